"""cProfile of one store's read path: every question of a dataset's histories, one by one or as one batch.

    python benchmarks/e2e/profile_read.py --store STORE --dataset DATASET --method c3m --mode batch > OUT.txt

The summaries in benchmarks/results/profiles/read-*.txt come from this (the store of e2e-read-cpu.md).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--method", default="c3m")
    ap.add_argument("--mode", choices=("single", "batch"), default="batch")
    ap.add_argument("--sort", default="tottime")
    args = ap.parse_args(argv)
    from c3m import Memory, MemoryConfig
    from c3m.dataset import load_dataset

    histories = load_dataset(args.dataset)
    root = Memory(args.store, histories[0].id, config=MemoryConfig(method=args.method))
    reqs = [(h.id, q.question) for h in histories for q in h.questions]
    for ns in dict.fromkeys(n for n, _ in reqs):
        root.tenant(ns).retrieve("warm up")  # load indexes, compile kernels
    prof = cProfile.Profile()
    prof.enable()
    t0 = time.perf_counter()
    if args.mode == "single":
        for ns, q in reqs:
            root.tenant(ns).retrieve(q)
    else:
        root.retrieve_many(reqs)
    wall = time.perf_counter() - t0
    prof.disable()
    print(f"{args.method} {args.mode}: {len(reqs)} questions in {wall:.3f} s ({1000 * wall / len(reqs):.1f} ms each)")
    pstats.Stats(prof).sort_stats(args.sort).print_stats(30)
    root.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
