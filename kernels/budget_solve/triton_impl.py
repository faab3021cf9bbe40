"""Triton kernel for the exact budget DP: one program per instance, the whole batch in one launch.

Why: the serving path solves one small knapsack per query (B up to 65,536 at once); on a GPU each
instance maps to one program, and the DP tables live in a global scratch buffer that stays in L2.

Same algorithm as :mod:`.cpu` (group knapsack over (pages, raw, images, token buckets), "best value
with cost <= state" tables, decision bits, exact backtracking), restructured for SIMT:

* states are processed in blocks of BLOCK_S lanes; a state's coordinates are recomputed from its flat
  index (integer division), and "fits" masks replace the CPU's nested loops;
* an item update reads ``dpin[s - off]`` for all states before any write, so each item is two passes
  (compute into ``tmp``, then copy back) separated by ``tl.debug_barrier()``;
* the processing order (items sorted by group) and group boundaries are precomputed outside the kernel:
  :func:`block_structure` on the host for numpy inputs, :mod:`.device` in torch for device tensors.

Values are fp32 in the kernel (the CPU path uses fp64): objectives agree to fp32 rounding, and on exact
ties a different but equally good selection may be returned.
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl


@triton.jit
def _fits(s, s0, s1, s2, R, I, T, a0, a1, a2, a3):
    c0 = s // s0
    c1 = (s // s1) % (R + 1)
    c2 = (s // s2) % (I + 1)
    c3 = s % (T + 1)
    return (c0 >= a0) & (c1 >= a1) & (c2 >= a2) & (c3 >= a3)


@triton.jit
def _dp_kernel(val_ptr, icost_ptr, order_ptr, bstart_ptr, bend_ptr, gcost_ptr, caps_ptr,
               dp_ptr, dpin_ptr, tmp_ptr, take_ptr, gtake_ptr, chosen_ptr, M, S_MAX,
               BLOCK_S: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    P = tl.load(caps_ptr + b * 4 + 0)
    R = tl.load(caps_ptr + b * 4 + 1)
    I = tl.load(caps_ptr + b * 4 + 2)
    T = tl.load(caps_ptr + b * 4 + 3)
    s2 = T + 1
    s1 = (I + 1) * s2
    s0 = (R + 1) * s1
    S = (P + 1) * s0
    dp = dp_ptr + b * S_MAX
    dpin = dpin_ptr + b * S_MAX
    tmp = tmp_ptr + b * S_MAX
    take = take_ptr + b * M * S_MAX
    gtake = gtake_ptr + b * M * S_MAX
    lanes = tl.arange(0, BLOCK_S)
    for s_lo in range(0, S, BLOCK_S):
        s = s_lo + lanes
        tl.store(dp + s, tl.zeros([BLOCK_S], tl.float32), mask=s < S)
    tl.debug_barrier()
    for t in range(0, M):
        m = tl.load(order_ptr + b * M + t)
        gc0 = tl.load(gcost_ptr + (b * M + t) * 4 + 0)
        gc1 = tl.load(gcost_ptr + (b * M + t) * 4 + 1)
        gc2 = tl.load(gcost_ptr + (b * M + t) * 4 + 2)
        gc3 = tl.load(gcost_ptr + (b * M + t) * 4 + 3)
        if tl.load(bstart_ptr + b * M + t) != 0:  # enter the group: dpin = dp shifted by its cost
            goff = gc0 * s0 + gc1 * s1 + gc2 * s2 + gc3
            for s_lo in range(0, S, BLOCK_S):
                s = s_lo + lanes
                ok = (s < S) & _fits(s, s0, s1, s2, R, I, T, gc0, gc1, gc2, gc3)
                x = tl.load(dp + s - goff, mask=ok, other=float("-inf"))
                tl.store(dpin + s, x, mask=s < S)
            tl.debug_barrier()
        v = tl.load(val_ptr + b * M + m)
        if v > 0.0:
            a0 = tl.load(icost_ptr + (b * M + m) * 4 + 0)
            a1 = tl.load(icost_ptr + (b * M + m) * 4 + 1)
            a2 = tl.load(icost_ptr + (b * M + m) * 4 + 2)
            a3 = tl.load(icost_ptr + (b * M + m) * 4 + 3)
            off = a0 * s0 + a1 * s1 + a2 * s2 + a3
            for s_lo in range(0, S, BLOCK_S):
                s = s_lo + lanes
                live = s < S
                ok = live & _fits(s, s0, s1, s2, R, I, T, a0, a1, a2, a3)
                cur = tl.load(dpin + s, mask=live, other=float("-inf"))
                cand = tl.load(dpin + s - off, mask=ok, other=float("-inf")) + v
                better = ok & (cand > cur)
                tl.store(tmp + s, tl.where(better, cand, cur), mask=live)
                tl.store(take + m * S_MAX + s, better.to(tl.int8), mask=live)
            tl.debug_barrier()
            for s_lo in range(0, S, BLOCK_S):
                s = s_lo + lanes
                tl.store(dpin + s, tl.load(tmp + s, mask=s < S), mask=s < S)
            tl.debug_barrier()
        if tl.load(bend_ptr + b * M + t) != 0:  # leave the group: dp = max(dp, dpin)
            for s_lo in range(0, S, BLOCK_S):
                s = s_lo + lanes
                live = s < S
                a = tl.load(dp + s, mask=live, other=0.0)
                c = tl.load(dpin + s, mask=live, other=float("-inf"))
                up = live & (c > a)
                tl.store(dp + s, tl.where(up, c, a), mask=live)
                tl.store(gtake + t * S_MAX + s, up.to(tl.int8), mask=live)
            tl.debug_barrier()
    # backtrack (scalar): walk positions backwards; gtake is stored at each block's last position
    st = S - 1
    in_blk = tl.full([], 0, tl.int32)
    for tt in range(0, M):
        t = M - 1 - tt
        if tl.load(bend_ptr + b * M + t) != 0:
            in_blk = tl.load(gtake + t * S_MAX + st).to(tl.int32)
        if in_blk != 0:
            m = tl.load(order_ptr + b * M + t)
            if tl.load(take + m * S_MAX + st) != 0:
                tl.store(chosen_ptr + b * M + m, tl.full([], 1, tl.int8))
                st -= (tl.load(icost_ptr + (b * M + m) * 4 + 0) * s0
                       + tl.load(icost_ptr + (b * M + m) * 4 + 1) * s1
                       + tl.load(icost_ptr + (b * M + m) * 4 + 2) * s2
                       + tl.load(icost_ptr + (b * M + m) * 4 + 3))
            if tl.load(bstart_ptr + b * M + t) != 0:
                st -= (tl.load(gcost_ptr + (b * M + t) * 4 + 0) * s0
                       + tl.load(gcost_ptr + (b * M + t) * 4 + 1) * s1
                       + tl.load(gcost_ptr + (b * M + t) * 4 + 2) * s2
                       + tl.load(gcost_ptr + (b * M + t) * 4 + 3))
                in_blk = tl.full([], 0, tl.int32)


def block_structure(groups: np.ndarray, gcost: np.ndarray):
    """Host-side processing order: items sorted by group (-1 = its own block), block starts/ends and
    each position's group cost (nonzero only at block starts; zero for ungrouped items)."""
    B, M = groups.shape
    order = np.argsort(groups, axis=1, kind="stable")
    gs = np.take_along_axis(groups, order, 1)
    prev = np.concatenate([np.full((B, 1), -2), gs[:, :-1]], axis=1)
    nxt = np.concatenate([gs[:, 1:], np.full((B, 1), -2)], axis=1)
    bstart = (gs != prev) | (gs < 0)
    bend = (gs != nxt) | (gs < 0)
    pos_gc = np.zeros((B, M, 4), np.int64)
    if gcost.shape[1]:
        gpad = np.concatenate([gcost, np.zeros((B, 1, 4), np.int64)], axis=1)
        gidx = np.where(gs >= 0, gs, gcost.shape[1])
        pos_gc = np.take_along_axis(gpad, gidx[:, :, None], axis=1) * bstart[:, :, None]
    return order, bstart, bend, pos_gc


def dp_launch(values, icost, order, bstart, bend, pos_gc, caps, s_max: int, block_s: int | None = None):
    """Run the DP kernel on tensors already on one device (``block_structure``'s order and blocks); returns
    ``chosen [B, M]`` int8 on that device. ``s_max``: the largest ``prod(caps + 1)`` in the batch."""
    import os

    import torch

    B, M = values.shape
    device = values.device
    mem = B * s_max * (3 * 4 + 2 * M)
    if mem > 8 * 2 ** 30:
        raise MemoryError(f"budget_solve (triton): scratch would need {mem / 2**30:.1f} GiB; "
                          f"split the batch or lower token_buckets")
    interp = os.environ.get("TRITON_INTERPRET", "0") == "1"
    BLOCK_S = block_s or (64 if interp else 512)

    def t(x, dt):
        return x.to(dtype=dt).contiguous()

    dp = torch.empty((B, s_max), dtype=torch.float32, device=device)
    dpin = torch.empty_like(dp)
    tmp = torch.empty_like(dp)
    take = torch.zeros((B, M, s_max), dtype=torch.int8, device=device)
    gtake = torch.zeros((B, M, s_max), dtype=torch.int8, device=device)
    chosen = torch.zeros((B, M), dtype=torch.int8, device=device)
    _dp_kernel[(B,)](t(values, torch.float32), t(icost, torch.int64), t(order, torch.int64),
                     t(bstart, torch.int8), t(bend, torch.int8), t(pos_gc, torch.int64),
                     t(caps, torch.int64), dp, dpin, tmp, take, gtake, chosen, M, s_max,
                     BLOCK_S=BLOCK_S)
    return chosen


def dp_solve_triton(values, icost, groups, gcost, caps, device, block_s: int | None = None):
    """Exact batched DP on ``device`` (CUDA, or CPU under TRITON_INTERPRET=1). numpy in, numpy out: the
    coverage loop's oracle and numpy callers; device tensors take :mod:`.device` and :func:`dp_launch`."""
    import torch

    from ..dispatch import record_transfer

    B, M = values.shape
    if B == 0 or M == 0:
        return np.zeros((B, M), bool)
    S = np.prod(caps + 1, axis=1)
    S_MAX = int(S.max())
    order, bstart, bend, pos_gc = block_structure(groups, gcost)
    arrays = (values, icost, order, bstart, bend, pos_gc, caps)
    record_transfer("budget_solve", "upload", len(arrays))
    chosen = dp_launch(*(torch.from_numpy(np.ascontiguousarray(x)).to(device) for x in arrays), S_MAX,
                       block_s=block_s)
    record_transfer("budget_solve", "download")
    return chosen.cpu().numpy().astype(bool)
