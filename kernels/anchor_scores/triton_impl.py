"""Triton path for anchor scoring and the anchor graph: posting-list scatter with atomics.

Why this shape on a GPU: the work is a sparse scatter (every (query, anchor) pair adds
``idf(a)·sim(q, a)`` to each episode on the anchor's posting list). One program per (row, anchor)
pair streams that posting list in BLOCK-sized vector loads and ``tl.atomic_add``s into a dense
``[rows, E]`` fp32 scratch (plus a "touched" flag, since weights may be zero or negative); the final
top-k per row is a masked ``torch.topk``. The dense scratch costs ``rows·E·5`` bytes, which is small
on a GPU (256 queries × 1M episodes = 1.3 GB; rows are processed in chunks to cap it).

Anchors shared by several seeds of one query count once, as in the CPU path: the seeds' anchors are marked in a
``[rows, A]`` mask on the device and its nonzero (query, anchor) pairs, in (query, anchor) order, are the
programs. Everything runs on the queries' device; the index's CSR is uploaded once per index and device
(:meth:`.common.AnchorIndex.on_device`). fp32 atomics make the summation
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


def _scatter_topk(rows, anchors, weights, selfs, csr, n_rows, k, E, max_postings=0, exclude=None):
    """Scatter the (row, anchor, weight) pairs (tensors on ``csr``'s device), then top-k per row.

    ``exclude``: optional ``[n_rows, S]`` episode ids (-1 = none) that row may not return (its seeds).
    Returns torch (scores [n_rows, k] f64, ids [n_rows, k] i64) on that device."""
    import torch

    device = csr.an_indptr.device
    BLOCK = 128 if device.type != "cpu" else 32
    scratch = torch.zeros((n_rows, E), dtype=torch.float32, device=device)
    touched = torch.zeros((n_rows, E), dtype=torch.int8, device=device)
    if len(rows):
        _scatter_kernel[(len(rows),)](
            rows.to(torch.int64).contiguous(), anchors.to(torch.int64).contiguous(),
            weights.to(torch.float32).contiguous(), selfs.to(torch.int64).contiguous(), csr.an_indptr,
            csr.an_episodes, scratch, touched, E, int(max_postings or 0), BLOCK=BLOCK)
    if exclude is not None and exclude.shape[1]:
        hit = torch.zeros((n_rows, E + 1), dtype=torch.bool, device=device)  # column E: the -1 padding
        hit.scatter_(1, torch.where(exclude >= 0, exclude, E), True)
        touched.masked_fill_(hit[:, :E], 0)
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


def _seed_anchor_mask(csr, seeds, A):
    """``[B, A]`` bool: anchor a is carried by one of row b's seeds (-1 = padding), built on the seeds' device."""
    import torch

    B, S = seeds.shape
    mark = torch.zeros((B, A + 1), dtype=torch.bool, device=seeds.device)  # column A: padding lands here
    L = csr.max_len
    if L and S:
        sd = seeds.clamp_min(0)
        start = csr.ep_indptr[sd]
        length = torch.where(seeds >= 0, csr.ep_indptr[sd + 1] - start, 0)
        j = torch.arange(L, device=seeds.device)
        pos = (start[:, :, None] + j).clamp_max(csr.ep_anchors.shape[0] - 1)
        an = torch.where(j < length[:, :, None], csr.ep_anchors[pos], A)
        mark.scatter_(1, an.reshape(B, S * L), True)
    return mark[:, :A]


def expand_triton(index, idf, sim, seeds, k):
    """Triton version of :func:`..cpu.expand_cpu` on tensors on one device (``sim``'s): ``idf`` [A] f64,
    ``sim`` [B, A], ``seeds`` [B, S] int64 (validated). Returns torch (scores, ids) on that device."""
    import torch

    device = sim.device
    B, S = seeds.shape
    A = index.num_anchors
    E = index.num_episodes
    if B == 0 or k == 0 or E == 0:
        return (torch.full((B, k), float("-inf"), dtype=torch.float64, device=device),
                torch.full((B, k), -1, dtype=torch.int64, device=device))
    csr = index.on_device(device)
    mark = _seed_anchor_mask(csr, seeds, A)
    outs_s, outs_i = [], []
    chunk = max(1, MAX_SCRATCH // max(E, 1))
    for lo in range(0, B, chunk):
        hi = min(B, lo + chunk)
        rows, anchors = mark[lo:hi].nonzero(as_tuple=True)  # (query, anchor) order, each pair once
        weights = idf[anchors] * sim[rows + lo, anchors].to(torch.float64)
        s, i = _scatter_topk(rows, anchors, weights, torch.full_like(rows, -1), csr, hi - lo, k, E,
                             exclude=seeds[lo:hi])
        outs_s.append(s)
        outs_i.append(i)
    return torch.cat(outs_s), torch.cat(outs_i)


def graph_triton(index, idf, k_edge, max_postings, device):
    """Triton version of :func:`..cpu.graph_cpu`: dense ``[E, k_edge]`` (weights, ids) as numpy."""
    import torch

    from ..dispatch import record_transfer

    op = "build_anchor_graph"
    E = index.num_episodes
    out_w = np.full((E, k_edge), -np.inf)
    out_n = np.full((E, k_edge), -1, np.int64)
    if E == 0 or k_edge == 0:
        return out_w, out_n
    csr = index.on_device(device, op)
    ep_of = np.repeat(np.arange(E, dtype=np.int64), np.diff(index.ep_indptr))
    chunk = max(1, MAX_SCRATCH // E)
    for lo in range(0, E, chunk):
        hi = min(E, lo + chunk)
        p_lo, p_hi = index.ep_indptr[lo], index.ep_indptr[hi]
        rows = ep_of[p_lo:p_hi]
        anchors = index.ep_anchors[p_lo:p_hi]
        pairs = [torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in (rows - lo, anchors, idf[anchors], rows)]
        record_transfer(op, "upload", len(pairs))
        s, i = _scatter_topk(*pairs, csr, hi - lo, k_edge, E, max_postings=max_postings)
        record_transfer(op, "download", 2)
        out_w[lo:hi] = s.cpu().numpy()
        out_n[lo:hi] = i.cpu().numpy()
    return out_w, out_n
