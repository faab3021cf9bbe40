"""Brute-force reference for ``budget_solve``: enumerate every subset (small M only).

This is the ground truth for the tests and for the measured optimality gaps: it uses the *raw*
(unbucketed) token costs, so it is the true optimum of the stated problem.
"""
from __future__ import annotations

import numpy as np

MAX_BRUTE_M = 20


def selection_cost(chosen, costs, groups=None, group_costs=None):
    """Cost ``[B, 4]`` of a selection: item costs plus each touched group's cost, charged once.

    ``chosen`` ``[B, M]`` bool, ``costs`` ``[B, M, 4]``, ``groups`` ``[B, M]`` ints in ``[-1, G)``,
    ``group_costs`` ``[B, G, 4]``. Plain numpy; used by the tests and benchmarks.
    """
    chosen = np.asarray(chosen, bool)
    costs = np.asarray(costs, np.float64)
    total = np.einsum("bm,bmj->bj", chosen.astype(np.float64), costs)
    if groups is not None:
        groups = np.asarray(groups, np.int64)
        group_costs = np.asarray(group_costs, np.float64)
        B, G = group_costs.shape[:2]
        touched = np.zeros((B, G), bool)
        bb, mm = np.nonzero(chosen & (groups >= 0))
        touched[bb, groups[bb, mm]] = True
        total += np.einsum("bg,bgj->bj", touched.astype(np.float64), group_costs)
    return total


def coverage_value(chosen, coverage, coverage_weights=None):
    """``Cov(S) = sum_l w_l [some chosen item covers l]`` per instance, ``[B]`` float64."""
    chosen = np.asarray(chosen, bool)
    cov = np.asarray(coverage, bool)
    covered = np.any(cov & chosen[:, :, None], axis=1)  # [B, L]
    w = np.ones(covered.shape) if coverage_weights is None else np.asarray(coverage_weights, float)
    return (covered * w).sum(axis=1)


def objective(chosen, values, coverage=None, coverage_weights=None, lam=0.0):
    """``Rel(S) + lam * Cov(S)`` per instance (``Rel`` = sum of chosen values)."""
    rel = (np.asarray(chosen, bool) * np.asarray(values, np.float64)).sum(axis=1)
    if coverage is None or lam == 0:
        return rel
    return rel + lam * coverage_value(chosen, coverage, coverage_weights)


def budget_solve_bruteforce(values, costs, budgets, groups=None, group_costs=None, *,
                            coverage=None, coverage_weights=None, lam=0.0):
    """Optimal ``chosen [B, M]`` by enumerating all ``2^M`` subsets per instance (``M <= 20``).

    Ties between equal-objective subsets go to the lowest subset bitmask. Raises ``ValueError`` for
    ``M > 20`` (2^M subsets would not fit in memory).
    """
    values = np.asarray(values, np.float64)
    costs = np.asarray(costs, np.float64)
    budgets = np.asarray(budgets, np.float64)
    B, M = values.shape
    if M > MAX_BRUTE_M:
        raise ValueError(f"budget_solve_bruteforce: M={M} items > {MAX_BRUTE_M}; brute force needs "
                         f"2^M subsets. Use budget_solve(mode='exact') for larger M")
    subsets = ((np.arange(2 ** M)[:, None] >> np.arange(M)[None, :]) & 1).astype(bool)  # [S, M]
    out = np.zeros((B, M), bool)
    for b in range(B):
        ch = subsets
        c = ch.astype(np.float64) @ costs[b]  # [S, 4]
        if groups is not None:
            g = np.asarray(groups[b], np.int64)
            gc = np.asarray(group_costs[b], np.float64)
            G = gc.shape[0]
            onehot = np.zeros((M, G))
            ok = g >= 0
            onehot[np.nonzero(ok)[0], g[ok]] = 1
            touched = (ch.astype(np.float64) @ onehot) > 0
            c = c + touched.astype(np.float64) @ gc
        feas = np.all(c <= budgets[b][None, :] + 1e-9, axis=1)
        obj = ch.astype(np.float64) @ values[b]
        if coverage is not None and lam != 0:
            cov = np.asarray(coverage[b], bool)  # [M, L]
            w = np.ones(cov.shape[1]) if coverage_weights is None else np.asarray(coverage_weights[b])
            covered = (ch.astype(np.float64) @ cov.astype(np.float64)) > 0
            obj = obj + lam * (covered.astype(np.float64) @ w)
        obj = np.where(feas, obj, -np.inf)
        out[b] = subsets[int(np.argmax(obj))]
    return out
