"""``dense-topk``: dense top-k over Raw Nodes under the reader budget — the plain baseline.

Write: embed each Raw Node's text (the shared vectors, cached in the store by content hash) and keep its id.
Read: cosine score of every node against the embedded question; the best ``pool`` nodes (option, default
48) go to the budgeted selection, which takes them best-first while they fit the reader budget (Raw Nodes,
images, text tokens; it has no pages, so it charges none) and returns them in time order
(``RankedNodesMethod``). Under the default budget that is the top 12 by similarity.
It keeps every node (complete provenance) and has no bounded index: it is unbounded, the yardstick C3M's
bounded index is compared with, not a memory policy.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..types import RawNode
from .base import MemoryMethod, register
from .ranked import RankedNodesMethod


class DenseScorer:
    """Cosine similarity of a question against the shared node vectors (reused by ``hybrid``)."""

    def __init__(self, method: MemoryMethod):
        self.method = method
        self.clear()

    def clear(self) -> None:
        self.vectors = np.zeros((0, self.method.models.text_embedder.dim), dtype=np.float32)

    def add(self, nodes: Sequence[RawNode]) -> None:
        if not nodes:
            return
        vecs = self.method.node_vectors(nodes)
        self.vectors = np.concatenate([self.vectors, vecs]) if len(self.vectors) else vecs

    def scores(self, question: str) -> np.ndarray:
        q = self.method.models.text_embedder.embed([question])[0]
        return self.vectors @ q


@register
class DenseTopK(RankedNodesMethod):
    name = "dense-topk"
    summary = "cosine top-k over every Raw Node under the reader budget (the plain yardstick)"

    def _clear(self) -> None:
        if not hasattr(self, "dense"):
            self.dense = DenseScorer(self)
        self.dense.clear()

    def _add(self, nodes: Sequence[RawNode]) -> None:
        self.dense.add(nodes)

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)

    def scores(self, question: str) -> np.ndarray:
        return self.dense.scores(question)

    def _state_extra(self) -> dict:
        return {"embedder": self.models.text_embedder.name}
