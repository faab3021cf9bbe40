"""RAMU relation heads side by side on one set of gold pairs: quality at δ, calibration and write-time speed.

Pairs come from ``c3m.eval.relation_pairs`` (a ``c3m synth`` folder, or the ``.npz`` cache the trainer writes).
Every head is scored by ``c3m.eval.relation_eval`` (one definition for all), at its own δ: the one stored with
trained weights (chosen on dev), 0.6 for ``feature`` (c3m's default). Speed is pairs judged per second through
``predict`` on dict features (what RAMU hands it), best of three runs.

    python benchmarks/relation_head.py --pairs /tmp/rh/pairs-test.npz --heads feature mlp cross-encoder:/tmp/ce
"""
from __future__ import annotations

import argparse
import datetime as dt
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from c3m.eval.relation_eval import evaluate  # noqa: E402
from c3m.eval.relation_pairs import RelationPairs, build_pairs  # noqa: E402
from c3m.models.relation_head import CLASSES, make_relation_head  # noqa: E402


def probabilities(head, feats, texts):
    """[n, 3] probabilities for ECE when the head has them (trained heads); None for feature-v1."""
    from c3m.models.relation_head import feature_matrix

    if not hasattr(head, "probabilities"):
        return None
    X = feature_matrix(feats, head.feature_names)
    return head.probabilities(X, texts) if head.reads_text else head.probabilities(X)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", required=True, help="a pairs .npz, or a c3m synth folder")
    ap.add_argument("--heads", nargs="+", default=["feature", "mlp"])
    ap.add_argument("--limit", type=int, default=0, help="score only the first N pairs (a slow head)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/relation-head-synth-cpu.md"))
    args = ap.parse_args()
    P = RelationPairs.load(args.pairs) if args.pairs.endswith(".npz") else build_pairs(args.pairs)
    if args.limit:
        P = P.subset(np.arange(len(P)) < args.limit)
    feats = [dict(zip(P.feature_names, map(float, row))) for row in P.X]
    rows = []
    for name in args.heads:
        head = make_relation_head(name)
        pairs = P.texts if getattr(head, "reads_text", False) else None
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            judged = head.predict(feats, pairs) if pairs is not None else head.predict(feats)
            best = min(best, time.perf_counter() - t0)
        prob = probabilities(head, feats, P.texts)
        own = float(getattr(head, "meta", {}).get("delta", 0.6))
        for delta in dict.fromkeys((own, 0.6)):  # its own δ, and c3m's default δ = 0.6
            rows.append((name, head.name, evaluate(judged, prob, P, delta), len(P) / best))
    write(rows, args, P)


def write(rows, args, P) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = [f"# RAMU relation heads on gold pairs ({len(P)} pairs, {len(set(P.history))} histories)", "",
           f"- command: `python benchmarks/relation_head.py --pairs {args.pairs} --heads {' '.join(args.heads)}`",
           f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, "
           f"{platform.machine()}, Python {platform.python_version()}",
           f"- classes: {', '.join(c.value for c in CLASSES)}; image pairs appear with and without the text–image "
           "feature; each head at its own δ (stored with trained weights, chosen on dev) and at c3m's default δ = 0.6", "",
           "| head | accuracy | F1 same | F1 update | F1 distinct | δ | Merge precision | same recall | "
           "Update precision | update recall | twins → same | ECE | pairs/s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, label, r, speed in rows:
        a, pc = r["at_delta"], r["per_class"]
        ece = f"{r['ece']:.4f}" if "ece" in r else "n/a (uncalibrated)"
        out.append(f"| `{name}` ({label}) | {r['accuracy']:.3f} | {pc['same']['f1']:.3f} | {pc['update']['f1']:.3f} | "
                   f"{pc['distinct']['f1']:.3f} | {r['delta']} | {a['merge_precision']:.3f} | {a['same_recall']:.3f} | "
                   f"{a['update_precision']:.3f} | {a['update_recall']:.3f} | {r['twins_same']:.3f} | {ece} | "
                   f"{speed:,.0f} |")
    out += ["", f"Majority class: {rows[0][2]['majority_accuracy']:.3f}. Twins: {rows[0][2]['n_twins']} look-alike "
            f"distinct pairs; image-only changes: {rows[0][2]['n_image_change']}; re-shared photos: "
            f"{rows[0][2]['n_reshared']}.", ""]
    Path(args.out).write_text("\n".join(out) + "\n", encoding="utf-8")
    print("\n".join(out))


if __name__ == "__main__":
    main()
