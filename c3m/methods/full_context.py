"""``full-context``: the most recent turns that fit the reader budget — the "just use the context window"
reference.

Write: keep every Raw Node id in commit order (``RankedNodesMethod``). Read: ignore the question; rank nodes
by recency (the latest turn first) and take them while they fit the reader budget (Raw Nodes, images, text
tokens), returned in time order. What a long-context model sees when the history is cut to its window. It
scores nothing and keeps no bounded index (``bounded = False``): a floor for every memory that *chooses*.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import register
from .ranked import RankedConfig, RankedNodesMethod


@dataclass(frozen=True)
class FullContextConfig(RankedConfig):
    pool: int = field(default=64, metadata={"minimum": 1})  # most recent nodes offered to the budgeted selection


@register
class FullContext(RankedNodesMethod):
    name = "full-context"
    Config = FullContextConfig
    summary = "the most recent turns that fit the reader budget (no retrieval)"
    reads = "recent Raw Nodes"

    def scores(self, question: str) -> np.ndarray:
        return np.arange(len(self.node_ids), dtype=np.float64)  # later = better
