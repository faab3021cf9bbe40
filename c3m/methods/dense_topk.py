"""``dense-topk``: dense top-k over Raw Nodes under the reader budget — the plain baseline.

Write: embed each Raw Node's text (the shared vectors, cached in the store by content hash) and keep its id.
Read: cosine score of every node against the embedded question; the best ``pool`` nodes (option, default
48; ties go to the earlier node) go to the budgeted selection, which takes them best-first while they fit the reader budget (Raw Nodes,
images, text tokens; it has no pages, so it charges none) and returns them in time order
(``RankedNodesMethod``). Under the default budget that is the top 12 by similarity.
It keeps every node (complete provenance) and has no bounded index: it is unbounded, the yardstick C3M's
bounded index is compared with, not a memory policy.

Batched (``retrieve_many``): the node vectors live in a ``KeyArena`` (one shared by every tenant a ``Memory``
opens), so a batch of questions over many tenants is one embedding call and one ragged ``candidate_topk``
launch; ``retrieve`` is the batch of one, so the two give the same contexts.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..read.arena import KeyArena
from ..read.batch import query_vectors, ragged_topk
from ..read.scorers import DenseScorer
from ..types import Context, RawNode, ReaderBudget
from .base import register
from .ranked import RankedNodesMethod

#: extra candidates fetched beyond the pool, so a few redacted nodes among the best do not force a second scan
POOL_SLACK = 16


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

    def attach_arena(self, arena: KeyArena, key: str | None = None) -> None:
        self.dense.attach(arena, key)

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        return DenseTopK._read_batch([(self, question, budget)])[0]

    @staticmethod
    def _read_batch(requests) -> list[Context]:
        """One embedding call, one ragged top-k launch per key arena, one node fetch per store (module
        docstring); each context is what ``retrieve`` gives alone."""
        out: list[Context | None] = [None] * len(requests)
        live = []
        for i, (m, q, b) in enumerate(requests):
            if m.node_ids:
                live.append(i)
            else:
                out[i] = m._empty(q, b)
        if not live:
            return out  # type: ignore[return-value]
        Q = query_vectors([requests[i][0].models.text_embedder for i in live], [requests[i][1] for i in live])
        qrow = dict(zip(live, range(len(live))))
        want = {i: requests[i][0].pool_size + POOL_SLACK for i in live}
        todo = live
        while todo:
            ranked = DenseTopK._ranked(requests, todo, Q[[qrow[i] for i in todo]], want)
            nodes = _fetch(requests, ranked)
            again = []
            for i in todo:
                m, q, b = requests[i]
                order, scores = ranked[i]
                pool = [(nodes[id(m.store)][m.node_ids[r]], float(s)) for r, s in zip(order, scores)]
                pool = [(n, s) for n, s in pool if not n.redacted][:m.pool_size]
                if len(pool) < m.pool_size and len(order) < len(m.node_ids):  # redacted nodes ate the slack
                    want[i] = 2 * want[i]
                    again.append(i)
                else:
                    out[i] = m._select(q, pool, b)
            todo = again
        return out  # type: ignore[return-value]

    @staticmethod
    def _ranked(requests, todo, Q, want) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per request: its best ``want`` node rows (tenant-local, best first; ties: earlier node) and scores."""
        ranked = {}
        by_arena: dict[int, list[int]] = {}
        for j, i in enumerate(todo):
            by_arena.setdefault(id(requests[i][0].dense.arena), []).append(j)
        for js in by_arena.values():
            m0 = requests[todo[js[0]]][0]
            arena, device = m0.dense.arena, m0.device
            spans = [arena.span(requests[todo[j]][0].dense.key) for j in js]
            k = max(min(want[todo[j]], e - s) for j, (s, e) in zip(js, spans))
            scores, rows = ragged_topk(Q[js], arena, spans, k, device=device)  # one device rule (read.batch)
            for r, j in enumerate(js):
                n = min(want[todo[j]], spans[r][1] - spans[r][0])
                ranked[todo[j]] = (rows[r, :n] - spans[r][0], scores[r, :n])
        return ranked

    def _state_extra(self) -> dict:
        return {"embedder": self.models.text_embedder.name}


def _fetch(requests, ranked) -> dict[int, dict[str, RawNode]]:
    """The ranked nodes of every request, one ``get_nodes`` per store."""
    ids: dict[int, tuple] = {}
    for i, (order, _) in ranked.items():
        m = requests[i][0]
        entry = ids.setdefault(id(m.store), (m.store, []))
        entry[1].extend(m.node_ids[r] for r in order)
    return {key: store.get_nodes(list(dict.fromkeys(want))) for key, (store, want) in ids.items()}
