"""Triton kernels for ``candidate_topk``: inner-product scoring fused with top-k.

Why fused: with B queries and N keys the score matrix is B x N floats; writing it out and reading it
back for ``torch.topk`` costs more memory traffic than reading the keys themselves when B is large,
and for small B the kernel should be bound by reading the keys once (the HBM limit). Here each
program scores a chunk of keys tile by tile in registers and keeps only a running top-``K_PAD`` list;
the B x N matrix never exists in memory.

How the indices survive ``tl.topk`` (which returns values only and needs power-of-two sizes): each
(score, index) pair is packed into one int64 whose signed order equals (score, -index) order::

    bits   = float32 bits of the score, as int32
    mapped = bits if bits >= 0 else bits ^ 0x7FFFFFFF      # int32 order == float order
    key    = (mapped << 32) | (0x7FFFFFFF - index)         # ties: lower index ranks first
    invalid slots (masked, out of range, padding) = INT64_MIN

A running list ``best`` (sorted descending) is merged with a tile's sorted top list ``t`` by
``max(best, flip(t))`` (a bitonic sequence holding the top K_PAD of the union) and one bitonic merge.

Two kernels:
* ``_dense_kernel``: all queries search the same keys. A program owns BLOCK_B queries x one chunk of
  keys and uses ``tl.dot`` so every key tile is read once per BLOCK_B queries.
* ``_ragged_kernel``: query b searches rows ``starts[b]:ends[b]`` (multi-tenant). A program owns one
  query x one chunk of its range; scoring is a broadcast multiply + row sum. Dense calls with
  ``B <= DENSE_AS_RAGGED_MAX_B`` run here too (over ``[0, N)``), see that constant for why.

Both skip a tile cheaply when none of its float scores beats the running K_PAD-th best score.
Both write per-(query, chunk) partial lists ``[B, n_chunks, K_PAD]`` (int64); the host merges them
with one ``torch.topk`` over ``n_chunks * K_PAD`` values and unpacks. That partial buffer is
``N / CHUNK * K_PAD`` per query, far below N.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

INT64_MIN = -(2 ** 63)
#: largest supported k (K_PAD = next power of two must fit in registers)
MAX_K = 1024


@triton.jit
def _pack(scores, idx, valid):
    bits = scores.to(tl.int32, bitcast=True)
    mapped = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    low = (2147483647 - idx).to(tl.int64)
    key = (mapped.to(tl.int64) << 32) | low
    return tl.where(valid, key, -9223372036854775808)


@triton.jit
def _kth_score(best):
    """Float32 score of the lowest entry of each sorted-desc ``best`` row; -inf while a row still
    holds empty (INT64_MIN) slots. The inverse of :func:`_pack`'s score half."""
    low = tl.min(best, axis=len(best.shape) - 1)
    mapped = (low >> 32).to(tl.int32)
    bits = tl.where(mapped >= 0, mapped, mapped ^ 0x7FFFFFFF)
    return tl.where(low == -9223372036854775808, float("-inf"), bits.to(tl.float32, bitcast=True))


@triton.jit
def _merge(best, tile_keys, K_PAD: tl.constexpr):
    """Merge running sorted-desc ``best`` with an unsorted tile; keep top K_PAD, sorted desc."""
    t = tl.topk(tile_keys, K_PAD)  # sorted descending along the last dim
    c = tl.maximum(best, tl.flip(t, len(t.shape) - 1))  # triton 3.6 requires an explicit dim
    return tl.bitonic_merge(c, descending=True)


@triton.jit
def _dense_kernel(q_ptr, k_ptr, m_ptr, out_ptr, B, N, D, CHUNK, n_chunks,
                  stride_q, stride_k, stride_m,
                  MASK_MODE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, K_PAD: tl.constexpr, F32_IEEE: tl.constexpr):
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = offs_b < B
    lo = pid_c * CHUNK
    hi = tl.minimum(lo + CHUNK, N)
    best = tl.full([BLOCK_B, K_PAD], -9223372036854775808, tl.int64)
    thr = _kth_score(best)  # -inf per row; written this way so its type is the loop's
    for t in range(lo, hi, BLOCK_N):
        offs_n = t + tl.arange(0, BLOCK_N)
        n_ok = offs_n < hi
        acc = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            d_ok = offs_d < D
            qd = tl.load(q_ptr + offs_b[:, None] * stride_q + offs_d[None, :],
                         mask=b_ok[:, None] & d_ok[None, :], other=0.0)
            kd = tl.load(k_ptr + offs_n.to(tl.int64)[:, None] * stride_k + offs_d[None, :],
                         mask=n_ok[:, None] & d_ok[None, :], other=0.0)
            if F32_IEEE:
                acc += tl.dot(qd.to(tl.float32), tl.trans(kd.to(tl.float32)), input_precision="ieee")
            else:
                acc += tl.dot(qd, tl.trans(kd))
        valid = b_ok[:, None] & n_ok[None, :]
        if MASK_MODE == 1:
            mv = tl.load(m_ptr + offs_n, mask=n_ok, other=0)
            valid = valid & (mv != 0)[None, :]
        if MASK_MODE == 2:
            mv = tl.load(m_ptr + offs_b.to(tl.int64)[:, None] * stride_m + offs_n[None, :],
                         mask=valid, other=0)
            valid = valid & (mv != 0)
        # skip packing and the sort network when no score of this tile beats its row's K_PAD-th
        # best (the common case after the first tiles): one float compare per score. A score
        # *equal* to it may be skipped: its key's index is above every kept one (tiles run in
        # index order), so it ranks below them under the tie rule anyway.
        hit = valid & (acc > thr[:, None])
        if tl.max(tl.max(hit.to(tl.int32), axis=1), axis=0) > 0:
            keys2 = _pack(acc, offs_n[None, :] + tl.zeros([BLOCK_B, BLOCK_N], tl.int32), valid)
            best = _merge(best, keys2, K_PAD)
            thr = _kth_score(best)
    offs_k = tl.arange(0, K_PAD)
    row = offs_b.to(tl.int64)[:, None] * (n_chunks * K_PAD)
    out = out_ptr + row + pid_c * K_PAD + offs_k[None, :]
    tl.store(out, best, mask=b_ok[:, None])


@triton.jit
def _ragged_kernel(q_ptr, k_ptr, m_ptr, s_ptr, e_ptr, out_ptr, D, CHUNK, n_chunks,
                   stride_q, stride_k, stride_m,
                   MASK_MODE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                   K_PAD: tl.constexpr):
    b = tl.program_id(0)
    pid_c = tl.program_id(1)
    start = tl.load(s_ptr + b)
    end = tl.load(e_ptr + b)
    lo = start + pid_c * CHUNK
    hi = tl.minimum(lo + CHUNK, end)
    best = tl.full([K_PAD], -9223372036854775808, tl.int64)
    thr = _kth_score(best)  # -inf; written this way so its type is the loop's
    for t in range(lo, hi, BLOCK_N):
        offs_n = t + tl.arange(0, BLOCK_N)
        n_ok = offs_n < hi
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            d_ok = offs_d < D
            qd = tl.load(q_ptr + b * stride_q + offs_d, mask=d_ok, other=0.0).to(tl.float32)
            kd = tl.load(k_ptr + offs_n.to(tl.int64)[:, None] * stride_k + offs_d[None, :],
                         mask=n_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(kd * qd[None, :], axis=1)
        valid = n_ok
        if MASK_MODE == 1:
            mv = tl.load(m_ptr + offs_n, mask=n_ok, other=0)
            valid = valid & (mv != 0)
        if MASK_MODE == 2:
            mv = tl.load(m_ptr + b.to(tl.int64) * stride_m + offs_n, mask=n_ok, other=0)
            valid = valid & (mv != 0)
        hit = valid & (acc > thr)  # same float prefilter as the dense kernel
        if tl.max(hit.to(tl.int32), axis=0) > 0:
            best = _merge(best, _pack(acc, offs_n.to(tl.int32), valid), K_PAD)
            thr = _kth_score(best)
    offs_k = tl.arange(0, K_PAD)
    tl.store(out_ptr + b.to(tl.int64) * (n_chunks * K_PAD) + pid_c * K_PAD + offs_k, best)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _unpack(packed, k: int):
    """Host side: top-k over the partial lists, then int64 key -> (score float32, index int64)."""
    import torch

    B = packed.shape[0]
    flat = packed.reshape(B, -1)
    kk = min(k, flat.shape[1])
    top, _ = torch.topk(flat, kk, dim=1)
    mapped = (top >> 32).to(torch.int32)
    bits = torch.where(mapped >= 0, mapped, mapped ^ 0x7FFFFFFF)
    scores = bits.view(torch.float32).clone()
    idx = 2147483647 - (top & 0xFFFFFFFF)
    invalid = top == INT64_MIN
    scores[invalid] = float("-inf")
    idx[invalid] = -1
    out_s = torch.full((B, k), float("-inf"), dtype=torch.float32, device=packed.device)
    out_i = torch.full((B, k), -1, dtype=torch.int64, device=packed.device)
    out_s[:, :kk] = scores
    out_i[:, :kk] = idx
    return out_s, out_i


def _num_sms(device) -> int:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


#: dense calls with at most this many queries run the ragged kernel over ``[0, N)`` per query.
#: Why: ``tl.dot`` needs >= 16 query rows, so the dense kernel pads B=1 to 16 and spends 16x the
#: scoring work; on an H200 it reached 13-17% of HBM at B=1, while the ragged kernel (one query per
#: program, no padding) streamed 67% (benchmarks/results/kernels-h200*.md). Each query streams the
#: keys once, so B queries cost B streams: at B=2 that is still estimated above the dense kernel.
#: An estimate from those two runs, not yet measured as such: ``sweep_gpu_topk.py`` measures both.
DENSE_AS_RAGGED_MAX_B = 2


def candidate_topk_triton(queries, keys, k: int, starts=None, ends=None, mask=None, *,
                          block_n: int | None = None, block_d: int | None = None,
                          block_b: int | None = None, chunk: int | None = None,
                          kernel: str | None = None, fp32_dot: str = "ieee"):
    """Fused score + top-k on CUDA tensors (or CPU tensors under ``TRITON_INTERPRET=1``).

    Same contract as :func:`..reference.candidate_topk_reference`. ``keys`` may be fp32, fp16 or
    bf16 (queries are cast to the keys' dtype for the dot product, accumulation is fp32; fp32 keys
    use IEEE fp32 dot products, not TF32, so results match the reference to fp32 rounding).
    Tile sizes default to GPU-friendly values, or tiny ones under the interpreter. ``kernel``
    (``"dense"`` or ``"ragged"``) overrides the choice for dense calls (tests, sweeps); default:
    ragged when ``B <= DENSE_AS_RAGGED_MAX_B``. ``fp32_dot="tf32"`` lets the dense kernel use
    TF32 tensor cores for fp32 keys (faster, ~1e-3 relative score error, so near-ties may reorder);
    measurement only for now: the public op keeps IEEE fp32 so every backend agrees.
    """
    import torch

    if k > MAX_K:
        raise ValueError(f"candidate_topk_triton: k={k} exceeds MAX_K={MAX_K}; use backend='cpu' "
                         f"or 'reference' for larger k")
    B, D = queries.shape
    N = keys.shape[0]
    dev = queries.device
    if k == 0 or B == 0 or N == 0:
        return (torch.full((B, k), float("-inf"), dtype=torch.float32, device=dev),
                torch.full((B, k), -1, dtype=torch.int64, device=dev))
    if N >= 2 ** 31 - 1:
        raise ValueError(f"candidate_topk_triton: N={N} keys exceeds the 2^31-1 index limit; split "
                         f"the key set and merge the results")
    interp = _interpreting()
    K_PAD = max(2, 1 << (k - 1).bit_length())  # >= 2: tl.flip cannot take a length-1 dim
    BLOCK_N = block_n or (32 if interp else 128)
    BLOCK_N = max(BLOCK_N, K_PAD)
    BLOCK_D = block_d or (32 if interp else (64 if keys.element_size() == 4 else 128))
    BLOCK_D = min(BLOCK_D, max(16, 1 << (D - 1).bit_length()))
    keys = keys.contiguous()
    if keys.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        keys = keys.float()
    q = queries.to(keys.dtype).contiguous()
    if fp32_dot not in ("ieee", "tf32"):
        raise ValueError(f"candidate_topk_triton: fp32_dot={fp32_dot!r}; use 'ieee' or 'tf32'")
    f32 = keys.dtype == torch.float32 and fp32_dot == "ieee"
    mask_mode, m, stride_m = 0, keys, 0
    if mask is not None:
        m = mask.to(torch.uint8).contiguous()
        mask_mode = 1 if m.dim() == 1 else 2
        stride_m = m.stride(0) if m.dim() == 2 else 0
    target_programs = 4 * _num_sms(dev)
    if kernel not in (None, "dense", "ragged"):
        raise ValueError(f"candidate_topk_triton: kernel={kernel!r}; use 'dense', 'ragged' or None")
    if starts is None and (kernel == "ragged" or (kernel is None and B <= DENSE_AS_RAGGED_MAX_B)):
        starts = torch.zeros(B, dtype=torch.int64, device=dev)
        ends = torch.full((B,), N, dtype=torch.int64, device=dev)
    if starts is None:
        BLOCK_B = block_b or 16
        n_bblocks = triton.cdiv(B, BLOCK_B)
        if chunk is None:
            n_chunks = max(1, min(triton.cdiv(N, BLOCK_N), triton.cdiv(target_programs, n_bblocks)))
            chunk = triton.cdiv(triton.cdiv(N, n_chunks), BLOCK_N) * BLOCK_N
        n_chunks = triton.cdiv(N, chunk)
        part = torch.empty((B, n_chunks, K_PAD), dtype=torch.int64, device=dev)
        _dense_kernel[(n_bblocks, n_chunks)](
            q, keys, m, part, B, N, D, chunk, n_chunks, q.stride(0), keys.stride(0), stride_m,
            MASK_MODE=mask_mode, BLOCK_B=BLOCK_B, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, K_PAD=K_PAD,
            F32_IEEE=f32)
    else:
        starts = starts.to(device=dev, dtype=torch.int64).contiguous()
        ends = ends.to(device=dev, dtype=torch.int64).contiguous()
        lens = (ends - starts).clamp_min(0)
        max_len = int(lens.max()) if B else 0
        if max_len == 0:
            return (torch.full((B, k), float("-inf"), dtype=torch.float32, device=dev),
                    torch.full((B, k), -1, dtype=torch.int64, device=dev))
        if chunk is None:
            mean_len = max(1, int(lens.float().mean()))
            per_q = max(1, triton.cdiv(target_programs, B))
            chunk = max(BLOCK_N, triton.cdiv(triton.cdiv(mean_len, per_q), BLOCK_N) * BLOCK_N)
        n_chunks = triton.cdiv(max_len, chunk)
        part = torch.empty((B, n_chunks, K_PAD), dtype=torch.int64, device=dev)
        _ragged_kernel[(B, n_chunks)](
            q, keys, m, starts, ends, part, D, chunk, n_chunks, q.stride(0), keys.stride(0), stride_m,
            MASK_MODE=mask_mode, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, K_PAD=K_PAD)
    return _unpack(part, k)
