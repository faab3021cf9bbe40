"""HiVe-Mem horizontal expansion: IDF-weighted anchor scoring of one-hop neighbours, and the graph.

* :func:`anchor_scores` — for each query, score every episode that shares an anchor with one of the
  query's seed episodes as ``sum over shared anchors a of idf(a) * sim(q, a)`` and return the top
  ``k_exp`` non-seed neighbours.
* :func:`build_anchor_graph` — edge weight between two episodes = ``sum of idf(a)`` over the anchors
  they share (text and visual, cross-modal via ``canonical``); each node keeps its ``k_edge`` heaviest
  edges (a directed k-NN graph: e may list n while n does not list e).

Backends: ``triton`` (posting-list scatter with atomics into a dense scratch, then ``torch.topk``;
:mod:`.triton_impl`), ``cpu`` (numba posting-list walk with sparse accumulators, no scipy),
``reference`` (dense PyTorch matrix products, small inputs).

On ``triton``, device tensors (``sim``, ``seeds``, ``idf``) stay on their device: checked there (one small fetch
for the seeds' range), scored there against the index's CSR kept on the device (uploaded once per index and
device: pass a prebuilt ``index=`` to reuse it across calls), answered there. The CSR arguments are host data.
"""
from __future__ import annotations

import numbers
from typing import Optional

import numpy as np

from .._compat import have_torch, triton_usable
from ..dispatch import record, resolve_backend
from ..dispatch import record_transfer
from .common import OP, AnchorIndex, _np, _on, build_anchor_index

__all__ = ["anchor_scores", "build_anchor_graph", "build_anchor_index", "AnchorIndex"]


def _backend(op, backend, is_cuda, size):
    def chk_ref():
        ok, why = have_torch()
        if ok and size > 5e7:
            return False, f"the dense reference would need {size:.3g} matrix cells; use backend='cpu'"
        return ok, why

    checks = {"triton": lambda: triton_usable(is_cuda), "cpu": lambda: (True, ""), "reference": chk_ref}
    return resolve_backend(op, backend, is_cuda=is_cuda, checks=checks,
                           auto_chain_cuda=("triton", "cpu"), auto_chain_cpu=("cpu",))


def _check_k(name, k):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"{OP}: {name} must be a non-negative int, got {k!r}")


def _shape_dtype(x):
    """(shape, numpy dtype kind or torch dtype is-int, dtype name) without copying a device tensor."""
    if type(x).__module__.startswith("torch"):
        import torch

        t = x.dtype
        return tuple(x.shape), not (t.is_floating_point or t.is_complex or t == torch.bool), str(t)
    a = np.asarray(x)
    return a.shape, a.dtype.kind in "iu", str(a.dtype)


def _check_shapes(sim, seeds, A: int) -> int:
    """``sim`` [B, A] and ``seeds`` [B, S] ints (shapes and dtypes only: free on any device); returns B."""
    shape, _, _ = _shape_dtype(sim)
    if len(shape) != 2 or shape[1] != A:
        raise ValueError(f"{OP}: sim must be [B, A] with A=len(idf)={A}, got {list(shape)}")
    B = shape[0]
    sshape, is_int, dtype = _shape_dtype(seeds)
    if len(sshape) != 2 or sshape[0] != B or (np.prod(sshape) and not is_int):
        raise ValueError(f"{OP}: seeds must be an int array [B, S] with B={B} (pad with -1), got "
                         f"{list(sshape)} {dtype}")
    return B


def _scores_on_device(index, idf, sim, seeds, k_exp: int):
    """The Triton path for device tensors: the seeds' range checked on ``sim``'s device (one fetch), idf and
    seeds moved there if they live elsewhere (counted), scores and ids returned there."""
    import torch

    from .triton_impl import expand_triton

    dev = sim.device
    seeds_t = _on(seeds, dev, torch.int64)
    E = index.num_episodes
    if seeds_t.numel():
        lo, hi = torch.stack(torch.aminmax(seeds_t)).tolist()
        record_transfer(OP, "sync")
        if lo < -1 or hi >= E:
            raise ValueError(f"{OP}: seeds must lie in [-1, E={E}), got [{lo}, {hi}]")
    record(OP, "triton")
    return expand_triton(index, _on(idf, dev, torch.float64), sim, seeds_t, k_exp)


def _out(x, like, dev):
    if like:
        import torch

        return torch.from_numpy(x).to(dev)
    return x


def anchor_scores(ep_indptr, ep_anchors, idf, sim, seeds, k_exp: int, *, canonical=None,
                  index: Optional[AnchorIndex] = None, backend: Optional[str] = None):
    """Top ``k_exp`` one-hop neighbours of each query's seed episodes, scored by shared anchors.

    Args:
        ep_indptr, ep_anchors: per-episode anchor sets in CSR form (see :func:`build_anchor_index`).
        idf: ``[A]`` anchor IDF weights (indexed by canonical anchor id).
        sim: ``[B, A]`` query-anchor similarities.
        seeds: ``[B, S]`` seed episode ids per query, ``-1`` = padding.
        k_exp: neighbours to return per query.
        canonical: optional ``[A]`` anchor -> canonical id map (cross-modal matches).
        index: a prebuilt :class:`AnchorIndex` (skips re-normalising the CSR on every call, and on ``triton``
            reuses the CSR it keeps on the device).
        backend: ``None``/"auto", "triton", "cpu", "reference" (env ``C3M_KERNELS_BACKEND_ANCHOR_SCORES``).

    Returns:
        ``(scores[B, k_exp] float64, episodes[B, k_exp] int64)`` sorted by descending score. An anchor
        counts once per query even if several seeds carry it: ``score(n) = sum over a in A(n) ∩
        (union of the seeds' anchors) of idf(a) * sim(q, a)``. Seeds are never returned. Fewer than
        ``k_exp`` neighbours are padded with ``(-inf, -1)``; ties may come in any order.
    """
    _check_k("k_exp", k_exp)
    torch_in = type(sim).__module__.startswith("torch")
    dev = sim.device if torch_in else None
    if np.ndim(idf) != 1:
        raise ValueError(f"{OP}: idf must be 1-D [A], got {list(np.shape(idf))}")
    A = int(np.shape(idf)[0])
    if index is None:
        index = build_anchor_index(ep_indptr, ep_anchors, A, canonical)
    elif index.num_anchors != A:
        raise ValueError(f"{OP}: index was built for {index.num_anchors} anchors but idf has {A}")
    B = _check_shapes(sim, seeds, A)
    E = index.num_episodes
    is_cuda = torch_in and dev.type == "cuda"
    name = _backend(OP, backend, is_cuda, float(E) * A + float(B) * E)
    if name == "triton" and torch_in:
        return _scores_on_device(index, idf, sim, seeds, k_exp)
    idf_np = _np(idf, np.float64)
    sim_np = _np(sim, np.float64)
    seeds_np = _np(seeds).astype(np.int64)
    if seeds_np.size and (seeds_np.min() < -1 or seeds_np.max() >= E):
        raise ValueError(f"{OP}: seeds must lie in [-1, E={E}), got [{int(seeds_np.min())}, "
                         f"{int(seeds_np.max())}]")
    record(OP, name)
    if name == "triton":  # host arrays: up once, the answer back once
        import torch

        from .triton_impl import expand_triton

        s, i = expand_triton(index, _on(idf_np, "cpu", torch.float64), _on(sim_np, "cpu", torch.float64),
                             _on(seeds_np, "cpu", torch.int64), k_exp)
        return s.cpu().numpy(), i.cpu().numpy()
    if name == "reference":
        from .reference import expand_reference

        s, i = expand_reference(index, idf_np, sim_np, seeds_np, k_exp)
    else:
        from .cpu import expand_cpu

        s, i = expand_cpu(index, idf_np, sim_np, seeds_np, k_exp)
    return _out(s, torch_in, dev), _out(i, torch_in, dev)


def build_anchor_graph(ep_indptr, ep_anchors, idf, k_edge: int, *, canonical=None,
                       max_postings: Optional[int] = None, index: Optional[AnchorIndex] = None,
                       device=None, backend: Optional[str] = None):
    """Episode graph: weight(e, n) = sum of idf over shared anchors; keep <= ``k_edge`` per node.

    Args:
        ep_indptr, ep_anchors, idf, canonical, index: as in :func:`anchor_scores`.
        k_edge: maximum out-edges per episode (the heaviest; ties: lower episode id first on CPU).
        max_postings: optional stop-anchor cut: anchors carried by more than this many episodes are
            ignored (they connect everything, carry little IDF and cost O(postings^2) work).
        device: ``None`` (CPU) or a CUDA device (e.g. ``"cuda"``) to build on the GPU with Triton
            (inputs are numpy/CSR either way; the result comes back as numpy).

    Returns:
        CSR ``(indptr[E+1], neighbours[nnz] int64, weights[nnz] float64)``; each row sorted by
        descending weight. Episodes that share no anchor have no edges; no self-loops.
    """
    _check_k("k_edge", k_edge)
    if max_postings is not None and (not isinstance(max_postings, numbers.Integral) or max_postings < 1):
        raise ValueError(f"{OP}: max_postings must be a positive int or None, got {max_postings!r}")
    idf_np = _np(idf, np.float64, op="build_anchor_graph")
    if idf_np.ndim != 1:
        raise ValueError(f"{OP}: idf must be 1-D [A], got {list(idf_np.shape)}")
    if index is None:
        index = build_anchor_index(ep_indptr, ep_anchors, idf_np.shape[0], canonical)
    E = index.num_episodes
    name = _backend("build_anchor_graph", backend, device is not None and "cuda" in str(device),
                    float(E) * (E + index.num_anchors))
    record("build_anchor_graph", name)
    if name == "triton":
        from .triton_impl import graph_triton

        w, n = graph_triton(index, idf_np, k_edge, max_postings, device or "cpu")
    elif name == "reference":
        from .reference import graph_reference

        w, n = graph_reference(index, idf_np, k_edge, max_postings)
    else:
        from .cpu import graph_cpu

        w, n = graph_cpu(index, idf_np, k_edge, max_postings)
    valid = n >= 0
    indptr = np.zeros(E + 1, np.int64)
    np.cumsum(valid.sum(axis=1), out=indptr[1:])
    return indptr, n[valid], w[valid]


from .._compat import callable_package  # noqa: E402

callable_package(__name__, anchor_scores)
