"""CPU paths for ``candidate_topk``.

* Dense (every query searches the same keys), B > SCAN_MAX_B (10): blocked
  ``keys_block @ queries.T`` (numpy's BLAS sgemm; keys-major because that layout ran 1.3-1.8x
  faster than ``queries @ keys_block.T`` here) into a ``BLOCK_ROWS x B`` buffer, then a numba
  strip-max prefilter + threshold select per block into running size-k buffers. The score matrix is
  only ever ``block x B`` large. faiss' ``IndexFlatIP`` strategy.
* Dense, B <= SCAN_MAX_B (10): the keys are cut into chunks streamed in parallel; within a chunk every
  query scans each 64-row tile while it is cache-resident, so DRAM is read once for all queries.
  The per-chunk lists are merged. Memory bound at small B, all cores busy at B = 1.
* Ragged (per-query key ranges, the multi-tenant serving case): a numba kernel, parallel over queries,
  that streams each query's own key rows once, keeps a size-k min-buffer, and never materialises a
  score vector. With faiss one would need one index (and one Python call) per tenant.
* Everything here is numpy + numba (no torch needed); without numba the kernels run as plain
  Python (correct, slow).
"""
from __future__ import annotations

import numpy as np

from .._compat import njit, prange, twin
from .._rows import sort_row

#: fastmath without the no-NaN / no-Inf assumptions: the running thresholds start at -inf
FINITE_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


@njit(inline="always")
def _offer(out_s, out_i, row, cnt, minpos, thr, b, s, n):  # pragma: no cover - numba
    """Offer score ``s`` of key row ``n`` to a running top-k buffer, row ``row`` of ``out_s/out_i``,
    whose state is slot ``b`` of ``cnt/minpos/thr``.

    The buffer holds ``cnt[b]`` unsorted entries; once full, ``minpos[b]`` is the slot of the current
    k-th best and ``thr[b]`` its score. The tie rule of every CPU path lives here: a later key needs a
    strictly larger score, eviction takes the largest index among equal minima, so among equal
    scores lower indices win.
    """
    k = out_s.shape[1]
    c = cnt[b]
    if c < k:
        out_s[row, c] = s
        out_i[row, c] = n
        cnt[b] = c + 1
        if c + 1 < k:
            return
    elif s > thr[b]:
        out_s[row, minpos[b]] = s
        out_i[row, minpos[b]] = n
    else:
        return
    mp = 0
    for t in range(1, k):
        if out_s[row, t] < out_s[row, mp] or (
                out_s[row, t] == out_s[row, mp] and out_i[row, t] > out_i[row, mp]):
            mp = t
    minpos[b] = mp
    thr[b] = out_s[row, mp]


def _scan_topk_body(q, keys, starts, ends, mask, mask_mode, k, out_s, out_i):  # pragma: no cover - numba
    """Per-query streaming top-k. ``mask_mode``: 0 none, 1 mask[0, n], 2 mask[b, n].

    Ties as in :func:`_offer`: among equal scores lower indices win (deterministic).
    """
    B = q.shape[0]
    d = q.shape[1]
    cnt = np.zeros(B, np.int64)  # per-query buffer state; query b touches only slot b
    minpos = np.zeros(B, np.int64)
    thr = np.full(B, -np.inf, np.float32)
    for b in prange(B):
        row = np.int64(b) if mask_mode == 2 else np.int64(0)
        for n in range(starts[b], ends[b]):
            if mask_mode != 0 and mask[row, n] == 0:
                continue
            s = np.float32(0.0)
            for j in range(d):
                s += q[b, j] * keys[n, j]
            if cnt[b] < k or s > thr[b]:
                _offer(out_s, out_i, b, cnt, minpos, thr, b, s, n)
        sort_row(out_s, out_i, b, cnt[b])  # score desc, index asc


#: the scan parallel over queries, and the same scan on the calling thread: waking the thread pool for one
#: query or a few thousand keys costs more than the scan (0.12 ms serial vs 20 ms parallel for one query over
#: 1,650 keys with the other core busy, measured), and a service's per-question read is exactly that shape
_scan_topk = njit(parallel=True, fastmath=FINITE_FASTMATH)(twin(_scan_topk_body, "_scan_topk"))
_scan_topk_serial = njit(fastmath=FINITE_FASTMATH)(twin(_scan_topk_body, "_scan_topk_serial"))
#: multiply-adds below which the ragged scan runs serially
SERIAL_SCAN_WORK = 1 << 21


def _mask_arg(mask):
    """``(mask as uint8 [1 or B, N], mode)`` for the numba kernels: mode 0 none, 1 one row shared by
    every query, 2 one row per query. numba needs a typed array even without a mask."""
    if mask is None:
        return np.zeros((1, 1), np.uint8), 0
    m = np.ascontiguousarray(mask, dtype=np.uint8)
    return (m.reshape(1, -1), 1) if m.ndim == 1 else (m, 2)


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
    m, mode = _mask_arg(mask)
    starts, ends = np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64)
    work = int(np.maximum(ends - starts, 0).sum()) * q.shape[1]
    kernel = _scan_topk_serial if B == 1 or work < SERIAL_SCAN_WORK else _scan_topk
    kernel(q, keys, starts, ends, m, mode, k, out_s, out_i)
    return out_s, out_i


#: key rows per tile in :func:`_tiled_scan` (96 KiB at d=384: stays in L2 while every query reads it)
TILE_ROWS = 64


@njit(parallel=True, fastmath=FINITE_FASTMATH)
def _tiled_scan(q, keys, bounds, mask, mask_mode, k, ps, pi):  # pragma: no cover - numba
    """Dense top-k for a few queries: parallel over key chunks ``bounds[c]:bounds[c+1]``; inside a
    chunk, tile by tile, every query scans the tile while it is in L2, so DRAM is read once for all
    B queries (the per-query scan re-read it B times: 1.6x slower at B=4, measured). Partial lists
    go to ``ps/pi[b * C + c]``; the caller merges them."""
    B = q.shape[0]
    d = q.shape[1]
    C = bounds.shape[0] - 1
    for c in prange(C):
        cnt = np.zeros(B, np.int64)
        minpos = np.zeros(B, np.int64)
        thr = np.full(B, -np.inf, np.float32)
        for r0 in range(bounds[c], bounds[c + 1], TILE_ROWS):
            r1 = min(bounds[c + 1], r0 + TILE_ROWS)
            for b in range(B):
                mrow = np.int64(b) if mask_mode == 2 else np.int64(0)
                for n in range(r0, r1):
                    if mask_mode != 0 and mask[mrow, n] == 0:
                        continue
                    s = np.float32(0.0)
                    for j in range(d):
                        s += q[b, j] * keys[n, j]
                    if cnt[b] < k or s > thr[b]:
                        _offer(ps, pi, b * C + c, cnt, minpos, thr, b, s, n)


#: rows per max-prefilter strip in :func:`_block_select` (measured: 16 and 64 within 5%)
STRIP_ROWS = 16


@njit(fastmath=FINITE_FASTMATH)
def _block_select(S, base, mask, mask_mode, out_s, out_i, cnt, minpos, thr):  # pragma: no cover
    """Fold a keys-major score block ``S [n, B]`` (row j = key row ``base + j``) into the buffers.

    Two passes per strip of ``STRIP_ROWS`` key rows: a branch-free running max per query over the
    strip (contiguous, SIMD), then a scalar scan of only those queries whose strip max beats their
    k-th best. Once the thresholds settle almost no strip passes, so selection costs one vectorised
    read of the (cache-resident) block instead of B·n compare-and-branch steps (measured at B=256,
    k=10 on 2 cores: selection overhead 240 ms → 60 ms per 1M keys).
    Serial on purpose: BLAS worker threads spin between calls, and a parallel numba pass
    interleaved block by block with them ran 2-3x slower on 2 cores (measured).
    """
    n = S.shape[0]
    B = S.shape[1]
    k = out_s.shape[1]
    mx = np.empty(B, np.float32)
    for j0 in range(0, n, STRIP_ROWS):
        j1 = min(n, j0 + STRIP_ROWS)
        for b in range(B):
            mx[b] = S[j0, b]
        for j in range(j0 + 1, j1):
            for b in range(B):
                v = S[j, b]
                mx[b] = v if v > mx[b] else mx[b]
        for b in range(B):
            if mx[b] > thr[b] or cnt[b] < k:
                row = np.int64(b) if mask_mode == 2 else np.int64(0)
                for j in range(j0, j1):
                    if mask_mode != 0 and mask[row, base + j] == 0:
                        continue
                    s = S[j, b]
                    if cnt[b] < k or s > thr[b]:
                        _offer(out_s, out_i, b, cnt, minpos, thr, b, s, base + j)


@njit
def _sort_rows(out_s, out_i, cnt):  # pragma: no cover - numba
    for b in range(out_s.shape[0]):
        sort_row(out_s, out_i, b, cnt[b])


#: up to this many queries the dense path streams keys (tiled scan) instead of sgemm. Measured on
#: 2 cores, k=10, tiled scan vs sgemm: N=1M d=384 143 vs 160 ms at B=10, 149 vs 167 at B=12, 216 vs
#: 167 at B=16; N=200K d=768 55 vs 60 at B=10, 67 vs 63 at B=12
SCAN_MAX_B = 10
#: key rows per sgemm block (measured on 2 cores, N=1M d=384 and N=200K d=768, B 16..256: 2,048-8,192
#: rows within 5% of the best everywhere; 16K+ rows lose 25% at B=16 d=768, <=256 rows 20% at B=256)
BLOCK_ROWS = 4096


#: below this many (query, key) scores one numpy matmul + sort beats the parallel numba scan, whose thread
#: launch dominates: 1 query x 36 keys took ~1,000 us through the scan and ~6 us this way on the 2-core
#: machine under load (RAMU's candidate lookup against a 36-entry index is exactly this shape)
SMALL_WORK = 1 << 14


def _small_topk(q, keys, k, mask, out_s, out_i):
    """Top-k of a tiny dense problem: full score matrix, masked, sorted by (score desc, index asc)."""
    S = q @ keys.T
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        S = np.where(m if m.ndim == 2 else m[None, :], S, -np.inf).astype(np.float32)
    idx = np.broadcast_to(np.arange(S.shape[1]), S.shape)
    order = np.lexsort((idx, -S), axis=-1)[:, :k]
    kk = order.shape[1]
    out_s[:, :kk] = np.take_along_axis(S, order, 1)
    out_i[:, :kk] = order
    out_i[np.isneginf(out_s)] = -1
    return out_s, out_i


def dense_topk_numpy(q: np.ndarray, keys: np.ndarray, k: int, mask: np.ndarray | None = None,
                     threads: int | None = None):
    """Dense top-k on the CPU: the fast path for queries that all search the same keys.

    * ``B <= SCAN_MAX_B``: split the keys into chunks, stream them in parallel with the tiled numba
      scan (each key tile read from DRAM once for all queries), merge the per-chunk lists (memory
      bound at small B, all cores busy even at B=1).
    * otherwise: blocked keys-major sgemm (numpy BLAS) into a ``block x B`` buffer, then a numba
      prefiltered threshold-select pass per block (the faiss IndexFlatIP strategy).
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
    if B * N <= SMALL_WORK:
        return _small_topk(q, keys, k, mask, out_s, out_i)
    m, mode = _mask_arg(mask)
    if B <= SCAN_MAX_B:
        n_chunks = max(1, min(4 * (threads or os.cpu_count() or 1), N // max(4 * k, 4096)))
        bounds = np.linspace(0, N, n_chunks + 1).astype(np.int64)
        ps = np.full((B * n_chunks, k), -np.inf, np.float32)
        pi = np.full((B * n_chunks, k), -1, np.int64)
        _tiled_scan(q, keys, bounds, m, mode, k, ps, pi)
        ps = ps.reshape(B, n_chunks * k)
        pi = pi.reshape(B, n_chunks * k)
        order = np.lexsort((pi, -ps), axis=-1)[:, :k]  # score desc, index asc
        kk = order.shape[1]
        out_s[:, :kk] = np.take_along_axis(ps, order, 1)
        out_i[:, :kk] = np.take_along_axis(pi, order, 1)
        out_i[np.isneginf(out_s)] = -1
        return out_s, out_i
    block = min(N, BLOCK_ROWS)
    cnt = np.zeros(B, np.int64)
    minpos = np.zeros(B, np.int64)
    thr = np.full(B, -np.inf, np.float32)
    buf = np.empty((block, B), np.float32)
    q_t = np.ascontiguousarray(q.T)
    for lo in range(0, N, block):
        hi = min(N, lo + block)
        S = buf if hi - lo == block else np.empty((hi - lo, B), np.float32)
        np.matmul(keys[lo:hi], q_t, out=S)  # keys-major: the layout BLAS runs fastest here
        _block_select(S, lo, m, mode, out_s, out_i, cnt, minpos, thr)
    _sort_rows(out_s, out_i, cnt)
    return out_s, out_i
