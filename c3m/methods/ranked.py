"""Shared base for the unbounded baselines that keep every Raw Node and rank all of them per question.

``RankedNodesMethod`` owns everything that is the same for dense-topk, bm25 and hybrid: the list of
Raw-Node ids in commit order, the ``upto_seq`` bookkeeping, the snapshot state (it names the range "every
Raw Node of sessions 1..upto_seq" plus the count, and is rebuilt from the Cold Store on load), the pointers
and the read path. A subclass only says how to index new nodes (``_add``/``_clear``) and how to score a
question against all of them (``scores``: one float per node, higher is better, ``-inf`` = "not matched",
which keeps a node out of the candidate pool).

Read path: score every node, take the best ``pool`` (option, default 48) non-redacted matched nodes
(``np.argsort(-scores, kind="stable")``, so ties go to the earlier node) as the candidate pool, then take
pool nodes best-first while they fit the reader budget (Raw Nodes, distinct images, text tokens counted by
the token counter — the harness's ``c3m.budget.measure_context`` definition; no pages, so it charges none),
and return them in time order as raw text.

These methods keep one index entry per Raw Node (complete provenance) and have no write budget: they are
yardsticks for C3M's bounded index, not bounded memories (``bounded = False``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from ..errors import StoreError
from ..read.select import greedy, item_cost
from ..types import BudgetUse, Context, ContextItem, EvidenceForm, RawNode, ReaderBudget, RouteTrace
from .base import MemoryMethod
from .options import parse_options

#: default size of the candidate pool handed to the budgeted selection
DEFAULT_POOL = 48


@dataclass(frozen=True)
class RankedConfig:
    pool: int = field(default=DEFAULT_POOL, metadata={"minimum": 1})  # candidates handed to the selection


class RankedNodesMethod(MemoryMethod):
    """Keep every Raw Node; per question, score all of them, pool the best, select under the budget."""

    complete_provenance = True
    bounded = False
    #: the typed options (a frozen dataclass; subclasses extend ``RankedConfig``)
    Config: ClassVar[type] = RankedConfig
    read_options = frozenset({"pool"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = parse_options(self.Config, self.options, self.name)
        self.pool_size = self.cfg.pool
        self.reset()

    # -- what a subclass provides --------------------------------------------------------------
    def _clear(self) -> None:
        """Empty the subclass's per-node index."""

    def _add(self, nodes: Sequence[RawNode]) -> None:
        """Append these nodes (in order) to the subclass's per-node index."""

    def scores(self, question: str) -> np.ndarray:
        """One score per node in ``self.node_ids`` order (higher = better; ``-inf`` = not a candidate)."""
        raise NotImplementedError

    def _state_extra(self) -> dict:
        """What else the snapshot should record (e.g. the embedder's name)."""
        return {}

    # -- write path ----------------------------------------------------------------------------
    def reset(self) -> None:
        self.node_ids: list[str] = []
        self.upto_seq = 0
        self._clear()

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        self._add(nodes)
        self.node_ids.extend(n.node_id for n in nodes)
        self.upto_seq = self.store.session_record(self.namespace, session_id).seq
        return [{"action": "add", "nodes": len(nodes)}]

    def state(self) -> dict:
        """The index is "every Raw Node of sessions 1..upto_seq", so the snapshot names that range rather
        than repeating every id (the snapshot's pointer list already holds them)."""
        return {**self._state_extra(), "upto_seq": self.upto_seq, "count": len(self.node_ids)}

    def load_state(self, state: dict) -> None:
        self.reset()
        nodes = list(self.store.iter_nodes(self.namespace, upto_seq=state["upto_seq"]))
        if len(nodes) != state["count"]:
            raise StoreError(f"{self.name} snapshot expects {state['count']} Raw Nodes up to session "
                             f"{state['upto_seq']}, the store has {len(nodes)}", fix="run `c3m verify`")
        self._add(nodes)
        self.node_ids = [n.node_id for n in nodes]
        self.upto_seq = state["upto_seq"]

    def pointers(self) -> set[str]:
        return set(self.node_ids)

    def describe(self) -> dict:
        return {"method": self.name, **self._state_extra(), "pointers": len(self.node_ids), "pool": self.pool_size,
                "index": "one entry per Raw Node (unbounded baseline)"}

    # -- read path -----------------------------------------------------------------------------
    def _pool(self, scores: np.ndarray) -> list[tuple[RawNode, float]]:
        """The best ``pool_size`` matched, non-redacted nodes, best first (ties: earlier node first)."""
        order = np.argsort(-scores, kind="stable")
        pool: list[tuple[RawNode, float]] = []
        chunk = max(2 * self.pool_size, 16)
        for start in range(0, len(order), chunk):
            idx = [int(i) for i in order[start:start + chunk] if np.isfinite(scores[i])]
            nodes = self.store.get_nodes([self.node_ids[i] for i in idx])
            for i in idx:
                node = nodes[self.node_ids[i]]
                if not node.redacted:
                    pool.append((node, float(scores[i])))
                    if len(pool) == self.pool_size:
                        return pool
            if len(idx) < len(order[start:start + chunk]):  # reached the unmatched (-inf) tail
                break
        return pool

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        if not self.node_ids:
            return self._empty(question, budget)
        scores = np.asarray(self.scores(question), dtype=np.float64)
        assert scores.shape == (len(self.node_ids),), f"{self.name}.scores gave {scores.shape}"
        return self._select(question, self._pool(scores), budget)

    def _empty(self, question: str, budget: ReaderBudget) -> Context:
        return Context(question, (), BudgetUse(), budget, RouteTrace(self.name, notes=("empty memory",)))

    def _select(self, question: str, pool: list[tuple[RawNode, float]], budget: ReaderBudget) -> Context:
        """Take pool nodes best-first while they fit the budget (the selection stage's greedy mode, stopping when the
        Raw-Node slots are full); the context lists them in time order."""
        count = self.models.token_counter.count
        tokens: dict[str, int] = {}

        def cost(item, shown):
            node = item[0]
            tokens[node.node_id] = count(node.text)
            return (item_cost(raw_node=True, images=node.images, tokens=tokens[node.node_id], shown=shown),
                    {im.sha256 for im in node.images})

        filled = greedy(pool, budget, cost, stop=lambda use, _: use.raw_nodes >= budget.raw_nodes)
        use, dropped = filled.use, [n.node_id for n, _ in filled.dropped]
        chosen = [(n, s, tokens[n.node_id]) for n, s in filled.chosen]
        chosen.sort(key=lambda c: (c[0].time, c[0].session_id, c[0].turn_index))
        items = tuple(ContextItem(n.node_id, n.provenance, n.role, EvidenceForm.RAW_TEXT, n.text, n.images, s, t)
                      for n, s, t in chosen)
        pool_ids = tuple(n.node_id for n, _ in pool)
        trace = RouteTrace(
            self.name,
            candidates=tuple((n.node_id, round(s, 4)) for n, s in pool),
            expanded_nodes=pool_ids,
            expanded_images=tuple(dict.fromkeys(im.sha256 for n, _, _ in chosen for im in n.images)),
            selected_nodes=tuple(n.node_id for n, _, _ in chosen),
            covered_sessions=tuple(dict.fromkeys(n.session_id for n, _, _ in chosen)),
            dropped_for_budget=tuple(dropped),
            notes=() if pool else ("no candidate matched the question",),
            pool=pool_ids,
            scored=len(self.node_ids),
        )
        return Context(question, items, use, budget, trace)
