"""HiVe-Mem's episode graph over shared anchors, and its one-hop expansion (horizontal retrieval).

**Anchors.** One vocabulary (string -> id) holds text anchors (spaCy entity / noun-chunk keys) and visual
anchors (perception labels, "value label"), both normalised with ``c3m.models.anchors.anchor_key``, so a text
"dog" and a visual "dog" are the same id: the kernels' ``canonical`` map is the identity. ``visual=False``
drops the visual anchor lists at ``add`` time (they never enter the vocabulary, the graph or expansion).

**IDF** (document = episode, N = episodes so far): the project's ``c3m.index.active.idf``,
``idf(a) = log((2 + N) / (1 + min(df(a), N)))`` — no +1, so an anchor in most episodes weighs almost nothing,
and the phantom episode keeps every weight > 0 in a young graph. ``use_idf=False`` sets every idf to 1 (edge
weight = number of shared anchors).

**Edges.** weight(e, n) = sum of idf(a) over the anchors e and n share (rounded to 4 decimals, in memory and
in the snapshot alike, so a reloaded graph behaves identically). Two steps:

1. *Candidates* — each episode keeps a directed list of its ``k_edge`` heaviest partners (ties: lower id
   first), exactly what ``build_anchor_graph`` returns.
2. *Undirected graph* — the union of the candidate lists (an edge listed by either side), then capped by
   weight with a greedy pass: candidate pairs sorted by descending weight (ties: lower (i, j) first) are
   accepted while *both* ends have fewer than ``k_edge`` edges. Every edge is listed by both ends and no
   episode has more than ``k_edge``.

**Refresh.** ``add`` (one session's episodes) extends the vocabulary and document frequencies, then computes
the new episodes' weights to every episode with the *current* IDF (posting-list walk in numpy: the
new x all block is exact, and it also offers each new episode to the old episodes' candidate lists); old
candidate weights are left as computed (IDF drift). When N has grown by >= ``rebuild_growth`` (25%) since
the last full rebuild, every candidate list is recomputed with ``build_anchor_graph`` on the whole CSR
(the first ``add`` is a rebuild). ``stats()`` reports the rebuild count and per-session seconds.

**Expansion.** ``expand(seeds, sim, k_exp)`` scores the seeds' graph neighbours (one hop, seeds excluded) with
``anchor_scores``: score(n) = sum over anchors n shares with the seeds of idf(a) * sim(q, a). The kernel
scores *every* episode sharing an anchor with a seed, so it is called on the sub-problem made of the seeds and
their graph neighbours only (local ids, local anchor ids): candidates are exactly the one-hop neighbours.

**Device.** ``device`` (an attribute, not part of the state; default ``"cpu"``) is where the rebuild
(``build_anchor_graph``) and the expansion (``anchor_scores``) run; the owning method sets it to its memory's
device. ``c3m_kernels.dispatch.placement`` decides: numpy and the CPU kernels on "cpu" (the weights and orders
above, exactly), torch tensors and Triton on CUDA (fp32 sums: scores equal in exact arithmetic may round apart, and
a candidate tied at the ``k_edge``-th place may differ). The incremental ``add`` step is numpy either way.
"""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np

#: rounding of edge weights (memory and snapshot alike)
WEIGHT_DECIMALS = 4
REBUILD_GROWTH = 0.25
STATE_VERSION = 1


def idf_vector(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Vectorised ``c3m.index.active.idf``: log((2 + N) / (1 + min(df, N)))."""
    df = np.minimum(np.asarray(df, np.float64), n_docs)
    return np.log((2.0 + n_docs) / (1.0 + df))


class AnchorGraph:
    """The undirected episode graph over shared anchors (module docstring)."""

    #: where the kernels run (module docstring, "Device"): "cpu" or a CUDA device; set by the owning method
    device: str = "cpu"

    def __init__(self, k_edge: int = 4, *, use_idf: bool = True, visual: bool = True,
                 rebuild_growth: float = REBUILD_GROWTH, max_postings: int | None = None):
        if isinstance(k_edge, bool) or not isinstance(k_edge, int) or k_edge < 1:
            raise ValueError(f"k_edge must be an int >= 1, got {k_edge!r}")
        if not rebuild_growth > 0:
            raise ValueError(f"rebuild_growth must be > 0, got {rebuild_growth!r}")
        self.k_edge, self.use_idf, self.visual = k_edge, bool(use_idf), bool(visual)
        self.rebuild_growth = float(rebuild_growth)
        self.max_postings = max_postings
        self.keys: list[str] = []
        self.vocab: dict[str, int] = {}
        self.ep_anchors: list[np.ndarray] = []
        self.postings: list[list[int]] = []
        self.df = np.zeros(0, np.int64)
        self.out: list[list[tuple[int, float]]] = []     # directed candidate lists
        self.edges: list[list[tuple[int, float]]] = []   # the undirected graph (derived from ``out``)
        self.n_at_rebuild = 0
        self.rebuilds = 0
        self.session_seconds: list[float] = []           # this process only (not in the snapshot)
        self.rebuild_seconds: list[float] = []

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        return len(self.ep_anchors)

    @property
    def num_anchors(self) -> int:
        return len(self.keys)

    def num_edges(self) -> int:
        return sum(len(r) for r in self.edges) // 2

    def idf(self) -> np.ndarray:
        """[A] weights under the current N (all ones with ``use_idf=False``)."""
        if not self.use_idf:
            return np.ones(self.num_anchors, np.float64)
        return idf_vector(self.df, self.num_episodes)

    def anchor_ids(self, episode: int) -> np.ndarray:
        return self.ep_anchors[episode]

    def anchors_of(self, episode: int) -> list[str]:
        return [self.keys[a] for a in self.ep_anchors[episode]]

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        indptr = np.zeros(self.num_episodes + 1, np.int64)
        np.cumsum([len(a) for a in self.ep_anchors], out=indptr[1:])
        anchors = np.concatenate(self.ep_anchors) if self.ep_anchors else np.zeros(0, np.int64)
        return indptr, anchors.astype(np.int64)

    def neighbours(self, episode: int) -> list[tuple[int, float]]:
        return list(self.edges[episode])

    def weight(self, e: int, n: int) -> float:
        """The current-IDF weight between two episodes (not necessarily the stored edge weight)."""
        shared = np.intersect1d(self.ep_anchors[e], self.ep_anchors[n], assume_unique=True)
        return round(float(self.idf()[shared].sum()), WEIGHT_DECIMALS)

    # -- write ---------------------------------------------------------------------------------
    def _intern(self, keys: Sequence[str]) -> np.ndarray:
        ids = []
        for k in dict.fromkeys(k for k in keys if k):
            a = self.vocab.get(k)
            if a is None:
                a = self.vocab[k] = len(self.keys)
                self.keys.append(k)
                self.postings.append([])
            ids.append(a)
        return np.array(sorted(ids), np.int64)

    def add(self, text_anchors: Sequence[Sequence[str]],
            visual_anchors: Sequence[Sequence[str]] | None = None) -> list[int]:
        """Add one session's episodes (per episode: its text anchor keys, and its visual anchor keys);
        returns their episode ids (0-based, in order)."""
        if visual_anchors is not None and len(visual_anchors) != len(text_anchors):
            raise ValueError("text_anchors and visual_anchors must have one list per episode")
        if not text_anchors:
            return []
        t0 = time.perf_counter()
        new = []
        for i, text in enumerate(text_anchors):
            keys = list(text) + (list(visual_anchors[i]) if visual_anchors is not None and self.visual else [])
            ids = self._intern(keys)
            e = len(self.ep_anchors)
            self.ep_anchors.append(ids)
            for a in ids:
                self.postings[a].append(e)
            self.out.append([])
            new.append(e)
        self.df = np.array([len(p) for p in self.postings], np.int64)
        n = self.num_episodes
        if n >= self.n_at_rebuild * (1.0 + self.rebuild_growth):
            self._rebuild()
        else:
            self._link(new)
        self._undirect()
        self.session_seconds.append(time.perf_counter() - t0)
        return new

    def _row(self, e: int, idf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(partners, weights) of episode ``e`` with every episode it shares an anchor with (not itself)."""
        anchors = self.ep_anchors[e]
        if not len(anchors):
            return np.zeros(0, np.int64), np.zeros(0)
        lists = [self.postings[a] for a in anchors]
        eps = np.fromiter((x for p in lists for x in p), np.int64, sum(len(p) for p in lists))
        ws = np.repeat(idf[anchors], [len(p) for p in lists])
        partners, inv = np.unique(eps, return_inverse=True)
        weights = np.round(np.bincount(inv, weights=ws, minlength=len(partners)), WEIGHT_DECIMALS)
        keep = partners != e
        return partners[keep], weights[keep]

    def _top(self, partners: np.ndarray, weights: np.ndarray) -> list[tuple[int, float]]:
        order = np.lexsort((partners, -weights))[: self.k_edge]
        return [(int(partners[i]), float(weights[i])) for i in order]

    def _link(self, new: list[int]) -> None:
        """Incremental step: exact rows for the new episodes, offered to the old episodes' lists."""
        if self.max_postings is not None:  # stop-anchors: keep the incremental rows consistent with rebuilds
            idf = self.idf() * (self.df <= self.max_postings)
        else:
            idf = self.idf()
        fresh = set(new)
        for e in new:
            partners, weights = self._row(e, idf)
            self.out[e] = self._top(partners, weights)
            for p, w in zip(partners.tolist(), weights.tolist()):
                if p in fresh:
                    continue  # its own fresh row already weighed this pair
                row = self.out[p]
                if len(row) >= self.k_edge and (w, -e) <= (row[-1][1], -row[-1][0]):
                    continue
                row.append((e, w))
                row.sort(key=lambda x: (-x[1], x[0]))
                del row[self.k_edge:]

    def rebuild(self) -> None:
        """Recompute every edge with the current IDF now (``add`` does this by itself on 25% growth)."""
        self._rebuild()
        self._undirect()

    def _rebuild(self) -> None:
        """Every candidate list recomputed with the current IDF by ``build_anchor_graph`` (whole CSR)."""
        from c3m_kernels.anchor_scores import build_anchor_graph
        from c3m_kernels.dispatch import placement

        t0 = time.perf_counter()
        indptr, anchors = self.csr()
        at = placement(self.device, "build_anchor_graph")
        gp, nb, w = build_anchor_graph(indptr, anchors, self.idf(), self.k_edge, max_postings=self.max_postings,
                                       device=at.device if at.tensors else None)
        w = np.round(w, WEIGHT_DECIMALS)
        for e in range(self.num_episodes):
            lo, hi = int(gp[e]), int(gp[e + 1])
            self.out[e] = sorted(((int(n), float(x)) for n, x in zip(nb[lo:hi], w[lo:hi])),
                                 key=lambda x: (-x[1], x[0]))
        self.n_at_rebuild = self.num_episodes
        self.rebuilds += 1
        self.rebuild_seconds.append(time.perf_counter() - t0)

    def _undirect(self) -> None:
        """Union of the candidate lists, capped greedily by weight (module docstring, step 2)."""
        pairs: dict[tuple[int, int], float] = {}
        for e, row in enumerate(self.out):
            for n, w in row:
                key = (e, n) if e < n else (n, e)
                pairs[key] = max(w, pairs.get(key, -math.inf))
        deg = [0] * self.num_episodes
        edges: list[list[tuple[int, float]]] = [[] for _ in range(self.num_episodes)]
        for (i, j), w in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0])):
            if deg[i] < self.k_edge and deg[j] < self.k_edge:
                deg[i] += 1
                deg[j] += 1
                edges[i].append((j, w))
                edges[j].append((i, w))
        for row in edges:
            row.sort(key=lambda x: (-x[1], x[0]))
        self.edges = edges

    # -- read ----------------------------------------------------------------------------------
    def expand(self, seeds: Sequence[int], sim: np.ndarray, k_exp: int) -> list[tuple[int, float]]:
        """Top ``k_exp`` one-hop graph neighbours of ``seeds`` (never a seed), by
        sum over anchors shared with the seeds of idf(a) * sim[a]; ties: lower episode id first.
        ``sim`` is the ``[A]`` query-anchor similarity (only the seeds' anchors are read)."""
        from c3m_kernels.anchor_scores import anchor_scores
        from c3m_kernels.dispatch import placement

        seeds = list(dict.fromkeys(int(s) for s in seeds if 0 <= int(s) < self.num_episodes))
        sim = np.asarray(sim, np.float64)
        if sim.shape != (self.num_anchors,):
            raise ValueError(f"sim must be [A={self.num_anchors}], got {list(sim.shape)}")
        seed_set = set(seeds)
        nbrs = sorted({n for s in seeds for n, _ in self.edges[s]} - seed_set)
        if k_exp <= 0 or not nbrs:
            return []
        local = seeds + nbrs
        a_local = np.unique(np.concatenate([self.ep_anchors[e] for e in local]))
        remap = {int(a): i for i, a in enumerate(a_local)}
        indptr = np.zeros(len(local) + 1, np.int64)
        np.cumsum([len(self.ep_anchors[e]) for e in local], out=indptr[1:])
        anchors = np.array([remap[int(a)] for e in local for a in self.ep_anchors[e]], np.int64)
        idf = self.idf()[a_local]
        at = placement(self.device, "anchor_scores")
        scores, eps = at.host(anchor_scores(indptr, anchors, idf, at.put(sim[a_local][None, :]),
                                            at.put(np.arange(len(seeds), dtype=np.int64)[None, :]), len(nbrs)))
        got = [(local[int(i)], float(s)) for s, i in zip(scores[0], eps[0]) if i >= 0]
        assert all(e not in seed_set for e, _ in got), "anchor_scores returned a seed"
        got.sort(key=lambda x: (-x[1], x[0]))
        return got[:k_exp]

    # -- state ---------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        secs = self.session_seconds
        return {"episodes": self.num_episodes, "anchors": self.num_anchors, "edges": self.num_edges(),
                "rebuilds": self.rebuilds, "sessions_timed": len(secs),
                "seconds_per_session": round(sum(secs) / len(secs), 6) if secs else None,
                "seconds_max": round(max(secs), 6) if secs else None,
                "rebuild_seconds": round(sum(self.rebuild_seconds), 6)}

    def state(self) -> dict[str, Any]:
        """Plain, compact JSON: anchor strings, per-episode anchor ids, candidate lists as flat
        [n, w, n, w, ...] rows; document frequencies, postings and the undirected edges are derived."""
        return {"v": STATE_VERSION, "k_edge": self.k_edge, "idf": self.use_idf, "visual": self.visual,
                "growth": self.rebuild_growth, "max_postings": self.max_postings, "keys": self.keys,
                "eps": [a.tolist() for a in self.ep_anchors],
                "out": [[x for n, w in row for x in (n, w)] for row in self.out],
                "n_at_rebuild": self.n_at_rebuild, "rebuilds": self.rebuilds}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "AnchorGraph":
        if state.get("v") != STATE_VERSION:
            raise ValueError(f"unknown anchor-graph state version {state.get('v')!r}")
        g = cls(int(state["k_edge"]), use_idf=bool(state["idf"]), visual=bool(state["visual"]),
                rebuild_growth=float(state["growth"]), max_postings=state.get("max_postings"))
        g.keys = list(state["keys"])
        g.vocab = {k: i for i, k in enumerate(g.keys)}
        g.postings = [[] for _ in g.keys]
        for e, ids in enumerate(state["eps"]):
            arr = np.array(ids, np.int64)
            g.ep_anchors.append(arr)
            for a in ids:
                g.postings[a].append(e)
        g.df = np.array([len(p) for p in g.postings], np.int64)
        g.out = [[(int(r[i]), float(r[i + 1])) for i in range(0, len(r), 2)] for r in state["out"]]
        g.n_at_rebuild, g.rebuilds = int(state["n_at_rebuild"]), int(state["rebuilds"])
        g._undirect()
        return g


__all__ = ["AnchorGraph", "REBUILD_GROWTH", "idf_vector"]
