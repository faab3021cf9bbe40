"""C3M §4.2 capacity-scaling ablation: the same 128K histories under write budgets C1, C1.25, C1.5, C1.75.

Reads one ``c3m eval`` output folder per capacity (each run with ``--config`` naming its write budget) and
writes a Markdown table and a plot of overflow repairs per history, Raw-Node pointers, Route-Hit, Support
Recall and oracle-reader accuracy against capacity. The reader budget and the Raw Nodes are the same in
every run, so only the index's organisation changes.

    python benchmarks/c3m_capacity.py --run C1=/tmp/res/abl-1.0 --run C1.25=/tmp/res/abl-1.25 ... \\
        --out benchmarks/results/c3m-synth-cpu/capacity-scaling
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

METRICS = (("overflow_repairs", "overflow repairs / history", False), ("raw_node_pointers", "Raw-Node pointers", False),
           ("route_hit", "Route-Hit", True), ("support_recall", "Support Recall", True),
           ("oracle_reader_acc", "oracle-reader acc.", True))


def value(overall: dict, key: str):
    v = overall[key]
    return v["mean"] if isinstance(v, dict) else v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", required=True, help="LABEL=eval-output-folder, in capacity order")
    ap.add_argument("--method", default="c3m")
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.md and PREFIX.png")
    args = ap.parse_args()
    rows = []
    for spec in args.run:
        label, folder = spec.split("=", 1)
        m = json.loads(Path(folder, "metrics.json").read_text())
        (length, cats), = m["metrics"][args.method].items()
        budget = m["header"]["config"]["write_budget"]
        rows.append((label, length, budget, cats["overall"], m["header"]))
    out = [f"# C3M capacity scaling at {rows[0][1]} (C3M §4.2 ablation)", "",
           f"- runs: {', '.join(r[0] for r in rows)}; {int(value(rows[0][3], 'histories'))} histories each; reader "
           f"budget {rows[0][4]['budget']}", f"- date {rows[0][4]['date']}, commit {rows[0][4]['commit']}, "
           f"{rows[0][4]['machine']}", "",
           "| capacity | write budget (entries/pages/tokens/bytes) | " + " | ".join(t for _, t, _ in METRICS) + " |",
           "|---" * (len(METRICS) + 2) + "|"]
    for label, _, b, o, _ in rows:
        cells = []
        for key, _, pct in METRICS:
            v = o[key]
            if isinstance(v, dict) and pct:
                cells.append(f"{100 * v['mean']:.1f} [{100 * v['lo']:.1f}, {100 * v['hi']:.1f}]")
            else:
                cells.append(f"{value(o, key):.2f}")
        out.append(f"| {label} | {b['entries']}/{b['pages']}/{b['index_tokens']}/{b['index_bytes']} | " + " | ".join(cells) + " |")
    Path(args.out + ".md").write_text("\n".join(out) + "\n", encoding="utf-8")
    print("\n".join(out))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(len(rows)))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    a1.plot(x, [value(r[3], "overflow_repairs") for r in rows], "o-", label="overflow repairs / history")
    a1.plot(x, [value(r[3], "raw_node_pointers") for r in rows], "s--", label="Raw-Node pointers")
    a1.set_xticks(x, [r[0] for r in rows])
    a1.set_title("index pressure")
    a1.legend(fontsize=8)
    for key, title, _ in METRICS[2:]:
        a2.plot(x, [100 * value(r[3], key) for r in rows], "o-", label=title)
    a2.set_xticks(x, [r[0] for r in rows])
    a2.set_ylabel("%")
    a2.set_title("outcomes (same reader budget)")
    a2.legend(fontsize=8)
    fig.suptitle(f"C3M capacity scaling at {rows[0][1]}")
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=120)


if __name__ == "__main__":
    main()
