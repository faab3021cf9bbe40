"""Scoring a relation head against gold pairs: per-class P/R/F1, Eq. 3's actions by δ, calibration (ECE).

Shared by the trainer (``training/train_relation_head.py``) and the head benchmark (``benchmarks/relation_head.py``)
so a trained head and the ``feature-v1`` heuristic are scored by one definition.

- **Actions at δ**: Merge = predicted *same* with confidence ≥ δ, Update = predicted *update* with confidence ≥ δ
  (Eq. 3); precision is against the gold label, recall against all gold pairs of that label. A Merge on a pair
  that is not *same* conflates two records ("unsafe").
- **ECE**: expected calibration error over the top-class confidence of the three-way probabilities, 15 equal bins.
- **Temperature**: one scalar T fitted on dev by golden-section search over log T (NLL is unimodal in T).
"""
from __future__ import annotations

import math

import numpy as np

from ..models.relation_head import FeatureRelationHead
from ..types import Relation
from .relation_pairs import LABELS, RelationPairs


def nll(logits: np.ndarray, y: np.ndarray, temperature: float = 1.0) -> float:
    z = logits / temperature
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def fit_temperature(logits: np.ndarray, y: np.ndarray) -> float:
    """argmin_T NLL(logits / T) by golden-section search over log T in [log 0.05, log 20] (NLL is unimodal in T)."""
    lo, hi = math.log(0.05), math.log(20.0)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if nll(logits, y, math.exp(a)) < nll(logits, y, math.exp(b)):
            hi = b
        else:
            lo = a
    return math.exp((lo + hi) / 2)


def ece(prob: np.ndarray, y: np.ndarray, bins: int = 15) -> tuple[float, list[tuple[float, float, int]]]:
    """Expected calibration error over the top-class confidence, and the reliability bins (conf, acc, n)."""
    conf, pred = prob.max(axis=1), prob.argmax(axis=1)
    edges = np.linspace(0, 1, bins + 1)
    total, rows = 0.0, []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            c, a = float(conf[m].mean()), float((pred[m] == y[m]).mean())
            total += m.mean() * abs(c - a)
            rows.append((c, a, int(m.sum())))
    return float(total), rows


def actions_at(judged: list[tuple[Relation, float]], y: np.ndarray, delta: float) -> dict:
    """Eq. 3's Merge / Update at δ against the gold labels."""
    rel = np.array([r.value for r, _ in judged])
    conf = np.array([c for _, c in judged])
    merge, update = (rel == "same") & (conf >= delta), (rel == "update") & (conf >= delta)
    n_same, n_upd = max(1, int((y == 0).sum())), max(1, int((y == 1).sum()))
    return {"delta": delta, "merges": int(merge.sum()), "updates": int(update.sum()),
            "merge_precision": float((y[merge] == 0).mean()) if merge.any() else float("nan"),
            "same_recall": float((y[merge] == 0).sum() / n_same),
            "update_precision": float((y[update] == 1).mean()) if update.any() else float("nan"),
            "update_recall": float((y[update] == 1).sum() / n_upd),
            "unsafe_merges": int((y[merge] != 0).sum())}


DELTAS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def choose_delta(judged, y) -> float:
    """The smallest δ on dev whose Merges are ≥ 0.85 precise and Updates ≥ 0.9 precise (most recall among the
    safe ones); the most precise δ when none is."""
    rows = [actions_at(judged, y, d) for d in DELTAS]
    ok = [r for r in rows if r["merge_precision"] >= 0.85 and r["update_precision"] >= 0.9]
    if ok:
        return ok[0]["delta"]
    return max(rows, key=lambda r: (np.nan_to_num(r["merge_precision"]) + np.nan_to_num(r["update_precision"]),
                                    -r["delta"]))["delta"]


def evaluate(judged: list[tuple[Relation, float]], prob: np.ndarray | None, P: RelationPairs, delta: float) -> dict:
    """Every number of the report for one head on one pair set (``prob``: its [n, 3] probabilities, for ECE)."""
    names = LABELS + ("uncertain",)
    pred = np.array([names.index(r.value) for r, _ in judged])
    conf = np.zeros((len(LABELS), len(names)), int)
    for g, p in zip(P.y, pred):
        conf[g, p] += 1
    per_class = {}
    for k, lab in enumerate(LABELS):
        tp, fp, fn = conf[k, k], conf[:, k].sum() - conf[k, k], conf[k].sum() - conf[k, k]
        pr, rc = tp / max(1, tp + fp), tp / max(1, tp + fn)
        per_class[lab] = {"precision": float(pr), "recall": float(rc), "f1": float(2 * pr * rc / max(1e-9, pr + rc)),
                          "n": int(conf[k].sum())}
    out = {"n": len(P), "accuracy": float((pred == P.y).mean()), "per_class": per_class, "confusion": conf.tolist(),
           "uncertain_rate": float((pred == 3).mean()),
           "twins_same": float((pred[P.twin] == 0).mean()) if P.twin.any() else float("nan"),
           "n_twins": int(P.twin.sum()),
           "image_change_update_recall": float((pred[P.image_change] == 1).mean()) if P.image_change.any() else float("nan"),
           "n_image_change": int(P.image_change.sum()), "n_reshared": int(P.reshared.sum()),
           "delta": delta, "at_delta": actions_at(judged, P.y, delta),
           "sweep": [actions_at(judged, P.y, d) for d in DELTAS],
           "majority_accuracy": float(np.bincount(P.y, minlength=3).max() / max(1, len(P)))}
    if prob is not None:
        out["ece"], out["reliability"] = ece(prob, P.y)
    return out


def feature_head_judged(P: RelationPairs):
    head = FeatureRelationHead()
    return head.predict([dict(zip(P.feature_names, map(float, row))) for row in P.X])


def sweep_table(rows) -> list[str]:
    """Markdown rows of ``evaluate(...)['sweep']``."""
    out = ["| δ | Merges | Merge precision | same recall | Updates | Update precision | update recall | unsafe Merges |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['delta']} | {r['merges']} | {r['merge_precision']:.3f} | {r['same_recall']:.3f} | "
                   f"{r['updates']} | {r['update_precision']:.3f} | {r['update_recall']:.3f} | {r['unsafe_merges']} |")
    return out
