"""Break a `c3m eval` run on a `c3m synth --preset photo` dataset down the way issue 43 diagnosed the held-out
loss: raw-text Support Recall per category and method, KU (and TR) split by the gold turn's text length
(< 60 characters, the short photo captions, vs >= 60) and by whether the gold is a photo-only change, and
overflow repairs per history.

    python benchmarks/photo_breakdown.py --eval /tmp/eval/photo-dev-48k-base --dataset /tmp/data/photo-dev-48k

It reads the eval folder's per-question records (``results/<method>/<length>.jsonl``) and the dataset's hidden
sidecar (``_hidden/questions.jsonl``: each support row's ``text_chars`` and ``photo_only``); it never reruns
anything. Prints markdown (``--json`` for the numbers). Means are x100 over questions; n in brackets.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from c3m.eval.harness import load_results  # noqa: E402
from c3m.eval.replay import namespace_for  # noqa: E402
from c3m.eval.synth import load_hidden  # noqa: E402
from c3m.types import CATEGORIES  # noqa: E402

SHORT = 60


def _mean(values: list[float]) -> tuple[float | None, int]:
    return (100 * sum(values) / len(values) if values else None), len(values)


def _fmt(cell: tuple[float | None, int]) -> str:
    value, n = cell
    return "–" if value is None else f"{value:.1f} (n={n})"


def breakdown(eval_dir: Path, dataset: Path) -> dict:
    hidden = load_hidden(dataset)
    by_ns = {namespace_for(h): h for h in hidden["world"]}
    results = load_results(eval_dir)
    out: dict = {}
    for method, lengths in results.items():
        rows = [(r, q) for rs in lengths.values() for r in rs for q in r.questions]
        cats = {c: _mean([q.raw_support_recall for _, q in rows if q.category == c and q.raw_support_recall is not None])
                for c in CATEGORIES}
        cats["overall"] = _mean([q.raw_support_recall for _, q in rows
                                 if q.raw_support_recall is not None and q.category != "AR"])
        split: dict[str, dict[str, list[float]]] = {}
        for r, q in rows:
            if q.category not in ("KU", "TR") or q.raw_support_recall is None:
                continue
            spec = hidden["questions"].get((by_ns.get(q.namespace, q.namespace), q.question_id))
            if spec is None or not spec["support"] or "text_chars" not in spec["support"][0]:
                continue
            support = spec["support"]
            short = [s["text_chars"] < SHORT for s in support]
            photo = [s.get("photo_only", False) for s in support]
            if all(short):
                key = f"gold < {SHORT} chars"
            elif not any(short):
                key = f"gold >= {SHORT} chars"
            else:
                key = "gold mixed"
            groups = split.setdefault(q.category, {})
            groups.setdefault(key, []).append(q.raw_support_recall)
            groups.setdefault("gold photo-only" if any(photo) else "gold said in words", []).append(q.raw_support_recall)
        histories = [r for rs in lengths.values() for r in rs]
        repairs = [r.overflow_repairs for r in histories]
        out[method] = {"categories": cats,
                       "split": {c: {k: _mean(v) for k, v in g.items()} for c, g in split.items()},
                       "overflow_repairs_per_history": sum(repairs) / len(repairs) if repairs else None,
                       "histories": len(histories)}
    return out


def markdown(data: dict) -> str:
    methods = list(data)
    lines = ["| raw SR ×100 | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for c in (*CATEGORIES, "overall"):
        lines.append(f"| {c} | " + " | ".join(_fmt(data[m]["categories"][c]) for m in methods) + " |")
    for cat in ("KU", "TR"):
        keys = sorted({k for m in methods for k in data[m]["split"].get(cat, {})})
        lines += ["", f"| {cat} raw SR ×100 by gold turn | " + " | ".join(methods) + " |",
                  "|---|" + "---|" * len(methods)]
        for k in keys:
            lines.append(f"| {k} | " + " | ".join(_fmt(data[m]["split"].get(cat, {}).get(k, (None, 0)))
                                                 for m in methods) + " |")
    lines += ["", "| method | histories | overflow repairs / history |", "|---|---|---|"]
    for m in methods:
        v = data[m]["overflow_repairs_per_history"]
        lines.append(f"| {m} | {data[m]['histories']} | {'–' if v is None else f'{v:.1f}'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", required=True, type=Path, help="a `c3m eval --out` folder")
    ap.add_argument("--dataset", required=True, type=Path, help="the photo-preset dataset it was run on")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    data = breakdown(args.eval, args.dataset)
    print(json.dumps(data, indent=2) if args.json else markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
