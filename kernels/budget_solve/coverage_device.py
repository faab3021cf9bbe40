"""Coverage mode on the Triton path for device tensors: :func:`.coverage.coverage_solve` in torch, on the device.

The same loop, op for op (fp64, the same 1e-12 slacks, the same stable orders and first-index ties), calling the
Triton DP (:func:`.triton_impl.dp_launch`) on device tensors as its oracle. The host reads only small control-flow
values (which instances still move, the largest DP table of a sub-batch, round counts), each counted as a "sync".

Bit-for-bit equality with the numpy loop needs every floating sum to round as numpy's does. Sums over items
(``Rel``) follow numpy's pairwise summation exactly (:func:`_np_sum`). Sums over labels run through ``np.einsum``,
whose order is CPU-dispatched (SIMD width) and cannot be reproduced portably; they are exact, hence order-free,
when the label weights are integers (the default: all ones) with ``sum |w| < 2**53``. :func:`weights_exact` tests
that; other weights take the host loop.
"""
from __future__ import annotations

from ..dispatch import record_transfer
from .coverage import _order_noise

OP = "budget_solve"


def _sync(n: int = 1):
    record_transfer(OP, "sync", n)


def weights_exact(w) -> "object":
    """Device flag: label weights make every label sum exact (integers, finite, ``sum |w| < 2**53`` per row)."""
    import torch

    if w.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=w.device)
    return (torch.isfinite(w).all() & (w == w.round()).all()
            & (w.abs().sum(dim=1).max() < 2.0 ** 53))


def _np_sum(x):
    """``x.sum(-1)`` in numpy's order (``0.0 + pairwise_sum``, blocks of 128, eight accumulators)."""
    import torch

    def pw(a):
        n = a.shape[-1]
        if n < 8:
            res = torch.zeros(a.shape[:-1], dtype=a.dtype, device=a.device)
            for i in range(n):
                res = res + a[..., i]
            return res
        if n <= 128:
            r = a[..., 0:8].clone()
            i = 8
            while i < n - (n % 8):
                r = r + a[..., i:i + 8]
                i += 8
            res = ((r[..., 0] + r[..., 1]) + (r[..., 2] + r[..., 3])) + ((r[..., 4] + r[..., 5]) + (r[..., 6] + r[..., 7]))
            while i < n:
                res = res + a[..., i]
                i += 1
            return res
        n2 = n // 2
        n2 -= n2 % 8
        return pw(a[..., :n2]) + pw(a[..., n2:])

    return 0.0 + pw(x)


def _tight_minorant(chosen, values, cov, w, variant, rand):
    import torch

    B, M, L = cov.shape
    covered = (cov & chosen[:, :, None]).any(dim=1)
    marginal = _np_sum((cov & ~covered[:, None, :]) * w[:, None, :])  # exact: integer weights
    if variant == 0:
        outside = marginal
    elif variant == 1:
        outside = values + marginal
    else:
        outside = rand
    key = torch.where(chosen, values, outside)
    # np.lexsort((-key, ~chosen)): by ~chosen, then -key, then index (stable sorts; -0.0 folded into +0.0)
    _, p1 = torch.sort(-key + 0.0, dim=1, stable=True)
    _, p2 = torch.sort((~chosen).gather(1, p1).to(torch.int8), dim=1, stable=True)
    perm = p1.gather(1, p2)
    rank = torch.empty((B, M), dtype=torch.int64, device=cov.device)
    rank.scatter_(1, perm, torch.arange(M, device=cov.device).expand(B, M).contiguous())
    rmask = torch.where(cov, rank[:, :, None], M + 1)
    first = rmask.argmin(dim=1)  # [B, L]: first index of the minimum, as numpy
    has = cov.any(dim=1)
    h = torch.zeros((B, M), dtype=torch.float64, device=cov.device)
    h.scatter_add_(1, first, torch.where(has, w, 0.0))  # exact: integer weights
    return h


def _state(chosen, icost, groups, gcost, cov):
    import torch

    B, M = chosen.shape
    G = gcost.shape[1]
    ch = chosen.to(torch.int64)
    cnt = (ch[:, :, None] * cov.to(torch.int64)).sum(dim=1)
    gcnt = torch.zeros((B, max(G, 1)), dtype=torch.int64, device=chosen.device)
    sel = chosen & (groups >= 0)
    gcnt.scatter_add_(1, torch.where(sel, groups, 0), sel.to(torch.int64))
    cost = (ch[:, :, None] * icost).sum(dim=1)
    if G:
        cost = cost + ((gcnt[:, :G] > 0).to(torch.int64)[:, :, None] * gcost).sum(dim=1)
    return cnt, gcnt, cost


def _best_moves(chosen, values, icost, groups, gcost, caps, cov, covf, w, lam, gidx, gc_item):
    import torch

    B, M = chosen.shape
    G = gcost.shape[1]
    dev = chosen.device
    cnt, gcnt, cost = _state(chosen, icost, groups, gcost, cov)
    gcnt_pad = torch.cat([gcnt[:, :G], torch.full((B, 1), 10 ** 9, dtype=torch.int64, device=dev)], dim=1)
    gc_of = gcnt_pad.gather(1, gidx)
    new_g = gc_of == 0
    add_cost = cost[:, None, :] + icost + gc_item * new_g[:, :, None]
    add_ok = (~chosen) & (add_cost <= caps[:, None, :]).all(dim=2)
    unc = (cnt == 0).to(torch.float64) * w
    add_gain_raw = values + lam * _np_sum(covf * unc[:, None, :])  # label sums: exact (integer weights)
    ninf = torch.tensor(float("-inf"), dtype=torch.float64, device=dev)
    add_gain = torch.where(add_ok, add_gain_raw, ninf)
    only = (cnt == 1).to(torch.float64) * w
    loss_i = values + lam * _np_sum(covf * only[:, None, :])
    back = lam * _np_sum(covf[:, :, None, :] * only[:, None, None, :] * covf[:, None, :, :])
    sw_gain = -loss_i[:, :, None] + add_gain_raw[:, None, :] + back
    free_i = (gc_of == 1) & (groups >= 0)
    rm_cost = cost[:, None, :] - icost - gc_item * free_i[:, :, None]
    same = (groups[:, :, None] == groups[:, None, :]) & (groups[:, :, None] >= 0)
    gcount_after = gc_of[:, None, :] - same.to(torch.int64)
    newg_j = (gcount_after == 0) & (groups[:, None, :] >= 0)
    sw_cost = rm_cost[:, :, None, :] + icost[:, None, :, :] + gc_item[:, None, :, :] * newg_j[..., None]
    sw_ok = chosen[:, :, None] & (~chosen)[:, None, :] & (sw_cost <= caps[:, None, None, :]).all(dim=3)
    sw_gain = torch.where(sw_ok, sw_gain, ninf).reshape(B, M * M)
    best_add = add_gain.argmax(1)
    best_sw = sw_gain.argmax(1)
    return (best_add, add_gain.gather(1, best_add[:, None])[:, 0],
            best_sw, sw_gain.gather(1, best_sw[:, None])[:, 0])


def _rows(mask, rows):
    """``rows[mask]`` (the host learns how many: one sync)."""
    _sync()
    return rows[mask.nonzero()[:, 0]]


def local_search(chosen, values, icost, groups, gcost, caps, cov, w, lam, limit, limit_max: int):
    """:func:`.coverage.local_search`; ``limit [B]`` rounds per instance on the device, ``limit_max`` its max."""
    import torch

    chosen = chosen.clone()
    B, M = chosen.shape
    dev = chosen.device
    G = gcost.shape[1]
    covf = cov.to(torch.float64)
    gpad = torch.cat([gcost, torch.zeros((B, 1, 4), dtype=torch.int64, device=dev)], dim=1)
    gidx = torch.where(groups >= 0, groups, G)
    gc_item = gpad.gather(1, gidx[:, :, None].expand(B, M, 4))
    rows = torch.arange(B, device=dev)
    for round_ in range(limit_max if B else 0):
        rows = _rows(limit[rows] > round_, rows)
        if rows.numel() == 0:
            break
        r = rows
        best_add, ga, best_sw, gs = _best_moves(
            chosen[r], values[r], icost[r], groups[r], gcost[r], caps[r], cov[r], covf[r], w[r],
            lam, gidx[r], gc_item[r])
        do_add = (ga > 1e-12) & (ga >= gs)
        do_sw = (gs > 1e-12) & ~do_add
        chosen[r, best_add] = chosen[r, best_add] | do_add
        i, j = best_sw // M, best_sw % M
        chosen[r, i] = chosen[r, i] & ~do_sw
        chosen[r, j] = chosen[r, j] | do_sw
        rows = _rows(do_add | do_sw, r)
        if rows.numel() == 0:
            break
    return chosen


def coverage_solve_device(values, icost, groups, gcost, caps, order, bstart, bend, pos_gc, coverage, w, lam,
                          max_iter: int = 6, variants=(0, 1, 2), seed: int = 0, local_moves: bool = True,
                          lengths=None, block_s=None):
    """:func:`.coverage.coverage_solve` on the device. ``values`` f64, ``icost``/``groups``/``gcost``/``caps`` i64
    (``groups`` padded to -1, ``gcost`` in DP units), ``order``/``bstart``/``bend``/``pos_gc`` the DP's block
    structure, ``coverage`` bool ``[B, M, L]`` (padding cleared), ``w`` f64 ``[B, L]`` with integer entries
    (:func:`weights_exact`), ``lengths`` ``[B]`` i64 or None. Returns ``chosen [B, M]`` bool on the device."""
    import torch

    from .triton_impl import dp_launch

    B, M, L = coverage.shape
    dev = values.device
    cov = coverage
    states = torch.prod(caps + 1, dim=1)

    def obj(ch, rows=None):
        v, c, ww = (values, cov, w) if rows is None else (values[rows], cov[rows], w[rows])
        covered = (c & ch[:, :, None]).any(dim=1)
        return _np_sum(ch * v) + lam * _np_sum(covered * ww)

    def dp_stacked(value_sets, rows):
        V = len(value_sets)
        _sync()
        s_max = int(states[rows].max())
        out = dp_launch(torch.cat(value_sets), icost[rows].repeat(V, 1, 1), order[rows].repeat(V, 1),
                        bstart[rows].repeat(V, 1), bend[rows].repeat(V, 1), pos_gc[rows].repeat(V, 1, 1),
                        caps[rows].repeat(V, 1), s_max, block_s=block_s) != 0
        return list(torch.split(out, rows.numel()))

    all_rows = torch.arange(B, device=dev)
    starts = dp_stacked([values, values + lam * _np_sum(cov * w[:, None, :])], all_rows)
    best = starts[0].clone()
    best_obj = obj(best)
    if local_moves:
        limit = (2 * lengths) if lengths is not None else torch.full((B,), 2 * M, dtype=torch.int64, device=dev)
        _sync()
        limit_max = int(limit.max())
    for start, cur in enumerate(starts):
        cur = cur.clone()
        cur_obj = obj(cur)
        rows = all_rows
        for it in range(max_iter):
            base = cur[rows]
            n = rows.numel()
            improved = torch.zeros(n, dtype=torch.bool, device=dev)
            value_sets = []
            for var in variants:
                rand = None
                if var == 2:  # the same host stream as the numpy loop: M numbers, uploaded (not an input array)
                    record_transfer(OP, "upload")
                    rand = torch.as_tensor(_order_noise(seed, start, it, M), device=dev).expand(n, M)
                h = _tight_minorant(base, values[rows], cov[rows], w[rows], var, rand)
                value_sets.append(values[rows] + lam * h)
            for nxt in dp_stacked(value_sets, rows):
                nxt_obj = obj(nxt, rows)
                up = nxt_obj > cur_obj[rows] + 1e-12
                cur[rows] = torch.where(up[:, None], nxt, cur[rows])
                cur_obj[rows] = torch.where(up, nxt_obj, cur_obj[rows])
                improved |= up
            rows = _rows(improved, rows)
            if rows.numel() == 0:
                break
        if local_moves:
            cur = local_search(cur, values, icost, groups, gcost, caps, cov, w, lam, limit, limit_max)
            cur_obj = obj(cur)
        better = cur_obj > best_obj + 1e-12
        best = torch.where(better[:, None], cur, best)
        best_obj = torch.where(better, cur_obj, best_obj)
    return best
