"""``dense-topk``: dense top-k over Raw Nodes under the reader budget — the plain baseline.

Write: embed each Raw Node's text (vectors cached in the store by content hash) and keep its id.
Read: cosine score against the question, take nodes best-first while they fit the reader budget
(Raw Nodes, images, text tokens; it has no pages, so it charges none), return them in time order.
It keeps every node (complete provenance) and has no bounded index: it is the yardstick C3M's bounded
index is compared with, not a memory policy.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..types import BudgetUse, Context, ContextItem, EvidenceForm, RawNode, ReaderBudget, RouteTrace
from .base import MemoryMethod, register

TRACE_CANDIDATES = 50


@register
class DenseTopK(MemoryMethod):
    name = "dense-topk"

    def reset(self) -> None:
        self.node_ids: list[str] = []
        self.upto_seq = 0
        self.vectors = np.zeros((0, self.models.text_embedder.dim), dtype=np.float32)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reset()

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        vecs = self.node_vectors(nodes)
        self.node_ids.extend(n.node_id for n in nodes)
        self.vectors = np.concatenate([self.vectors, vecs]) if len(self.vectors) else vecs
        self.upto_seq = self.store.session_record(self.namespace, session_id).seq
        return [{"action": "add", "nodes": len(nodes)}]

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        count = self.models.token_counter.count
        if not self.node_ids:
            trace = RouteTrace(self.name, notes=("empty memory",))
            return Context(question, (), BudgetUse(), budget, trace)
        q = self.models.text_embedder.embed([question])[0]
        scores = self.vectors @ q
        order = np.argsort(-scores, kind="stable")
        nodes = self.store.get_nodes([self.node_ids[i] for i in order[: max(4 * budget.raw_nodes, 64)]])
        chosen: list[tuple[RawNode, float, int]] = []
        use, dropped = BudgetUse(), []
        for i in order:
            if use.raw_nodes >= budget.raw_nodes:
                break
            node = nodes.get(self.node_ids[i]) or self.store.get_nodes([self.node_ids[i]])[self.node_ids[i]]
            if node.redacted:
                continue
            tokens = count(node.text)
            step = BudgetUse(0, 1, len(node.images), tokens)
            if not (use + step).fits(budget):
                dropped.append(node.node_id)
                continue
            use = use + step
            chosen.append((node, float(scores[i]), tokens))
        chosen.sort(key=lambda c: (c[0].time, c[0].session_id, c[0].turn_index))
        items = tuple(ContextItem(n.node_id, n.provenance, n.role, EvidenceForm.RAW_TEXT, n.text, n.images, s, t)
                      for n, s, t in chosen)
        trace = RouteTrace(
            self.name,
            candidates=tuple((self.node_ids[i], round(float(scores[i]), 4)) for i in order[:TRACE_CANDIDATES]),
            # routing = the top raw_nodes by similarity; selection then applies the other budget limits
            expanded_nodes=tuple(self.node_ids[i] for i in order[: budget.raw_nodes]),
            expanded_images=tuple(im.sha256 for n, _, _ in chosen for im in n.images),
            selected_nodes=tuple(n.node_id for n, _, _ in chosen),
            covered_sessions=tuple(dict.fromkeys(n.session_id for n, _, _ in chosen)),
            dropped_for_budget=tuple(dropped),
        )
        return Context(question, items, use, budget, trace)

    def state(self) -> dict:
        """The index is "every Raw Node of sessions 1..upto_seq", so the snapshot names that range rather
        than repeating every id (the snapshot's pointer list already holds them)."""
        return {"embedder": self.models.text_embedder.name, "upto_seq": self.upto_seq, "count": len(self.node_ids)}

    def load_state(self, state: dict) -> None:
        from ..errors import StoreError

        self.reset()
        nodes = list(self.store.iter_nodes(self.namespace, upto_seq=state["upto_seq"]))
        if len(nodes) != state["count"]:
            raise StoreError(f"dense-topk snapshot expects {state['count']} Raw Nodes up to session "
                             f"{state['upto_seq']}, the store has {len(nodes)}", fix="run `c3m verify`")
        self.vectors = self.node_vectors(nodes)
        self.node_ids = [n.node_id for n in nodes]
        self.upto_seq = state["upto_seq"]

    def pointers(self) -> set[str]:
        return set(self.node_ids)

    def describe(self) -> dict:
        return {"method": self.name, "embedder": self.models.text_embedder.name, "pointers": len(self.node_ids),
                "index": "one entry per Raw Node (unbounded baseline)"}
