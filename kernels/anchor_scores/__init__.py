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
"""
from __future__ import annotations

import numbers
from typing import Optional

import numpy as np

from .._compat import have_torch, triton_usable
from ..dispatch import record, resolve_backend
from .common import OP, AnchorIndex, _np, build_anchor_index

__all__ = ["anchor_scores", "build_anchor_graph", "build_anchor_index", "AnchorIndex"]


def _backend(op, backend, is_cuda, size):
    def chk_triton():
        ok, why = triton_usable(is_cuda)
        if ok and not have_torch()[0]:
            return False, "torch is not installed (the Triton launcher needs it)"
        return ok, why

    def chk_ref():
        ok, why = have_torch()
        if ok and size > 5e7:
            return False, f"the dense reference would need {size:.3g} matrix cells; use backend='cpu'"
        return ok, why

    checks = {"triton": chk_triton, "cpu": lambda: (True, ""), "reference": chk_ref}
    return resolve_backend(op, backend, is_cuda=is_cuda, checks=checks,
                           auto_chain_cuda=("triton", "cpu"), auto_chain_cpu=("cpu",))


def _check_k(name, k):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
        raise ValueError(f"{OP}: {name} must be a non-negative int, got {k!r}")


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
        index: a prebuilt :class:`AnchorIndex` (skips re-normalising the CSR on every call).
        backend: ``None``/"auto", "cpu", "reference" (env ``C3M_KERNELS_BACKEND_ANCHOR_SCORES``).

    Returns:
        ``(scores[B, k_exp] float64, episodes[B, k_exp] int64)`` sorted by descending score. An anchor
        counts once per query even if several seeds carry it: ``score(n) = sum over a in A(n) ∩
        (union of the seeds' anchors) of idf(a) * sim(q, a)``. Seeds are never returned. Fewer than
        ``k_exp`` neighbours are padded with ``(-inf, -1)``; ties may come in any order.
    """
    _check_k("k_exp", k_exp)
    torch_in = type(sim).__module__.startswith("torch")
    dev = sim.device if torch_in else None
    idf_np = _np(idf, np.float64)
    if idf_np.ndim != 1:
        raise ValueError(f"{OP}: idf must be 1-D [A], got {list(idf_np.shape)}")
    A = idf_np.shape[0]
    if index is None:
        index = build_anchor_index(ep_indptr, ep_anchors, A, canonical)
    elif index.num_anchors != A:
        raise ValueError(f"{OP}: index was built for {index.num_anchors} anchors but idf has {A}")
    sim_np = _np(sim, np.float64)
    seeds_np = _np(seeds)
    if sim_np.ndim != 2 or sim_np.shape[1] != A:
        raise ValueError(f"{OP}: sim must be [B, A] with A=len(idf)={A}, got {list(sim_np.shape)}")
    B = sim_np.shape[0]
    if seeds_np.ndim != 2 or seeds_np.shape[0] != B or (seeds_np.size and seeds_np.dtype.kind not in "iu"):
        raise ValueError(f"{OP}: seeds must be an int array [B, S] with B={B} (pad with -1), got "
                         f"{list(seeds_np.shape)} {seeds_np.dtype}")
    seeds_np = seeds_np.astype(np.int64)
    E = index.num_episodes
    if seeds_np.size and (seeds_np.min() < -1 or seeds_np.max() >= E):
        raise ValueError(f"{OP}: seeds must lie in [-1, E={E}), got [{int(seeds_np.min())}, "
                         f"{int(seeds_np.max())}]")
    is_cuda = torch_in and dev.type == "cuda"
    name = _backend(OP, backend, is_cuda, float(E) * A + float(B) * E)
    record(OP, name)
    if name == "triton":
        from .triton_impl import expand_triton

        s, i = expand_triton(index, idf_np, sim_np, seeds_np, k_exp, dev if is_cuda else "cpu")
        if torch_in:
            return s.to(dev), i.to(dev)
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
    idf_np = _np(idf, np.float64)
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
