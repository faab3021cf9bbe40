"""``cdrs``: an entity graph with one-hop expansion and query-local conflict detection, under the shared protocol.

The C3M paper compares against CDRs, compared in C3M §3.2 (its reference list is not at hand here: no authors or
venue are claimed): "embodied-memory CDRs uses an independent graph with query-local conflict detection; CDRs's
graph bytes and pre-filter candidates count toward the same budgets". Built here as:

- **Graph nodes** are the index's entries, each keyed by what it is about (``entities`` from ``describe_text``
  of its text with the heuristic anchor extractor; attribute values in ``states``). Write (``fold``): a new
  per-node entry *joins* an existing graph node when they share an entity key of high IDF weight (at least
  ``join_idf`` of the largest IDF the index can give, that of a key seen once) and their cosine is at least
  ``join_sim`` (default 0.6) — joined by ``merged``, sources united — else it is a new graph node. Document
  frequencies are observed once per new entry (after the decision, IDF over the past).
- **Edges** join graph nodes that share entity keys, weight = the IDF mass of the shared keys, heaviest first,
  at most ``k_edge`` (default 4) per node. They are stored in the snapshot (``meta["edges"]``: [id, id, weight]
  lists), so their bytes count toward the write budget like everything else.
- **Reduction** (``shrink``, while over the write budget): merge the two graph nodes joined by the heaviest
  edge (tie: the most similar pair); with no edges, the most similar pair.
- **Read**: the shared reader (``BoundedIndexMethod.retrieve``), whose candidates ``rerank`` changes in two
  steps. (1) *One-hop graph expansion*: the graph neighbours of the routed entries are expanded
  too (Rel = cos(q, node) + η · cos(q, neighbour)), restricted to the pages already read (a neighbour on an
  unread page would cost a page the reader budget has already spent); the pool stays at ``pool`` candidates
  and the base's best-first selection keeps the context within the reader budget. (2) **Query-local conflict
  detection** (a named heuristic, ``conflicts``): among the candidates, two Raw Nodes about the same entity
  (a shared entity key of ``describe_text`` of their texts — only keys the question names, when it names any
  the candidates hold) with different attribute values (``describe_text``'s states: colours, names, numbers)
  conflict; the more recent one stays in place and the older one is moved below every non-conflicting
  candidate — demoted, not dropped, so a "before" question still sees it when the budget has room.

Simplified from the original: the graph is over the protocol's per-node entries (no embodied scene graph or
spatial relations), and conflicts are detected by the lexicon heuristic rather than a learned detector.
Joining and merging unite sources, so every Raw Node stays reachable (``complete_provenance = True``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..index.active import IndexEntry, idf
from ..read.bmer import BmerConfig, expand_pool
from ..types import RawNode
from .base import register
from .bounded import BoundedConfig, BoundedIndexMethod, cosine, describe_texts


@dataclass(frozen=True)
class CDRsConfig(BoundedConfig):
    join_sim: float = 0.6                                   # cosine needed to join an existing graph node
    join_idf: float = 0.5                                   # share of the largest IDF a shared key needs to join
    k_edge: int = field(default=4, metadata={"minimum": 0})  # edges kept per graph node


def node_order(n: RawNode) -> tuple:
    return (n.time, n.session_id, n.turn_index)


def conflicts(nodes: Sequence[RawNode], question: str = "") -> list[tuple[str, str, str]]:
    """Query-local conflict detection (named heuristic, module docstring): [(older id, newer id, entity key)] for
    every pair of nodes about one entity with different attribute values."""
    described = describe_texts([n.text for n in nodes])
    ents = [set(d[0]) for d in described]
    states = [set(d[1]) for d in described]
    wanted = set(describe_texts([question])[0][0]) if question.strip() else set()
    held = set().union(*ents) if ents else set()
    focus = wanted & held  # keys the question names; empty: any shared key counts
    out = []
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            shared = ents[i] & ents[j]
            if focus:
                shared &= focus
            if not shared or not states[i] or not states[j] or states[i] == states[j]:
                continue
            older, newer = sorted((nodes[i], nodes[j]), key=node_order)
            if node_order(older) == node_order(newer):
                continue
            out.append((older.node_id, newer.node_id, sorted(shared)[0]))
    return out


@register
class CDRs(BoundedIndexMethod):
    name = "cdrs"
    complete_provenance = True
    Config = CDRsConfig
    summary = "an entity graph with one-hop expansion and query-local conflict detection (newer state first)"
    reads = "Raw Nodes via graph nodes"
    paper = "CDRs (as in C3M §3.2)"

    # -- graph -----------------------------------------------------------------------------------
    def _max_idf(self) -> float:
        return idf("\0never", {"\0never": 1}, self.index.n_docs)

    def _join_target(self, e: IndexEntry) -> tuple[IndexEntry, float, str] | None:
        floor = self.cfg.join_idf * self._max_idf()
        best = None
        for node in self.index.ordered():
            keys = [k for k in set(node.entities) & set(e.entities) if idf(k, self.index.df, self.index.n_docs) >= floor]
            sim = cosine(node, e)
            if keys and sim >= self.cfg.join_sim and (best is None or sim > best[1]):
                best = (node, sim, sorted(keys)[0])
        return best

    def edge_weight(self, a: IndexEntry, b: IndexEntry) -> float:
        return sum(idf(k, self.index.df, self.index.n_docs) for k in set(a.entities) & set(b.entities))

    def rebuild_edges(self) -> None:
        """Edges between graph nodes that share entity keys: heaviest first (tie: most similar), at most
        ``k_edge`` per node, stored in ``meta["edges"]`` (counted in the snapshot's bytes)."""
        nodes = self.index.ordered()
        cand = []
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                w = self.edge_weight(a, b)
                if w > 0:
                    cand.append((-round(w, 3), -cosine(a, b), a.entry_id, b.entry_id))
        cand.sort()
        degree: dict[str, int] = {}
        edges = []
        for w, _, a, b in cand:
            if degree.get(a, 0) < self.cfg.k_edge and degree.get(b, 0) < self.cfg.k_edge:
                degree[a], degree[b] = degree.get(a, 0) + 1, degree.get(b, 0) + 1
                edges.append([a, b, -w])
        self.index.meta["edges"] = sorted(edges)

    def edges(self) -> list[list]:
        return self.index.meta.get("edges", [])

    def neighbours(self, ids: set[str]) -> set[str]:
        out = set()
        for a, b, _ in self.edges():
            if a in ids:
                out.add(b)
            if b in ids:
                out.add(a)
        return out - ids

    def _merge(self, parts: Sequence[IndexEntry]) -> IndexEntry:
        new = self.merged(parts)
        self.replace_entries(parts, new)
        return new

    # -- write -------------------------------------------------------------------------------------
    def fold(self, session_id: str, entries: list[IndexEntry]) -> list[dict]:
        actions = []
        for e, (ents, states, *_) in zip(entries, self.describe_entries(entries)):
            target = self._join_target(e)
            if target is not None:
                node, sim, key = target
                new = self._merge([node, e])
                actions.append({"action": "join", "entry": e.entry_id, "into": new.entry_id, "key": key,
                                "sim": round(sim, 4)})
            else:
                self.index.entries[e.entry_id] = e
                actions.append({"action": "node", "entry": e.entry_id, "session": session_id})
            self.index.observe_df(set(ents) | set(states))
        self.rebuild_edges()
        return actions

    def shrink(self) -> dict:
        nodes = {e.entry_id: e for e in self.index.ordered()}
        if len(nodes) < 2:
            raise RuntimeError(f"{self.name}: the index is over the write budget {self.usage()} with one graph node "
                               "left (the write budget is smaller than one entry)")
        live = [(w, a, b) for a, b, w in self.edges() if a in nodes and b in nodes]
        if live:
            w, a, b = max(live, key=lambda t: (t[0], cosine(nodes[t[1]], nodes[t[2]]), t[1], t[2]))
            how = {"edge": w}
        else:
            ids = list(nodes)
            Z = self.index.matrix(list(nodes.values()))
            S = Z @ Z.T
            S[np.tril_indices(len(ids))] = -np.inf
            i, j = divmod(int(np.argmax(S)), len(ids))
            a, b, how = ids[i], ids[j], {"edge": None}
        sim = cosine(nodes[a], nodes[b])
        new = self._merge([nodes[a], nodes[b]])
        self.rebuild_edges()
        return {"action": "merge", "entries": [a, b], "into": new.entry_id, "sim": round(sim, 4), **how}

    # -- read --------------------------------------------------------------------------------------
    def widen(self, q, pages, routed, pool):
        """One-hop graph expansion (module docstring): the neighbours of the routed entries, on pages already
        read, expanded into their Raw Nodes; the pool stays at ``pool`` candidates."""
        read = {p for p, _ in pages}
        owners = {e.entry_id for e, _ in routed}
        near = [self.index.entries[i] for i in sorted(self.neighbours(owners))
                if i in self.index.entries and self.index.entries[i].page in read]
        if not near:
            return [], [], []
        bcfg = BmerConfig(entries_k=self.cfg.entries_k, lexical=0.0, entry_boost=self.cfg.entry_boost,
                          pool=self.cfg.pool)
        ids, scored = expand_pool([(e, float(e.z @ q)) for e in near], self.namespace, q, bcfg,
                                  get_nodes=self.store.get_nodes, vectors=self.node_vectors)
        have = {node.node_id for _, kind, node, _ in pool if kind == "node"}
        added = [(rel, "node", node, e) for node, rel, e, _ in scored if node.node_id not in have]
        return added, ids, [f"graph expansion: {len(near)} neighbour entries, {len(added)} nodes offered"]

    def rerank(self, question: str, pool: list[tuple]) -> tuple[list[tuple], list[str]]:
        """Query-local conflict detection (module docstring): the older node of each conflicting pair is moved
        below every non-conflicting candidate. The pool (routed and graph-expanded nodes) is cut to ``pool`` first."""
        pool = pool[:self.cfg.pool]
        nodes = [node for _, kind, node, _ in pool if kind == "node"]
        found = conflicts(nodes, question)
        if not found:
            return pool, []
        demoted = {older for older, _, _ in found}
        note = ("conflicts (older demoted): " + ", ".join(f"{o}<{n} [{k}]" for o, n, k in found[:8])
                + (f" (+{len(found) - 8} more)" if len(found) > 8 else ""))
        keep = [c for c in pool if not (c[1] == "node" and c[2].node_id in demoted)]
        return keep + [c for c in pool if c[1] == "node" and c[2].node_id in demoted], [note]


__all__ = ["CDRs", "CDRsConfig", "conflicts"]
