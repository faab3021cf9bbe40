"""Exact batched DP for the BMER reader budget (numba, parallel over instances).

Problem per instance: choose items maximising ``sum(values)`` subject to, in every dimension
j in (pages, raw nodes, images, tokens), ``sum(item costs) + sum(costs of touched groups) <= budget``.
A group (a memory page) is charged once when any of its items is chosen.

Method: a group knapsack over a 4-D state grid ``(pages, raw, images, token_buckets)`` where
``dp[s]`` is the best value with cost <= s in every dimension. For each group: enter it (shift by
the group cost), run 0/1 knapsack over its items on that copy, and keep the elementwise max with the
"skip the group" table. Decision bits (per item, per group, per state) allow exact backtracking.
Ungrouped items are singleton groups with zero group cost.

Token costs are converted to buckets of ``delta`` tokens, each item's (and group's) cost rounded *up*
and the budget rounded *down*, so any DP-feasible choice is feasible in raw tokens. When
``delta == 1`` and token costs are integers the DP is exactly optimal.
"""
from __future__ import annotations

import numpy as np

from .._compat import njit, prange


@njit
def _dp_one(b, values, icost, groups, gcost, caps, chosen):  # pragma: no cover - numba
    """Solve instance ``b``. values [B,M] f64, icost [B,M,4] i64 (tokens in buckets), groups [B,M]
    i64 (-1 = none), gcost [B,G,4] i64, caps [B,4] i64 (clipped budgets), chosen [B,M] u1 (out)."""
    M = values.shape[1]
    P = caps[b, 0]
    R = caps[b, 1]
    I = caps[b, 2]
    T = caps[b, 3]
    s3 = 1
    s2 = T + 1
    s1 = (I + 1) * s2
    s0 = (R + 1) * s1
    S = (P + 1) * s0
    c0 = np.empty(S, np.int64)
    c1 = np.empty(S, np.int64)
    c2 = np.empty(S, np.int64)
    c3 = np.empty(S, np.int64)
    for s in range(S):
        c0[s] = s // s0
        c1[s] = (s // s1) % (R + 1)
        c2[s] = (s // s2) % (I + 1)
        c3[s] = s % (T + 1)
    # group order: sort items by group id; -1 items each form their own zero-cost group
    order = np.argsort(groups[b], kind="mergesort")
    # count sequence blocks
    nblk = 0
    blk_start = np.empty(M + 1, np.int64)
    blk_gid = np.empty(M, np.int64)
    t = 0
    while t < M:
        g = groups[b, order[t]]
        blk_start[nblk] = t
        blk_gid[nblk] = g
        u = t + 1
        if g >= 0:
            while u < M and groups[b, order[u]] == g:
                u += 1
        t = u
        nblk += 1
    blk_start[nblk] = M
    dp = np.zeros(S, np.float64)
    dpin = np.empty(S, np.float64)
    take = np.zeros((M, S), np.uint8)
    gtake = np.zeros((nblk, S), np.uint8)
    for q in range(nblk):
        g = blk_gid[q]
        gc0 = 0
        gc1 = 0
        gc2 = 0
        gc3 = 0
        if g >= 0:
            gc0 = gcost[b, g, 0]
            gc1 = gcost[b, g, 1]
            gc2 = gcost[b, g, 2]
            gc3 = gcost[b, g, 3]
        goff = gc0 * s0 + gc1 * s1 + gc2 * s2 + gc3 * s3
        if goff == 0:
            for s in range(S):
                dpin[s] = dp[s]
        else:
            for s in range(S):
                if c0[s] >= gc0 and c1[s] >= gc1 and c2[s] >= gc2 and c3[s] >= gc3:
                    dpin[s] = dp[s - goff]
                else:
                    dpin[s] = -np.inf
        for t in range(blk_start[q], blk_start[q + 1]):
            m = order[t]
            v = values[b, m]
            if not v > 0.0:
                continue
            a0 = icost[b, m, 0]
            a1 = icost[b, m, 1]
            a2 = icost[b, m, 2]
            a3 = icost[b, m, 3]
            off = a0 * s0 + a1 * s1 + a2 * s2 + a3 * s3
            # descending over the states that fit the item (no per-state bounds checks); the
            # source s - off is always visited later, so this is a correct in-place 0/1 update
            for p in range(P, a0 - 1, -1):
                for r in range(R, a1 - 1, -1):
                    for i in range(I, a2 - 1, -1):
                        base = p * s0 + r * s1 + i * s2
                        for tt in range(T, a3 - 1, -1):
                            s = base + tt
                            cand = dpin[s - off] + v
                            if cand > dpin[s]:
                                dpin[s] = cand
                                take[m, s] = 1
        for s in range(S):
            if dpin[s] > dp[s]:
                dp[s] = dpin[s]
                gtake[q, s] = 1
    # backtrack from the full-budget state
    s = S - 1
    for q in range(nblk - 1, -1, -1):
        if gtake[q, s] == 0:
            continue
        for t in range(blk_start[q + 1] - 1, blk_start[q] - 1, -1):
            m = order[t]
            if take[m, s] == 1:
                chosen[b, m] = 1
                s -= (icost[b, m, 0] * s0 + icost[b, m, 1] * s1 + icost[b, m, 2] * s2
                      + icost[b, m, 3] * s3)
        g = blk_gid[q]
        if g >= 0:
            s -= gcost[b, g, 0] * s0 + gcost[b, g, 1] * s1 + gcost[b, g, 2] * s2 + gcost[b, g, 3]


@njit(parallel=True)
def _dp_batch(values, icost, groups, gcost, caps, chosen):  # pragma: no cover - numba
    for b in prange(values.shape[0]):
        _dp_one(b, values, icost, groups, gcost, caps, chosen)


@njit
def _dp_batch_serial(values, icost, groups, gcost, caps, chosen):  # pragma: no cover - numba
    """Same, without threads: a parallel launch costs more than a tiny batch."""
    for b in range(values.shape[0]):
        _dp_one(b, values, icost, groups, gcost, caps, chosen)


#: batches with less DP work than this (sum over instances of states x items) use the serial
#: kernel: a parallel launch costs more than it saves on one question's solves (2-3 BMER-sized instances,
#: ~2e6 state-item updates each: c3m's per-question read was 45 ms mean / 73 ms p95 with them parallel and
#: 35 / 51 ms serial on 2 cores, benchmarks/results/e2e-read-cpu); a batch of many questions is parallel
SERIAL_MAX_WORK = 1 << 24


def prepare_dp_inputs(costs, budgets, groups, group_costs, token_buckets: int):
    """Bucket tokens (costs up, budget down) and clip count budgets to what could be spent.

    Returns ``(icost [B,M,4] i64, gcost [B,G,4] i64, caps [B,4] i64, delta [B] f64)``.
    """
    costs = np.asarray(costs, np.float64)
    budgets = np.asarray(budgets, np.float64)
    B, M = costs.shape[:2]
    tok_budget = budgets[:, 3]
    delta = np.maximum(1.0, np.ceil(tok_budget / float(token_buckets)))
    icost = np.empty((B, M, 4), np.int64)
    icost[:, :, :3] = np.ceil(costs[:, :, :3] - 1e-9)
    icost[:, :, 3] = np.ceil(costs[:, :, 3] / delta[:, None] - 1e-9)
    gcost = np.asarray(group_costs, np.float64)
    gi = np.empty(gcost.shape, np.int64)
    gi[:, :, :3] = np.ceil(gcost[:, :, :3] - 1e-9)
    gi[:, :, 3] = np.ceil(gcost[:, :, 3] / delta[:, None] - 1e-9)
    caps = np.empty((B, 4), np.int64)
    caps[:, :3] = np.floor(budgets[:, :3] + 1e-9)
    caps[:, 3] = np.floor(tok_budget / delta + 1e-9)
    # never allocate states that no selection can reach
    reach = icost.sum(axis=1) + (gi.sum(axis=1) if gi.shape[1] else 0)
    caps = np.minimum(caps, reach)
    caps = np.maximum(caps, 0)
    return icost, np.ascontiguousarray(gi), caps, delta


def dp_solve(values, icost, groups, gcost, caps):
    """Run the batched DP; ``values`` ``[B, M]`` (items with value <= 0 are never chosen)."""
    B, M = values.shape
    chosen = np.zeros((B, M), np.uint8)
    if B == 0 or M == 0:
        return chosen.astype(bool)
    if gcost.shape[1] == 0:
        gcost = np.zeros((B, 1, 4), np.int64)
    work = int(np.prod(np.asarray(caps, np.int64) + 1, axis=1).sum()) * M
    kernel = _dp_batch_serial if B == 1 or work < SERIAL_MAX_WORK else _dp_batch
    kernel(np.ascontiguousarray(values, np.float64), np.ascontiguousarray(icost, np.int64),
              np.ascontiguousarray(groups, np.int64), np.ascontiguousarray(gcost, np.int64),
              np.ascontiguousarray(caps, np.int64), chosen)
    return chosen.astype(bool)
