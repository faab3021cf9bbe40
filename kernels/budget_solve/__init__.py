"""``budget_solve``: batched BMER reader-budget selection over (pages, Raw Nodes, images, tokens).

Backends: ``triton`` (the same exact DP, one program per instance, :mod:`.triton_impl`; CUDA, or CPU
under ``TRITON_INTERPRET=1``), ``cpu`` (exact group-knapsack DP in numba, parallel over the batch;
pure-Python fallback without numba), ``reference`` (brute force over all subsets, ``M <= 20``).
Coverage mode's outer loop calls the chosen backend's DP as the oracle: in numpy on the host (:mod:`.coverage`), or,
for device tensors on ``triton``, in torch on their device (:mod:`.coverage_device`; integer label weights).

Device tensors on ``triton`` (exact mode; coverage mode with integer label weights) stay on their device: :mod:`.device` validates and prepares them there
(one small fetch of verdicts and sizes), and the answer comes back as a tensor on that device. Everywhere else the
inputs are validated and prepared in numpy (``dispatch.transfers`` counts the copies).
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from .._compat import triton_usable
from ..dispatch import record, record_transfer, resolve_backend
from .coverage import coverage_solve
from .cpu import dp_solve, prepare_dp_inputs
from .reference import (MAX_BRUTE_M, budget_solve_bruteforce, coverage_value, objective,
                        selection_cost)

__all__ = ["budget_solve", "budget_solve_bruteforce", "selection_cost", "coverage_value",
           "objective", "DIMENSIONS"]

OP = "budget_solve"
#: budget dimensions, in order
DIMENSIONS = ("pages", "raw_nodes", "images", "tokens")
#: refuse DP tables above this many states per instance (memory: states x (M+groups) bytes)
MAX_STATES = 1 << 21


def _np(x, dtype=None):
    if x is None:
        return None
    if type(x).__module__.startswith("torch"):
        record_transfer(OP, "download")
        x = x.detach().cpu().numpy()
    return np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)


def budget_solve(values, costs, budgets, groups=None, group_costs=None, *, mode: str = "exact",
                 coverage=None, coverage_weights=None, lam: float = 1.0, token_buckets: int = 64,
                 max_iter: int = 6, lengths=None, backend: Optional[str] = None):
    """Choose items per instance to maximise value under four budgets; never exceeds any budget.

    Args:
        values: ``[B, M]`` item relevance (items with value <= 0 are not chosen in exact mode).
        costs: ``[B, M, 4]`` per-item cost in (pages, raw nodes, images, tokens). The first three are
            non-negative integers (counts); tokens are non-negative numbers.
        budgets: ``[B, 4]`` or ``[4]`` (broadcast) budgets in the same dimensions.
        groups: optional ``[B, M]`` ints in ``[-1, G)``: the page an item belongs to (-1 = none).
            A group's cost is charged once when any of its items is chosen.
        group_costs: optional ``[B, G, 4]`` or ``[G, 4]``; default: one page per group, i.e.
            ``(1, 0, 0, 0)``. Items that belong to a group normally carry 0 in ``costs[..., 0]``.
        mode: ``"exact"`` maximises ``sum(values)`` exactly (tokens bucketed, see below);
            ``"coverage"`` maximises ``sum(values) + lam * Cov`` (heuristic with DP repair; see
            :mod:`.coverage`). The reference backend is exact in both modes.
        coverage: ``[B, M, L]`` bool, item covers label l (sessions, relations, clusters).
            Required for mode="coverage".
        coverage_weights: optional ``[B, L]`` label weights (default 1).
        lam: coverage weight lambda.
        token_buckets: tokens are counted in ``ceil(budget_tokens / token_buckets)``-token buckets,
            item costs rounded *up*, so results are always feasible; if the token budget is at most
            ``token_buckets`` (and costs are integers) the DP is exactly optimal.
        max_iter: coverage mode iterations per start.
        lengths: optional ``[B]`` ints: instance b has ``lengths[b]`` real items, the rest of its row is
            padding (never chosen, costs and coverage ignored). A batch of ragged instances then gives
            each instance exactly the selection it gets when solved alone, unpadded.
        backend: ``None``/"auto", "triton", "cpu" or "reference"
            (env ``C3M_KERNELS_BACKEND_BUDGET_SOLVE``).

    Returns:
        ``chosen [B, M]`` bool (torch bool tensor on the input device for torch inputs).
    """
    torch_in = type(values).__module__.startswith("torch")
    dev = values.device if torch_in else None
    if torch_in and mode == "exact" and values.ndim == 2:
        if _resolve(backend, dev.type == "cuda", values.shape[1]) == "triton":
            return _solve_on_device(values, costs, budgets, groups, group_costs, lengths, token_buckets)
    if torch_in and mode == "coverage" and values.ndim == 2:
        if _resolve(backend, dev.type == "cuda", values.shape[1]) == "triton":
            got = _coverage_on_device(values, costs, budgets, groups, group_costs, coverage, coverage_weights,
                                      lam, max_iter, lengths, token_buckets)
            if got is not None:
                return got
    v = _np(values, np.float64)
    c = _np(costs, np.float64)
    if v.ndim != 2:
        raise ValueError(f"{OP}: values must be [B, M], got shape {list(v.shape)}")
    B, M = v.shape
    if c.shape != (B, M, 4):
        raise ValueError(f"{OP}: costs must be [B, M, 4]=[{B}, {M}, 4] (pages, raw nodes, images, "
                         f"tokens), got {list(c.shape)}")
    bud = _np(budgets, np.float64)
    if bud.shape == (4,):
        bud = np.broadcast_to(bud, (B, 4))
    if bud.shape != (B, 4):
        raise ValueError(f"{OP}: budgets must be [B, 4] or [4], got {list(bud.shape)}")
    if not (np.all(np.isfinite(c)) and np.all(c >= 0)):
        raise ValueError(f"{OP}: costs must be finite and >= 0")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{OP}: values must be finite")
    if np.any(bud < 0) or np.any(np.isnan(bud)):
        raise ValueError(f"{OP}: budgets must be >= 0")
    if np.any(np.abs(c[:, :, :3] - np.round(c[:, :, :3])) > 1e-9):
        raise ValueError(f"{OP}: costs[..., 0:3] (pages, raw nodes, images) must be integers")
    bud = np.where(np.isinf(bud), 1e12, bud)
    if groups is None:
        g = np.full((B, M), -1, np.int64)
        gc = np.zeros((B, 0, 4))
    else:
        g = _np(groups)
        if g.shape != (B, M) or g.dtype.kind not in "iu":
            raise ValueError(f"{OP}: groups must be an int array [B, M]=[{B}, {M}], got "
                             f"{list(g.shape)} {g.dtype}")
        g = g.astype(np.int64)
        G = int(g.max()) + 1 if g.size else 0
        if g.size and g.min() < -1:
            raise ValueError(f"{OP}: groups must be >= -1 (-1 = no group)")
        if group_costs is None:
            gc = np.zeros((B, G, 4))
            gc[:, :, 0] = 1.0
        else:
            gc = _np(group_costs, np.float64)
            if gc.ndim == 2:
                gc = np.broadcast_to(gc, (B,) + gc.shape)
            if gc.ndim != 3 or gc.shape[0] != B or gc.shape[2] != 4 or gc.shape[1] < G:
                raise ValueError(f"{OP}: group_costs must be [B, G, 4] or [G, 4] with G > max(groups)"
                                 f"={G - 1}, got {list(gc.shape)}")
            if np.any(gc < 0) or np.any(np.abs(gc[:, :, :3] - np.round(gc[:, :, :3])) > 1e-9):
                raise ValueError(f"{OP}: group_costs must be >= 0 with integer page/raw/image costs")
    if mode not in ("exact", "coverage"):
        raise ValueError(f"{OP}: mode must be 'exact' or 'coverage', got {mode!r}")
    cov = None
    w = None
    if mode == "coverage":
        if coverage is None:
            raise ValueError(f"{OP}: mode='coverage' needs coverage=[B, M, L] bool")
        cov = _np(coverage).astype(bool)
        if cov.ndim != 3 or cov.shape[:2] != (B, M):
            raise ValueError(f"{OP}: coverage must be [B, M, L] with B={B}, M={M}, got "
                             f"{list(cov.shape)}")
        if coverage_weights is not None:
            w = _np(coverage_weights, np.float64)
            if w.shape != (B, cov.shape[2]):
                raise ValueError(f"{OP}: coverage_weights must be [B, L]=[{B}, {cov.shape[2]}], got "
                                 f"{list(w.shape)}")
    if lengths is not None:
        n = _np(lengths)
        if n.shape != (B,) or n.dtype.kind not in "iu" or (B and (n.min() < 0 or n.max() > M)):
            raise ValueError(f"{OP}: lengths must be [B]=[{B}] ints in [0, M={M}], got {list(n.shape)} {n.dtype}")
        pad = np.arange(M)[None, :] >= n[:, None]
        if pad.any():
            v, c = np.where(pad, 0.0, v), np.where(pad[:, :, None], 0.0, c)
            if groups is not None:
                g = np.where(pad, -1, g)
            if cov is not None:
                cov = cov & ~pad[:, :, None]
        lengths = n.astype(np.int64)
    if not isinstance(token_buckets, int) or token_buckets < 1:
        raise ValueError(f"{OP}: token_buckets must be a positive int, got {token_buckets!r}")

    is_cuda = torch_in and dev.type == "cuda"
    name = _resolve(backend, is_cuda, M)
    if B == 0 or M == 0:
        chosen = np.zeros((B, M), bool)
    elif name == "reference":
        record(OP, name)
        chosen = budget_solve_bruteforce(v, c, bud, None if groups is None else g, gc,
                                         coverage=cov, coverage_weights=w,
                                         lam=lam if mode == "coverage" else 0.0)
    else:
        icost, gi, caps, _ = prepare_dp_inputs(c, bud, g, gc, token_buckets)
        states = np.prod(caps + 1, axis=1) if B else np.zeros(0)
        if B and states.max() > MAX_STATES:
            b = int(states.argmax())
            raise ValueError(
                f"{OP}: instance {b} needs {int(states[b])} DP states (> {MAX_STATES}) for clipped "
                f"budgets {caps[b].tolist()} (pages, raw, images, token buckets); lower "
                f"token_buckets or the count budgets")
        record(OP, name)
        dp = dp_solve
        if name == "triton":
            from .triton_impl import dp_solve_triton

            dp = functools.partial(dp_solve_triton, device=dev if is_cuda else "cpu")
        if mode == "exact":
            chosen = dp(v, icost, g, gi, caps)
        else:
            chosen = coverage_solve(v, icost, g, gi, caps, cov, w, lam, max_iter=max_iter, dp=dp, lengths=lengths)
    if lengths is not None and B and M:
        chosen = chosen & (np.arange(M)[None, :] < lengths[:, None])
    if torch_in:
        import torch

        return torch.from_numpy(np.ascontiguousarray(chosen)).to(dev)
    return chosen


def _resolve(backend, is_cuda: bool, M: int) -> str:
    """The backend for a call with ``M`` items per instance (:func:`..dispatch.resolve_backend`'s rules)."""
    def chk_ref():
        if M > MAX_BRUTE_M:
            return False, f"M={M} > {MAX_BRUTE_M} items is too many for brute force"
        return True, ""

    checks = {"triton": lambda: triton_usable(is_cuda), "cpu": lambda: (True, ""), "reference": chk_ref}
    return resolve_backend(OP, backend, is_cuda=is_cuda, checks=checks,
                           auto_chain_cuda=("triton", "cpu"), auto_chain_cpu=("cpu",))


def _solve_on_device(values, costs, budgets, groups, group_costs, lengths, token_buckets: int):
    """Exact mode on ``triton`` for device tensors: validated, prepared and solved where they live."""
    import torch

    from .device import prepare_on_device

    p = prepare_on_device(values, costs, budgets, groups, group_costs, lengths, token_buckets, MAX_STATES)
    B, M = p.values.shape
    if B == 0 or M == 0:
        return torch.zeros((B, M), dtype=torch.bool, device=values.device)
    record(OP, "triton")
    from .triton_impl import dp_launch

    chosen = dp_launch(p.values, p.icost, p.order, p.bstart, p.bend, p.pos_gc, p.caps, p.s_max) != 0
    if p.lengths is not None:
        chosen &= torch.arange(M, device=chosen.device)[None, :] < p.lengths[:, None]
    return chosen


def _coverage_on_device(values, costs, budgets, groups, group_costs, coverage, coverage_weights, lam, max_iter,
                        lengths, token_buckets: int):
    """Coverage mode on ``triton`` for device tensors: prepared and solved where they live
    (:mod:`.coverage_device`). ``None`` when the label weights are not integers: numpy's label sums (``einsum``)
    then round in a CPU-dependent order that the device cannot reproduce, and the host loop runs instead."""
    import torch

    from .coverage_device import coverage_solve_device, weights_exact
    from .device import _on, prepare_on_device

    dev = values.device
    B, M = values.shape
    if coverage is None:
        raise ValueError(f"{OP}: mode='coverage' needs coverage=[B, M, L] bool")
    cov = _on(coverage, dev).to(torch.bool)
    if cov.ndim != 3 or tuple(cov.shape[:2]) != (B, M):
        raise ValueError(f"{OP}: coverage must be [B, M, L] with B={B}, M={M}, got {list(cov.shape)}")
    L = cov.shape[2]
    if coverage_weights is None:
        w = torch.ones((B, L), dtype=torch.float64, device=dev)
    else:
        w = _on(coverage_weights, dev, torch.float64)
        if tuple(w.shape) != (B, L):
            raise ValueError(f"{OP}: coverage_weights must be [B, L]=[{B}, {L}], got {list(w.shape)}")
        ok = bool(weights_exact(w))
        record_transfer(OP, "sync")
        if not ok:
            return None
    p = prepare_on_device(values, costs, budgets, groups, group_costs, lengths, token_buckets, MAX_STATES)
    if B == 0 or M == 0:
        return torch.zeros((B, M), dtype=torch.bool, device=dev)
    if p.lengths is not None:
        cov = cov & (torch.arange(M, device=dev)[None, :] < p.lengths[:, None])[:, :, None]
    record(OP, "triton")
    chosen = coverage_solve_device(p.values, p.icost, p.groups, p.gcost, p.caps, p.order, p.bstart, p.bend,
                                   p.pos_gc, cov, w, lam, max_iter=max_iter, lengths=p.lengths)
    if p.lengths is not None:
        chosen = chosen & (torch.arange(M, device=dev)[None, :] < p.lengths[:, None])
    return chosen


from .._compat import callable_package  # noqa: E402

callable_package(__name__, budget_solve)
