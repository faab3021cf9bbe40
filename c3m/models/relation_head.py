"""``feature`` relation head: RAMU's g_r as a documented linear scorer over the named features phi.

Logits per relation are weighted sums of the features (table below) plus a bias; a softmax turns them into
(relation, confidence). The weights encode four readings of C3M §2.1:

- **same**: both are about the same thing (``entity``) with nothing new (``novelty`` low), more so when
  the unit says it is showing it ``again``;
- **update**: the same thing with a new attribute value, or a change cue when no value is named
  (``novelty``);
- **distinct**: little entity overlap, or a new-instance cue (``another``);
- **uncertain**: a constant floor, so weak evidence for everything stays below the merge threshold δ.

It is a heuristic head (hand-set, not trained), measured against the generator's gold relation labels in
``benchmarks/results/relation-head-synth-cpu.md``; the trained head (training issue) and an LLM-judged head
implement the same ``RelationHead`` protocol.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..types import Relation

#: logit = bias + sum(weight * feature)
WEIGHTS: dict[Relation, dict[str, float]] = {
    Relation.SAME: {"bias": -1.5, "entity": 4.0, "sim": 1.0, "novelty": -4.0, "again": 1.5, "another": -3.0},
    Relation.UPDATE: {"bias": -2.5, "entity": 3.0, "sim": 1.0, "novelty": 2.5, "another": -2.0},
    Relation.DISTINCT: {"bias": 2.5, "entity": -3.0, "another": 2.0},
    Relation.UNCERTAIN: {"bias": 0.5},
}


class FeatureRelationHead:
    """Linear scorer over phi with the hand-set ``WEIGHTS`` (see module docstring)."""

    name = "feature-v1"

    def __init__(self, weights: Mapping[Relation, Mapping[str, float]] | None = None, temperature: float = 1.0):
        self.weights = {r: dict(w) for r, w in (weights or WEIGHTS).items()}
        self.temperature = temperature

    def logits(self, f: Mapping[str, float]) -> dict[Relation, float]:
        x = f
        return {r: w.get("bias", 0.0) + sum(v * x.get(k, 0.0) for k, v in w.items() if k != "bias")
                for r, w in self.weights.items()}

    def predict(self, features: Sequence[Mapping[str, float]]) -> list[tuple[Relation, float]]:
        out = []
        for f in features:
            z = self.logits(f)
            top = max(z.values())
            exp = {r: math.exp((v - top) / self.temperature) for r, v in z.items()}
            best = max(exp, key=exp.get)
            out.append((best, exp[best] / sum(exp.values())))
        return out
