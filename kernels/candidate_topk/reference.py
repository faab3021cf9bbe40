"""Plain PyTorch reference for ``candidate_topk``: one query at a time, obviously correct, slow.

Every fast path is tested against this function. It materialises each query's score vector, which
is exactly what the fused kernels avoid.
"""
from __future__ import annotations

from typing import Tuple


def candidate_topk_reference(queries, keys, k: int, starts=None, ends=None, mask=None) -> Tuple:
    """Reference top-k by inner product.

    Args:
        queries: float tensor ``[B, d]``.
        keys: float tensor ``[N, d]``.
        k: number of results per query (``>= 0``).
        starts, ends: optional int tensors ``[B]``; query ``b`` searches rows ``starts[b]:ends[b]``.
            ``None`` means every query searches all ``N`` rows.
        mask: optional bool tensor ``[N]`` or ``[B, N]``; ``False`` removes a key from the search.

    Returns:
        ``(scores[B, k] float32, idx[B, k] int64)`` sorted by descending score; ``idx`` are global
        row numbers into ``keys``. Slots beyond the number of searchable keys hold ``(-inf, -1)``.
    """
    import torch

    B = queries.shape[0]
    N = keys.shape[0]
    dev = queries.device
    out_s = torch.full((B, k), float("-inf"), dtype=torch.float32, device=dev)
    out_i = torch.full((B, k), -1, dtype=torch.int64, device=dev)
    if k == 0:
        return out_s, out_i
    q32 = queries.float()
    k32 = keys.float()
    for b in range(B):
        lo = 0 if starts is None else int(starts[b])
        hi = N if ends is None else int(ends[b])
        idx = torch.arange(lo, hi, device=dev, dtype=torch.int64)
        if mask is not None:
            row = mask[lo:hi] if mask.dim() == 1 else mask[b, lo:hi]
            idx = idx[row.to(torch.bool)]
        if idx.numel() == 0:
            continue
        s = k32[idx] @ q32[b]
        kk = min(k, idx.numel())
        top_s, top_j = torch.topk(s, kk)
        out_s[b, :kk] = top_s
        out_i[b, :kk] = idx[top_j]
    return out_s, out_i
