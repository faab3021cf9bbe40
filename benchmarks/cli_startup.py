"""Whole-process start-up of the ``c3m`` command: each command timed from outside, best and median of N runs.

Compares this checkout against an older one (``--before-tree``, a ``git worktree`` of an earlier commit, run with
the same interpreter and packages through ``PYTHONPATH``), runs interleaved (before, after, before, ...) so a
drifting machine moves both. Each tree gets its own demo store, built by its own ``c3m demo --store``.

    git worktree add /tmp/before a13822e
    python benchmarks/cli_startup.py --before-tree /tmp/before --runs 5 --out benchmarks/results/cli-startup-cpu.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [  # (label, argv after `c3m`); {store} and {data} are the tree's demo store and dataset
    ("demo", ["demo"]),
    ("ask", ["ask", "What colour is my mug now?", "-n", "demo-user", "--store", "{store}"]),
    ("inspect", ["inspect", "-n", "demo-user", "--store", "{store}"]),
    ("verify", ["verify", "--store", "{store}"]),
    ("ingest (no-op)", ["ingest", "{data}", "--store", "{store}", "-q"]),
    ("methods", ["methods"]),
]


def env_for(tree: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("C3M_STORE", "C3M_NAMESPACE")}
    if tree is not None:  # its `c3m` package shadows the installed one (c3m_kernels stays the installed one)
        env["PYTHONPATH"] = str(tree)
    return env


def c3m_argv(args: list[str]) -> list[str]:
    exe = Path(sys.executable).with_name("c3m")
    return ([str(exe)] if exe.exists() else [sys.executable, "-m", "c3m.cli"]) + args


def timed(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-400:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before-tree", type=Path, help="checkout of the earlier commit to compare against")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cli-startup-cpu.md")
    args = ap.parse_args()
    trees = {"after": None} if args.before_tree is None else {"before": args.before_tree, "after": None}
    with tempfile.TemporaryDirectory(prefix="c3m-startup-") as tmp:
        work = Path(tmp)
        places = {}
        for name, tree in trees.items():
            store, data = work / f"{name}-store", work / f"{name}-data"
            timed(c3m_argv(["demo", "--store", str(store), "--dataset-out", str(data)]), env_for(tree), work)
            places[name] = {"store": str(store), "data": str(data)}
        times: dict[tuple[str, str], list[float]] = {}
        for label, argv in COMMANDS:
            for _ in range(args.runs + 1):  # the first round warms the page cache and is not counted
                for name, tree in trees.items():
                    t = timed(c3m_argv([a.format(**places[name]) for a in argv]), env_for(tree), work)
                    times.setdefault((label, name), []).append(t)
            for name in trees:
                times[(label, name)] = times[(label, name)][1:]
            print(label, {n: round(min(times[(label, n)]), 3) for n in trees}, flush=True)
    write(args, trees, times)
    return 0


def write(args, trees, times) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    before = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.before_tree, capture_output=True,
                            text=True).stdout.strip() if args.before_tree else None
    sys.path.insert(0, str(ROOT))
    from c3m.machine import cpu_model

    lines = [f"# `c3m` start-up, whole process ({datetime.now(timezone.utc):%Y-%m-%d}, {cpu_model()}, "
             f"{os.cpu_count()} cores)", "",
             f"Command: `python benchmarks/cli_startup.py{' --before-tree BEFORE' if before else ''} --runs {args.runs}`"
             f" at commit {commit}" + (f", before = commit {before}" if before else "") + ". Wall seconds from "
             "process start to exit, "
             f"best and median of {args.runs} interleaved runs after one warm-up round; the demo store is the "
             "tree's own `c3m demo --store`.", ""]
    if before:
        lines += ["| command | before best | before median | after best | after median | before / after (best) |",
                  "|---|---:|---:|---:|---:|---:|"]
    else:
        lines += ["| command | best | median |", "|---|---:|---:|"]
    for label, _ in COMMANDS:
        a = times[(label, "after")]
        if before:
            b = times[(label, "before")]
            lines.append(f"| `c3m {label}` | {min(b):.2f} | {statistics.median(b):.2f} | {min(a):.2f} | "
                         f"{statistics.median(a):.2f} | {min(b) / min(a):.1f}× |")
        else:
            lines.append(f"| `c3m {label}` | {min(a):.2f} | {statistics.median(a):.2f} |")
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
