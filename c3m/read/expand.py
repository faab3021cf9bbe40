"""Horizontal expansion over the active index (HiVe-Mem §3.2, on C3M's entries).

BMER's routed entries are the *seeds*. The anchor graph links entries that share anchors — their entity keys
(textual anchors) and the visual anchor keys of their images, one vocabulary, so a text mention and a seen
object of one concept match. Edge weight = Σ idf(a) over shared anchors (idf over the index's entries, so a
key every entry holds weighs ~0), each entry keeps its ``k_edge`` heaviest edges, and an edge kept by either
end counts (undirected). A one-hop neighbour n of the seeds scores Σ idf(a)·max(0, cos(q, a)) over the anchors
it shares with the seeds (``c3m_kernels.anchor_scores``); the ``k_exp`` best join the read.

**Where the graph lives.** It is a pure function of the index snapshot (entries' ``entities`` and ``visual``
counters), rebuilt per question from at most ``WriteBudget.entries`` rows — so it is counted in the write
budget as the anchor keys the snapshot stores, and nothing outside the index is consulted to build it. A
reader may keep it (``anchor_graph``) until the index changes: c3m does, so a batch of questions builds it once.

**Batched.** A batch of questions scores its expansions in one ``anchor_scores`` call per graph (``expand_many``):
one row per question, each row computed exactly as alone (a row's sums never see another row), so a question's
expansion is the same in a batch as by itself. ``expand_entries`` is the batch of one.

**Device.** ``device`` is the memory's device: the graph build (``build_anchor_graph``) and the scoring
(``anchor_scores``) get numpy arrays and run their CPU kernels on "cpu", torch tensors / ``device=`` and Triton on
CUDA (``c3m_kernels.dispatch.placement``); the graph keeps its ``AnchorIndex`` and the IDF on the device (uploaded once
per graph), each call uploads its similarities and seeds once, and the scores come back to the host once per call.
Triton sums in fp32
(atomics) where the CPU kernels use fp64: equal fp32 scores keep the CPU order (lower entry first), but two scores
equal in exact arithmetic may round apart and swap, and a graph edge tied at the ``k_edge``-th place may differ.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..index.active import ActiveIndex, IndexEntry


def entry_anchors(e: IndexEntry, visual: bool = True) -> set[str]:
    return set(e.entities) | (set(e.visual) if visual else set())


@dataclass(frozen=True)
class AnchorGraph:
    """The anchor graph of one index state: a pure function of its entries (the same for every question), so a
    read path may keep it until the index changes."""

    entries: list
    sets: list
    ids: dict
    indptr: np.ndarray
    flat: np.ndarray
    idf: np.ndarray
    g_ptr: np.ndarray
    g_nb: np.ndarray
    index: Any = None  # c3m_kernels' AnchorIndex of (indptr, flat): normalised once, kept on the device by the op
    _idf_on: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def vocab_size(self) -> int:
        return len(self.ids)

    def idf_for(self, at):
        """``idf`` as ``at`` (a ``dispatch.Placement``) wants it: numpy as is, or a tensor uploaded once per device."""
        if not at.tensors:
            return self.idf
        got = self._idf_on.get(at.device)
        if got is None:
            got = self._idf_on[at.device] = at.put(self.idf)
        return got


def anchor_graph(index: ActiveIndex, *, k_edge: int = 4, use_idf: bool = True, visual: bool = True,
                 device: str = "cpu") -> AnchorGraph | None:
    """Build the graph (module docstring) on ``device``; None when the entries hold no anchor."""
    from c3m_kernels.anchor_scores import build_anchor_graph, build_anchor_index
    from c3m_kernels.dispatch import placement

    entries = index.ordered()
    sets = [entry_anchors(e, visual) for e in entries]
    vocab = sorted(set().union(*sets)) if sets else []
    if not vocab:
        return None
    ids = {k: i for i, k in enumerate(vocab)}
    indptr = np.zeros(len(entries) + 1, np.int64)
    np.cumsum([len(s) for s in sets], out=indptr[1:])
    flat = np.array([ids[k] for s in sets for k in sorted(s)], np.int64)
    df = np.bincount(flat, minlength=len(vocab))
    idf = (np.log((2 + len(entries)) / (1 + df)) if use_idf else np.ones(len(vocab))).astype(np.float64)
    at = placement(device, "build_anchor_graph")
    index = build_anchor_index(indptr, flat, len(vocab))
    g_ptr, g_nb, _ = build_anchor_graph(indptr, flat, idf, k_edge, index=index,
                                        device=at.device if at.tensors else None)
    return AnchorGraph(entries, sets, ids, indptr, flat, idf, g_ptr, g_nb, index)


@dataclass
class Expansion:
    """One question's expansion, planned on the host: its row of ``expand_many``'s batched ``anchor_scores`` call."""

    graph: AnchorGraph
    seed_rows: list        # the seeds' rows in ``graph.entries``, ascending
    neighbours: set        # rows that may be returned: one-hop graph neighbours of the seeds, ``allowed``
    sim: np.ndarray        # [vocab] max(0, cos(q, anchor)) on the seeds' anchors, 0 elsewhere
    k_exp: int
    device: str


def plan_expansion(index: ActiveIndex, seeds: Sequence[IndexEntry], q: np.ndarray,
                   key_vectors: Callable[[list[str]], np.ndarray], *, k_exp: int = 2, k_edge: int = 4,
                   use_idf: bool = True, visual: bool = True, allowed: Callable[[IndexEntry], bool] | None = None,
                   graph: AnchorGraph | None | bool = False, device: str = "cpu") -> Expansion | None:
    """Everything ``expand_entries`` does before scoring; None when there is nothing to score (no expansion)."""
    entries = index.ordered()
    if not seeds or k_exp <= 0 or len(entries) <= len(seeds):
        return None
    if graph is False:
        graph = anchor_graph(index, k_edge=k_edge, use_idf=use_idf, visual=visual, device=device)
    if graph is None:
        return None
    entries, sets, ids, g_ptr, g_nb = graph.entries, graph.sets, graph.ids, graph.g_ptr, graph.g_nb
    row = {e.entry_id: i for i, e in enumerate(entries)}
    seed_rows = sorted({row[e.entry_id] for e in seeds if e.entry_id in row})
    neighbours: set[int] = set()
    for s in seed_rows:  # undirected: s lists n, or n lists s
        neighbours.update(int(n) for n in g_nb[g_ptr[s]:g_ptr[s + 1]])
    seed_set = set(seed_rows)
    for n in range(len(entries)):
        if n not in seed_set and seed_set & {int(x) for x in g_nb[g_ptr[n]:g_ptr[n + 1]]}:
            neighbours.add(n)
    neighbours -= seed_set
    if allowed is not None:
        neighbours = {n for n in neighbours if allowed(entries[n])}
    if not neighbours:
        return None
    seed_keys = sorted(set().union(*(sets[s] for s in seed_rows)))
    sim = np.zeros(graph.vocab_size)
    if seed_keys:
        cos = key_vectors(seed_keys) @ q
        sim[[ids[k] for k in seed_keys]] = np.maximum(0.0, cos)
    return Expansion(graph, seed_rows, neighbours, sim, k_exp, device)


def expand_many(plans: Sequence[Expansion | None]) -> list[list[tuple[IndexEntry, float]]]:
    """Each plan's ``k_exp`` best neighbours as (entry, score) with score > 0 ([] for None), from one
    ``anchor_scores`` call per graph (rows padded with -1 seeds, which the kernels skip)."""
    from c3m_kernels.anchor_scores import anchor_scores
    from c3m_kernels.dispatch import placement

    out: list[list[tuple[IndexEntry, float]]] = [[] for _ in plans]
    by_graph: dict[tuple[int, str], list[int]] = {}
    for b, p in enumerate(plans):
        if p is not None:
            by_graph.setdefault((id(p.graph), p.device), []).append(b)
    for (_, device), rows in by_graph.items():
        graph = plans[rows[0]].graph
        sim = np.stack([plans[b].sim for b in rows])
        seeds = np.full((len(rows), max(len(plans[b].seed_rows) for b in rows)), -1, np.int64)
        for r, b in enumerate(rows):
            seeds[r, :len(plans[b].seed_rows)] = plans[b].seed_rows
        at = placement(device, "anchor_scores")
        if at.tensors:  # the similarities and the seeds go up once; the top-k comes back once
            sim, seeds = at.put(sim), at.put(seeds)
        scores, eps = at.host(anchor_scores(graph.indptr, graph.flat, graph.idf_for(at), sim, seeds,
                                            len(graph.entries), index=graph.index))
        for r, b in enumerate(rows):
            p = plans[b]
            got = [(graph.entries[int(i)], float(s)) for s, i in zip(scores[r], eps[r])
                   if i >= 0 and int(i) in p.neighbours and math.isfinite(s) and s > 0]
            out[b] = got[:p.k_exp]
    return out


def expand_entries(index: ActiveIndex, seeds: Sequence[IndexEntry], q: np.ndarray,
                   key_vectors: Callable[[list[str]], np.ndarray], *, k_exp: int = 2, k_edge: int = 4,
                   use_idf: bool = True, visual: bool = True,
                   allowed: Callable[[IndexEntry], bool] | None = None,
                   graph: AnchorGraph | None | bool = False, device: str = "cpu") -> list[tuple[IndexEntry, float]]:
    """The ``k_exp`` best one-hop neighbours of ``seeds`` (never a seed), as (entry, score) with score > 0.
    ``graph``: ``anchor_graph(index, ...)`` with the same options when the caller keeps it (False: build it).
    ``device``: where ``anchor_scores`` runs (module docstring). ``expand_many`` of one ``plan_expansion``."""
    return expand_many([plan_expansion(index, seeds, q, key_vectors, k_exp=k_exp, k_edge=k_edge, use_idf=use_idf,
                                       visual=visual, allowed=allowed, graph=graph, device=device)])[0]
