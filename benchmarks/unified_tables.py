"""Tables for the unified-reader results: headline, paired differences and the HiVe-Mem-style ablation table.

The harness's own report pairs every method with every other; with an ablation table that is hundreds of
pairs. This script reads the same results (``OUT/results``) and writes only the comparisons the unified
reader is judged by: c3m against each parent and yardstick, and each ablation against its full method, all
as paired cluster-bootstrap differences on the same histories (``c3m.eval.metrics.paired_difference``).

Usage: python benchmarks/unified_tables.py OUT/eval [--out FILE.md] [--plot FILE.png]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from c3m.eval.harness import load_results
from c3m.eval.metrics import RETRIEVAL_CATEGORIES, aggregate, paired_difference

HEADLINE = ("c3m", "c3m-paper", "hivemem", "hybrid", "dense-topk")
CATS = RETRIEVAL_CATEGORIES + ("AR", "overall")


def _order(length: str) -> int:
    return int("".join(ch for ch in length if ch.isdigit()) or 0)


def _pct(e) -> str:
    return "–" if e is None or e.get("mean") is None else f"{100 * e['mean']:.1f}"


def _diff(d, scale: float = 100.0, digits: int = 1) -> str:
    if d is None:
        return "–"
    s = f"{scale * d['mean']:+.{digits}f} [{scale * d['lo']:+.{digits}f}, {scale * d['hi']:+.{digits}f}]"
    return s + (" **A**" if d["win"] == "A" else " **B**" if d["win"] == "B" else "")


def headline(everything, lengths) -> list[str]:
    lines = ["| Method | Length | Histories | Support Recall | raw Support Recall | Oracle-reader | Judged (extractive answerer, gold contained) | "
             "Route-Hit | Context tokens (text + image) | Images | Pool | Bounded | Peak index (entries / KiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for length in lengths:
        for m in HEADLINE:
            res = everything.get(m, {}).get(length)
            if not res:
                continue
            o = aggregate(res)["overall"]
            peak = o["index_peak_max"] or {}
            lines.append(f"| {m} | {length} | {o['histories']} | {_pct(o['support_recall'])} | "
                         f"{_pct(o['raw_support_recall'])} | {_pct(o['oracle_reader_acc'])} | {_pct(o['judged_acc'])} | "
                         f"{_pct(o['route_hit'])} | "
                         f"{o['context_tokens']['mean']:.0f} ({o['text_tokens']['mean']:.0f} + "
                         f"{o['image_tokens']['mean']:.0f}) | {o['images']['mean']:.2f} | {o['pool_size']['mean']:.0f} | "
                         f"{'yes' if o['bounded'] else 'no'} | {peak.get('entries', 0):.0f} / "
                         f"{peak.get('index_bytes', 0) / 1024:.0f} |")
    return lines


def paired(everything, lengths, a: str, others, metric: str = "support_recall", scale=100.0, digits=1) -> list[str]:
    lines = [f"| {a} − B | Length | " + " | ".join(CATS) + " |", "|---" * (len(CATS) + 2) + "|"]
    for length in lengths:
        ra = everything.get(a, {}).get(length)
        for b in others:
            rb = everything.get(b, {}).get(length)
            if not ra or not rb:
                continue
            cells = [_diff(paired_difference(ra, rb, metric, c), scale, digits) for c in CATS]
            lines.append(f"| {b} | {length} | " + " | ".join(cells) + " |")
    return lines


def ablations(everything, lengths, base: str) -> list[str]:
    variants = sorted(m for m in everything if m.startswith((base + ":", base + "_")))
    lines = [f"| Variant of `{base}` | Length | Support Recall | − full (paired) | raw SR | − full (paired) | "
             "Oracle-reader | − full (paired) | Context tokens | Images |", "|---|---|---|---|---|---|---|---|---|---|"]
    for length in lengths:
        full = everything.get(base, {}).get(length)
        if not full:
            continue
        o = aggregate(full)["overall"]
        lines.append(f"| **full** | {length} | {_pct(o['support_recall'])} | | {_pct(o['raw_support_recall'])} | | "
                     f"{_pct(o['oracle_reader_acc'])} | | "
                     f"{o['context_tokens']['mean']:.0f} | {o['images']['mean']:.2f} |")
        for v in variants:
            res = everything[v].get(length)
            if not res:
                continue
            ov = aggregate(res)["overall"]
            lines.append(f"| {v[len(base) + 1:]} | {length} | {_pct(ov['support_recall'])} | "
                         f"{_diff(paired_difference(res, full, 'support_recall'))} | {_pct(ov['raw_support_recall'])} | "
                         f"{_diff(paired_difference(res, full, 'raw_support_recall'))} | {_pct(ov['oracle_reader_acc'])} | "
                         f"{_diff(paired_difference(res, full, 'oracle_reader_acc'))} | "
                         f"{ov['context_tokens']['mean']:.0f} | {ov['images']['mean']:.2f} |")
    return lines


def diagnosis(everything, lengths, a: str = "c3m", b: str = "dense-topk") -> list[str]:
    """Per category, the questions where B's context holds more gold turns than A's, split by A's trace: the gold
    turn never reached A's candidate pool (a routing miss: pages/entries/pool), or it did and the budgeted
    selection left it out (a selection miss); and the reverse wins."""
    lines = [f"| Length | Category | {a} worse | of which routing miss | selection miss | {a} better | "
             f"{a} better where {b}'s pool missed |", "|---|---|---|---|---|---|---|"]
    for length in lengths:
        ra, rb = everything.get(a, {}).get(length), everything.get(b, {}).get(length)
        if not ra or not rb:
            continue
        qb = {(r.history, q.question_id): q for r in rb for q in r.questions}
        for cat in RETRIEVAL_CATEGORIES:
            worse = route = better = better_route = 0
            for r in ra:
                for q in r.questions:
                    o = qb.get((r.history, q.question_id))
                    if q.category != cat or o is None or q.support_recall is None:
                        continue
                    if q.support_recall < o.support_recall:
                        worse += 1
                        route += q.route_hit == 0
                    elif q.support_recall > o.support_recall:
                        better += 1
                        better_route += o.route_hit == 0
            lines.append(f"| {length} | {cat} | {worse} | {route} | {worse - route} | {better} | {better_route} |")
    return lines


def plot(everything, lengths, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = [m for m in HEADLINE[1:] if m in everything]
    fig, axes = plt.subplots(1, len(lengths), figsize=(5.5 * len(lengths), 3.6), squeeze=False)
    for ax, length in zip(axes[0], lengths):
        ra = everything["c3m"].get(length)
        for j, b in enumerate(others):
            rb = everything[b].get(length)
            if not ra or not rb:
                continue
            ds = [paired_difference(ra, rb, "support_recall", c) for c in CATS]
            xs = [i + (j - len(others) / 2) * 0.18 for i in range(len(CATS))]
            ax.bar(xs, [100 * d["mean"] for d in ds], width=0.18, label=b,
                   yerr=[[100 * (d["mean"] - d["lo"]) for d in ds], [100 * (d["hi"] - d["mean"]) for d in ds]],
                   capsize=2)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(CATS)), CATS)
        ax.set_title(f"c3m − B, Support Recall ×100 ({length})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("eval_dir")
    ap.add_argument("--out")
    ap.add_argument("--plot")
    args = ap.parse_args()
    everything = load_results(args.eval_dir)
    lengths = sorted({L for by in everything.values() for L in by}, key=_order)
    parts = ["## Headline (overall = IE/MSR/TR/KU)", "", *headline(everything, lengths), "",
             "## Paired differences: c3m − B, Support Recall ×100 (95% paired cluster bootstrap; **A** = c3m wins, "
             "**B** = B wins)", "", *paired(everything, lengths, "c3m", HEADLINE[1:]), "",
             "## Paired differences: c3m − B, raw Support Recall ×100 (only turns shown raw count)", "",
             *paired(everything, lengths, "c3m", HEADLINE[1:], "raw_support_recall"), "",
             "## Paired differences: c3m − B, judged accuracy ×100 (extractive answerer, `contains` judge: the gold answer is in its reply)", "",
             *paired(everything, lengths, "c3m", HEADLINE[1:], "judged_acc"), "",
             "## Paired differences: c3m − B, context tokens (text + image; negative = c3m reads fewer)", "",
             *paired(everything, lengths, "c3m", HEADLINE[1:], "context_tokens", 1.0, 0), "",
             "## Paired differences: c3m − B, oracle-reader accuracy ×100", "",
             *paired(everything, lengths, "c3m", HEADLINE[1:], "oracle_reader_acc"), "",
             "## Where c3m loses and wins against dense-topk, by c3m's route trace", "",
             *diagnosis(everything, lengths), "",
             "## Ablations of the unified reader (read-only variants asked on the same committed index)", "",
             *ablations(everything, lengths, "c3m"), "",
             "## Ablations of hivemem (HiVe-Mem's table; visual_anchors/idf rebuild the graph)", "",
             *ablations(everything, lengths, "hivemem"), ""]
    text = "\n".join(parts)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        print(text)
    if args.plot and "c3m" in everything:
        plot(everything, lengths, Path(args.plot))


if __name__ == "__main__":
    main()
