"""Read latency per question, stage by stage: c3m's full reader (index + Cold-Store channels + reranker) beside its
strictly bounded variant, dense-topk and hybrid, on the same histories and questions, in one run.

Each history is ingested once per method family (c3m variants share c3m's committed index: they differ only in read
options). Then every question is read twice:

* ``single``: ``method.retrieve(question, budget)`` alone, timed per question (what one agent waits);
* ``batched``: ``method.retrieve_batch(all of the history's questions)``, the wall time divided by the questions
  (what the evaluation harness reports as read ms).

For c3m the single reads are split into stages by wrapping the read path's module-level stage functions with a
clock (exclusive times; they do not nest): embed the question, describe it (anchors), route + expand over the index,
the index pool (node fetch + top-k), the Cold-Store channels + fusion + feature rows (``gather``), the reranker
(``rerank``), composition + solve. Results: a Markdown table and a PNG under ``--out``.

    python benchmarks/read_latency.py --dataset /tmp/hard-dev-48k --out benchmarks/results/read-latency-cpu
    python benchmarks/read_latency.py --smoke        # a tiny history, seconds (tests/test_read_latency_smoke.py)

``--stores DIR`` keeps the ingested stores and reuses them, so two trees (before / after a read-side change) can be
timed on the same stores back to back.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: (stage, "module:attribute") — the read path's stage functions, wrapped with a clock for the single reads. A
#: missing attribute is an error (the smoke test catches a renamed stage), not a silently empty column.
STAGES = (("embed", "c3m.read.reader:query_vectors"), ("describe", "c3m.read.reader:describe_many"),
          ("route", "c3m.read.reader:segments_scores"), ("route", "c3m.read.reader:route_one"),
          ("route", "c3m.read.reader:expand_many"), ("route", "c3m.read.reader:members"),
          ("index pool", "c3m.read.reader:expand_pools"), ("channels + features", "c3m.read.reader:gather"),
          ("rerank", "c3m.read.reader:rerank"), ("compose + solve", "c3m.read.reader:compose_plan"),
          ("compose + solve", "c3m.read.reader:solve_many"), ("compose + solve", "c3m.read.reader:compose_finish"))


def _owner(path: str):
    """("c3m.methods.c3m:C3M._route") -> (the object holding the attribute, the attribute's name)."""
    import importlib

    module, _, attr = path.partition(":")
    owner = importlib.import_module(module)
    *outer, name = attr.split(".")
    for part in outer:
        owner = getattr(owner, part)
    if not hasattr(owner, name):
        raise AttributeError(f"read_latency: stage {path} no longer exists (update STAGES)")
    return owner, name


class StageClock:
    """Wraps the read path's stage functions with perf_counter; ``take()`` returns and resets."""

    def __init__(self):
        self.spent, self.saved = defaultdict(float), []
        for stage, path in STAGES:
            owner, name = _owner(path)
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            self.saved.append((owner, name, original))
            fn = original.__func__ if isinstance(original, staticmethod) else original
            wrapped = self._wrap(stage, fn)
            setattr(owner, name, staticmethod(wrapped) if isinstance(original, staticmethod) else wrapped)

    def _wrap(self, stage, fn):
        def timed(*a, **k):
            t0 = CLOCK()
            try:
                return fn(*a, **k)
            finally:
                self.spent[stage] += CLOCK() - t0
        return timed

    def take(self) -> dict[str, float]:
        out = dict(self.spent)
        self.spent.clear()
        return out

    def close(self) -> None:
        for owner, name, original in reversed(self.saved):
            setattr(owner, name, original)


#: the clock every time here is read from: wall time (``--clock wall``, default) or this process's CPU time (``--clock
#: cpu``: on a shared machine, what the read itself spent, whatever else ran; equal to wall time on a quiet one
#: with one thread, as the reads do not wait on I/O once the store is in the page cache)
CLOCK = time.perf_counter


def percentile(xs, p) -> float:
    return float(np.percentile(np.asarray(xs, float), p)) if len(xs) else float("nan")


def run(args) -> dict:
    from c3m import Memory, MemoryConfig
    from c3m.dataset import load_dataset
    from c3m.eval.harness import method_spec
    from c3m.eval.runtime import _init_worker
    from c3m.types import ReaderBudget

    _init_worker(args.threads)
    histories = load_dataset(args.dataset)[: args.histories or None]
    budget = ReaderBudget()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    out: dict = {"methods": {}, "histories": len(histories), "questions": 0}
    with tempfile.TemporaryDirectory(prefix="c3m-read-latency-") as tmp:
        if args.stores:  # kept between runs: a read-side change reads the same stores
            tmp = args.stores
        for spec in methods:
            base, options = method_spec(spec)
            single, batched, stages = [], [], defaultdict(list)
            for h in histories:
                store = Path(tmp) / base / h.id
                cfg = MemoryConfig(method=base, method_options=options)
                with Memory(store, "h", config=cfg) as mem:
                    if mem.version == 0:
                        mem.add_history(h)
                    qs = [q.question for q in h.questions]
                    mem.method.retrieve(qs[0], budget)  # warm: model loads, Cold-Store keys, reranker
                    memo = getattr(getattr(mem.method, "anchors", None), "memo", None)
                    clock = StageClock() if base in ("c3m", "c3m-paper") else None
                    try:
                        for q in [q for _ in range(args.repeat) for q in qs]:
                            if memo is not None:  # every read describes its question afresh
                                memo.clear()
                            if clock:
                                clock.take()
                            t0 = CLOCK()
                            mem.method.retrieve(q, budget)
                            single.append(1000 * (CLOCK() - t0))
                            if clock:
                                for stage, s in clock.take().items():
                                    stages[stage].append(1000 * s)
                    finally:
                        if clock:
                            clock.close()
                    if memo is not None:
                        memo.clear()
                    t0 = CLOCK()
                    mem.method.retrieve_batch(qs, budget)
                    batched.append(1000 * (CLOCK() - t0) / len(qs))
            n = len(single)
            out["questions"] = n
            out["methods"][spec] = {
                "single_p50": percentile(single, 50), "single_p95": percentile(single, 95),
                "batched_per_q": float(np.mean(batched)),
                "stages_p50": {s: percentile(v + [0.0] * (n - len(v)), 50) for s, v in stages.items()},
                "stages_p95": {s: percentile(v + [0.0] * (n - len(v)), 95) for s, v in stages.items()},
            }
            print(spec, json.dumps(out["methods"][spec]), flush=True)
    return out


def write(out: dict, args, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"# Read latency per question ({platform.machine()}, CPU)", "",
             f"`python benchmarks/read_latency.py {' '.join(sys.argv[1:])}` — {dt.date.today().isoformat()}, commit "
             f"{commit}, {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
             f"{args.threads} thread(s), {args.clock} clock; {out['histories']} histories of `{Path(args.dataset).name}`, "
             f"{out['questions']} questions, default reader budget, MiniLM embedder.", "",
             "| method | single p50 ms | single p95 ms | batched ms / question |", "|---|---:|---:|---:|"]
    for spec, m in out["methods"].items():
        lines.append(f"| {spec} | {m['single_p50']:.1f} | {m['single_p95']:.1f} | {m['batched_per_q']:.1f} |")
    staged = {s: m for s, m in out["methods"].items() if m["stages_p50"]}
    if staged:
        names = list(dict.fromkeys(s for s, _ in STAGES))
        lines += ["", "Stages of a single read (ms, p50 / p95 over questions; exclusive):", "",
                  "| method | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for spec, m in staged.items():
            lines.append(f"| {spec} | " + " | ".join(
                f"{m['stages_p50'].get(s, 0):.1f} / {m['stages_p95'].get(s, 0):.1f}" for s in names) + " |")
    (path / "read-latency.md").write_text("\n".join(lines) + "\n")
    (path / "read-latency.json").write_text(json.dumps(out, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    specs = list(out["methods"])
    fig, ax = plt.subplots(figsize=(8, 3.5))
    x = np.arange(len(specs))
    ax.bar(x - 0.2, [out["methods"][s]["single_p50"] for s in specs], 0.4, label="single p50")
    ax.bar(x + 0.2, [out["methods"][s]["single_p95"] for s in specs], 0.4, label="single p95")
    ax.axhline(50, color="grey", ls="--", lw=1, label="50 ms target (p95)")
    ax.set_xticks(x, specs, rotation=15, fontsize=8)
    ax.set_ylabel("ms per question")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path / "read-latency.png", dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset")
    ap.add_argument("--methods", default="c3m,c3m:cold=false,c3m:reranker=bmer,dense-topk,hybrid")
    ap.add_argument("--histories", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/torch threads (one harness worker's share)")
    ap.add_argument("--out", default="benchmarks/results/read-latency-cpu")
    ap.add_argument("--stores", help="keep the ingested stores here and reuse them (default: a temporary folder)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--repeat", type=int, default=1, help="read each question this many times (single reads)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    with tempfile.TemporaryDirectory(prefix="c3m-read-latency-smoke-") as tmp:
        if args.smoke:
            from c3m.eval.synth import generate_dataset

            args.dataset = str(generate_dataset(Path(tmp) / "d", length=4000, episodes=1, seed=0, progress=False,
                                                preset="hard", split="dev"))
            args.methods, args.out = "c3m,dense-topk", str(Path(tmp) / "out")
        out = run(args)
        write(out, args, Path(args.out))
        print((Path(args.out) / "read-latency.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
