"""The C3M paper's Table 1 from harness results: one Markdown file (``OUT/table1.md``) and an optional PNG.

Input is what ``harness.run_eval`` returns and ``harness.load_results(OUT)`` reads back:
``{method: {length: [HistoryResult]}}``. Every number comes from ``metrics.aggregate`` and
``metrics.paired_difference``, so the definitions are the harness's own:

- one table per metric (raw-text Support Recall first — the headline, since captions and crops depend on the
  perception backend — then Support Recall incl. captions/crops beside it, oracle-reader accuracy, and
  evidence-check and judged accuracy when the results hold them): rows = methods, columns = IE, MSR, TR, KU,
  AR each × the lengths present (32k, 64k, 128k first) and Overall × lengths; Overall pools IE/MSR/TR/KU
  (AR is reported on its own). Values ×100, the best per column in bold (ties all bold), ``–`` where a method
  has no result;
- a resources table per length (context tokens, images, latencies, peak index, violations);
- the reference method (default ``c3m``) against the strongest other method of each cell, as a paired
  cluster-bootstrap difference on the same histories;
- "where the reference loses": per significant loss, the questions it got wrong that the winner got right,
  split by its own Route-Hit (0: the gold never reached its pool; 1: in the pool, not selected).

Usage from the command line: ``c3m table1 OUT [--reference c3m] [--out FILE]`` (``c3m eval`` writes it too).
"""
from __future__ import annotations

from pathlib import Path

from ..types import CATEGORIES
from .metrics import RETRIEVAL_CATEGORIES, aggregate, in_category, paired_difference

#: (metric, title) in the order the tables are written, the headline first; the title before " (" names the
#: paired table. raw_support_recall, evidence_acc and judged_acc only when present (older results lack them)
TABLE1_METRICS = (("raw_support_recall", "Raw-text Support Recall (share of gold evidence turns shown as raw "
                   "text or original image; captions and crops do not count)"),
                  ("support_recall", "Support Recall incl. captions/crops (share of gold evidence turns in the "
                   "context, raw or as a caption or crop of their own image)"),
                  ("oracle_reader_acc", "Oracle-reader accuracy (all gold evidence in the context; AR without "
                   "evidence: no misleading item)"),
                  ("evidence_acc", "Evidence-check accuracy (evidence-check-v1: every support detail visible in "
                   "some shown form)"),
                  ("judged_acc", "Judged answer accuracy"))
OPTIONAL_METRICS = ("raw_support_recall", "evidence_acc", "judged_acc")
_FIXED_LENGTHS = ("32k", "64k", "128k")
DASH = "–"


def length_order(lengths) -> list[str]:
    """32k, 64k, 128k first, then any other labels by their number (non-numbers last, by name)."""
    def key(label: str):
        if label in _FIXED_LENGTHS:
            return (0, _FIXED_LENGTHS.index(label), "")
        try:
            return (1, float(label.lower().rstrip("k")), label)
        except ValueError:
            return (2, 0.0, label)
    return sorted(set(lengths), key=key)


def method_order(methods) -> list[str]:
    """The project's method names in ``METHOD_NAMES`` order (a variant ``name:opts`` after its base), then the
    rest in the order given."""
    from ..methods.base import METHOD_NAMES

    methods = list(methods)

    def key(m: str):
        base = m.split(":", 1)[0]
        return (METHOD_NAMES.index(base) if base in METHOD_NAMES else len(METHOD_NAMES), m != base, methods.index(m))
    return sorted(methods, key=key)


def is_bounded(by_len: dict) -> bool:
    results = [r for res in by_len.values() for r in res]
    return bool(results) and all(r.bounded for r in results)


def method_label(method: str, by_len: dict) -> str:
    return method if is_bounded(by_len) else f"{method} (unbounded)"


def has_metric(results: dict, metric: str) -> bool:
    """Whether any question of any method holds a value for ``metric`` (old results lack evidence_acc)."""
    return any(getattr(q, metric, None) is not None for by_len in results.values() for res in by_len.values()
               for r in res for q in r.questions)


def _columns(lengths) -> list[tuple[str, str]]:
    """(category | "overall", length) in Table-1 order: each category × lengths, then Overall × lengths."""
    return [(c, length) for c in (*CATEGORIES, "overall") for length in lengths]


def _col_name(cat: str, length: str) -> str:
    return f"{'Overall' if cat == 'overall' else cat} {length}"


def _mean(agg: dict | None, cat: str, metric: str):
    if not agg:
        return None
    entry = agg.get(cat, {}).get(metric)
    return entry.get("mean") if isinstance(entry, dict) else None


def compute_aggregates(results: dict, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """{method: {length: aggregate(...)}} for every non-empty cell."""
    return {m: {length: aggregate(res, n_boot=n_boot, seed=seed) for length, res in by_len.items() if res}
            for m, by_len in results.items()}


def metric_table(results: dict, aggs: dict, metric: str, title: str, *, note: str | None = None) -> list[str]:
    """One Table-1 table for ``metric``: values ×100 (one decimal), best per column bold (ties all bold; a
    column with a single number has no best), ``–`` where a method has no value."""
    methods = method_order(results)
    lengths = length_order(length for by_len in results.values() for length in by_len)
    cols = _columns(lengths)
    shown = {m: [None if (v := _mean(aggs.get(m, {}).get(length), cat, metric)) is None else round(100 * v, 1)
                 for cat, length in cols] for m in methods}
    best = []
    for j in range(len(cols)):
        vals = [shown[m][j] for m in methods if shown[m][j] is not None]
        best.append(max(vals) if len(vals) >= 2 else None)
    lines = [f"## {title} ×100", "",
             "| Method | " + " | ".join(_col_name(c, length) for c, length in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for m in methods:
        cells = [DASH if v is None else (f"**{v:.1f}**" if v == best[j] else f"{v:.1f}")
                 for j, v in enumerate(shown[m])]
        lines.append(f"| {method_label(m, results[m])} | " + " | ".join(cells) + " |")
    lines += ["", f"Overall = {'/'.join(RETRIEVAL_CATEGORIES)} pooled (the harness's \"overall\"); AR is reported "
              "on its own and is not part of Overall. Best per column in bold (ties all bold); – = no result."]
    if note:
        lines.append(note)
    lines += [histories_line(results), ""]
    return lines


def histories_line(results: dict) -> str:
    parts = []
    for m in method_order(results):
        by_len = results[m]
        parts.append(f"{m} " + ", ".join(f"{length} {len(by_len[length])}" for length in length_order(by_len)
                                        if by_len[length]))
    return "Histories per method and length: " + "; ".join(parts) + "."


def _f(v, fmt: str = ".1f") -> str:
    return DASH if v is None else format(v, fmt)


def resources_tables(results: dict, aggs: dict) -> list[str]:
    lines = ["## Resources per length (measured by the harness)", "",
             "Context tokens = text + image tokens per question (mean); peak index = the largest active index "
             "over all histories (max of each history's peak over its snapshots). Read violations must be 0.", ""]
    lengths = length_order(length for by_len in results.values() for length in by_len)
    for length in lengths:
        lines += [f"### {length}", "",
                  "| Method | Bounded | Context tokens (text + image) | Images | Read ms p50/p95 | Write ms p50/p95 | "
                  "Peak index entries / pages / index tokens / KiB | Write violations | Read violations |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for m in method_order(results):
            agg = aggs.get(m, {}).get(length)
            if not agg:
                continue
            o = agg["overall"]
            ctx, txt, img = (o[k]["mean"] for k in ("context_tokens", "text_tokens", "image_tokens"))
            peak = o.get("index_peak_max") or {}
            peak_cell = (f"{peak['entries']:.0f} / {peak['pages']:.0f} / {peak['index_tokens']:.0f} / "
                         f"{peak['index_bytes'] / 1024:.1f}" if peak else DASH)
            lines.append(f"| {m} | {'yes' if o.get('bounded') else 'no (unbounded)'} | "
                         f"{_f(ctx, '.0f')} ({_f(txt, '.0f')} + {_f(img, '.0f')}) | {_f(o['images']['mean'], '.2f')} | "
                         f"{_f(o['read_ms_p50'])}/{_f(o['read_ms_p95'])} | {_f(o['write_ms_p50'])}/"
                         f"{_f(o['write_ms_p95'])} | {peak_cell} | {o.get('write_violations', 0)} | "
                         f"{o.get('read_violations', 0)} |")
        lines.append("")
    return lines


def _shared_mean(results, histories: set[str], metric: str, cat: str):
    vals = [getattr(q, metric, None) for r in results if r.history in histories for q in r.questions if in_category(cat, q)]
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def strongest_opponent(results: dict, reference: str, length: str, cat: str, metric: str) -> str | None:
    """The other method with the highest mean of ``metric`` on ``cat`` × ``length``, measured on the histories
    it shares with the reference (ties: the earlier method in ``method_order``); None when none shares any."""
    ref = results.get(reference, {}).get(length) or []
    ref_h = {r.history for r in ref}
    best, best_v = None, None
    for m in method_order(results):
        if m == reference:
            continue
        res = results[m].get(length) or []
        shared = ref_h & {r.history for r in res}
        v = _shared_mean(res, shared, metric, cat) if shared else None
        if v is not None and (best_v is None or v > best_v):
            best, best_v = m, v
    return best


def paired_vs_strongest(results: dict, reference: str, metric: str, *, n_boot: int = 2000,
                        seed: int = 0) -> dict:
    """{(cat, length): (opponent, paired difference reference − opponent)} for every cell with an opponent."""
    out = {}
    lengths = length_order(length for by_len in results.values() for length in by_len)
    for cat, length in _columns(lengths):
        opp = strongest_opponent(results, reference, length, cat, metric)
        if opp is None:
            continue
        d = paired_difference(results[reference][length], results[opp][length], metric, cat, n_boot=n_boot,
                              seed=seed)
        if d is not None:
            out[(cat, length)] = (opp, d)
    return out


def _signed(v: float) -> str:
    return f"{100 * v:+.1f}".replace("-", "\u2212")  # a typographic minus, as in the paper


def _diff_cell(entry) -> str:
    if entry is None:
        return DASH
    opp, d = entry
    mark = " **A**" if d["win"] == "A" else " **B**" if d["win"] == "B" else ""
    return f"{_signed(d['mean'])} [{_signed(d['lo'])}, {_signed(d['hi'])}] vs {opp}{mark}"


def paired_table(results: dict, reference: str, metric: str, title: str, paired: dict) -> list[str]:
    lengths = length_order(length for by_len in results.values() for length in by_len)
    cols = _columns(lengths)
    return [f"### {title}: {reference} − strongest other method (×100)", "",
            "| Metric | " + " | ".join(_col_name(c, length) for c, length in cols) + " |",
            "|---|" + "---|" * len(cols),
            f"| {metric} | " + " | ".join(_diff_cell(paired.get(col)) for col in cols) + " |", ""]


def losses(results: dict, reference: str, metric: str, paired: dict) -> list[dict]:
    """For every cell the reference loses significantly: the questions it scored lower than the winner on,
    split by its own Route-Hit (0 = routing miss, 1 = selection miss, None = no gold evidence to route)."""
    out = []
    for (cat, length), (opp, d) in paired.items():
        if d["win"] != "B":
            continue
        theirs = {(r.history, q.question_id): q for r in results[opp][length] for q in r.questions}
        routing = selection = other = 0
        for r in results[reference][length]:
            for q in r.questions:
                w = theirs.get((r.history, q.question_id))
                a, b = getattr(q, metric, None), getattr(w, metric, None) if w is not None else None
                if not in_category(cat, q) or a is None or b is None or not a < b:
                    continue
                if q.route_hit == 0:
                    routing += 1
                elif q.route_hit == 1:
                    selection += 1
                else:
                    other += 1
        out.append({"cell": _col_name(cat, length), "winner": opp, "diff": d, "lost": routing + selection + other,
                    "routing_miss": routing, "selection_miss": selection, "no_route_signal": other})
    return out


def losses_section(results: dict, reference: str, by_metric: dict[str, dict]) -> list[str]:
    lines = [f"## Where {reference} loses", "",
             f"Cells where {reference} is significantly below the strongest other method (the paired interval "
             f"excludes 0). Lost = questions {reference} scored lower on than the winner; routing miss = "
             f"{reference}'s Route-Hit 0 (no gold turn reached its candidate pool), selection miss = Route-Hit 1 "
             "(a gold turn was in the pool but the final context lacks what was needed); no signal = no gold "
             "evidence to route (AR without evidence).", ""]
    rows = []
    for metric, paired in by_metric.items():
        for row in losses(results, reference, metric, paired):
            d = row["diff"]
            rows.append(f"| {metric} | {row['cell']} | {row['winner']} | {_signed(d['mean'])} "
                        f"[{_signed(d['lo'])}, {_signed(d['hi'])}] | {row['lost']} | {row['routing_miss']} | "
                        f"{row['selection_miss']} | {row['no_route_signal']} |")
    if not rows:
        return lines + [f"No significant loss of {reference} in any cell.", ""]
    return lines + ["| Metric | Cell | Winner | Difference | Lost | Routing miss | Selection miss | No signal |",
                    "|---|---|---|---|---|---|---|---|", *rows, ""]


def table1_markdown(results: dict, *, reference: str = "c3m", judged_label: str | None = None,
                    n_boot: int = 1000, seed: int = 0, aggs: dict | None = None) -> str:
    """The whole Table-1 document as Markdown (see the module docstring)."""
    results = {m: {length: res for length, res in by_len.items() if res} for m, by_len in results.items()}
    results = {m: by_len for m, by_len in results.items() if by_len}
    aggs = aggs if aggs is not None else compute_aggregates(results, n_boot=n_boot, seed=seed)
    metrics = [(m, t) for m, t in TABLE1_METRICS if m not in OPTIONAL_METRICS or has_metric(results, m)]
    lines = ["# C3M Table 1", "",
             "Every figure is measured by the harness (`c3m.eval.metrics`): contexts recounted from their items, "
             "indexes from their snapshots; a context over the reader budget is a read violation and scores 0. "
             "Intervals are 95% cluster bootstraps over histories.", ""]
    if not results:
        return "\n".join(lines + ["No results.", ""])
    for metric, title in metrics:
        note = None
        if metric == "judged_acc":
            note = f"Judged by: {judged_label or 'answerer and judge not recorded'}."
        lines += metric_table(results, aggs, metric, title, note=note)
    lines += resources_tables(results, aggs)
    if reference in results and len(results) > 1:
        lines += [f"## {reference} against the strongest other method per cell", "",
                  f"{reference} − B ×100 with a 95% paired cluster bootstrap over the histories both ran; B is the "
                  f"other method with the highest mean in that cell (on the shared histories). **A** = {reference} "
                  "significantly better, **B** = significantly worse (the interval excludes 0).", ""]
        by_metric = {}
        for metric, title in metrics:
            by_metric[metric] = paired_vs_strongest(results, reference, metric, seed=seed)
            lines += paired_table(results, reference, metric, title.split(" (")[0], by_metric[metric])
        lines += losses_section(results, reference, by_metric)
    elif reference not in results:
        lines += [f"_(no results for the reference method {reference!r}: no paired comparison)_", ""]
    return "\n".join(lines) + "\n"


def overall_plot(results: dict, aggs: dict, path: Path) -> Path | None:
    """Overall oracle-reader accuracy vs length per method; None (silently) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    lengths = length_order(length for by_len in results.values() for length in by_len)
    if not lengths:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    colours = plt.get_cmap("tab20").colors  # one colour per method (the default cycle repeats after 10)
    for k, m in enumerate(method_order(results)):
        pts = [(i, _mean(aggs.get(m, {}).get(length), "overall", "oracle_reader_acc")) for i, length in
               enumerate(lengths)]
        pts = [(i, 100 * v) for i, v in pts if v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colours[k % len(colours)],
                    linestyle="-" if results[m] and all(r.bounded for rs in results[m].values() for r in rs) else "--",
                    label=method_label(m, results[m]))
    ax.set_xticks(range(len(lengths)), lengths)
    ax.set_xlabel("history length (text tokens)")
    ax.set_ylabel("Overall oracle-reader accuracy ×100")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the axes, off the lines
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_table1(results: dict, out_path: str | Path, *, reference: str = "c3m", judged_label: str | None = None,
                 n_boot: int = 1000, seed: int = 0) -> Path:
    """Write the Table-1 Markdown to ``out_path`` (usually ``OUT/table1.md``) and, with matplotlib, a PNG of
    Overall oracle-reader accuracy vs length beside it (``<stem>_overall.png``). Returns the Markdown path."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    clean = {m: {length: res for length, res in by_len.items() if res} for m, by_len in results.items()}
    clean = {m: by_len for m, by_len in clean.items() if by_len}
    aggs = compute_aggregates(clean, n_boot=n_boot, seed=seed)
    text = table1_markdown(clean, reference=reference, judged_label=judged_label, seed=seed, aggs=aggs)
    png = overall_plot(clean, aggs, out_path.with_name(f"{out_path.stem}_overall.png")) if clean else None
    if png is not None:
        text += f"\n![Overall oracle-reader accuracy vs length]({png.name})\n"
    out_path.write_text(text, encoding="utf-8")
    return out_path
