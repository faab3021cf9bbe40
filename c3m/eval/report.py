"""Reports: Markdown tables in the layout of the C3M paper's Table 1, ``metrics.json``, and PNG plots.

``metrics.json`` schema::

    {"header": {command, date, commit, machine, seed, config, budget},
     "metrics": {method: {length: {category | "overall": {metric: {"mean", "lo", "hi", "n"} | number}}}}}

Categories are IE, MSR, TR, KU, AR; metrics are listed in ``metrics.METRICS`` (each with a 95% cluster
bootstrap interval ``lo``..``hi``); ``overall`` also holds write/read latency percentiles, Raw-Node
pointers, Raw Nodes and overflow repairs per history.
"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..machine import describe as describe_machine
from ..types import CATEGORIES, as_json_dict
from .metrics import aggregate

TABLE_METRICS = (("oracle_reader_acc", "Oracle-reader accuracy (evidence-only: all gold evidence in context; "
                  "AR: no misleading item) ×100", 100),
                 ("support_recall", "Support Recall ×100", 100),
                 ("route_hit", "Route-Hit ×100", 100))


def _length_key(label: str) -> float:
    try:
        return float(label.rstrip("k"))
    except ValueError:
        return float("inf")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def make_header(config, budget, *, seed: int = 0, command: str | None = None, judge: str | None = None,
                perception: str | None = None) -> dict:
    return {"command": command or " ".join(["c3m", *sys.argv[1:]]),
            "answer_accuracy": (f"judged: answerer {config.answerer}, judge {judge}, perception "
                                f"{perception + (' (hidden ground truth)' if perception == 'oracle' else '') if perception else 'none (text only)'}"
                                if judge else "not judged (no --judge); oracle-reader accuracy only"),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": _commit(),
            "machine": describe_machine(),
            "seed": seed, "config": as_json_dict(config), "budget": as_json_dict(budget)}


def compute_metrics(everything: dict, *, seed: int = 0, n_boot: int = 1000) -> dict:
    return {m: {length: aggregate(res, seed=seed, n_boot=n_boot)
                for length, res in sorted(by_len.items(), key=lambda kv: _length_key(kv[0])) if res}
            for m, by_len in everything.items()}


def _cell(entry, scale) -> str:
    if not isinstance(entry, dict) or entry.get("mean") is None:
        return "–"
    return f"{entry['mean'] * scale:.1f}"


def markdown(metrics: dict, header: dict) -> str:
    lines = ["# c3m evaluation report", ""]
    lines += [f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in header.items()
              if k not in ("config", "budget")]
    lines += [f"- reader budget: {header.get('budget')}", f"- config: `{json.dumps(header.get('config'))}`", ""]
    lengths = sorted({length for by_len in metrics.values() for length in by_len}, key=_length_key)
    cats = [c for c in CATEGORIES if any(c in row for by_len in metrics.values() for row in by_len.values())]
    judged = any(row.get("overall", {}).get("judged_acc", {}).get("n") for by_len in metrics.values()
                 for row in by_len.values())
    tables = ((("judged_acc", f"Judged answer accuracy ({header.get('answer_accuracy')}) ×100", 100),)
              if judged else ()) + TABLE_METRICS
    for metric, title, scale in tables:
        lines += [f"## {title}", ""]
        head = "| Method | " + " | ".join(f"{c} {length}" for c in cats + ["Overall"] for length in lengths) + " |"
        lines += [head, "|" + "---|" * (1 + (len(cats) + 1) * len(lengths))]
        for method, by_len in metrics.items():
            cells = [_cell(by_len.get(length, {}).get(cat if cat != "Overall" else "overall", {}).get(metric), scale)
                     for cat in cats + ["Overall"] for length in lengths]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Intervals (overall, 95% cluster bootstrap over histories)", "",
              "| Method | Length | Oracle-reader | Support Recall | Route-Hit |", "|---|---|---|---|---|"]
    for method, by_len in metrics.items():
        for length, row in by_len.items():
            o = row["overall"]
            fmt = lambda e: "–" if e["mean"] is None else f"{100 * e['mean']:.1f} [{100 * e['lo']:.1f}, {100 * e['hi']:.1f}]"
            lines.append(f"| {method} | {length} | {fmt(o['oracle_reader_acc'])} | {fmt(o['support_recall'])} | "
                         f"{fmt(o['route_hit'])} |")
    lines += ["", "## Resources (per question / per session / per history)", "",
              "| Method | Length | Histories | Text tokens | Images | Raw Nodes read | Read ms p50/p95 | "
              "Write ms p50/p95 | Raw-Node pointers | Raw Nodes | Overflow repairs |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for method, by_len in metrics.items():
        for length, row in by_len.items():
            o = row["overall"]
            lines.append(f"| {method} | {length} | {o['histories']} | {o['text_tokens']['mean']:.0f} | "
                         f"{o['images']['mean']:.2f} | {o['raw_nodes_read']['mean']:.1f} | "
                         f"{o['read_ms_p50']:.1f}/{o['read_ms_p95']:.1f} | {o['write_ms_p50']:.1f}/{o['write_ms_p95']:.1f}"
                         f" | {o['raw_node_pointers']:.1f} | {o['raw_nodes']:.1f} | {o['overflow_repairs']:.2f} |")
    return "\n".join(lines) + "\n"


def plots(metrics: dict, out: Path) -> list[Path]:
    """Recall/accuracy vs history length, and tokens vs accuracy; skipped (with a note) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method, by_len in metrics.items():
        lengths = list(by_len)
        for ax, metric in zip(axes, ("oracle_reader_acc", "support_recall")):
            ax.plot(lengths, [100 * by_len[length]["overall"][metric]["mean"] for length in lengths], marker="o",
                    label=method)
            ax.set_xlabel("history length (text tokens)")
            ax.set_ylabel(f"{metric.replace('_', ' ')} ×100")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    written.append(out / "accuracy_vs_length.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    for method, by_len in metrics.items():
        xs = [by_len[length]["overall"]["text_tokens"]["mean"] for length in by_len]
        ys = [100 * by_len[length]["overall"]["oracle_reader_acc"]["mean"] for length in by_len]
        ax.scatter(xs, ys, label=method)
        for x, y, length in zip(xs, ys, by_len):
            ax.annotate(length, (x, y), fontsize=8)
    ax.set_xlabel("context text tokens per question")
    ax.set_ylabel("oracle-reader accuracy ×100")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    written.append(out / "tokens_vs_accuracy.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def write_report(everything: dict, out: str | Path, header: dict, *, n_boot: int = 1000) -> dict:
    """Write report.md, metrics.json and plots into ``out``; returns the metrics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = compute_metrics(everything, seed=int(header.get("seed", 0)), n_boot=n_boot)
    (out / "metrics.json").write_text(json.dumps({"header": header, "metrics": metrics}, indent=2, sort_keys=True))
    text = markdown(metrics, header)
    images = plots(metrics, out)
    text += "\n" + ("\n".join(f"![{p.stem}]({p.name})" for p in images) if images else
                    "_(plots skipped: matplotlib is not installed; pip install 'c3m[bench]')_") + "\n"
    (out / "report.md").write_text(text)
    return metrics
