"""``hybrid``: dense + BM25 fused by reciprocal-rank fusion — the strongest simple baseline.

Reciprocal-rank fusion (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet and
Individual Rank Learning Methods", SIGIR 2009): a node's score is Σ 1 / (k + rank) over the rankings it
appears in, rank counted from 1, with k = ``rrf_k`` (option, default 60). Only the top ``depth`` (option,
default 100) of each ranking contribute: the dense ranking (cosine of the shared node vectors, as in
``dense-topk``) and the BM25 ranking (``bm25``'s FTS5 index; nodes matching no term are unranked). Nodes
in neither top-``depth`` score ``-inf`` and stay out of the pool. Ties go to the earlier node. The pool and
budgeted selection are ``RankedNodesMethod``'s.

It keeps one entry per Raw Node (complete provenance) and has no write budget: it is unbounded, a
yardstick for C3M's bounded index, not a bounded memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..read.scorers import Bm25Index, DenseScorer, rrf
from ..types import RawNode
from .base import register
from .ranked import RankedConfig, RankedNodesMethod


@dataclass(frozen=True)
class HybridConfig(RankedConfig):
    rrf_k: float = field(default=60.0, metadata={"minimum": 0})    # reciprocal-rank fusion constant
    depth: int = field(default=100, metadata={"minimum": 1})       # ranks fused from each ranking


@register
class Hybrid(RankedNodesMethod):
    name = "hybrid"
    summary = "reciprocal-rank fusion of dense-topk and bm25 over every Raw Node"
    Config = HybridConfig
    read_options = frozenset({"pool", "rrf_k", "depth"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rrf_k, self.depth = self.cfg.rrf_k, self.cfg.depth

    def _clear(self) -> None:
        if not hasattr(self, "dense"):
            self.dense, self.bm25 = DenseScorer(self), Bm25Index()
        self.dense.clear()
        self.bm25.clear()

    def _add(self, nodes: Sequence[RawNode]) -> None:
        self.dense.add(nodes)
        self.bm25.add(nodes)

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)

    def scores(self, question: str) -> np.ndarray:
        return rrf([self.dense.scores(question), self.bm25.scores(question, limit=self.depth)], len(self.node_ids),
                   k=self.rrf_k, depth=self.depth)

    def _state_extra(self) -> dict:
        return {"embedder": self.models.text_embedder.name, "rrf_k": self.rrf_k, "depth": self.depth}
