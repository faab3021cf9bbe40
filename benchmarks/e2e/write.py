"""End-to-end write path: ingest one long history per method, with sessions/s, per-session p50/p95 and a per-stage
breakdown (store, embed, anchors, perception, RAMU, capacity, snapshot; ``_write_stages``).

Each (tree, method) runs in its own fresh process on a fresh store, as ``c3m ingest`` would (model loading
included in the total). ``--before-tree`` runs an older checkout (a ``git worktree``) through ``PYTHONPATH`` with
the same interpreter, so before and after are measured in one run on one machine.

    python benchmarks/e2e/write.py --before-tree /tmp/old              # 128K hard/dev history, c3m + dense-topk
    python benchmarks/e2e/write.py --smoke                              # a tiny history, results to a temp dir
    python benchmarks/e2e/write.py --profile-dir benchmarks/results/profiles --methods c3m   # cProfile summaries

``--harness DATASET`` measures the write path *at the evaluation harness's workload* instead: each history
written as a ``c3m eval --workers 2`` method process writes it (one thread, the scratch warm-up, each session's
texts embedded untimed, then ``add_session`` timed: ``c3m.eval.sandbox``), re-enacted in this process so the stage
clock sees it, with the harness's per-session write time, the overflow repairs and write violations it measures
(``replay._measure_writes``), and the exclusive per-stage seconds of every method; ``--profile-dir`` then also
writes one cProfile summary per stage (top functions by self time within the stage):

    python benchmarks/e2e/write.py --harness benchmarks/data/memgallery-dev --methods c3m,dense-topk,hybrid \
        --profile-dir benchmarks/results/profiles/write-harness
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from _write_stages import STAGES, StageClock, install  # noqa: E402


# -- worker: one method, one tree, one process ---------------------------------------------------------------
def work(args) -> int:
    import cProfile
    import io
    import pstats

    from c3m.config import MemoryConfig
    from c3m.dataset import iter_histories
    from c3m.memory import Memory
    from c3m.methods import method_class

    cfg = MemoryConfig().with_(method=args.method, perception=args.perception, text_embedder=args.text_embedder)
    clock = StageClock()
    install(clock, method_class(args.method))
    history = next(iter(iter_histories(args.dataset)))
    prof = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="c3m-e2e-write-") as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        with Memory(Path(tmp) / "store", history.id, config=cfg) as mem:
            setup = time.perf_counter() - t0
            nodes = sum(mem.add_session(s).raw_nodes for s in history.sessions)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        if prof:
            prof.disable()
    if prof:
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(40)
            Path(f"{args.profile}.{key}.txt").write_text(f"# {args.method}, {len(history.sessions)} sessions, "
                                                        f"{total:.1f} s under cProfile, sorted by {key}\n"
                                                        + buf.getvalue())
    Path(args.json).write_text(json.dumps({"method": args.method, "sessions": len(history.sessions),
                                           "raw_nodes": nodes, "total_s": total, "setup_s": setup,
                                           "cpu_s": cpu, "session_s": clock.sessions, "stages": clock.totals,
                                           "stages_cpu": clock.cpu}))
    return 0


def harness_work(args) -> int:
    """One tree: the harness's write workload in this process, one worker's thread setup, the stage clock per method.

    The evaluation harness writes in a method process of its own, which this process's stage clock cannot reach,
    so the same workload is re-enacted here with the harness's own steps (``c3m.eval.sandbox.warm_up`` and
    ``timed_write``: the scratch warm-up, each session's texts embedded untimed, ``add_session`` timed) and its
    own write measurement (``replay._measure_writes``: peak, violations, overflow repairs). No read phase: Support
    Recall is ``c3m eval``'s (the column shows "—")."""
    try:
        from c3m.eval.sandbox import timed_write, warm_up
    except ImportError:  # a tree from before the method process: its harness wrote in-process
        return _harness_work_in_process(args)
    from c3m.config import MemoryConfig
    from c3m.dataset import load_dataset
    from c3m.eval.harness import method_spec, resolve_perception
    from c3m.eval.replay import HistoryResult, _measure_writes, materialise_images, namespace_for
    from c3m.eval.runtime import _init_worker, load_models
    from c3m.memory import Memory
    from c3m.methods import method_class

    _init_worker(1)  # what each of `--workers 2` on this 2-core machine gets
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    clock = StageClock(profile=bool(args.profile))
    install(clock, *[method_class(method_spec(m)[0]) for m in methods])
    histories = load_dataset(args.dataset)[:args.limit]
    out = {"total_s": 0.0, "methods": {}}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="c3m-e2e-harness-") as tmp:
        for spec in methods:
            name, options = method_spec(spec)
            cfg = MemoryConfig(method=name, method_options=options,
                               perception=resolve_perception(args.perception or "none", args.dataset))
            models = load_models(cfg)
            results = []
            for h in histories:
                result = HistoryResult(h.id, name, "?")
                with Memory(Path(tmp) / _safe_name(spec) / _safe_name(h.id), namespace_for(h.id), config=cfg,
                            models=models) as mem:
                    clock.label = WARM_UP  # its add_session is clocked apart and left out
                    warm_up(cfg, models)
                    clock.label = name
                    result.bounded = bool(mem.method.bounded)
                    for session in h.sessions:
                        result.write_seconds.append(timed_write(mem, models, materialise_images(session),
                                                                cfg.perception)["seconds"])
                    _measure_writes(result, mem.store, mem.namespace, mem.method_name, models, cfg)
                results.append(result)
            out["methods"][spec] = {
                "histories": len(results), "sessions": sum(len(r.write_seconds) for r in results),
                "write_ms": [1000 * w for r in results for w in r.write_seconds],
                "overflow_repairs": [r.overflow_repairs for r in results],
                "write_violations": sum(len(r.write_violations) for r in results),
                "support_recall": None,
                "stages": clock.by_label.get(name, {})}
    out["total_s"] = time.perf_counter() - t0
    _write_profiles(args.profile, clock)
    Path(args.json).write_text(json.dumps(out))
    return 0


def _harness_work_in_process(args) -> int:
    """A tree whose harness still wrote in its own process (e25fe86 and earlier): in-process ``run_eval`` with one
    worker's thread setup and the stage clock per method, as that harness ran it."""
    from c3m.eval import harness
    from c3m.methods import method_class

    harness._init_worker(1)  # what each of `--workers 2` on this 2-core machine gets
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    clock = StageClock(profile=bool(args.profile))
    clock.active = False  # stages count inside add_session only (not the read phase)
    install(clock, *[method_class(harness.method_spec(m)[0]) for m in methods])
    replay = harness.replay_history

    def labelled(history, store, *, config, **kw):
        clock.label = config.method
        return replay(history, store, config=config, **kw)

    harness.replay_history = labelled
    with tempfile.TemporaryDirectory(prefix="c3m-e2e-harness-") as tmp:
        t0 = time.perf_counter()
        everything = harness.run_eval([args.dataset], methods, tmp, workers=1, progress=False, limit=args.limit,
                                      perception=args.perception)
        total = time.perf_counter() - t0
    out = {"total_s": total, "methods": {}}
    for spec, by_length in everything.items():
        results = [r for rs in by_length.values() for r in rs]
        out["methods"][spec] = {
            "histories": len(results), "sessions": sum(len(r.write_seconds) for r in results),
            "write_ms": [1000 * w for r in results for w in r.write_seconds],
            "overflow_repairs": [r.overflow_repairs for r in results],
            "write_violations": sum(len(r.write_violations) for r in results),
            "support_recall": _mean([q.support_recall for r in results for q in r.questions
                                     if getattr(q, "support_recall", None) is not None]),
            "stages": clock.by_label.get(harness.method_spec(spec)[0], {})}
    _write_profiles(args.profile, clock)
    Path(args.json).write_text(json.dumps(out))
    return 0


def _write_profiles(prefix: str | None, clock: StageClock) -> None:
    """One cProfile summary per (method, stage) at ``PREFIX.<method>.<stage>.txt`` (the warm-up's left out)."""
    for (label, stage) in sorted(clock.profiles or ()):
        text = clock.profile_summary(label, stage) if prefix and label != WARM_UP else None
        if text:
            Path(f"{prefix}.{_safe_name(label)}.{stage}.txt").write_text(
                f"# {label}, stage {stage}: top functions by self time within the stage (cProfile)\n" + text)


WARM_UP = "(warm-up)"


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


# -- driver --------------------------------------------------------------------------------------------------
def c3m_argv(args: list[str]) -> list[str]:
    exe = Path(sys.executable).with_name("c3m")
    return ([str(exe)] if exe.exists() else [sys.executable, "-m", "c3m.cli"]) + args


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def env_for(tree: Path | None, threads: int = 0) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("C3M_STORE", "C3M_NAMESPACE")}
    env["PYTHONHASHSEED"] = "0"  # set order reaches c3m's visual-anchor tie-breaks: same index, same work per tree
    if tree is not None:  # its `c3m` package shadows the installed one (c3m_kernels stays the installed one)
        env["PYTHONPATH"] = str(tree)
    if threads:  # numpy's BLAS (MiniLM, spaCy) and torch's OpenMP pool (scene encoder)
        env.update({k: str(threads) for k in THREAD_VARS})
    return env


def run_one(args, tree: Path | None, method: str, dataset: Path, tmp: Path, profile: str = "",
            threads: int = 0) -> dict:
    out = tmp / f"{'before' if tree == args.before_tree else 'after'}-{method}-{threads}.json"
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--method", method, "--dataset", str(dataset),
            "--json", str(out), "--perception", args.perception, "--text-embedder", args.text_embedder]
    if profile:
        argv += ["--profile", profile]
    done = subprocess.run(argv, env=env_for(tree, threads), cwd=tmp, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{method} ({tree or 'this tree'}) failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text())


def pct(ms: list[float], q: float) -> float:
    ms = sorted(ms)
    return ms[min(len(ms) - 1, round(q * (len(ms) - 1)))] if ms else float("nan")


def run_harness(args) -> int:
    """``--harness``: each tree in a fresh process (``harness_work``), then one table of every method."""
    trees = ([("before", args.before_tree)] if args.before_tree else []) + [("after", args.after_tree)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="c3m-e2e-harness-") as tmp:
        for label, tree in trees:
            out = Path(tmp) / f"{label}.json"
            argv = [sys.executable, str(Path(__file__).resolve()), "--harness-worker", "--dataset",
                    str(args.harness.resolve()), "--methods", args.methods, "--json", str(out), "--perception",
                    args.perception]
            if args.limit:
                argv += ["--limit", str(args.limit)]
            if args.profile_dir:
                args.profile_dir.mkdir(parents=True, exist_ok=True)
                argv += ["--profile", str((args.profile_dir / label).resolve())]
            done = subprocess.run(argv, env=env_for(tree), cwd=tmp, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                raise SystemExit(f"harness run ({tree or 'this tree'}) failed: {done.stderr[-3000:]}")
            got = json.loads(out.read_text())
            for spec, m in got["methods"].items():
                rows.append({"tree": label, "method": spec, **m, "run_s": got["total_s"]})
            print(f"{label}: {got['total_s']:.1f} s", flush=True)
    lines = [f"# Write path at the harness's workload ({datetime.now(timezone.utc).date()}, {cpu_name()}, "
             f"{os.cpu_count()} cores)", "",
             f"Command: `python benchmarks/e2e/write.py {' '.join(sys.argv[1:])}` at commit "
             f"{git_commit(args.after_tree or ROOT)}"
             + (f", before = commit {git_commit(args.before_tree)}" if args.before_tree else "") + ". "
             "Each tree writes the dataset in one fresh process the way its `c3m eval --workers 2` does (one "
             "BLAS/OpenMP thread; from this change on, each history as a method process writes it: a scratch warm-up, "
             "each session's texts embedded untimed, `add_session` timed; Support Recall is then `c3m eval`'s, "
             "shown as —); write ms are the harness's own per-session times, stages exclusive wall seconds summed "
             "over the run (`_write_stages.py`).", "",
             "| tree | method | histories | sessions | write p50 ms | p95 ms | mean ms | overflow repairs / history "
             "| write violations | Support Recall |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ms = r["write_ms"]
        sr = r["support_recall"]
        lines.append(f"| {r['tree']} | {r['method']} | {r['histories']} | {r['sessions']} | {pct(ms, .5):.1f} | "
                     f"{pct(ms, .95):.1f} | {sum(ms) / max(1, len(ms)):.1f} | "
                     f"{sum(r['overflow_repairs']) / max(1, r['histories']):.1f} | {r['write_violations']} | "
                     f"{'—' if sr is None else f'{100 * sr:.1f}'} |")
    lines += ["", "Per-stage seconds (exclusive, whole run):", "", "| tree | method | " + " | ".join(STAGES) + " |",
              "|---|---|" + "---:|" * len(STAGES)]
    for r in rows:
        lines.append(f"| {r['tree']} | {r['method']} | " + " | ".join(f"{r['stages'].get(s, 0.0):.2f}"
                                                                    for s in STAGES) + " |")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
    print(text)
    return 0


def summarise(r: dict) -> dict:
    ms = sorted(1000 * s for s in r["session_s"])
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    stages = dict(r["stages"])
    stages["other"] = max(0.0, r["total_s"] - sum(stages.values()))
    cpu = dict(r["stages_cpu"])
    cpu["other"] = max(0.0, r["cpu_s"] - sum(cpu.values()))
    return {"method": r["method"], "sessions": r["sessions"], "raw_nodes": r["raw_nodes"],
            "total_s": r["total_s"], "cpu_s": r["cpu_s"], "sessions_per_s": r["sessions"] / r["total_s"],
            "p50_ms": statistics.median(ms), "p95_ms": p95, **{f"{k}_s": v for k, v in stages.items()},
            **{f"{k}_cpu_s": v for k, v in cpu.items()}}


def git_commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def cpu_name() -> str:
    from c3m.machine import cpu_model

    return cpu_model()


def write_outputs(args, rows: list[dict], dataset: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cols = ["tree", "method", "sessions", "raw_nodes", "total_s", "cpu_s", "sessions_per_s", "p50_ms", "p95_ms",
            *[f"{s}_s" for s in (*STAGES, "other")], *[f"{s}_cpu_s" for s in (*STAGES, "other")]]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    stage_names = (*STAGES, "other")
    lines = [f"# End-to-end write path, CPU ({datetime.now(timezone.utc).date()}, {cpu_name()}, "
             f"{os.cpu_count()} cores)", "",
             f"Command: `python benchmarks/e2e/write.py {' '.join(sys.argv[1:])}` at commit "
             f"{git_commit(args.after_tree or ROOT)}"
             + (f", before = commit {git_commit(args.before_tree)}" if args.before_tree else "") + ". "
             f"One history (`{dataset}`, first history), text embedder `{args.text_embedder}`, perception "
             f"`{args.perception}`; each row is a fresh process on a fresh store (model loading is in the total, "
             "as in `c3m ingest`). Stages are exclusive wall seconds (`benchmarks/e2e/_write_stages.py`); "
             "`other` is what no stage covers (session hashing, begin/prepare bookkeeping, the method's own glue).",
             "", "| tree | method | sessions | Raw Nodes | total ingest s | sessions/s | p50 ms/session | "
             "p95 ms/session | process CPU s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tree']} | {r['method']} | {r['sessions']} | {r['raw_nodes']} | {r['total_s']:.1f} | "
                     f"{r['sessions_per_s']:.2f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['cpu_s']:.1f} |")
    lines += ["", "Per-stage breakdown, seconds (% of the total):", "",
              "| tree | method | " + " | ".join(stage_names) + " |", "|---|---|" + "---:|" * len(stage_names)]
    for r in rows:
        lines.append(f"| {r['tree']} | {r['method']} | " + " | ".join(
            f"{r[s + '_s']:.1f} ({100 * r[s + '_s'] / r['total_s']:.0f}%)" for s in stage_names) + " |")
    lines += ["", "The same in process CPU seconds (all threads; steadier than wall time when the machine is shared):",
              "", "| tree | method | " + " | ".join(stage_names) + " |", "|---|---|" + "---:|" * len(stage_names)]
    for r in rows:
        lines.append(f"| {r['tree']} | {r['method']} | " + " | ".join(
            f"{r[s + '_cpu_s']:.1f} ({100 * r[s + '_cpu_s'] / max(r['cpu_s'], 1e-9):.0f}%)" for s in stage_names)
            + " |")
    before = {(r["method"], r["tree"].removeprefix("before")): r for r in rows if r["tree"].startswith("before")}
    pairs = [(before[r["method"], r["tree"].removeprefix("after")], r) for r in rows
             if r["tree"].startswith("after") and (r["method"], r["tree"].removeprefix("after")) in before]
    if pairs:
        lines += ["", "Before / after (ratio > 1: faster now):", "",
                  "| method | total s before | total s after | ratio | CPU s before → after | p50 ms before → after | "
                  + " | ".join(f"{s} s" for s in stage_names) + " |",
                  "|---|---:|---:|---:|---:|---:|" + "---:|" * len(stage_names)]
        for b, a in pairs:
            lines.append(f"| {a['method']}{a['tree'].removeprefix('after')} | {b['total_s']:.1f} | {a['total_s']:.1f} | "
                         f"{b['total_s'] / a['total_s']:.2f}× | {b['cpu_s']:.1f} → {a['cpu_s']:.1f} | "
                         f"{b['p50_ms']:.0f} → {a['p50_ms']:.0f} | "
                         + " | ".join(f"{b[s + '_s']:.1f} → {a[s + '_s']:.1f}" for s in stage_names) + " |")
    if args.notes:
        lines += ["", Path(args.notes).read_text().strip()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(rows, stage_names, out.with_suffix(".png"))


def plot(rows: list[dict], stage_names, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # the `bench` extra has it; the table and CSV do not need it
        print("matplotlib is not installed: no PNG (pip install -e '.[bench]')", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['method']}\n({r['tree']})" for r in rows]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(rows), 4.2))
    bottom = [0.0] * len(rows)
    for s in stage_names:
        vals = [r[s + "_s"] for r in rows]
        ax.bar(labels, vals, bottom=bottom, label=s)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("seconds to ingest the history")
    ax.set_title("write path per stage (CPU)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="c3m,dense-topk", help="comma-separated method names")
    ap.add_argument("--dataset", type=Path, help="dataset folder (default: synthesise one hard/dev history)")
    ap.add_argument("--length", default="128k", help="history length when synthesising")
    ap.add_argument("--smoke", action="store_true", help="a tiny history; results go to a temp dir unless --out")
    ap.add_argument("--before-tree", type=Path, help="checkout of the earlier commit to compare against")
    ap.add_argument("--after-tree", type=Path, help="checkout to measure as 'after' (default: this one, with "
                                                    "whatever is uncommitted in it)")
    ap.add_argument("--before-methods", help="methods the before tree runs for (default: all of --methods)")
    ap.add_argument("--one-thread", action="store_true",
                    help="also run the after tree with one BLAS/OpenMP thread (" + ", ".join(THREAD_VARS) + "=1)")
    ap.add_argument("--perception", default="scene-encoder")
    ap.add_argument("--text-embedder", default="auto")
    ap.add_argument("--out", type=Path, help="output path without suffix (.md, .csv, .png)")
    ap.add_argument("--notes", type=Path, help="Markdown appended to the report")
    ap.add_argument("--profile-dir", type=Path, help="write cProfile summaries (top 40) instead of timing tables")
    ap.add_argument("--harness", type=Path, help="measure at the eval harness's workload on this dataset (docstring)")
    ap.add_argument("--limit", type=int, help="--harness: first N histories only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--harness-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    ap.add_argument("--profile", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return work(args)
    if args.harness_worker:
        return harness_work(args)
    if args.harness:
        if args.perception == "scene-encoder" and "--perception" not in sys.argv:
            args.perception = "none"  # c3m eval's default
        return run_harness(args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    trees = ([("before", args.before_tree)] if args.before_tree else []) + [("after", args.after_tree)]
    with tempfile.TemporaryDirectory(prefix="c3m-e2e-write-") as tmp:
        tmp = Path(tmp).resolve()
        dataset = args.dataset
        if dataset is None:
            dataset = tmp / "data"
            subprocess.run(c3m_argv(["synth", str(dataset), "--preset", "hard", "--split", "dev", "--length",
                                     "4000" if args.smoke else args.length, "--episodes", "1", "--seed", "0",
                                     "--workers", "1", "-q"]), check=True, stdout=subprocess.DEVNULL)
        dataset = dataset.resolve()
        if args.profile_dir:
            args.profile_dir.mkdir(parents=True, exist_ok=True)
            for label, tree in trees:
                for m in methods:
                    r = run_one(args, tree, m, dataset, tmp, str((args.profile_dir / f"{label}-{m}").resolve()))
                    print(f"profiled {label} {m}: {r['total_s']:.1f} s under cProfile", flush=True)
            return 0
        runs = [(label, tree, 0) for label, tree in trees]
        if args.one_thread:
            runs += [(f"{label}, 1 thread", tree, 1) for label, tree in trees]
        compare = set(args.before_methods.split(",")) if args.before_methods else set(methods)
        rows = []
        for m in methods:
            for label, tree, threads in runs:
                if label.startswith("before") and m not in compare:
                    continue
                r = {"tree": label, **summarise(run_one(args, tree, m, dataset, tmp, threads=threads))}
                rows.append(r)
                print(f"{label} {m}: {r['total_s']:.1f} s, {r['sessions_per_s']:.2f} sessions/s, "
                      f"p50 {r['p50_ms']:.0f} ms", flush=True)
        out = args.out or (tmp / "e2e-write" if args.smoke else ROOT / "benchmarks" / "results" / "e2e-write-cpu")
        write_outputs(args, rows, dataset if args.dataset else
                      Path(f"c3m synth --preset hard --split dev --seed 0 --length {'4000' if args.smoke else args.length}"), out)
        print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
