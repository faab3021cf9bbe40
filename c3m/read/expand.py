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

**Device.** ``device`` is the memory's device: the graph build (``build_anchor_graph``) and the scoring
(``anchor_scores``) get numpy arrays and run their CPU kernels on "cpu", torch tensors / ``device=`` and Triton on
CUDA (``c3m_kernels.dispatch.placement``); the scores come back to the host once per question. Triton sums in fp32
(atomics) where the CPU kernels use fp64: equal fp32 scores keep the CPU order (lower entry first), but two scores
equal in exact arithmetic may round apart and swap, and a graph edge tied at the ``k_edge``-th place may differ.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

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

    @property
    def vocab_size(self) -> int:
        return len(self.ids)


def anchor_graph(index: ActiveIndex, *, k_edge: int = 4, use_idf: bool = True, visual: bool = True,
                 device: str = "cpu") -> AnchorGraph | None:
    """Build the graph (module docstring) on ``device``; None when the entries hold no anchor."""
    from c3m_kernels.anchor_scores import build_anchor_graph
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
    g_ptr, g_nb, _ = build_anchor_graph(indptr, flat, idf, k_edge, device=at.device if at.tensors else None)
    return AnchorGraph(entries, sets, ids, indptr, flat, idf, g_ptr, g_nb)


def expand_entries(index: ActiveIndex, seeds: Sequence[IndexEntry], q: np.ndarray,
                   key_vectors: Callable[[list[str]], np.ndarray], *, k_exp: int = 2, k_edge: int = 4,
                   use_idf: bool = True, visual: bool = True,
                   allowed: Callable[[IndexEntry], bool] | None = None,
                   graph: AnchorGraph | None | bool = False, device: str = "cpu") -> list[tuple[IndexEntry, float]]:
    """The ``k_exp`` best one-hop neighbours of ``seeds`` (never a seed), as (entry, score) with score > 0.
    ``graph``: ``anchor_graph(index, ...)`` with the same options when the caller keeps it (False: build it).
    ``device``: where ``anchor_scores`` runs (module docstring)."""
    entries = index.ordered()
    if not seeds or k_exp <= 0 or len(entries) <= len(seeds):
        return []
    from c3m_kernels.anchor_scores import anchor_scores
    from c3m_kernels.dispatch import placement

    if graph is False:
        graph = anchor_graph(index, k_edge=k_edge, use_idf=use_idf, visual=visual, device=device)
    if graph is None:
        return []
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
        return []
    seed_keys = sorted(set().union(*(sets[s] for s in seed_rows)))
    sim = np.zeros((1, graph.vocab_size))
    if seed_keys:
        cos = key_vectors(seed_keys) @ q
        sim[0, [ids[k] for k in seed_keys]] = np.maximum(0.0, cos)
    seeds_arr = np.array([seed_rows], np.int64)
    at = placement(device, "anchor_scores")
    if at.tensors:  # the query-anchor similarities and the seeds go up once; the top-k comes back once
        sim, seeds_arr = at.put(sim), at.put(seeds_arr)
    scores, eps = at.host(anchor_scores(graph.indptr, graph.flat, graph.idf, sim, seeds_arr, len(entries)))
    out = [(entries[int(i)], float(s)) for s, i in zip(scores[0], eps[0])
           if i >= 0 and int(i) in neighbours and math.isfinite(s) and s > 0]
    return out[:k_exp]
