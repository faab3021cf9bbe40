"""``candidate_topk``: inner-product top-k, dense or ragged (multi-tenant), with a fused Triton kernel.

Backends (see ``kernels/README.md``): ``triton`` (CUDA, or CPU under ``TRITON_INTERPRET=1``), ``cpu``
(blocked sgemm + numba threshold select for dense inputs, numba streaming scan for ragged ones), ``reference`` (plain
PyTorch, per query). Used by RAMU candidates, page/entry routing and seed retrieval.
"""
from __future__ import annotations

import numbers
from typing import Optional, Tuple

import numpy as np

from .._compat import have_torch, triton_usable
from ..dispatch import record, resolve_backend

__all__ = ["candidate_topk", "normalize_ranges"]

OP = "candidate_topk"


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


def normalize_ranges(offsets, B: int, N: int) -> Tuple[np.ndarray, np.ndarray]:
    """Turn ``offsets`` into per-query ``(starts[B], ends[B])`` int64 numpy arrays and validate them.

    Accepted forms: ``[B+1]`` (query b searches ``offsets[b]:offsets[b+1]``; segments are
    consecutive) or ``[B, 2]`` (explicit ``(start, end)`` per query; ranges may overlap, so several
    queries can search the same tenant).
    """
    off = np.asarray(offsets.detach().cpu() if _is_torch(offsets) else offsets)
    if off.dtype.kind not in "iu":
        raise TypeError(f"{OP}: offsets must be an integer array, got dtype {off.dtype}; "
                        f"pass e.g. np.asarray(offsets, dtype=np.int64)")
    off = off.astype(np.int64)
    if off.ndim == 1:
        if off.shape[0] != B + 1:
            raise ValueError(f"{OP}: offsets has length {off.shape[0]} but must be B+1={B + 1} "
                             f"(one segment per query), or pass a [B, 2] array of (start, end)")
        starts, ends = off[:-1], off[1:]
    elif off.ndim == 2 and off.shape == (B, 2):
        starts, ends = off[:, 0], off[:, 1]
    else:
        raise ValueError(f"{OP}: offsets must have shape [B+1]=[{B + 1}] or [B, 2]=[{B}, 2], "
                         f"got {list(off.shape)}")
    if B and (starts.min() < 0 or ends.max() > N):
        raise ValueError(f"{OP}: offsets must lie in [0, N={N}], got range "
                         f"[{int(starts.min())}, {int(ends.max())}]")
    if B and np.any(ends < starts):
        b = int(np.argmax(ends < starts))
        raise ValueError(f"{OP}: offsets must be non-decreasing; query {b} has start "
                         f"{int(starts[b])} > end {int(ends[b])}")
    return np.ascontiguousarray(starts), np.ascontiguousarray(ends)


def _validate(queries, keys, k, mask):
    if getattr(queries, "ndim", None) != 2:
        raise ValueError(f"{OP}: queries must be 2-D [B, d], got shape "
                         f"{list(getattr(queries, 'shape', []))}")
    if getattr(keys, "ndim", None) != 2:
        raise ValueError(f"{OP}: keys must be 2-D [N, d], got shape {list(getattr(keys, 'shape', []))}")
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(f"{OP}: queries have d={queries.shape[1]} but keys have d={keys.shape[1]}; "
                         f"both must use the same embedding width")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"{OP}: k must be a non-negative int, got {k!r}")
    if mask is not None:
        B, N = queries.shape[0], keys.shape[0]
        shape = tuple(mask.shape)
        if shape not in ((N,), (B, N)):
            raise ValueError(f"{OP}: mask must have shape [N]=[{N}] or [B, N]=[{B}, {N}], "
                             f"got {list(shape)}")


def candidate_topk(queries, keys, k: int, *, offsets=None, mask=None,
                   backend: Optional[str] = None):
    """Top-``k`` keys by inner product for every query, optionally per-query (ragged) key ranges.

    Args:
        queries: ``[B, d]`` float tensor or numpy array.
        keys: ``[N, d]`` float tensor or array. On CUDA: fp32, fp16 or bf16. On CPU: computed in fp32.
        k: results per query (``>= 0``; ``k > N`` is allowed and padded).
        offsets: ``None`` (every query searches all keys), ``[B+1]`` ints (query b searches rows
            ``offsets[b]:offsets[b+1]``: many tenants' small indexes in one call), or ``[B, 2]``
            ``(start, end)`` per query. Empty segments are allowed.
        mask: optional bool ``[N]`` or ``[B, N]``; ``False`` excludes a key (deleted entries, ACLs).
        backend: ``None``/``"auto"``, ``"triton"``, ``"cpu"`` or ``"reference"`` (env vars:
            ``C3M_KERNELS_BACKEND_CANDIDATE_TOPK``, ``C3M_KERNELS_BACKEND``).

    Returns:
        ``(scores[B, k] float32, idx[B, k] int64)``, sorted by descending score. ``idx`` are global row
        numbers into ``keys`` (subtract the segment start for tenant-local ids). When a query has
        fewer than ``k`` searchable keys the tail is padded with ``(-inf, -1)``. Equal scores may come
        in any order. Torch inputs give torch outputs on the queries' device; numpy gives numpy.
        Inputs must be finite (a NaN score has no defined rank).
    """
    _validate(queries, keys, k, mask)
    torch_in = _is_torch(queries)
    B, N = queries.shape[0], keys.shape[0]
    is_cuda = torch_in and queries.device.type == "cuda"
    starts = ends = None
    if offsets is not None:
        starts, ends = normalize_ranges(offsets, B, N)

    def chk_triton():
        ok, why = triton_usable(is_cuda)
        if ok and not torch_in:
            return False, "inputs are numpy arrays; the Triton path needs torch tensors"
        if ok and k > 1024:
            return False, f"k={k} > 1024 is not supported by the Triton kernel"
        return ok, why

    def chk_cpu():
        # always runnable: numpy (its BLAS does the sgemm of the dense path) + numba (pure-Python
        # kernels without numba)
        return True, ""

    checks = {"triton": chk_triton, "cpu": chk_cpu, "reference": have_torch}
    name = resolve_backend(OP, backend, is_cuda=is_cuda, checks=checks)
    record(OP, name)

    if name == "cpu":
        return _run_cpu(queries, keys, k, starts, ends, mask, torch_in)
    import torch

    def as_t(x, dtype=None):
        t = x if _is_torch(x) else torch.from_numpy(np.asarray(x))
        return t if dtype is None else t.to(dtype)

    q_t, k_t = as_t(queries), as_t(keys)
    m_t = None if mask is None else as_t(mask).to(q_t.device)
    k_t = k_t.to(q_t.device)
    s_t = None if starts is None else torch.from_numpy(starts).to(q_t.device)
    e_t = None if ends is None else torch.from_numpy(ends).to(q_t.device)
    if name == "triton":
        from .triton_impl import candidate_topk_triton

        out = candidate_topk_triton(q_t, k_t, k, s_t, e_t, m_t)
    else:
        from .reference import candidate_topk_reference

        out = candidate_topk_reference(q_t, k_t, k, s_t, e_t, m_t)
    if torch_in:
        return out
    return out[0].cpu().numpy(), out[1].cpu().numpy()


def _run_cpu(queries, keys, k, starts, ends, mask, torch_in):
    from .cpu import dense_topk_numpy, scan_topk_numpy

    dev = queries.device if torch_in else None

    def to_np(x):
        return x.detach().cpu().float().numpy() if _is_torch(x) else np.asarray(x, dtype=np.float32)

    m = None
    if mask is not None:
        m = mask.detach().cpu().numpy() if _is_torch(mask) else np.asarray(mask)
    if starts is None:
        s, i = dense_topk_numpy(to_np(queries), to_np(keys), k, m)
    else:
        s, i = scan_topk_numpy(to_np(queries), to_np(keys), k, starts, ends, m)
    if torch_in:
        import torch

        return torch.from_numpy(s).to(dev), torch.from_numpy(i).to(dev)
    return s, i


from .._compat import callable_package  # noqa: E402

callable_package(__name__, candidate_topk)
