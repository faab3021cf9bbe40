"""Triton path for anchor scoring and the anchor graph: posting-list scatter with atomics.

Why this shape on a GPU: the work is a sparse scatter (every (query, anchor) pair adds
``idf(a)·sim(q, a)`` to each episode on the anchor's posting list). One program per (row, anchor)
pair streams that posting list in BLOCK-sized vector loads and ``tl.atomic_add``s into a dense
``[rows, E]`` fp32 scratch (plus a "touched" flag, since weights may be zero or negative); the final
top-k per row is a masked ``torch.topk``. The dense scratch costs ``rows·E·5`` bytes, which is small
on a GPU (256 queries × 1M episodes = 1.3 GB; rows are processed in chunks to cap it).

Anchors shared by several seeds of one query are de-duplicated on the host first (np.unique on
(query, anchor) pairs), so each counts once, as in the CPU path. fp32 atomics make the summation
order nondeterministic: scores agree with the CPU path to fp32 rounding. Within a row, equal fp32
scores come lower episode id first (as on the CPU); scores equal in exact arithmetic may still differ
in their last fp32 bit and swap, and a tie at the k-th place may keep either episode.
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

#: scratch budget (elements of the rows x E buffer) per launch
MAX_SCRATCH = 1 << 28


@triton.jit
def _scatter_kernel(pair_row_ptr, pair_anchor_ptr, pair_w_ptr, pair_self_ptr, an_indptr_ptr,
                    an_eps_ptr, scratch_ptr, touched_ptr, E, max_postings, BLOCK: tl.constexpr):
    p = tl.program_id(0)
    row = tl.load(pair_row_ptr + p).to(tl.int64)
    a = tl.load(pair_anchor_ptr + p)
    w = tl.load(pair_w_ptr + p)
    me = tl.load(pair_self_ptr + p)  # episode to skip (graph: the row itself), -1 = none
    lo = tl.load(an_indptr_ptr + a)
    hi = tl.load(an_indptr_ptr + a + 1)
    if (max_postings <= 0) | (hi - lo <= max_postings):
        for start in range(lo, hi, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            ok = offs < hi
            n = tl.load(an_eps_ptr + offs, mask=ok, other=0)
            ok = ok & (n != me)
            dst = row * E + n
            tl.atomic_add(scratch_ptr + dst, tl.zeros([BLOCK], tl.float32) + w, mask=ok)
            tl.store(touched_ptr + dst, tl.full([BLOCK], 1, tl.int8), mask=ok)


def _scatter_topk(rows, anchors, weights, selfs, index, n_rows, k, device, max_postings=0,
                  exclude=None):
    """Scatter the (row, anchor, weight) pairs, then top-k per row. Returns torch (scores, ids)."""
    import torch

    E = index.num_episodes
    BLOCK = 128 if device != "cpu" else 32
    scratch = torch.zeros((n_rows, E), dtype=torch.float32, device=device)
    touched = torch.zeros((n_rows, E), dtype=torch.int8, device=device)
    if len(rows):
        def t(x, dt):
            return torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=dt)

        _scatter_kernel[(len(rows),)](
            t(rows, torch.int64), t(anchors, torch.int64), t(weights, torch.float32),
            t(selfs, torch.int64), t(index.an_indptr, torch.int64), t(index.an_episodes, torch.int64),
            scratch, touched, E, int(max_postings or 0), BLOCK=BLOCK)
    if exclude is not None:
        touched[exclude] = 0
    scores = torch.where(touched != 0, scratch, torch.tensor(float("-inf"), device=device))
    kk = min(k, E)
    out_s = torch.full((n_rows, k), float("-inf"), dtype=torch.float64, device=device)
    out_i = torch.full((n_rows, k), -1, dtype=torch.int64, device=device)
    if kk:
        ts, ti = torch.topk(scores, kk, dim=1)
        # equal scores: lower episode id first, the CPU kernels' order (topk leaves ties in any order)
        ti, perm = torch.sort(ti, dim=1, stable=True)
        ts, perm = torch.sort(torch.gather(ts, 1, perm), dim=1, descending=True, stable=True)
        ti = torch.gather(ti, 1, perm)
        ti[torch.isneginf(ts)] = -1
        out_s[:, :kk] = ts.double()
        out_i[:, :kk] = ti
    return out_s, out_i


def expand_triton(index, idf, sim, seeds, k, device):
    """Triton version of :func:`..cpu.expand_cpu` (numpy in, torch out on ``device``)."""
    import torch

    B, S = seeds.shape
    A = index.num_anchors
    E = index.num_episodes
    if B == 0 or k == 0 or E == 0:
        return (torch.full((B, k), float("-inf"), dtype=torch.float64, device=device),
                torch.full((B, k), -1, dtype=torch.int64, device=device))
    # unique (query, anchor) pairs over the seeds' anchors
    qb, sj = np.nonzero(seeds >= 0)
    sd = seeds[qb, sj]
    lens = index.ep_indptr[sd + 1] - index.ep_indptr[sd]
    q_rep = np.repeat(qb, lens)
    starts = np.repeat(index.ep_indptr[sd], lens)
    within = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
    an = index.ep_anchors[starts + within]
    key = np.unique(q_rep.astype(np.int64) * A + an)
    rows, anchors = key // A, key % A
    weights = idf[anchors] * sim[rows, anchors]
    outs_s, outs_i = [], []
    chunk = max(1, MAX_SCRATCH // max(E, 1))
    for lo in range(0, B, chunk):
        hi = min(B, lo + chunk)
        sel = (rows >= lo) & (rows < hi)
        ex_b, ex_j = np.nonzero(seeds[lo:hi] >= 0)
        exclude = (torch.from_numpy(ex_b).to(device),
                   torch.from_numpy(seeds[lo:hi][ex_b, ex_j]).to(device))
        s, i = _scatter_topk(rows[sel] - lo, anchors[sel], weights[sel],
                             np.full(int(sel.sum()), -1), index, hi - lo, k, device,
                             exclude=exclude)
        outs_s.append(s)
        outs_i.append(i)
    return torch.cat(outs_s), torch.cat(outs_i)


def graph_triton(index, idf, k_edge, max_postings, device):
    """Triton version of :func:`..cpu.graph_cpu`: dense ``[E, k_edge]`` (weights, ids) as numpy."""
    E = index.num_episodes
    out_w = np.full((E, k_edge), -np.inf)
    out_n = np.full((E, k_edge), -1, np.int64)
    if E == 0 or k_edge == 0:
        return out_w, out_n
    ep_of = np.repeat(np.arange(E, dtype=np.int64), np.diff(index.ep_indptr))
    chunk = max(1, MAX_SCRATCH // E)
    for lo in range(0, E, chunk):
        hi = min(E, lo + chunk)
        p_lo, p_hi = index.ep_indptr[lo], index.ep_indptr[hi]
        rows = ep_of[p_lo:p_hi]
        anchors = index.ep_anchors[p_lo:p_hi]
        s, i = _scatter_topk(rows - lo, anchors, idf[anchors], rows, index, hi - lo, k_edge,
                             device, max_postings=max_postings)
        out_w[lo:hi] = s.cpu().numpy()
        out_n[lo:hi] = i.cpu().numpy()
    return out_w, out_n
