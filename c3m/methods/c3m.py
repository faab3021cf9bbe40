"""``c3m``: the flagship method — a bounded active index maintained by RAMU, read by BMER (C3M §2).

Write (per committed session, query-blind): cut the session into units (``write.units``), embed them
(the mean of their Raw Nodes' shared embeddings), extract entities and attribute values, then for each
unit run RAMU (``write.ramu``: candidates → relation head → Merge / Update / Add / Keep), and finally the
capacity policy (``write.capacity``) so the index fits the write budget after every commit. Every action is
returned for the maintenance log.
Read: BMER (``read.bmer``): pages → entries → Raw Nodes and images → ``budget_solve``.

Options (``MemoryConfig.method_options``; paper values where the paper gives them, DESIGN §4):
``delta`` 0.6, ``candidates`` (K) 4, ``min_sim`` 0.15, ``page_open_sim`` 0.35, ``unit_tokens`` 0,
``gamma`` 0.1, ``lam`` 0.05, ``entries_k`` 12, ``lexical`` 0.3, ``entry_boost`` 0.3, ``pool`` 48,
``anchors`` "auto" (spaCy, else the heuristic), ``relation_head`` "feature".
"""
from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidInput
from ..models.relation_head import FeatureRelationHead
from ..models.summary import LeadSummarizer
from ..read.bmer import BmerConfig, select
from ..types import Context, RawNode, ReaderBudget
from ..write.capacity import enforce
from ..index.active import ActiveIndex, normalize
from ..write.ramu import apply, decide, propose
from ..write.units import Unit, describe_text, segment
from .base import MemoryMethod, register

WRITE_DEFAULTS: dict[str, Any] = {"delta": 0.6, "candidates": 4, "min_sim": 0.15, "page_open_sim": 0.35,
                                  "unit_tokens": 0, "anchors": "auto", "relation_head": "feature",
                                  "summary_tokens": 24}
READ_DEFAULTS = {f.name: f.default for f in fields(BmerConfig)}
RELATION_HEADS = ("feature",)


class _AnchorMemo:
    """Per-process memo of text → (entities, states, change): small talk repeats, spaCy is the slow part."""

    def __init__(self, name: str, max_items: int = 100_000):
        from ..models.anchors import make_anchor_extractor

        self.extractor = make_anchor_extractor(name)
        self.max_items = max_items
        self.memo: dict[str, tuple] = {}

    def describe(self, texts: Sequence[str]) -> list[tuple[set, set, bool, bool, bool]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if todo:
            if len(self.memo) + len(todo) > self.max_items:
                self.memo.clear()
            for t, anchors in zip(todo, self.extractor.extract(todo)):
                self.memo[t] = describe_text(t, anchors)
        return [self.memo[t] for t in texts]


@lru_cache(maxsize=2)
def _memo(name: str) -> _AnchorMemo:
    return _AnchorMemo(name)


@register
class C3M(MemoryMethod):
    name = "c3m"
    bounded = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        unknown = set(self.options) - set(WRITE_DEFAULTS) - set(READ_DEFAULTS)
        if unknown:
            raise InvalidInput(f"method_options.{sorted(unknown)[0]}", "unknown option for method 'c3m'",
                               fix=f"use only {sorted(set(WRITE_DEFAULTS) | set(READ_DEFAULTS))}")
        opts = {**WRITE_DEFAULTS, **READ_DEFAULTS, **self.options}
        if opts["relation_head"] not in RELATION_HEADS:
            raise InvalidInput("method_options.relation_head", f"unknown relation head {opts['relation_head']!r}",
                               fix=f"choose one of {RELATION_HEADS}")
        if not 0.0 <= float(opts["delta"]) <= 1.0:
            raise InvalidInput("method_options.delta", f"must be in [0, 1], got {opts['delta']!r}",
                               fix="δ is a confidence threshold, e.g. 0.6")
        self.opts = opts
        self.read_cfg = BmerConfig(**{k: opts[k] for k in READ_DEFAULTS})
        self.head = FeatureRelationHead()
        self.summarizer = LeadSummarizer()
        self.anchors = _memo(opts["anchors"])
        self.reset()

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.index = ActiveIndex(self.models.text_embedder.dim,
                                 {"embedder": self.models.text_embedder.name, "head": self.head.name})

    def state(self) -> dict:
        return self.index.state()  # embedder and head names ride in the index's meta, so they are counted

    def load_state(self, state: dict) -> None:
        self.index = ActiveIndex.from_state(state)

    def pointers(self) -> set[str]:
        return self.index.pointer_ids(self.namespace)

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)
        self.anchors.describe([n.text for n in nodes])

    # -- write -------------------------------------------------------------------------------
    def _units(self, nodes: Sequence[RawNode]) -> list[Unit]:
        count = self.models.token_counter.count
        groups = segment(nodes, int(self.opts["unit_tokens"]), count)
        vecs = self.node_vectors(nodes)
        row = {n.node_id: i for i, n in enumerate(nodes)}
        described = self.anchors.describe([n.text for n in nodes])
        units = []
        for g in groups:
            ents, states, change, again, another = set(), set(), False, False, False
            speakers = [n for n in g if n.role == "user"] or g  # see write.units: descriptors from user turns
            for n in speakers:
                e, s, c, a, o = described[row[n.node_id]]
                ents |= e
                states |= s
                change, again, another = change or c, again or a, another or o
            z = normalize(vecs[[row[n.node_id] for n in g]].mean(axis=0))
            units.append(Unit(g[0].session_id, [n.turn_index for n in g], [n.node_id for n in g], g[0].time,
                              "\n".join(n.text for n in g), z, ents, states, change, sum(len(n.images) for n in g),
                              again, another))
        return units

    def _summary(self, unit: Unit, nodes: Sequence[RawNode]) -> str:
        first = next((n for n in nodes if n.node_id in unit.node_ids and n.text.strip()), None)
        text = self.summarizer.summarize(first.text, int(self.opts["summary_tokens"])) if first else ""
        return text + (f" [{unit.images} image{'s' if unit.images > 1 else ''}]" if unit.images else "")

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        actions = []
        for unit in self._units(nodes):
            cands = propose(self.index, unit, int(self.opts["candidates"]), float(self.opts["min_sim"]))
            decision = decide(unit, cands, self.head, self.index, float(self.opts["delta"]))
            actions.append(apply(self.index, unit, decision, self._summary(unit, nodes), self.write_budget,
                                 float(self.opts["page_open_sim"])))
            self.index.observe_df(unit.entities | unit.states)  # IDF over the past: counted after the decision
        actions += enforce(self.index, self.write_budget, self.head, self.models.token_counter.count,
                           float(self.opts["delta"]))
        return actions

    # -- read --------------------------------------------------------------------------------
    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        q = self.models.text_embedder.embed([question])[0].astype(np.float32)
        ents, states, *_ = self.anchors.describe([question])[0]
        keys = set(ents) | set(states) | {w for k in ents for w in k.split()}
        return select(self.index, self.namespace, question, q, keys, budget, self.read_cfg, vectors=self.node_vectors,
                      get_nodes=self.store.get_nodes, count=self.models.token_counter.count, method=self.name)

    # -- inspection --------------------------------------------------------------------------
    def describe(self) -> dict:
        count = self.models.token_counter.count
        use = self.index.usage(count)
        b = self.write_budget
        entries = []
        for e in self.index.ordered():
            entries.append({"id": e.entry_id, "page": f"p{e.page}", "kind": e.kind, "support": e.support,
                            "time": e.time.isoformat(), "pointers": sum(len(t) for t in e.sources().values()),
                            "labels": dict(e.labels), "text": e.render(),
                            "chain": [{"time": v.time.isoformat(), "states": v.states, "text": v.text}
                                      for v in e.versions] + [{"time": e.time.isoformat(), "states": e.states,
                                                               "text": e.text}] if e.versions else [],
                            "links": e.links})
        return {"method": self.name, "relation_head": self.head.name, "pointers": len(self.pointers()),
                "usage": {"entries": f"{use[0]}/{b.entries}", "pages": f"{use[1]}/{b.pages}",
                          "index_tokens": f"{use[2]}/{b.index_tokens}", "index_bytes": f"{use[3]}/{b.index_bytes}"},
                "pages": [{"id": f"p{i}", "summary": p.summary,
                           "entries": [e.entry_id for e in self.index.page_entries(i)]}
                          for i, p in enumerate(self.index.pages)],
                "entries": entries}
