"""Put methods from several ``c3m eval`` output folders side by side (same datasets, same harness).

    python benchmarks/compare_reports.py OUT.md FOLDER1 FOLDER2 ...

Each folder's ``metrics.json`` contributes every method it holds; the table has one row per
(length, category) and, per method, Route-Hit, Support Recall and oracle-reader accuracy (means with 95%
cluster-bootstrap intervals), then an overall block with tokens, images, pointers and overflow repairs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

CATS = ("IE", "MSR", "TR", "KU", "AR", "overall")


def cell(v) -> str:
    if not isinstance(v, dict) or v.get("mean") is None:
        return "–"
    return f"{100 * v['mean']:.1f} [{100 * v['lo']:.1f}, {100 * v['hi']:.1f}]"


def main() -> None:
    out_path, folders = sys.argv[1], sys.argv[2:]
    methods: dict[str, dict] = {}
    headers = []
    for f in folders:
        m = json.loads(Path(f, "metrics.json").read_text())
        headers.append((f, m["header"]))
        methods.update(m["metrics"])
    names = list(methods)
    lengths = sorted({L for m in methods.values() for L in m}, key=lambda s: int("".join(c for c in s if c.isdigit()) or 0))
    lines = ["# " + " vs ".join(names) + " on the synthetic benchmark", ""]
    for f, h in headers:
        lines.append(f"- `{h['command']}` — {h['date']}, commit {h['commit']}, {h['machine']}")
    lines += ["", "Cells: mean [95% cluster-bootstrap interval over histories], in %. Oracle-reader = all gold "
              "evidence in the context (AR: no misleading item); Route-Hit: a gold turn among the nodes routing "
              "reached before selection.", ""]
    for metric, title in (("support_recall", "Support Recall"), ("oracle_reader_acc", "Oracle-reader accuracy"),
                          ("route_hit", "Route-Hit")):
        lines += [f"## {title}", "", "| length | category | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for L in lengths:
            for c in CATS:
                lines.append(f"| {L} | {c} | " + " | ".join(cell(methods[n].get(L, {}).get(c, {}).get(metric)) for n in names) + " |")
        lines.append("")
    lines += ["## Cost and pressure (overall, per question / per history)", "",
              "| length | method | text tokens | images | Raw Nodes read | read ms p50 | write ms p50 | Raw-Node pointers | Raw Nodes | overflow repairs / history |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for L in lengths:
        for n in names:
            o = methods[n].get(L, {}).get("overall")
            if not o:
                continue
            mean = lambda k: o[k]["mean"] if isinstance(o[k], dict) else o[k]  # noqa: E731
            lines.append(f"| {L} | {n} | {mean('text_tokens'):.0f} | {mean('images'):.1f} | {mean('raw_nodes_read'):.1f} | "
                         f"{o['read_ms_p50']:.1f} | {o['write_ms_p50']:.1f} | {o['raw_node_pointers']:.1f} | "
                         f"{o['raw_nodes']:.1f} | {o['overflow_repairs']:.2f} |")
    Path(out_path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    plot(methods, names, lengths, Path(out_path).with_suffix(".png"))


def plot(methods, names, lengths, path: Path) -> None:
    """Support Recall and oracle-reader accuracy per category and length, methods side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(len(lengths), 2, figsize=(11, 2.8 * len(lengths)), squeeze=False)
    width = 0.8 / len(names)
    for row, L in enumerate(lengths):
        for col, (metric, title) in enumerate((("support_recall", "Support Recall"),
                                               ("oracle_reader_acc", "oracle-reader accuracy"))):
            ax = axes[row][col]
            cats = [c for c in CATS if c != "AR" or metric != "support_recall"]
            x = np.arange(len(cats))
            for i, n in enumerate(names):
                vals = [methods[n].get(L, {}).get(c, {}).get(metric) or {} for c in cats]
                mean = [100 * (v.get("mean") or 0) for v in vals]
                err = [[100 * ((v.get("mean") or 0) - (v.get("lo") or 0)) for v in vals],
                       [100 * ((v.get("hi") or 0) - (v.get("mean") or 0)) for v in vals]]
                ax.bar(x + i * width, mean, width, yerr=err, capsize=2, label=n)
            ax.set_xticks(x + width * (len(names) - 1) / 2, cats)
            ax.set_ylim(40, 102)
            ax.set_title(f"{title}, {L}")
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
