"""Train c3m's reranker: a LightGBM LambdaRank model over the read path's fused candidate turns.

One readable file: a dataclass of arguments (every field is a ``--flag``), data, cross-validation, fit, report.

Data: every history of each ``--data`` folder is ingested with ``c3m`` (query-blind, as in the harness), then each of
its questions with gold evidence goes through the read path up to the reranker (``C3M.rerank_inputs``): the fused
candidates and their ``c3m.read.features.FEATURES`` rows, once with the Cold-Store channels and once without (the
strictly bounded reader ranks the index's candidates with the same model). A candidate is relevant (label 1) when it
is a gold evidence turn. Pools are cached per history under ``--cache-dir``.

Validation: grouped K-fold over histories (each fold holds out whole histories of every folder), so every question is
scored by a model that never saw its history. Reported per folder and reader: Support Recall of the best
``--k`` candidates (the reader budget's Raw Nodes) for the model and for each single ordering it replaces (dense
cosine, the index's BMER relevance, rrf-v1), with the candidate pool's own recall as the ceiling.

Also out of fold: Support Recall split by the gold turn's length (under ``SHORT`` characters or not, counted per gold
turn), so a prior such as "short turns are rarely evidence" (issue #43: photo turns whose text says little) shows in
the report; and with ``--drop-groups`` a drop-column table: the cross-validation again without each feature group's
columns (``c3m.read.features.FEATURE_GROUPS``), SR@k per dataset, per category and per gold length, and the change
against the full model. A group whose loss *raises* recall somewhere is a prior the model learnt from the data mix.

The model then fits on everything and is written to a run folder (``--out``, default ``runs/reranker-<time>/``);
``--ship`` writes the shipped weights (``c3m/models/weights/reranker_lgbm.txt``) and their card instead.

No ``--device``: LightGBM's pip wheels train on the CPU only (a GPU build needs LightGBM compiled with CUDA), the
pools come from c3m's CPU read path, and the fit takes minutes on 2 cores; so this trainer has no torch device, no
process group and nothing for torchrun / accelerate to split.

    python training/train_reranker.py --data benchmarks/data/memgallery-dev,/tmp/hard-train-32k --ship
    python training/train_reranker.py --smoke          # a tiny synthetic split, end to end (tests)
    python training/train_reranker.py --data ... --drop-groups all --drop-report benchmarks/results/reranker-drop-columns-cpu.md
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import runkit  # noqa: E402
from runkit import opt  # noqa: E402

from c3m.read.features import FEATURE_GROUPS, FEATURES  # noqa: E402
from c3m.read.rerank import SHIPPED, FusionReranker  # noqa: E402

CATEGORIES = ("IE", "MSR", "TR", "KU", "AR")
#: a gold turn under this many characters is "short" in the length split (issue #43: photo turns of 29-52)
SHORT = 60
#: bumped when what a cached pool holds changes (2: each question's number of short gold turns)
POOL_FORMAT = 2


@dataclass
class Args:
    data: str = opt("benchmarks/data/memgallery-dev", "dataset folders, comma-separated")
    cache_dir: str = opt("/tmp/c3m-reranker-pools", "where each history's candidate pools are cached")
    out: str = opt("", "model file; the report and cv/ go beside it (empty: runs/reranker-<time>/reranker_lgbm.txt)")
    ship: bool = opt(False, "write the shipped weights and RERANKER_CARD.md instead of a run folder")
    report: str = opt("", "Markdown report (empty: beside the model)")
    folds: int = opt(5, "grouped cross-validation folds (by history)")
    k: int = opt(12, "candidates kept (the default reader budget's Raw Nodes)")
    histories: int = opt(0, "histories per folder (0: all)")
    workers: int = opt(2, "processes building pools")
    seed: int = opt(0, "fold assignment and LightGBM's random_state")
    # a grid over trees / leaves / min leaf size moved OOF SR@12 by < 1 point; the most regularised of the best is kept
    n_estimators: int = opt(200, "boosting rounds")
    learning_rate: float = opt(0.05, "LightGBM learning rate")
    num_leaves: int = opt(15, "leaves per tree")
    min_child_samples: int = opt(200, "minimum rows per leaf")
    length_price: float = opt(0.2, "reported beside: the order the reader uses (pipeline.ranked)")
    colsample_bytree: float = opt(0.8, "share of features per tree")
    drop_groups: str = opt("", "drop-column table: 'all' or comma-separated c3m.read.features.FEATURE_GROUPS names "
                               "(each cross-validated again without that group's columns); empty: none")
    cv_dir: str = opt("", "where the fold models and folds.json are kept (empty: cv/ beside the model; with --ship, "
                          "not kept)")
    drop_only: str = opt("", "a .cv.json of out-of-fold rows an earlier run wrote with the same data and settings: "
                             "skip the cross-validation and fit, run only --drop-groups against those rows")
    drop_report: str = opt("", "where the drop-column table goes (empty: drop-columns.md beside the model, or in "
                               "runs/ with --ship)")
    smoke: bool = opt(False, "a tiny synthetic split made on the fly, few trees (tests)")


def parse_args(argv: list[str] | None = None) -> Args:
    return runkit.parse_args(Args, argv, __doc__, shipped=SHIPPED)


# --- data ---------------------------------------------------------------------------------------------------
def pools_of_history(history, tag: str) -> dict:
    """Ingest one history with c3m and return its questions' candidate pools, with and without the Cold Store."""
    from c3m import Memory
    from c3m.config import MemoryConfig
    from c3m.types import ReaderBudget

    budget = ReaderBudget()
    questions = [q for q in history.questions if q.evidence]
    text = {(s.id, i): t.text for s in history.sessions for i, t in enumerate(s.turns)}
    out: dict = {"history": history.id, "dataset": tag, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="c3m-rerank-") as store:
        for cold in (True, False):
            cfg = MemoryConfig(method="c3m", method_options={"reranker": "rrf", "cold": cold})
            with Memory(store, namespace="h", config=cfg) as mem:
                if cold:
                    mem.add_history(history)
                got = mem.method.rerank_inputs([q.question for q in questions], budget)
                count = mem.models.token_counter.count
                rows = []
                for q, g in zip(questions, got):
                    if g is None:
                        continue
                    gold = {(e.session, e.turn) for e in q.evidence}
                    y = np.array([(c.node.session_id, c.node.turn_index) in gold for c in g.cands], np.int8)
                    tokens = np.array([count(c.node.text) for c in g.cands], np.int32)
                    n_short = sum(len(text[k]) < SHORT for k in gold if k in text)
                    rows.append((q.id, q.category, len(gold), n_short, g.X, y, tokens))
                out["modes"]["cold" if cold else "bounded"] = rows
    return out


def _pool_job(job) -> dict:
    from c3m.eval.runtime import _init_worker

    _init_worker(1)
    history, tag = job
    return pools_of_history(history, tag)


def load_pools(args: Args) -> list[dict]:
    """Every history's pools (cached by dataset folder, history id and the feature list)."""
    from c3m.dataset.format import load_dataset

    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{POOL_FORMAT} {' '.join(FEATURES)}".encode()).hexdigest()[:10]  # new features: new pools
    jobs, out = [], []
    for folder in [f for f in args.data.split(",") if f]:
        tag = Path(folder).name
        histories = load_dataset(folder)
        if args.histories:
            histories = histories[: args.histories]
        for h in histories:
            path = cache / f"{tag}.{h.id}.{key}.npz"
            if path.is_file():
                out.append(_load(path))
            else:
                jobs.append(((h, tag), path))
    if jobs:
        from tqdm import tqdm

        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            for (job, path), got in tqdm(zip(jobs, pool.map(_pool_job, [j for j, _ in jobs])), total=len(jobs),
                                         desc="pools", unit="history"):
                _save(path, got)
                out.append(got)
    return sorted(out, key=lambda p: (p["dataset"], p["history"]))


def _save(path: Path, pools: dict) -> None:
    arrays = {}
    meta = {"history": pools["history"], "dataset": pools["dataset"], "modes": {}}
    for mode, rows in pools["modes"].items():
        meta["modes"][mode] = [(qid, cat, n_gold, n_short) for qid, cat, n_gold, n_short, *_ in rows]
        for i, (*_, X, y, tok) in enumerate(rows):
            arrays[f"{mode}.{i}.X"], arrays[f"{mode}.{i}.y"], arrays[f"{mode}.{i}.t"] = X, y, tok
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=json.dumps(meta), **arrays)
    os.replace(tmp, path)


def _load(path: Path) -> dict:
    z = np.load(path)
    meta = json.loads(str(z["meta"]))
    modes = {mode: [(qid, cat, n, n_short, z[f"{mode}.{i}.X"], z[f"{mode}.{i}.y"], z[f"{mode}.{i}.t"])
                    for i, (qid, cat, n, n_short) in enumerate(rows)] for mode, rows in meta["modes"].items()}
    return {"history": meta["history"], "dataset": meta["dataset"], "modes": modes}


# --- model --------------------------------------------------------------------------------------------------
def stack(pools: list[dict]):
    """(X, y, group sizes) over every question of every history and mode, in order."""
    Xs, ys, sizes = [], [], []
    for p in pools:
        for rows in p["modes"].values():
            for *_, X, y, _ in rows:
                Xs.append(X)
                ys.append(y)
                sizes.append(len(y))
    return np.concatenate(Xs), np.concatenate(ys), np.array(sizes)


def fit(pools: list[dict], args: Args, keep: list[int] | None = None):
    """The LambdaRank model on every question of ``pools``; ``keep``: the column indices it sees (all by default;
    the drop-column runs leave a group out), named in the model file so the reader hands it those columns."""
    import lightgbm

    X, y, sizes = stack(pools)
    keep = list(range(len(FEATURES))) if keep is None else keep
    model = lightgbm.LGBMRanker(objective="lambdarank", n_estimators=args.n_estimators,
                                learning_rate=args.learning_rate, num_leaves=args.num_leaves,
                                min_child_samples=args.min_child_samples, colsample_bytree=args.colsample_bytree,
                                subsample=0.8, subsample_freq=1, lambdarank_truncation_level=2 * args.k,
                                random_state=args.seed, n_jobs=2, verbose=-1, deterministic=True, force_row_wise=True)
    model.fit(X[:, keep], y, group=sizes, feature_name=[FEATURES[i] for i in keep])
    return model.booster_


def recall_at(scores: np.ndarray, y: np.ndarray, n_gold: int, k: int, tokens: np.ndarray) -> tuple[float, int]:
    """Support Recall of the best ``k`` (ties: earlier candidate) and their tokens."""
    top = np.argsort(-scores, kind="stable")[:k]
    return float(y[top].sum()) / max(1, n_gold), int(tokens[top].sum())


ORDERINGS = ("dense", "bmer", "rrf", "lgbm", "lgbm-len")


def short_gold(X: np.ndarray) -> np.ndarray:
    """Which candidates are under ``SHORT`` characters (from ``text_len`` = log(1 + characters))."""
    return np.rint(np.expm1(X[:, FEATURES.index("text_len")].astype(float))) < SHORT


def orderings(X: np.ndarray, model, tokens: np.ndarray, price: float, keep: list[int] | None = None,
              baselines: bool = True) -> dict[str, np.ndarray]:
    """Each ordering's scores: the single signals the reranker replaces, the model, and the model's standardised
    score with the reader's length price (``pipeline.ranked``; log(1 + tokens) here, log(1 + characters / 4) there,
    ≈ the same)."""
    col = {n: i for i, n in enumerate(FEATURES)}
    out = {}
    if baselines:
        out = {"dense": X[:, col["dense_cos"]].astype(float),
               "bmer": np.nan_to_num(X[:, col["idx_rel"]].astype(float), nan=-9.0),
               "rrf": FusionReranker().scores(X, np.zeros(len(X), int))}
    if model is not None:
        out["lgbm"] = model.predict(X if keep is None else X[:, keep], num_threads=1)
        z = (out["lgbm"] - out["lgbm"].mean()) / (out["lgbm"].std() + 1e-9)
        out["lgbm-len"] = z - price * np.log1p(tokens)
    return out


def xfit_map(folds: dict[tuple[str, str], int]) -> dict[str, str]:
    """``folds.json``: history id (the harness's namespace) -> its fold's model file. An id that two folders share
    (the synthetic splits all name theirs train-00000, ...) in different folds is left out, so ``xfit:`` refuses it
    instead of scoring it with a model that saw it."""
    by_id: dict[str, set[int]] = {}
    for (_, h), f in folds.items():
        by_id.setdefault(h, set()).add(f)
    return {h: f"fold{next(iter(fs))}.txt" for h, fs in sorted(by_id.items()) if len(fs) == 1}


def cross_validate(pools: list[dict], args: Args, cv_dir: Path | None = None, keep: list[int] | None = None,
                   baselines: bool = True) -> list[dict]:
    """Out-of-fold Support Recall@k per question (module docstring). With ``cv_dir``, the fold models are kept there
    with ``folds.json`` (history -> its fold's model file), for ``c3m:reranker=xfit:DIR`` in the harness. ``keep``:
    the columns the models see (``fit``); ``baselines``: also score the single orderings (dense, bmer, rrf). Each row
    also counts the short and long gold turns (``SHORT``) and, per ordering, how many of each made the best k."""
    rng = np.random.default_rng(args.seed)
    folds: dict[tuple[str, str], int] = {}
    for tag in sorted({p["dataset"] for p in pools}):
        ids = sorted(p["history"] for p in pools if p["dataset"] == tag)
        for j, h in enumerate(rng.permutation(ids)):
            folds[(tag, h)] = j % args.folds
    rows = []
    for f in range(args.folds):
        train = [p for p in pools if folds[(p["dataset"], p["history"])] != f]
        test = [p for p in pools if folds[(p["dataset"], p["history"])] == f]
        if not train or not test:
            continue
        model = fit(train, args, keep)
        if cv_dir is not None:
            cv_dir.mkdir(parents=True, exist_ok=True)
            model.save_model(str(cv_dir / f"fold{f}.txt"))
        for p in test:
            for mode, qs in p["modes"].items():
                for qid, cat, n_gold, n_short, X, y, tok in qs:
                    row = {"dataset": p["dataset"], "history": p["history"], "mode": mode, "question": qid,
                           "category": cat, "fold": f, "ceiling": float(y.sum()) / max(1, n_gold),
                           "n_short": n_short, "n_long": n_gold - n_short}
                    short = short_gold(X) & (y == 1)
                    for name, s in orderings(X, model, tok, args.length_price, keep, baselines).items():
                        row[name], row[f"{name}_tokens"] = recall_at(s, y, n_gold, args.k, tok)
                        top = np.argsort(-s, kind="stable")[:args.k]
                        row[f"{name}_short"] = int(short[top].sum())
                        row[f"{name}_long"] = int(y[top].sum()) - row[f"{name}_short"]
                    rows.append(row)
    if cv_dir is not None:
        (cv_dir / "folds.json").write_text(json.dumps(xfit_map(folds), indent=1))
    return rows


def summary_table(rows: list[dict], k: int) -> str:
    lines = [f"| data | reader | questions | {' | '.join(f'{o} SR@{k}' for o in ORDERINGS)} | pool ceiling | "
             f"lgbm-len − best other | tokens (lgbm-len / lgbm / rrf / dense) |", "|" + "---|" * (6 + len(ORDERINGS))]
    keys = sorted({(r["dataset"], r["mode"]) for r in rows})
    for data, mode in keys:
        sel = [r for r in rows if r["dataset"] == data and r["mode"] == mode and r["category"] != "AR"]
        if not sel:
            continue
        mean = {o: 100 * np.mean([r[o] for r in sel]) for o in ORDERINGS}
        best_other = max(mean[o] for o in ORDERINGS if not o.startswith("lgbm"))
        tok = " / ".join(f"{np.mean([r[f'{o}_tokens'] for r in sel]):.0f}" for o in ("lgbm-len", "lgbm", "rrf", "dense"))
        lines.append(f"| {data} | {mode} | {len(sel)} | " + " | ".join(f"{mean[o]:.1f}" for o in ORDERINGS)
                     + f" | {100 * np.mean([r['ceiling'] for r in sel]):.1f} | {mean['lgbm-len'] - best_other:+.1f} | {tok} |")
    return "\n".join(lines)


def category_table(rows: list[dict], k: int) -> str:
    lines = [f"| data | reader | category | questions | {' | '.join(ORDERINGS)} |", "|" + "---|" * (4 + len(ORDERINGS))]
    for data, mode in sorted({(r["dataset"], r["mode"]) for r in rows}):
        for cat in CATEGORIES:
            sel = [r for r in rows if r["dataset"] == data and r["mode"] == mode and r["category"] == cat]
            if sel:
                lines.append(f"| {data} | {mode} | {cat} | {len(sel)} | "
                             + " | ".join(f"{100 * np.mean([r[o] for r in sel]):.1f}" for o in ORDERINGS) + " |")
    return "\n".join(lines)


def _share(rows: list[dict], name: str, part: str) -> tuple[float, int]:
    """The share of ``part`` ("short" / "long") gold turns in the best k by ordering ``name``, over gold turns."""
    n = sum(r[f"n_{part}"] for r in rows)
    return (100 * sum(r[f"{name}_{part}"] for r in rows) / n if n else float("nan")), n


def length_table(rows: list[dict], k: int) -> str:
    """Out-of-fold SR@k per gold turn, split by the gold turn's length (module docstring), IE/MSR/TR/KU."""
    names = [o for o in ("lgbm-len", "lgbm", "rrf", "dense") if rows and o in rows[0]]
    lines = [f"| data | reader | gold < {SHORT} chars | " + " | ".join(names) + f" | gold ≥ {SHORT} chars | "
             + " | ".join(names) + " |", "|" + "---|" * (4 + 2 * len(names))]
    for data, mode in sorted({(r["dataset"], r["mode"]) for r in rows}):
        sel = [r for r in rows if r["dataset"] == data and r["mode"] == mode and r["category"] != "AR"]
        cells = []
        for part in ("short", "long"):
            n = _share(sel, names[0], part)[1]
            cells.append(str(n))
            cells += [f"{_share(sel, o, part)[0]:.1f}" if n else "–" for o in names]
        lines.append(f"| {data} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def drop_groups(spec: str) -> list[str]:
    """The ``--drop-groups`` names: ``all`` or comma-separated ``FEATURE_GROUPS`` keys."""
    if spec.strip() == "all":
        return list(FEATURE_GROUPS)
    names = [g.strip() for g in spec.split(",") if g.strip()]
    unknown = [g for g in names if g not in FEATURE_GROUPS]
    if unknown:
        raise SystemExit(f"--drop-groups: unknown group(s) {unknown}; known: all, {', '.join(FEATURE_GROUPS)}")
    return names


def drop_column_runs(pools: list[dict], args: Args, full: list[dict], progress=None) -> dict[str, list[dict]]:
    """The cross-validation again without each group's columns (same folds and seed): group -> out-of-fold rows.
    ``progress(runs)`` after each group (the trainer rewrites the table, so a long run leaves a partial one)."""
    out = {"(none: full model)": full}
    for g in drop_groups(args.drop_groups):
        keep = [i for i, n in enumerate(FEATURES) if n not in FEATURE_GROUPS[g]]
        t = time.time()
        out[g] = cross_validate(pools, args, None, keep, baselines=False)
        print(f"drop {g}: {time.time() - t:.0f} s", flush=True)
        if progress is not None:
            progress(out)
    return out


def drop_column_report(runs: dict[str, list[dict]], args: Args, k: int) -> str:
    """The drop-column tables (module docstring): the reader's order (``lgbm-len``), IE/MSR/TR/KU questions."""
    full = next(iter(runs.values()))
    datasets = sorted({r["dataset"] for r in full})
    modes = sorted({r["mode"] for r in full})
    o = "lgbm-len"

    def mean(rows, **where) -> float:
        sel = [r for r in rows if r["category"] != "AR" or where.get("category") == "AR"]
        sel = [r for r in sel if all(r[key] == v for key, v in where.items())]
        return 100 * float(np.mean([r[o] for r in sel])) if sel else float("nan")

    def cell(value: float, base: float, first: bool) -> str:
        if math.isnan(value):
            return "–"
        return f"{value:.1f}" if first else f"{value:.1f} ({value - base:+.1f})"

    def table(head: list[str], values) -> list[str]:
        lines = ["| dropped group | columns | " + " | ".join(head) + " |", "|" + "---|" * (2 + len(head))]
        base = None
        for i, (g, rows) in enumerate(runs.items()):
            vals = values(rows)
            base = vals if base is None else base
            cols = ", ".join(FEATURE_GROUPS.get(g, ())) or "–"
            lines.append(f"| {g} | {cols} | " + " | ".join(cell(v, b, i == 0) for v, b in zip(vals, base)) + " |")
        return lines

    out = [f"Out-of-fold SR@{k} ×100 of the reader's order ({o}: the model's score standardised per question − "
           f"{args.length_price} · log(1 + tokens)), every run on the same {args.folds} folds grouped by history; "
           f"in brackets the change against the full model (negative: the group helps).", ""]
    for mode in modes:
        out += [f"### All questions but AR, reader `{mode}`", ""]
        out += table(datasets, lambda rows: [mean(rows, dataset=d, mode=mode) for d in datasets]) + [""]
    for cat in ("KU", "TR"):
        out += [f"### {cat} questions", ""]
        head = [f"{d} {m}" for d in datasets for m in modes]
        out += table(head, lambda rows: [mean(rows, dataset=d, mode=m, category=cat) for d in datasets
                                         for m in modes]) + [""]
    out += [f"### By gold turn length (share of gold turns under / at least {SHORT} characters in the best {k}, "
            f"IE/MSR/TR/KU, reader `cold`)", ""]
    head = [f"{d} {'<' if part == 'short' else '≥'}{SHORT}" for d in datasets for part in ("short", "long")]

    def by_length(rows):
        return [_share([r for r in rows if r["dataset"] == d and r["mode"] == "cold" and r["category"] != "AR"],
                       o, part)[0] for d in datasets for part in ("short", "long")]
    out += table(head, by_length)
    counts = ", ".join(f"{d}: {_share([r for r in full if r['dataset'] == d and r['mode'] == 'cold' and r['category'] != 'AR'], o, 'short')[1]} short / "
                       f"{_share([r for r in full if r['dataset'] == d and r['mode'] == 'cold' and r['category'] != 'AR'], o, 'long')[1]} long"
                       for d in datasets)
    out += ["", f"Gold turns counted ({counts})."]
    return "\n".join(out) + "\n"


def importance_table(booster) -> str:
    gain = booster.feature_importance("gain")
    total = max(1e-9, gain.sum())
    order = np.argsort(-gain)
    return "| feature | share of gain |\n|---|---|\n" + "\n".join(
        f"| {FEATURES[i]} | {100 * gain[i] / total:.1f} % |" for i in order if gain[i] > 0)


CARD_HEAD = """# reranker (`reranker_lgbm.txt`) — lgbm-lambdarank-v1

## What it is
- A LightGBM LambdaRank model (gradient-boosted trees) that orders the candidate turns of c3m's read path
  (`c3m/read/pipeline.py`) before the budget solver: one row of `c3m.read.features.FEATURES` per candidate (the
  channels' signals — dense cosine, Cold-Store BM25, the index's route and update chain — plus lexical overlap over
  the pool, names and numbers, date windows, recency, role, the round partner's and the session's scores, and since
  issue #43 whether the turn carries an image, whether the question asks what an image shows, the turn's place among
  the mentions of the question's subject (newest first) and how many candidates repeat its words).
- Loaded by `reranker="lgbm"` and by the default `auto`, and evaluated in numpy (`c3m/read/trees.py`, tested
  against LightGBM's own `Booster.predict`): reading needs no LightGBM. `rrf` (rrf-v1) is the named fallback. The reader orders candidates by the score standardised per question minus a length price
  (`length_price` 0.2 × log(1 + characters / 4)).
- Trained by `training/train_reranker.py` on the synthetic `train` splits (presets hard, easy and photo — the last
  has state changes shown only in photos under short generic captions and small talk repeated word for word) and
  the Mem-Gallery development dialogs (`benchmarks/data/memgallery-dev`, long evidence turns), with and without the
  Cold-Store channels; the exact folders are in the command below. No held-out set (the other half of Mem-Gallery,
  other real conversations, a synthetic `test` split) and no synthetic `dev` split was used for training; the
  `dev` splits are for measuring.
- Caveat: on Mem-Gallery a clue round marks both of its turns as evidence, so the model learns that a relevant
  turn's round partner is often evidence too; on the synthetic data only one turn is. Both are in the training
  data; on a set whose evidence is single turns the partner feature can cost Raw-Node slots.
- Caveat: with perception `none` the model sees that a turn carries an image, not what it shows; a photo that
  re-shows an unchanged state looks like one that changed it. The out-of-fold split by gold turn length below is
  there so that a length prior ("short turns are rarely evidence") shows before a model ships; the drop-column
  table per feature group is `benchmarks/results/reranker-drop-columns-cpu.md`.

"""


def smoke_data(tmp: Path) -> str:
    from c3m.eval.synth import generate_dataset

    generate_dataset(tmp / "smoke", split="train", length=4000, episodes=3, seed=0, preset="hard", progress=False)
    return str(tmp / "smoke")


def drop_table(pools: list[dict], args: Args, rows: list[dict], path: Path, argv, t0: float, n_q: int) -> None:
    """The drop-column runs against the full model's out-of-fold ``rows``, the table rewritten after each group."""
    path.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(argv if argv is not None else sys.argv[1:])
    total = len(drop_groups(args.drop_groups))

    def write(runs: dict, done: bool) -> None:
        path.write_text(
            f"# Reranker drop-column table ({'smoke' if args.smoke else 'lgbm-lambdarank-v1'})\n\n- date: "
            f"{dt.date.today().isoformat()}\n- command: `python training/train_reranker.py {command}`\n"
            f"- data: {args.data}\n- {len(pools)} histories, {n_q} question pools; groups: "
            f"`c3m.read.features.FEATURE_GROUPS`\n- "
            + (f"took {time.time() - t0:.0f} s with the main run" if done else
               f"PARTIAL: {len(runs) - 1} of {total} groups so far")
            + f", on {os.cpu_count()} CPU cores\n\n" + drop_column_report(runs, args, args.k))

    write(drop_column_runs(pools, args, rows, lambda runs: write(runs, False)), True)
    print(f"drop-column table: {path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.drop_groups:
        drop_groups(args.drop_groups)  # a wrong name fails now, not after the cross-validation
    if args.drop_only and (not args.drop_groups or not args.drop_report or args.ship):
        raise SystemExit("--drop-only needs --drop-groups and --drop-report, and no --ship")
    t0 = time.time()
    np.random.seed(args.seed)
    with tempfile.TemporaryDirectory(prefix="c3m-rerank-smoke-") as tmp:
        if args.smoke:
            args.data, args.cache_dir = smoke_data(Path(tmp)), str(Path(tmp) / "cache")
            args.n_estimators, args.folds, args.workers = 10, 3, 1
            args.min_child_samples = 5
        pools = load_pools(args)
        n_q = sum(len(rows) for p in pools for rows in p["modes"].values())
        print(f"{len(pools)} histories, {n_q} question pools ({time.time() - t0:.0f} s)")
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        if args.drop_only:  # the drop groups only, against a finished run's full-model rows (same folds and seed)
            rows = json.loads(Path(args.drop_only).read_text())
            drop_table(pools, args, rows, Path(args.drop_report), argv, t0, n_q)
            return 0
        out = Path(args.out) if args.out else (SHIPPED if args.ship else ROOT / "runs" / f"reranker-{stamp}" /
                                                  "reranker_lgbm.txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        cv_dir = Path(args.cv_dir) if args.cv_dir else (Path(tmp) if args.ship else out.parent) / "cv"
        rows = cross_validate(pools, args, cv_dir)
        model = fit(pools, args)
        model.save_model(str(out))
        report = (f"# Reranker ({'smoke' if args.smoke else 'lgbm-lambdarank-v1'}): cross-validated Support Recall@"
                  f"{args.k}\n\n- date: {dt.date.today().isoformat()}\n- command: `python training/train_reranker.py "
                  f"{' '.join(argv if argv is not None else sys.argv[1:])}`\n- data: {args.data}\n"
                  f"- {len(pools)} histories, {n_q} question pools; {args.folds}-fold cross-validation grouped by "
                  f"history (every question scored by a model that never saw its history)\n"
                  f"- args: `{json.dumps(asdict(args))}`\n- took {time.time() - t0:.0f} s on "
                  f"{os.cpu_count()} CPU cores\n\nSR@{args.k} ×100 over IE/MSR/TR/KU questions (AR separately below): "
                  f"the best {args.k} candidates by each ordering; *pool ceiling*: the share of gold turns among the "
                  f"candidates at all; *cold*: with the Cold-Store channels, *bounded*: the index alone; *lgbm-len*: the model's "
                  f"score standardised per question − {args.length_price} · log(1 + tokens), the order the reader uses.\n\n"
                  + summary_table(rows, args.k) + "\n\n## Per category\n\n" + category_table(rows, args.k)
                  + f"\n\n## By gold turn length (out of fold)\n\nSR@{args.k} ×100 per gold turn: the share of gold "
                  f"turns under / at least {SHORT} characters that are among the best {args.k} (IE/MSR/TR/KU). A gap "
                  f"between the two that the single orderings do not have is a prior the model learnt about length.\n\n"
                  + length_table(rows, args.k)
                  + "\n\n## Feature importance (final model, share of total split gain)\n\n"
                  + importance_table(model) + "\n")
        if args.ship:
            report = CARD_HEAD + f"## Cross-validated Support Recall@{args.k}\n" + report.split("\n", 1)[1]
        report_path = Path(args.report) if args.report else out.with_name(
            "RERANKER_CARD.md" if args.ship else "report.md")
        report_path.write_text(report)
        if not args.ship or args.cv_dir:  # the out-of-fold rows beside the fold models (the drop table's full row)
            (cv_dir.parent if args.ship else out.parent).joinpath(f"{out.stem}.cv.json").write_text(json.dumps(rows))
        print(summary_table(rows, args.k))
        print(f"model: {out}\nreport: {report_path}" + ("" if args.ship and not args.cv_dir
                                                         else f"\ncross-fitted models: {cv_dir}"), flush=True)
        if args.drop_groups:  # last: the model and its report are written whatever the drop runs take
            drop_path = Path(args.drop_report) if args.drop_report else (
                (ROOT / "runs" / f"reranker-{stamp}" if args.ship else out.parent) / "drop-columns.md")
            drop_table(pools, args, rows, drop_path, argv, t0, n_q)
        if args.smoke:
            shutil.rmtree(Path(tmp) / "cache", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
