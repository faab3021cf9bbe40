"""Raw-text Support Recall of ``c3m eval`` results split by the gold turn's length, per category, paired.

Why: a reranker that learnt "short turns are rarely evidence" (issue #43: user photo turns of 29-52 characters whose
text says little, the state being in the image) loses exactly the questions whose gold turns are short, and the
overall number hides it. This reads the per-question records ``c3m eval --out DIR`` wrote and the dataset's gold
evidence, and prints, per method: raw SR per category (overall: IE/MSR/TR/KU, as c3m eval's), and per category split into questions whose gold turns are
all under ``--short`` characters vs the rest; then each method's paired difference to ``--base`` (same questions) with
a 95 % bootstrap interval over histories.

    python benchmarks/sr_by_gold_length.py --results /tmp/eval/h4-photo --dataset /tmp/data/photo-dev-48k \
        --base dense-topk
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load_results(folder: Path) -> dict[str, dict[tuple[str, str], dict]]:
    """method -> (history, question id) -> the question's record, from every ``results/<method>/*.jsonl``."""
    out: dict[str, dict] = {}
    files = sorted((folder / "results").glob("*/*.jsonl"))
    if not files:
        raise SystemExit(f"no results/<method>/*.jsonl under {folder} (the --out of c3m eval)")
    for path in files:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            got = out.setdefault(rec["method"], {})
            for q in rec["questions"]:
                got[(rec["history"], q["question_id"])] = q
    return out


def gold_lengths(dataset: str) -> dict[tuple[str, str], list[int]]:
    """(history, question id) -> the character lengths of its gold evidence turns."""
    from c3m.dataset.format import load_dataset

    out = {}
    for h in load_dataset(dataset):
        text = {(s.id, i): t.text for s in h.sessions for i, t in enumerate(s.turns)}
        for q in h.questions:
            if q.evidence:
                out[(h.id, q.id)] = [len(text.get((e.session, e.turn), "")) for e in q.evidence]
    return out


def bootstrap(diff_by_history: dict[str, list[float]], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the mean paired difference, resampling histories (questions of a history move together)."""
    rng = np.random.default_rng(seed)
    keys = sorted(diff_by_history)
    if not keys:
        return float("nan"), float("nan")
    means = []
    for _ in range(n):
        pick = rng.integers(0, len(keys), len(keys))
        vals = [v for i in pick for v in diff_by_history[keys[i]]]
        means.append(np.mean(vals) if vals else 0.0)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return 100 * float(lo), 100 * float(hi)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="the --out folder of c3m eval")
    ap.add_argument("--dataset", required=True, help="the dataset folder it evaluated")
    ap.add_argument("--short", type=int, default=60, help="a gold turn under this many characters is short")
    ap.add_argument("--base", default="dense-topk", help="the method each other one is paired against")
    ap.add_argument("--categories", default="KU,TR", help="categories split by length")
    a = ap.parse_args(argv)
    res = load_results(Path(a.results))
    gold = gold_lengths(a.dataset)
    cats = [c for c in a.categories.split(",") if c]
    methods = sorted(res)

    def sel(method: str, cat: str | None, part: str | None):
        out = {}
        for key, q in res[method].items():
            if key not in gold or (cat and q["category"] != cat) or (not cat and q["category"] == "AR"):
                continue  # overall: IE/MSR/TR/KU, as the harness's
            short = all(n < a.short for n in gold[key])
            if part == "short" and not short or part == "long" and short:
                continue
            out[key] = q["raw_support_recall"]
        return out

    parts = [(c, p) for c in cats for p in (None, "short", "long")] + [(None, None)]
    label = {None: "all", "short": f"<{a.short}", "long": f"≥{a.short}"}
    head = [f"{c or 'overall'} {label[p]}" for c, p in parts]
    print("| method | " + " | ".join(head) + " |")
    print("|---|" + "---|" * len(head))
    for m in methods:
        cells = []
        for c, p in parts:
            got = sel(m, c, p)
            cells.append(f"{100 * np.mean(list(got.values())):.1f} (n={len(got)})" if got else "–")
        print(f"| {m} | " + " | ".join(cells) + " |")
    if a.base in res:
        print(f"\nPaired against {a.base} (difference, 95 % bootstrap interval over histories):\n")
        print("| method | " + " | ".join(head) + " |")
        print("|---|" + "---|" * len(head))
        for m in methods:
            if m == a.base:
                continue
            cells = []
            for c, p in parts:
                mine, base = sel(m, c, p), sel(a.base, c, p)
                keys = sorted(set(mine) & set(base))
                if not keys:
                    cells.append("–")
                    continue
                by_h: dict[str, list[float]] = {}
                for k in keys:
                    by_h.setdefault(k[0], []).append(mine[k] - base[k])
                d = 100 * np.mean([mine[k] - base[k] for k in keys])
                lo, hi = bootstrap(by_h)
                cells.append(f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]")
            print(f"| {m} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
