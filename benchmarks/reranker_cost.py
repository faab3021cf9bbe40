"""What reranking a question's candidates costs: the shipped LightGBM model (numpy and LightGBM) against a cross-encoder pass.

A cross-encoder reads (question, candidate) together, so it runs one transformer pass per candidate; its compute is
the shipped MiniLM-L6's forward over the pair text ("question [SEP] turn"), which is what is timed here (the
packaged all-MiniLM-L6-v2 weights, c3m's numpy forward, one thread and two). The tree model is timed on the same
number of feature rows. Candidates are real turns of the Mem-Gallery development dialogs, questions theirs.

    python benchmarks/reranker_cost.py --out benchmarks/results/reranker-cpu.md
"""
from __future__ import annotations

import argparse
import datetime as dt
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=str(ROOT / "benchmarks/data/memgallery-dev"))
    ap.add_argument("--candidates", default="24,48,100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from c3m.dataset import load_dataset
    from c3m.models.minilm import MiniLMEmbedder
    from c3m.read.features import FEATURES
    from c3m.read.rerank import make_reranker

    h = load_dataset(args.dataset)[0]
    turns = [t.text for s in h.sessions for t in s.turns if t.text.strip()]
    question = h.questions[0].question
    emb = MiniLMEmbedder()
    reranker = make_reranker("lgbm")
    try:  # LightGBM's own predict, beside the numpy evaluation the reader uses
        import lightgbm

        booster = lightgbm.Booster(model_file=str(reranker.path))
    except ImportError:
        booster = None
    rng = np.random.default_rng(0)
    rows = []
    for n in [int(x) for x in args.candidates.split(",")]:
        pairs = [f"{question} [SEP] {t}" for t in rng.choice(turns, n, replace=False)]
        X = rng.random((n, len(FEATURES))).astype(np.float32)
        emb.embed(pairs[:2])  # warm
        for threads in (1, 2):
            with threadpool_limits(threads):
                cross = timed(lambda: emb.embed(pairs), args.repeats)
                tree = timed(lambda: reranker.scores(X, np.zeros(n, int)), args.repeats * 20)
                lgb = timed(lambda: booster.predict(X, num_threads=1), args.repeats * 20) if booster else [np.nan]
            rows.append((n, threads, float(np.median(cross)), float(np.median(tree)), float(np.median(lgb))))
            print(rows[-1], flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    text = ["# Reranker cost per question: LightGBM vs a MiniLM-L6 cross-encoder pass (CPU)", "",
            f"`python benchmarks/reranker_cost.py {' '.join(argv if argv is not None else sys.argv[1:])}` — "
            f"{dt.date.today().isoformat()}, commit {commit}, {platform.processor() or platform.machine()}, "
            f"Python {platform.python_version()}; medians of {args.repeats} (cross-encoder) and {args.repeats * 20} "
            f"(trees) runs; pairs are \"question [SEP] turn\" over real Mem-Gallery dev turns.", "",
            "| candidates | threads | cross-encoder pass ms | trees in numpy (the reader's) ms | LightGBM predict ms | "
            "cross-encoder / numpy trees |", "|---:|---:|---:|---:|---:|---:|"]
    text += [f"| {n} | {t} | {c:.1f} | {g:.3f} | {b:.3f} | {c / g:,.0f}× |" for n, t, c, g, b in rows]
    text += ["", "The read budget is 50 ms per question (p95) for the whole reader, the reranker ≤ 5 ms of it; c3m's "
             "reader hands the reranker ~100 candidates. A cross-encoder over them would take the whole budget many "
             "times over before it ranks anything, so it was not trained. The tree model ranks them in about a millisecond "
             "in numpy (LightGBM's C predict is faster still, but importing LightGBM costs every reading process "
             "~0.8 s; see c3m/read/trees.py)."]
    if args.out:
        Path(args.out).write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
