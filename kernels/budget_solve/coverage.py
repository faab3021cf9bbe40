"""Coverage-aware selection: maximise ``Rel(S) + lam * Cov(S)`` under the same budgets.

``Cov(S) = sum_l w_l [some item of S covers label l]`` (labels: source sessions, relation labels,
clusters) is monotone submodular, so the objective is not additive and the exact DP does not apply
directly. Method (a modular-minorant / majorise-minimise loop that reuses the exact DP as an oracle):

1. Start points: the DP optimum of ``Rel`` alone, and the DP optimum of the *overcounting* modular
   upper bound ``v_m + lam * sum_l w_l C[m, l]``.
2. Given a current selection S, build the modular lower bound ``h`` that is tight at S: walk the items
   in an order that lists S first (by value), then the rest by marginal gain w.r.t. S, and credit each
   label to the first item in that order that covers it. For submodular ``Cov``, ``h(A) <= Cov(A)``
   for every A and ``h(S) = Cov(S)``.
3. Solve the additive problem ``v + lam * h`` exactly with the DP. Its answer A satisfies
   ``obj(A) >= Rel(A) + lam*h(A) >= Rel(S) + lam*h(S) = obj(S)``: the objective never decreases.
   Repeat until the selection stops changing (or ``max_iter``).
4. Polish each result with a batched local search (best "add j" or "swap i for j" move, feasibility
   checked in the DP's rounded-up units) until no move improves; it roughly halves the remaining
   gap. Return the best selection seen; all candidates are feasible by construction.

The measured mean gap to brute force is reported by ``benchmarks/kernels/bench_budget_solve.py`` and
printed by ``tests/kernels/test_budget_solve.py``.
"""
from __future__ import annotations

import numpy as np

from .cpu import dp_solve
from .reference import coverage_value


def _tight_minorant(chosen, values, cov, w, variant: int = 0, rand=None):
    """Modular lower bound ``h [B, M]`` of Cov, tight at ``chosen`` (see module docstring).

    ``variant`` picks the order of the items outside S (any order gives a valid minorant; different
    orders escape different local optima): 0 marginal gain, 1 value + marginal gain, 2 random
    (``rand``, shaped like ``values``).
    """
    B, M, L = cov.shape
    covered = np.any(cov & chosen[:, :, None], axis=1)  # [B, L]
    marginal = ((cov & ~covered[:, None, :]) * w[:, None, :]).sum(axis=2)  # gain w.r.t. S
    # order: chosen items first (by value desc), then the others by marginal gain desc
    if variant == 0:
        outside = marginal
    elif variant == 1:
        outside = values + marginal
    else:
        outside = rand
    key = np.where(chosen, values, outside)
    perm = np.lexsort((-key, ~chosen), axis=-1)
    rank = np.empty((B, M), np.int64)
    rank[np.arange(B)[:, None], perm] = np.arange(M)[None, :]
    big = M + 1
    rmask = np.where(cov, rank[:, :, None], big)  # [B, M, L]
    first = rmask.argmin(axis=1)  # [B, L]: item (by position) that gets the label's credit
    has = np.any(cov, axis=1)  # [B, L]
    h = np.zeros((B, M), np.float64)
    bb, ll = np.nonzero(has)
    np.add.at(h, (bb, first[bb, ll]), w[bb, ll])
    return h


def _state(chosen, icost, groups, gcost, cov):
    B, M = chosen.shape
    G = gcost.shape[1]
    ch = chosen.astype(np.int64)
    cnt = np.einsum("bm,bml->bl", ch, cov.astype(np.int64))
    gcnt = np.zeros((B, max(G, 1)), np.int64)
    bb, mm = np.nonzero(chosen & (groups >= 0))
    np.add.at(gcnt, (bb, groups[bb, mm]), 1)
    cost = np.einsum("bm,bmj->bj", ch, icost)
    if G:
        cost += np.einsum("bg,bgj->bj", (gcnt[:, :G] > 0).astype(np.int64), gcost)
    return cnt, gcnt, cost


def _best_moves(chosen, values, icost, groups, gcost, caps, cov, covf, w, lam, gidx, gc_item):
    """Best "add j" and best "swap i out, j in" move per instance, with their gains (-inf: none)."""
    B, M = chosen.shape
    G = gcost.shape[1]
    ar = np.arange(B)[:, None]
    cnt, gcnt, cost = _state(chosen, icost, groups, gcost, cov)
    # sentinel count for "no group": such items never open (or free) a group
    gcnt_pad = np.concatenate([gcnt[:, :G], np.full((B, 1), 10 ** 9)], axis=1)
    gc_of = gcnt_pad[ar, gidx]  # [B, M] chosen count of the item's group
    # add j
    new_g = (gc_of == 0)
    add_cost = cost[:, None, :] + icost + gc_item * new_g[:, :, None]
    add_ok = (~chosen) & np.all(add_cost <= caps[:, None, :], axis=2)
    unc = (cnt == 0).astype(np.float64) * w  # [B, L]
    add_gain_raw = values + lam * np.einsum("bml,bl->bm", covf, unc)
    add_gain = np.where(add_ok, add_gain_raw, -np.inf)
    # swap i (in) -> j (out of S)
    only = (cnt == 1).astype(np.float64) * w
    loss_i = values + lam * np.einsum("bml,bl->bm", covf, only)  # value lost removing i
    back = lam * np.einsum("bil,bl,bjl->bij", covf, only, covf)  # j re-covers i's unique labels
    sw_gain = -loss_i[:, :, None] + add_gain_raw[:, None, :] + back
    free_i = (gc_of == 1) & (groups >= 0)  # removing i frees its group cost
    rm_cost = cost[:, None, :] - icost - gc_item * free_i[:, :, None]  # [B, M, 4]
    same = (groups[:, :, None] == groups[:, None, :]) & (groups[:, :, None] >= 0)
    gcount_after = gc_of[:, None, :] - same.astype(np.int64)  # [B, i, j]
    newg_j = (gcount_after == 0) & (groups[:, None, :] >= 0)
    sw_cost = (rm_cost[:, :, None, :] + icost[:, None, :, :]
               + gc_item[:, None, :, :] * newg_j[..., None])
    sw_ok = (chosen[:, :, None] & (~chosen)[:, None, :]
             & np.all(sw_cost <= caps[:, None, None, :], axis=3))
    sw_gain = np.where(sw_ok, sw_gain, -np.inf).reshape(B, M * M)
    best_add = add_gain.argmax(1)
    best_sw = sw_gain.argmax(1)
    return best_add, add_gain[np.arange(B), best_add], best_sw, sw_gain[np.arange(B), best_sw]


def local_search(chosen, values, icost, groups, gcost, caps, cov, w, lam, max_rounds=None):
    """Batched best-improvement local search with "add j" and "swap i out, j in" moves.

    Feasibility is checked in the DP's units (bucketed tokens rounded up, clipped budgets), so every
    accepted move keeps the raw-token answer feasible. Each move strictly increases the objective;
    it stops when no move improves or after ``max_rounds`` rounds: an int, or one per instance
    (default 2·M). O(B·M²·L) per round, vectorised over the instances that still moved in the
    previous round.
    """
    chosen = chosen.copy()
    B, M = chosen.shape
    limit = np.broadcast_to(np.asarray(2 * M if max_rounds is None else max_rounds, np.int64), (B,))
    G = gcost.shape[1]
    covf = cov.astype(np.float64)
    gpad = np.concatenate([gcost, np.zeros((B, 1, 4), np.int64)], axis=1)  # index G = no group
    gidx = np.where(groups >= 0, groups, G)
    gc_item = np.take_along_axis(gpad, gidx[:, :, None], axis=1)  # [B, M, 4] group cost of item
    rows = np.arange(B)
    for round_ in range(int(limit.max()) if B else 0):
        rows = rows[limit[rows] > round_]
        if rows.size == 0:
            break
        r = rows
        best_add, ga, best_sw, gs = _best_moves(
            chosen[r], values[r], icost[r], groups[r], gcost[r], caps[r], cov[r], covf[r], w[r],
            lam, gidx[r], gc_item[r])
        do_add = (ga > 1e-12) & (ga >= gs)
        do_sw = (gs > 1e-12) & ~do_add
        chosen[r[do_add], best_add[do_add]] = True
        chosen[r[do_sw], best_sw[do_sw] // M] = False
        chosen[r[do_sw], best_sw[do_sw] % M] = True
        rows = r[do_add | do_sw]
        if rows.size == 0:
            break
    return chosen


def _dp_stacked(dp, value_sets, rows, icost, groups, gcost, caps):
    """One DP call for several value sets over the same ``rows``: the oracle calls of one iteration
    are independent, and one stacked batch lets the DP spread them over the cores (at B=1 the calls
    would otherwise run one after another on one core)."""
    V = len(value_sets)
    out = dp(np.concatenate(value_sets), np.tile(icost[rows], (V, 1, 1)),
             np.tile(groups[rows], (V, 1)), np.tile(gcost[rows], (V, 1, 1)),
             np.tile(caps[rows], (V, 1)))
    return np.split(out, V)


def _order_noise(seed: int, start: int, it: int, M: int) -> np.ndarray:
    """The random item order of variant 2 at (start, iteration): one row for every instance, drawn from
    its own stream, so an instance's result never depends on the batch around it (its position, the
    others' progress, or padding: a longer draw of one stream starts with the shorter one)."""
    return np.random.default_rng((seed, start, it)).random(M)


def coverage_solve(values, icost, groups, gcost, caps, coverage, coverage_weights, lam,
                   max_iter: int = 6, variants=(0, 1, 2), seed: int = 0,
                   local_moves: bool = True, dp=dp_solve, lengths=None):
    """Batched coverage-aware selection (see module docstring). Returns ``chosen [B, M]`` bool.

    ``dp`` is the exact additive solver used as the oracle (numba by default; the Triton one on GPU).
    ``lengths`` ``[B]``: instance b's real items are its first ``lengths[b]`` (the rest is padding, inert),
    which bounds its local search as if it were solved alone.
    """
    values = np.asarray(values, np.float64)
    cov = np.asarray(coverage, bool)
    B, M, L = cov.shape
    w = np.ones((B, L)) if coverage_weights is None else np.asarray(coverage_weights, np.float64)

    def obj(ch, rows=slice(None)):
        return (ch * values[rows]).sum(axis=1) + lam * coverage_value(ch, cov[rows], w[rows])

    all_rows = np.arange(B)
    starts = _dp_stacked(dp, [values, values + lam * (cov * w[:, None, :]).sum(axis=2)], all_rows,
                         icost, groups, gcost, caps)
    best = starts[0].copy()
    best_obj = obj(best)
    for start, cur in enumerate(starts):
        cur = cur.copy()
        cur_obj = obj(cur)
        rows = all_rows  # instances still improving: only these go back to the DP
        for it in range(max_iter):
            base = cur[rows]
            improved = np.zeros(rows.size, bool)
            value_sets = []
            for var in variants:
                rand = (np.broadcast_to(_order_noise(seed, start, it, M), (rows.size, M))
                        if var == 2 else None)
                h = _tight_minorant(base, values[rows], cov[rows], w[rows], var, rand)
                value_sets.append(values[rows] + lam * h)
            # every variant's minorant is built at ``base``, so their DPs are independent
            for nxt in _dp_stacked(dp, value_sets, rows, icost, groups, gcost, caps):
                nxt_obj = obj(nxt, rows)
                up = nxt_obj > cur_obj[rows] + 1e-12
                cur[rows[up]] = nxt[up]
                cur_obj[rows[up]] = nxt_obj[up]
                improved |= up
            rows = rows[improved]
            if rows.size == 0:
                break
        if local_moves:
            rounds = None if lengths is None else 2 * np.asarray(lengths, np.int64)
            cur = local_search(cur, values, icost, groups, gcost, caps, cov, w, lam, rounds)
            cur_obj = obj(cur)
        better = cur_obj > best_obj + 1e-12
        best = np.where(better[:, None], cur, best)
        best_obj = np.where(better, cur_obj, best_obj)
    return best
