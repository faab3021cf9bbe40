"""numba kernels for anchor scoring and the anchor graph (parallel, sparse accumulators).

Both walk anchor posting lists (anchor -> episodes) instead of multiplying sparse matrices: a query
touches only the anchors of its seeds and, through them, only the episodes that share one, so the
work is the number of (anchor, episode) postings visited, with no B x E or E x E intermediate. Each
parallel chunk owns one dense accumulator + "touched" list, reset after every row.
"""
from __future__ import annotations

import numpy as np

from .._compat import njit, prange, twin
from .._rows import sort_row as _sort_row


@njit(inline="always")
def _select_row(tlist, nt, acc, touched, out_s, out_i, row, k):  # pragma: no cover - numba
    """Top-k of ``acc[tlist[:nt]]`` into ``out_s/out_i[row]`` (sorted), resetting ``touched``.

    A candidate is compared with the current k-th best first; the O(k) min search runs only after a
    replacement. Ties: lower episode id wins (eviction removes the largest id among the minima).
    """
    cnt = 0
    mp = 0
    for t in range(nt):
        n = tlist[t]
        touched[n] = 0
        val = acc[n]
        if cnt < k:
            out_s[row, cnt] = val
            out_i[row, cnt] = n
            cnt += 1
            if cnt < k:
                continue
        elif val > out_s[row, mp] or (val == out_s[row, mp] and n < out_i[row, mp]):
            out_s[row, mp] = val
            out_i[row, mp] = n
        else:
            continue
        mp = 0
        for u in range(1, k):
            if out_s[row, u] < out_s[row, mp] or (out_s[row, u] == out_s[row, mp]
                                                  and out_i[row, u] > out_i[row, mp]):
                mp = u
    return cnt


def _expand_body(ep_indptr, ep_anchors, an_indptr, an_episodes, idf, sim, seeds, k,
                   n_chunks, out_s, out_i):  # pragma: no cover - numba
    B = seeds.shape[0]
    S = seeds.shape[1]
    E = ep_indptr.shape[0] - 1
    A = an_indptr.shape[0] - 1
    per = (B + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        acc = np.zeros(E, np.float64)
        touched = np.zeros(E, np.uint8)
        is_seed = np.zeros(E, np.uint8)
        amark = np.zeros(A, np.uint8)
        tlist = np.empty(E, np.int64)
        alist = np.empty(A, np.int64)
        for b in range(c * per, min(B, (c + 1) * per)):
            for j in range(S):
                s = seeds[b, j]
                if s >= 0:
                    is_seed[s] = 1
            na = 0
            for j in range(S):
                s = seeds[b, j]
                if s < 0:
                    continue
                for p in range(ep_indptr[s], ep_indptr[s + 1]):
                    a = ep_anchors[p]
                    if amark[a] == 0:
                        amark[a] = 1
                        alist[na] = a
                        na += 1
            nt = 0
            for t in range(na):
                a = alist[t]
                wa = idf[a] * sim[b, a]
                for p in range(an_indptr[a], an_indptr[a + 1]):
                    n = an_episodes[p]
                    if is_seed[n] == 1:
                        continue
                    if touched[n] == 0:
                        touched[n] = 1
                        acc[n] = 0.0
                        tlist[nt] = n
                        nt += 1
                    acc[n] += wa
            cnt = _select_row(tlist, nt, acc, touched, out_s, out_i, b, k)
            _sort_row(out_s, out_i, b, cnt)
            for t in range(na):
                amark[alist[t]] = 0
            for j in range(S):
                s = seeds[b, j]
                if s >= 0:
                    is_seed[s] = 0


def _graph_body(ep_indptr, ep_anchors, an_indptr, an_episodes, idf, max_postings, k,
                  n_chunks, out_w, out_n):  # pragma: no cover - numba
    E = ep_indptr.shape[0] - 1
    per = (E + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        acc = np.zeros(E, np.float64)
        touched = np.zeros(E, np.uint8)
        tlist = np.empty(E, np.int64)
        for e in range(c * per, min(E, (c + 1) * per)):
            nt = 0
            for p in range(ep_indptr[e], ep_indptr[e + 1]):
                a = ep_anchors[p]
                lo = an_indptr[a]
                hi = an_indptr[a + 1]
                if max_postings > 0 and hi - lo > max_postings:
                    continue
                w = idf[a]
                for q in range(lo, hi):
                    n = an_episodes[q]
                    if n == e:
                        continue
                    if touched[n] == 0:
                        touched[n] = 1
                        acc[n] = 0.0
                        tlist[nt] = n
                        nt += 1
                    acc[n] += w
            cnt = _select_row(tlist, nt, acc, touched, out_w, out_n, e, k)
            _sort_row(out_w, out_n, e, cnt)


#: each kernel parallel over row chunks, and the same kernel on the calling thread for small inputs: waking the
#: thread pool costs more than an index of a few dozen entries (c3m's) takes to scan, and far more when the other
#: cores are busy (the same finding as ``candidate_topk``'s serial scan)
_expand_kernel = njit(parallel=True)(twin(_expand_body, "_expand_kernel"))
_expand_serial = njit(twin(_expand_body, "_expand_serial"))
_graph_kernel = njit(parallel=True)(twin(_graph_body, "_graph_kernel"))
_graph_serial = njit(twin(_graph_body, "_graph_serial"))
#: postings (x queries) below which a kernel runs serially
SERIAL_POSTINGS = 1 << 16


def _chunks(rows: int) -> int:
    import os

    return max(1, min(rows, 8 * (os.cpu_count() or 1)))


def expand_cpu(index, idf, sim, seeds, k):
    """Top-``k`` non-seed one-hop neighbours per query; see :func:`c3m_kernels.anchor_scores.anchor_scores`."""
    B = seeds.shape[0]
    out_s = np.full((B, k), -np.inf, np.float64)
    out_i = np.full((B, k), -1, np.int64)
    if B == 0 or k == 0 or index.num_episodes == 0:
        return out_s, out_i
    small = B == 1 or B * len(index.ep_anchors) < SERIAL_POSTINGS
    (_expand_serial if small else _expand_kernel)(index.ep_indptr, index.ep_anchors, index.an_indptr, index.an_episodes,
                   np.ascontiguousarray(idf, np.float64), np.ascontiguousarray(sim, np.float64),
                   np.ascontiguousarray(seeds, np.int64), k, _chunks(B), out_s, out_i)
    out_i[np.isneginf(out_s)] = -1
    return out_s, out_i


def graph_cpu(index, idf, k_edge, max_postings):
    """Dense ``[E, k_edge]`` (weights, neighbours) padded with (-inf, -1)."""
    E = index.num_episodes
    out_w = np.full((E, k_edge), -np.inf, np.float64)
    out_n = np.full((E, k_edge), -1, np.int64)
    if E == 0 or k_edge == 0:
        return out_w, out_n
    small = len(index.an_episodes) * k_edge < SERIAL_POSTINGS
    (_graph_serial if small else _graph_kernel)(index.ep_indptr, index.ep_anchors, index.an_indptr, index.an_episodes,
                  np.ascontiguousarray(idf, np.float64), int(max_postings or 0), k_edge, _chunks(E),
                  out_w, out_n)
    return out_w, out_n
