"""Oversized input: peak RSS of adding one session whose turn is N characters, each size in a fresh process,
with the default method and models (``c3m``, MiniLM). Over ``MemoryConfig.max_turn_chars`` (100,000) the turn is
refused before any write; at or under it the session is stored and every turn stays reachable.

    python benchmarks/reliability/oversized.py --json benchmarks/results/reliability-oversized.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from datetime import datetime
from c3m import Memory
from c3m.errors import InvalidInput
from c3m.types import Session, Turn
n, store = int(sys.argv[1]), sys.argv[2]
words = ("the lamp in the hallway is olive and the mug on the shelf is blue ").split()
text = " ".join(words[i % len(words)] for i in range(n // 5 + 1))[:n]
with Memory(store, "u") as mem:
    mem.add_session(Session("warm", datetime(2026, 1, 1), [Turn("user", "A short first note about the lamp.")]))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    try:
        mem.add_session(Session("big", datetime(2026, 1, 2), [Turn("user", text)]))
        outcome = "stored"
    except InvalidInput as exc:
        outcome = f"refused: {exc.field}"
    secs = time.perf_counter() - t
    stored = [s.session_id for s in mem.sessions()]
print(json.dumps({"chars": n, "outcome": outcome, "seconds": round(secs, 2), "sessions": stored,
                  "rss_before_mib": round(base / 1024, 1),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 2_000_000])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(Path(tmp) / "store")], check=True,
                                 capture_output=True, text=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
