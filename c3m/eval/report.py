"""Reports: Markdown tables in the layout of the C3M paper's Table 1, ``metrics.json``, and PNG plots.

``metrics.json`` schema::

    {"header": {command, date, commit, machine, seed, config, budget},
     "metrics": {method: {length: {category | "overall": {metric: {"mean", "lo", "hi", "n"} | number}}}}}

     "paired": {"A vs B": {length: {category | "overall": {metric: {"mean", "lo", "hi", "n", "histories", "win"}}}}}}

Categories are IE, MSR, TR, KU, AR; metrics are listed in ``metrics.METRICS`` (each with a 95% cluster
bootstrap interval ``lo``..``hi``); ``overall`` pools IE/MSR/TR/KU (AR has its own row) and also holds
write/read latency percentiles, Raw-Node pointers, Raw Nodes, overflow repairs, the harness-measured peak
index size per history, whether the method is bounded, and read/write violation counts. ``paired`` holds
A − B per pair of methods on the histories both ran, with a paired cluster-bootstrap interval; ``win``
names the better method only when the interval excludes 0.

Raw-text Support Recall (gold turns shown as their stored text or original image) is the headline: it comes
first in ``report.md``, with the caption-inclusive Support Recall beside it, because captions and crops depend
on the perception backend and are cheap to show.
"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..machine import describe as describe_machine
from ..types import CATEGORIES, as_json_dict
from .metrics import RETRIEVAL_CATEGORIES, aggregate, paired_difference

#: paired in this order; report.md shows the first three (raw-text SR, the headline, before caption SR)
PAIRED_METRICS = ("raw_support_recall", "support_recall", "oracle_reader_acc", "route_hit", "answer_f1",
                  "answer_correct")
#: how the report names a metric: the two Support Recalls must never be mistaken for each other
LABELS = {"raw_support_recall": "Raw-text Support Recall (no captions)",
          "support_recall": "Support Recall incl. captions/crops",
          "oracle_reader_acc": "oracle-reader accuracy", "route_hit": "Route-Hit",
          "answer_f1": "answer token F1", "answer_correct": "answer correct (judge, else F1 >= 0.5; AR: declined)"}
TABLE_METRICS = (("oracle_reader_acc", "Oracle-reader accuracy (evidence-only: all gold evidence in context; "
                  "AR without evidence: no misleading item; Overall = IE/MSR/TR/KU) ×100", 100),
                 ("raw_support_recall", "Raw-text Support Recall ×100 (gold turns shown as raw text or original "
                  "image; captions and crops do not count)", 100),
                 ("support_recall", "Support Recall incl. captions/crops ×100 (a caption or crop of a gold image "
                  "turn counts)", 100),
                 ("route_hit", "Route-Hit ×100 (the first 48 pool ids, plus the selected items)", 100),
                 ("answer_f1", "Answer token F1 ×100 (the answerer's span against the gold answer, SQuAD "
                  "normalisation; declined = 0)", 100))


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
                perception: str | None = None, answered: bool = True) -> dict:
    perception = perception or getattr(config, "perception", "none") or "none"
    label = {"none": "none (text only; image turns embedded with their neighbouring text)",
             "oracle": "oracle (the synthetic dataset's hidden scene graphs: an upper bound, not a model)",
             "scene-encoder": "scene-encoder (c3m's synthetic-domain image encoder; pixels only)"}.get(
        perception.split(":")[0] if perception.startswith("oracle") else perception, perception)
    return {"command": command or " ".join(["c3m", *sys.argv[1:]]),
            "perception": label,
            "answer_accuracy": (f"judged: answerer {config.answerer}, judge {judge}, perception "
                                f"{'oracle (hidden ground truth)' if perception.startswith('oracle') else perception if perception != 'none' else 'none (text only)'}"
                                if judge else "not judged (no --judge); oracle-reader accuracy only"),
            "answers": (f"answerer {config.answerer} on every context (token F1 / exact match against the gold, "
                        "selective accuracy, refusals, mark errors)" if answered else "not answered (--no-answer)"),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": _commit(),
            "machine": describe_machine(),
            "seed": seed, "config": as_json_dict(config), "budget": as_json_dict(budget or config.reader_budget)}


def compute_metrics(everything: dict, *, seed: int = 0, n_boot: int = 1000) -> dict:
    return {m: {length: aggregate(res, seed=seed, n_boot=n_boot)
                for length, res in sorted(by_len.items(), key=lambda kv: _length_key(kv[0])) if res}
            for m, by_len in everything.items()}


def compute_paired(everything: dict, *, seed: int = 0, n_boot: int = 2000) -> dict:
    """{"A vs B": {length: {category: {metric: paired difference}}}} for every pair in the given order."""
    methods = list(everything)
    out: dict = {}
    for i, a in enumerate(methods):
        for b in methods[i + 1:]:
            pair = {}
            for length in sorted(set(everything[a]) & set(everything[b]), key=_length_key):
                ra, rb = everything[a][length], everything[b][length]
                cats = sorted({q.category for r in ra for q in r.questions}, key=CATEGORIES.index)
                pair[length] = {cat: {m: paired_difference(ra, rb, m, cat, seed=seed, n_boot=n_boot)
                                      for m in PAIRED_METRICS} for cat in cats + ["overall"]}
            if pair:
                out[f"{a} vs {b}"] = pair
    return out


def _diff_cell(d: dict | None, a: str, b: str) -> str:
    if not d:
        return "–"
    mark = f" **{a if d['win'] == 'A' else b}**" if d["win"] else ""
    return f"{100 * d['mean']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]{mark}"


def paired_markdown(paired: dict, metric: str = "raw_support_recall") -> list[str]:
    """The paired table: A − B ×100 per length and category, the winner named only when 0 is excluded."""
    if not paired:
        return []
    cats = [c for c in CATEGORIES if any(c in row for p in paired.values() for row in p.values())] + ["overall"]
    label = LABELS.get(metric, metric.replace("_", " "))
    lines = [f"## Paired differences, {label}: A − B ×100 (95% paired cluster bootstrap over the same histories; "
             "the better method is named only when the interval excludes 0)", "",
             "| A vs B | length | " + " | ".join(c if c != "overall" else "Overall" for c in cats) + " |",
             "|---|---|" + "---|" * len(cats)]
    for name, by_len in paired.items():
        a, b = name.split(" vs ")
        for length, row in by_len.items():
            lines.append(f"| {name} | {length} | " + " | ".join(_diff_cell(row.get(c, {}).get(metric), a, b)
                                                               for c in cats) + " |")
    return lines + [""]


def _cell(entry, scale) -> str:
    if not isinstance(entry, dict) or entry.get("mean") is None:
        return "–"
    return f"{entry['mean'] * scale:.1f}"


def _label(method: str, by_len: dict) -> str:
    rows = [row["overall"] for row in by_len.values()]
    label = method if all(o.get("bounded") for o in rows) else f"{method} (unbounded)"
    if any(o.get("searches_cold_store") for o in rows):
        label += " (+ Cold-Store search)"
    if any(o.get("reload_changed") for o in rows):
        label += " (reads change after reload)"
    return label


def markdown(metrics: dict, header: dict, paired: dict | None = None) -> str:
    lines = ["# c3m evaluation report", ""]
    lines += [f"- {k}: `{v}`" if k == "command" else f"- {k}: {v}" for k, v in header.items()
              if k not in ("config", "budget")]
    lines += [f"- reader budget: {header.get('budget')}", f"- config: `{json.dumps(header.get('config'))}`",
              "- every figure is measured by the harness (contexts recounted from their items, indexes from their "
              "snapshots); a context over the reader budget is a violation and scores 0; Overall pools "
              f"{'/'.join(RETRIEVAL_CATEGORIES)} (AR is reported on its own)", ""]
    for metric in PAIRED_METRICS[:3] + ("answer_f1",):
        lines += paired_markdown(paired or {}, metric)
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
            lines.append(f"| {_label(method, by_len)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += answers_markdown(metrics)
    lines += ["## Intervals (overall, 95% cluster bootstrap over histories)", "",
              "| Method | Length | Raw-text Support Recall (no captions) | Support Recall incl. captions/crops | "
              "Oracle-reader | Route-Hit |", "|---|---|---|---|---|---|"]
    for method, by_len in metrics.items():
        for length, row in by_len.items():
            o = row["overall"]
            fmt = lambda e: "–" if e["mean"] is None else f"{100 * e['mean']:.1f} [{100 * e['lo']:.1f}, {100 * e['hi']:.1f}]"
            lines.append(f"| {method} | {length} | {fmt(o['raw_support_recall'])} | {fmt(o['support_recall'])} | "
                         f"{fmt(o['oracle_reader_acc'])} | {fmt(o['route_hit'])} |")
    lines += ["", "## Resources (per question / per session / per history)", "",
              "| Method | Length | Histories | Context tokens | Text tokens | Image tokens | Images | Raw Nodes in context | "
              "Pool size | Nodes scored (self-reported) | Nodes read from store | Read ms p50/p95 | Write ms p50/p95 | Raw-Node pointers | "
              "Raw Nodes | Overflow repairs |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    mean = lambda e: "–" if e.get("mean") is None else f"{e['mean']:.1f}"
    for method, by_len in metrics.items():
        for length, row in by_len.items():
            o = row["overall"]
            lines.append(f"| {method} | {length} | {o['histories']} | {mean(o['context_tokens'])} | "
                         f"{o['text_tokens']['mean']:.0f} | {mean(o['image_tokens'])} | {o['images']['mean']:.2f} | {o['raw_nodes_read']['mean']:.1f} | {mean(o['pool_size'])} | "
                         f"{mean(o['scored'])} | {mean(o['nodes_read'])} | "
                         f"{o['read_ms_p50']:.1f}/{o['read_ms_p95']:.1f} | {o['write_ms_p50']:.1f}/{o['write_ms_p95']:.1f}"
                         f" | {o['raw_node_pointers']:.1f} | {o['raw_nodes']:.1f} | {o['overflow_repairs']:.2f} |")
    lines += ["", "## Budgets as measured by the harness", "",
              "Peak active-index size per history (mean / max over histories), measured from every committed "
              "snapshot; a bounded method over its write budget is a write violation. Read violations: contexts "
              "over the reader budget, or with an item that is not what it claims (not a stored Raw Node of the "
              "namespace, forged provenance, a caption, crop or summary the store or snapshot does not hold, a "
              "node the served snapshot does not reach through the pages the trace names, a made-up pool id), "
              "scored 0. Reads are served by the method reloaded from its last snapshot; *Reads after reload* "
              "compares them with the live instance that did the writes (changed = it kept state the snapshot "
              "does not hold). A method that searches the Cold Store at read time is marked so: its index size "
              "is not all it reads from, and *Cold-Store search KiB* (mean per history, measured on the store) is "
              "the full-text index's text plus one float32 vector per Raw Node, beside the bounded index.", "",
              "| Method | Length | Bounded | Entries | Pages | Index tokens | Index KiB | Cold-Store search KiB | "
              "Write violations | Read violations | Reads after reload |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for method, by_len in metrics.items():
        for length, row in by_len.items():
            o = row["overall"]
            pm, px = o.get("index_peak_mean") or {}, o.get("index_peak_max") or {}
            cell = lambda k, scale=1.0: (f"{pm[k] / scale:.0f} / {px[k] / scale:.0f}" if k in pm else "–")
            bounded = "yes" if o.get("bounded") else "no (unbounded)"
            if o.get("searches_cold_store"):
                bounded += " + searches the Cold Store"
            checked, changed = o.get("reload_checked", 0), o.get("reload_changed", 0)
            reload = ("–" if not checked else f"same ({checked} asked)" if not changed
                      else f"**changed {changed}/{checked}**")
            cold = f"{o['cold_search_bytes_mean'] / 1024:.0f}" if o.get("searches_cold_store") and \
                o.get("cold_search_bytes_mean") else "–"
            lines.append(f"| {method} | {length} | {bounded} | "
                         f"{cell('entries')} | {cell('pages')} | {cell('index_tokens')} | "
                         f"{cell('index_bytes', 1024)} | {cold} | {o.get('write_violations', 0)} | "
                         f"{o.get('read_violations', 0)} | {reload} |")
    return "\n".join(lines) + "\n"


def answers_markdown(metrics: dict) -> list[str]:
    """Answers beside evidence: selective accuracy, refusals and mark errors per method and length (empty when no
    question was answered: ``--no-answer``)."""
    rows = []
    pct = lambda e: "–" if not isinstance(e, dict) or e.get("mean") is None else f"{100 * e['mean']:.1f}"  # noqa: E731
    for method, by_len in metrics.items():
        for length, table in by_len.items():
            o = a = table["overall"]
            if not a.get("answers_n"):
                continue
            ku = table.get("KU", {}).get("mark_error", {})
            marks = "–" if ku.get("mean") is None else f"{round(ku['mean'] * ku['n'])} / {ku['n']}"
            rows.append(f"| {method} | {length} | {pct(o['answer_f1'])} | {pct(o['answer_em'])} | "
                        f"{pct(o['answered'])} | {pct(o['precision_answered'])} | "
                        f"{pct(table.get('AR', {}).get('refused_should'))} | {pct(a['refusal_recall'])} | "
                        f"{pct(a['refusal_precision'])} | {pct(o['declined_with_evidence'])} | "
                        f"{pct(o['unsure_with_evidence'])} | "
                        f"{marks} | {o.get('chain_mark_errors', 0)} / {o.get('chain_turns', 0)} |")
    if not rows:
        return []
    return ["## Answers (the configured answerer on each context; Overall = IE/MSR/TR/KU) ×100", "",
            "Coverage = answerable questions answered rather than declined; precision = correct among those answered "
            "(the judge's verdict with --judge, else token F1 >= 0.5; a gold answer that is one image id is correct when the "
            "answer names that id or its first cited node is a gold evidence turn of that session); refusal recall on AR, and on every question "
            "that should be declined (AR, or its gold evidence not all in the context), a refusal being \"not in memory\"; refusal precision = "
            "refusals that should have been; refused / not sure with evidence = answerable questions with all gold "
            "evidence in the context refused or left \"not sure\" anyway; mark errors = KU questions whose gold evidence the answerer read marked "
            "superseded; chain mark errors = turns named by a chain step of the context the answerer read that are "
            "not an event turn of the chain's subject entity, of all turns chain steps named (synthetic data only: "
            "judged from the generator's hidden world; 0 / 0 where the dataset has none).", "",
            "| Method | Length | Token F1 | EM | Coverage | Precision among answered | Refusal recall (AR) | "
            "Refusal recall (should decline) | Refusal precision | Refused with evidence | Not sure with evidence | "
            "Mark errors (KU) | Chain mark errors (turns) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""]


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
        for ax, metric in zip(axes, ("oracle_reader_acc", "raw_support_recall")):
            means = [by_len[length]["overall"][metric]["mean"] for length in lengths]  # None: results predate it
            ax.plot(lengths, [float("nan") if v is None else 100 * v for v in means], marker="o", label=method)
            ax.set_xlabel("history length (text tokens)")
            ax.set_ylabel(f"{LABELS[metric]} ×100")
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


def paired_plot(paired: dict, out: Path, metric: str = "raw_support_recall") -> Path | None:
    """The first method against each other one: A − B per category with its paired 95% interval, one panel
    per length."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    first = next(iter(paired)).split(" vs ")[0] if paired else ""
    paired = {k: v for k, v in paired.items() if k.startswith(first + " vs ")}
    lengths = sorted({length for p in paired.values() for length in p}, key=_length_key)
    if not lengths:
        return None
    cats = [c for c in CATEGORIES if any(c in p.get(length, {}) for p in paired.values() for length in lengths)]
    cats += ["overall"]
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.5 * len(lengths), 4), squeeze=False, sharey=True)
    width = 0.8 / max(1, len(paired))
    for ax, length in zip(axes[0], lengths):
        for j, (name, by_len) in enumerate(paired.items()):
            ds = [by_len.get(length, {}).get(c, {}).get(metric) for c in cats]
            xs = [i + j * width for i in range(len(cats))]
            mean = [100 * d["mean"] if d else 0.0 for d in ds]
            err = [[100 * (d["mean"] - d["lo"]) if d else 0.0 for d in ds],
                   [100 * (d["hi"] - d["mean"]) if d else 0.0 for d in ds]]
            ax.bar(xs, mean, width, yerr=err, capsize=2, label=name)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks([i + width * (len(paired) - 1) / 2 for i in range(len(cats))], cats)
        ax.set_title(f"{length}: A − B, {LABELS.get(metric, metric)} ×100")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "paired_differences.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(everything: dict, out: str | Path, header: dict, *, n_boot: int = 1000) -> dict:
    """Write report.md, metrics.json and plots into ``out``; returns the metrics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = compute_metrics(everything, seed=int(header.get("seed", 0)), n_boot=n_boot)
    paired = compute_paired(everything, seed=int(header.get("seed", 0)))
    (out / "metrics.json").write_text(json.dumps({"header": header, "metrics": metrics, "paired": paired},
                                                 indent=2, sort_keys=True))
    text = markdown(metrics, header, paired)
    images = plots(metrics, out)
    if paired:
        images += [p for p in [paired_plot(paired, out)] if p is not None]
    text += "\n" + ("\n".join(f"![{p.stem}]({p.name})" for p in images) if images else
                    "_(plots skipped: matplotlib is not installed; pip install 'c3m[bench]')_") + "\n"
    (out / "report.md").write_text(text)
    return metrics
