"""CPU paths for ``candidate_topk``.

* Dense (every query searches the same keys), B > 4: blocked ``queries @ keys_block.T`` (BLAS sgemm)
  into an L2-sized buffer, then a numba threshold-select pass per block into running size-k buffers.
  The score matrix is only ever ``B x block`` large. Same strategy as faiss' ``IndexFlatIP``.
* Dense, B <= 4: the keys are cut into chunks and every (query, chunk) pair is streamed by the numba
  scan below, in parallel; the per-chunk lists are merged. Memory bound, all cores busy at B = 1.
* Ragged (per-query key ranges, the multi-tenant serving case): a numba kernel, parallel over queries,
  that streams each query's own key rows once, keeps a size-k min-buffer, and never materialises a
  score vector. With faiss one would need one index (and one Python call) per tenant.
* Everything here is numpy + numba (no torch needed); without numba the kernels run as plain
  Python (correct, slow).
"""
from __future__ import annotations

import numpy as np

from .._compat import njit, prange
from .._rows import sort_row

@njit(parallel=True, fastmath=True)
def _scan_topk(q, keys, starts, ends, mask, mask_mode, k, out_s, out_i):  # pragma: no cover - numba
    """Per-query streaming top-k. ``mask_mode``: 0 none, 1 mask[0, n], 2 mask[b, n].

    Ties: a later key replaces a buffered one only with a strictly larger score, and eviction picks
    the largest index among equal minima, so among equal scores lower indices win (deterministic).
    """
    B = q.shape[0]
    d = q.shape[1]
    for b in prange(B):
        lo = starts[b]
        hi = ends[b]
        cnt = 0
        minpos = 0
        minval = np.float32(0.0)
        row = np.int64(0)
        if mask_mode == 2:
            row = np.int64(b)
        for n in range(lo, hi):
            if mask_mode != 0 and mask[row, n] == 0:
                continue
            s = np.float32(0.0)
            for j in range(d):
                s += q[b, j] * keys[n, j]
            if cnt < k:
                out_s[b, cnt] = s
                out_i[b, cnt] = n
                cnt += 1
                if cnt == k:
                    minpos = 0
                    for t in range(1, k):
                        if out_s[b, t] < out_s[b, minpos] or (
                                out_s[b, t] == out_s[b, minpos] and out_i[b, t] > out_i[b, minpos]):
                            minpos = t
                    minval = out_s[b, minpos]
            elif s > minval:
                out_s[b, minpos] = s
                out_i[b, minpos] = n
                minpos = 0
                for t in range(1, k):
                    if out_s[b, t] < out_s[b, minpos] or (
                            out_s[b, t] == out_s[b, minpos] and out_i[b, t] > out_i[b, minpos]):
                        minpos = t
                minval = out_s[b, minpos]
        sort_row(out_s, out_i, b, cnt)  # score desc, index asc


def scan_topk_numpy(q: np.ndarray, keys: np.ndarray, k: int, starts: np.ndarray, ends: np.ndarray,
                    mask: np.ndarray | None = None):
    """Streaming top-k over per-query key ranges (numpy in, numpy out). See :func:`_scan_topk`."""
    B = q.shape[0]
    q = np.ascontiguousarray(q, dtype=np.float32)
    keys = np.ascontiguousarray(keys, dtype=np.float32)
    if keys.shape[0] == 0:
        keys = np.zeros((1, q.shape[1]), np.float32)  # numba needs a non-empty typed array
    out_s = np.full((B, k), -np.inf, dtype=np.float32)
    out_i = np.full((B, k), -1, dtype=np.int64)
    if k == 0 or B == 0:
        return out_s, out_i
    if mask is None:
        m, mode = np.zeros((1, 1), np.uint8), 0
    else:
        m = np.ascontiguousarray(mask, dtype=np.uint8)
        mode = 1 if m.ndim == 1 else 2
        m = m.reshape(1, -1) if m.ndim == 1 else m
    _scan_topk(q, keys, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64),
               m, mode, k, out_s, out_i)
    return out_s, out_i


@njit
def _block_select(S, base, mask, mask_mode, out_s, out_i, cnt, minpos):  # pragma: no cover - numba
    """Fold a score block ``S [B, n]`` (columns = key rows ``base + j``) into running top-k buffers.

    The buffers ``out_s/out_i [B, k]`` hold ``cnt[b]`` unsorted entries; ``minpos[b]`` is the slot of
    the current k-th best once full. Most scores fail the single ``s > min`` test, so this pass runs
    at memory speed over the (cache-resident) block. Same tie rule as :func:`_scan_topk`.
    Serial on purpose: torch's sgemm runs on its own bundled OpenMP runtime, and interleaving it
    block by block with numba's OpenMP pool made both spin against each other (measured 3x slower
    on 2 cores); the select pass is a small fraction of the sgemm time.
    """
    B = S.shape[0]
    n = S.shape[1]
    k = out_s.shape[1]
    for b in range(B):
        c = cnt[b]
        mp = minpos[b]
        row = np.int64(0)
        if mask_mode == 2:
            row = np.int64(b)
        for j in range(n):
            if mask_mode != 0 and mask[row, base + j] == 0:
                continue
            s = S[b, j]
            if c < k:
                out_s[b, c] = s
                out_i[b, c] = base + j
                c += 1
                if c == k:
                    mp = 0
                    for t in range(1, k):
                        if out_s[b, t] < out_s[b, mp] or (
                                out_s[b, t] == out_s[b, mp] and out_i[b, t] > out_i[b, mp]):
                            mp = t
            elif s > out_s[b, mp]:
                out_s[b, mp] = s
                out_i[b, mp] = base + j
                mp = 0
                for t in range(1, k):
                    if out_s[b, t] < out_s[b, mp] or (
                            out_s[b, t] == out_s[b, mp] and out_i[b, t] > out_i[b, mp]):
                        mp = t
        cnt[b] = c
        minpos[b] = mp


@njit
def _sort_rows(out_s, out_i, cnt):  # pragma: no cover - numba
    for b in range(out_s.shape[0]):
        sort_row(out_s, out_i, b, cnt[b])


def _matmul_into():
    """``f(q, kblock, out)`` writing ``q @ kblock.T`` into ``out``.

    torch's sgemm when torch is importable: measured here, numpy's OpenBLAS threads and numba's
    worker threads fight over the cores when interleaved block by block (4x slower on 2 cores).
    """
    try:
        import torch
    except ImportError:
        return lambda q, kb, out: np.matmul(q, kb.T, out=out)

    def mm(q, kb, out):
        torch.mm(torch.from_numpy(q), torch.from_numpy(kb).T, out=torch.from_numpy(out))

    return mm


#: below this many queries the dense path streams keys (parallel over key chunks) instead of sgemm
SCAN_MAX_B = 4
#: score-block elements for the sgemm path (B x block floats = 16 MiB; big enough for full-speed sgemm)
SELECT_BLOCK_ELEMS = 1 << 22


def dense_topk_numpy(q: np.ndarray, keys: np.ndarray, k: int, mask: np.ndarray | None = None,
                     threads: int | None = None):
    """Dense top-k on the CPU: the fast path for queries that all search the same keys.

    * ``B <= SCAN_MAX_B``: split the keys into chunks, stream each (query, chunk) pair with the
      numba scan in parallel, merge the per-chunk lists (memory bound, all cores busy even at B=1).
    * otherwise: blocked sgemm (numpy BLAS) into an L2-sized ``B x block`` buffer, then a numba
      threshold-select pass per block (the faiss IndexFlatIP strategy).
    """
    import os

    B, d = q.shape
    N = keys.shape[0]
    out_s = np.full((B, k), -np.inf, dtype=np.float32)
    out_i = np.full((B, k), -1, dtype=np.int64)
    if k == 0 or B == 0 or N == 0:
        return out_s, out_i
    q = np.ascontiguousarray(q, dtype=np.float32)
    keys = np.ascontiguousarray(keys, dtype=np.float32)
    if mask is None:
        m, mode = np.zeros((1, 1), np.uint8), 0
    else:
        m = np.ascontiguousarray(mask, dtype=np.uint8)
        mode = 1 if m.ndim == 1 else 2
        m = m.reshape(1, -1) if m.ndim == 1 else m
    if B <= SCAN_MAX_B:
        n_chunks = max(1, min(4 * (threads or os.cpu_count() or 1), N // max(4 * k, 4096)))
        bounds = np.linspace(0, N, n_chunks + 1).astype(np.int64)
        qq = np.repeat(q, n_chunks, axis=0)
        st = np.tile(bounds[:-1], B)
        en = np.tile(bounds[1:], B)
        mm = m
        if mode == 2:
            mm = np.repeat(m, n_chunks, axis=0)
        ps = np.full((B * n_chunks, k), -np.inf, np.float32)
        pi = np.full((B * n_chunks, k), -1, np.int64)
        _scan_topk(qq, keys, st, en, mm, mode, k, ps, pi)
        ps = ps.reshape(B, n_chunks * k)
        pi = pi.reshape(B, n_chunks * k)
        order = np.lexsort((pi, -ps), axis=-1)[:, :k]  # score desc, index asc
        kk = order.shape[1]
        out_s[:, :kk] = np.take_along_axis(ps, order, 1)
        out_i[:, :kk] = np.take_along_axis(pi, order, 1)
        out_i[np.isneginf(out_s)] = -1
        return out_s, out_i
    block = int(max(256, min(N, SELECT_BLOCK_ELEMS // B)))
    cnt = np.zeros(B, np.int64)
    minpos = np.zeros(B, np.int64)
    buf = np.empty((B, block), np.float32)
    mm = _matmul_into()
    for lo in range(0, N, block):
        hi = min(N, lo + block)
        S = buf if hi - lo == block else np.empty((B, hi - lo), np.float32)
        mm(q, keys[lo:hi], S)
        _block_select(S, lo, m, mode, out_s, out_i, cnt, minpos)
    _sort_rows(out_s, out_i, cnt)
    return out_s, out_i
