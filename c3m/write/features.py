"""RAMU's relation features phi(m, e) (C3M Eq. 2): named floats comparing an incoming unit with an entry.

Every feature is in [0, 1] so heads can share them:

- ``sim``: cosine of the routing vectors (the candidate score, clipped at 0).
- ``entity``: IDF-weighted containment of the smaller entity set in the larger — are they about the same
  thing? IDF comes from the index's own document frequencies (write-time statistics, query-blind), with no
  +1, so words in a large share of units ("plan", "update") weigh about nothing.
- ``entity_jaccard``: IDF-weighted Jaccard — the *scope*: same thing in the same context (a mug in the
  kitchen vs. a look-alike mug in the garage share "mug" but not the room).
- ``conflict``: the IDF mass that *both* sides have and the other lacks, min(w(a∖b), w(b∖a)) / w(a∪b). A
  re-mention is usually a subset of what the entry knows ("my mug" after "my mug in the kitchen": 0); a
  look-alike names its own context on both sides ("the mug in the garage" vs "the mug in the kitchen": > 0).
- ``state_same`` / ``state_new``: share of the unit's attribute values the entry already holds / does not.
- ``change`` / ``again`` / ``another``: the unit uses a change / re-mention / new-instance cue (action).
- ``novelty``: ``state_new`` when the unit names attribute values, else ``change`` — repeating a known
  state with a change verb ("I repainted my mug red", twice) is nothing new.
- ``time``: log-scaled gap in days, 1 at a year or more.
- ``has_image`` / ``text_image``: whether the unit has images, and the cosine between the unit's image
  vector and the entry's routing vector when an image embedder in the text space is configured.
- ``image_image``: the cosine between the unit's image vector and the entry's own (the mean of its images'
  vectors), when both exist: a re-shared or re-photographed object looks like itself, an off-screen repaint
  does not (only the photo shows some changes).
"""
from __future__ import annotations

import math
from typing import Mapping

from ..index.active import idf
from .units import Unit

FEATURE_NAMES = ("sim", "entity", "entity_jaccard", "conflict", "state_same", "state_new", "change", "again", "another",
                 "novelty", "time", "has_image", "text_image", "image_image")


def relation_features(unit: Unit, entry, df: Mapping[str, int], n_docs: int) -> dict[str, float]:
    """phi(m, e) for one incoming unit and one index entry (``entry`` has z, entities, states, time)."""
    w = {k: idf(k, df, n_docs) for k in unit.entities | set(entry.entities)}
    a, b = unit.entities, set(entry.entities)
    shared = sum(w[k] for k in a & b)
    smaller = min(sum(w[k] for k in a), sum(w[k] for k in b))
    union = sum(w[k] for k in a | b)
    states_e = set(entry.states)
    n_states = len(unit.states)
    gap = abs((unit.time - entry.time).total_seconds()) / 86400.0
    text_image = image_image = 0.0
    if unit.image_z is not None:
        text_image = max(0.0, float(unit.image_z @ entry.z))
        entry_image = getattr(entry, "image_z", None)
        if entry_image is not None:
            image_image = max(0.0, float(unit.image_z @ entry_image))
    state_new = len(unit.states - states_e) / n_states if n_states else 0.0
    return {
        "sim": max(0.0, float(unit.z @ entry.z)),
        "entity": shared / smaller if smaller > 0 else 0.0,
        "entity_jaccard": shared / union if union > 0 else 0.0,
        "conflict": min(sum(w[k] for k in a - b), sum(w[k] for k in b - a)) / union if union > 0 else 0.0,
        "state_same": len(unit.states & states_e) / n_states if n_states else 0.0,
        "state_new": state_new,
        "novelty": state_new if n_states else float(unit.change),
        "change": float(unit.change),
        "again": float(unit.again),
        "another": float(unit.another),
        "time": min(1.0, math.log1p(gap) / math.log1p(365.0)),
        "has_image": float(unit.images > 0),
        "text_image": text_image,
        "image_image": image_image,
    }


def judge(head, features, pairs):
    """``head.predict`` over phi rows; ``pairs`` [(entry text, unit text)] reach only heads that read them
    (``reads_text``), so one-argument heads keep ``predict(features)``."""
    return head.predict(features, pairs) if getattr(head, "reads_text", False) else head.predict(features)
