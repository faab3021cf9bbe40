"""Does an eval run reproduce the committed per-question results? For every method and history the two share,
count the per-question metric fields that are equal and print both means (paired differences between methods
are in the run's own report.md).

    python benchmarks/compare_to_baselines.py OUT [BASELINE]    (BASELINE: benchmarks/results/baselines-synth-cpu)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

FIELDS = ("oracle_reader_acc", "support_recall", "evidence_acc", "route_hit")


def load(folder: Path, method: str) -> dict:
    """{(length, history): {question_id: question record}} of one method's results."""
    out = {}
    for f in (folder / "results" / method).glob("*.jsonl"):
        for line in f.open():
            r = json.loads(line)
            out[(r["length"], r["history"])] = {q["question_id"]: q for q in r["questions"]}
    return out


def mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> int:
    new_dir = Path(sys.argv[1])
    base_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent / "results" / "baselines-synth-cpu"
    for method in sorted(p.name for p in (new_dir / "results").iterdir()):
        new, old = load(new_dir, method), load(base_dir, method)
        shared = sorted(set(new) & set(old))
        pairs = [(new[k][q], old[k][q]) for k in shared for q in new[k] if q in old[k]]
        same = sum(a[f] == b[f] for a, b in pairs for f in FIELDS)
        means = ", ".join(f"{f} {mean(b[f] for _, b in pairs):.3f} -> {mean(a[f] for a, _ in pairs):.3f}"
                          for f in FIELDS)
        print(f"{method}: {len(shared)} histories, fields equal {same}/{len(pairs) * len(FIELDS)}; {means}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
