"""``budget_solve``'s checks and DP preparation in torch, on the inputs' own device (the Triton path).

Why: the host path validates and prepares in numpy (``__init__`` and :func:`.cpu.prepare_dp_inputs`); given
device tensors, that copies every input to the host and the prepared arrays back. Here the same checks and the
same arithmetic (fp64, the same 1e-9 slack, the same stable group order as
:func:`.triton_impl.block_structure`) run where the tensors live, so the DP gets exactly the arrays the host
path would give it. The host reads one small tensor per call: the checks' verdicts and the largest DP table,
which it needs anyway to raise a clear error and to size the launch.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..dispatch import record_transfer

OP = "budget_solve"


class Prepared(NamedTuple):
    """The DP's inputs on the device: padded items zeroed, tokens bucketed, budgets clipped, groups ordered."""

    values: "object"       # [B, M] f64
    icost: "object"        # [B, M, 4] i64
    order: "object"        # [B, M] i64: items sorted by group (stable)
    bstart: "object"       # [B, M] bool: position starts a group block
    bend: "object"         # [B, M] bool: position ends a group block
    pos_gc: "object"       # [B, M, 4] i64: group cost charged at a block's start
    caps: "object"         # [B, 4] i64
    lengths: "object"      # [B] i64 or None
    s_max: int             # largest DP table (states) in the batch
    groups: "object" = None  # [B, M] i64: groups, padding set to -1 (coverage mode's local search)
    gcost: "object" = None   # [B, G, 4] i64: group costs in DP units (``prepare_dp_inputs``'s ``gi``)


def _on(x, dev, dtype=None):
    """``x`` as a tensor on ``dev``; a host array (or a tensor elsewhere) is copied there, and counted."""
    import torch

    if torch.is_tensor(x):
        if x.device != dev:
            record_transfer(OP, "upload")
        return x.to(device=dev, dtype=dtype or x.dtype)
    record_transfer(OP, "upload")
    return torch.as_tensor(np.asarray(x), device=dev, dtype=dtype)


def _is_int(t) -> bool:
    """numpy's ``dtype.kind in "iu"`` for a tensor."""
    import torch

    return not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool)


def _not_int(x, upto: int):
    """True where ``x[..., :upto]`` is more than 1e-9 from an integer (the host path's test)."""
    return ((x[..., :upto] - x[..., :upto].round()).abs() > 1e-9).any()


def prepare_on_device(values, costs, budgets, groups, group_costs, lengths, token_buckets: int,
                      max_states: int) -> Prepared:
    """Validate (the host path's ``ValueError`` messages) and prepare on ``values.device``; exact mode only.

    Shapes and dtypes are checked for free; the value checks are reduced to flags on the device and read in one
    fetch together with the sizes the launch needs."""
    import torch

    dev = values.device
    f64, i64 = torch.float64, torch.int64
    v = values.to(f64)
    if v.ndim != 2:
        raise ValueError(f"{OP}: values must be [B, M], got shape {list(v.shape)}")
    B, M = v.shape
    c = _on(costs, dev, f64)
    if tuple(c.shape) != (B, M, 4):
        raise ValueError(f"{OP}: costs must be [B, M, 4]=[{B}, {M}, 4] (pages, raw nodes, images, "
                         f"tokens), got {list(c.shape)}")
    bud = _on(budgets, dev, f64)
    if tuple(bud.shape) == (4,):
        bud = bud.expand(B, 4)
    if tuple(bud.shape) != (B, 4):
        raise ValueError(f"{OP}: budgets must be [B, 4] or [4], got {list(bud.shape)}")
    g = torch.full((B, M), -1, dtype=i64, device=dev)
    gc = None
    if groups is not None:
        g = _on(groups, dev)
        if tuple(g.shape) != (B, M) or not _is_int(g):
            raise ValueError(f"{OP}: groups must be an int array [B, M]=[{B}, {M}], got "
                             f"{list(g.shape)} {g.dtype}")
        g = g.to(i64)
        if group_costs is not None:
            gc = _on(group_costs, dev, f64)
            if gc.ndim == 2:
                gc = gc.expand(B, *gc.shape)
            if gc.ndim != 3 or gc.shape[0] != B or gc.shape[2] != 4:
                raise ValueError(f"{OP}: group_costs must be [B, G, 4] or [G, 4] with G > max(groups), got "
                                 f"{list(gc.shape)}")
    n = None
    if lengths is not None:
        n = _on(lengths, dev)
        if tuple(n.shape) != (B,) or not _is_int(n):
            raise ValueError(f"{OP}: lengths must be [B]=[{B}] ints in [0, M={M}], got {list(n.shape)} {n.dtype}")
        n = n.to(i64)
    if not isinstance(token_buckets, int) or token_buckets < 1:
        raise ValueError(f"{OP}: token_buckets must be a positive int, got {token_buckets!r}")

    no = torch.zeros((), dtype=torch.bool, device=dev)
    G = g.max() + 1 if g.numel() else torch.zeros((), dtype=i64, device=dev)  # before padding, as on the host
    flags = {
        "costs": ~(torch.isfinite(c).all() & (c >= 0).all()),
        "values": ~torch.isfinite(v).all(),
        "budgets": (bud < 0).any() | torch.isnan(bud).any(),
        "integer": _not_int(c, 3),
        "groups": (g < -1).any() if groups is not None else no,
        "gc_rows": (G > gc.shape[1]) if gc is not None else no,
        "gc_values": ((gc < 0).any() | _not_int(gc, 3)) if gc is not None else no,
        "lengths": ((n < 0).any() | (n > M).any()) if n is not None else no,
    }

    # the host path's preparation (``__init__`` then ``prepare_dp_inputs``), op for op
    bud = torch.where(torch.isinf(bud), torch.full_like(bud, 1e12), bud)
    if n is not None:
        pad = torch.arange(M, device=dev)[None, :] >= n[:, None]
        v = torch.where(pad, 0.0, v)
        c = torch.where(pad[:, :, None], 0.0, c)
        g = torch.where(pad, -1, g)
    tok = bud[:, 3]
    delta = torch.clamp_min(torch.ceil(tok / float(token_buckets)), 1.0)
    icost = torch.cat([torch.ceil(c[:, :, :3] - 1e-9), torch.ceil(c[:, :, 3:] / delta[:, None, None] - 1e-9)],
                      dim=2).to(i64)
    caps = torch.cat([torch.floor(bud[:, :3] + 1e-9), torch.floor(tok / delta + 1e-9)[:, None]], dim=1).to(i64)
    reach = icost.sum(dim=1)
    if gc is not None:
        gi = torch.cat([torch.ceil(gc[:, :, :3] - 1e-9), torch.ceil(gc[:, :, 3:] / delta[:, None, None] - 1e-9)],
                       dim=2).to(i64)
        reach = reach + gi.sum(dim=1)
    elif groups is not None:  # one page per group, every group 0..G-1 counted (the host path's [B, G, 4])
        reach = reach + torch.stack([G, *(torch.zeros_like(G),) * 3])[None, :]
    caps = torch.clamp_min(torch.minimum(caps, reach), 0)

    gs, order = torch.sort(g, dim=1, stable=True)
    edge = torch.full((B, 1), -2, dtype=i64, device=dev)
    bstart = (gs != torch.cat([edge, gs[:, :-1]], dim=1)) | (gs < 0)
    bend = (gs != torch.cat([gs[:, 1:], edge], dim=1)) | (gs < 0)
    if gc is not None:
        Gc = gc.shape[1]
        gpad = torch.cat([gi, torch.zeros((B, 1, 4), dtype=i64, device=dev)], dim=1)
        gidx = torch.where((gs >= 0) & (gs < Gc), gs, Gc)  # clamped: out-of-range ids are flagged, never read
        pos_gc = torch.gather(gpad, 1, gidx[:, :, None].expand(B, M, 4)) * bstart[:, :, None]
    else:
        pos_gc = torch.zeros((B, M, 4), dtype=i64, device=dev)
        if groups is not None:
            pos_gc[:, :, 0] = (bstart & (gs >= 0)).to(i64)

    states = torch.prod(caps + 1, dim=1)
    s_max = states.max() if B and M else torch.zeros((), dtype=i64, device=dev)
    got = torch.stack([*(f.to(i64) for f in flags.values()), G.to(i64), s_max.to(i64)]).tolist()
    record_transfer(OP, "sync")
    bad = dict(zip(flags, got))
    G_host, s_max_host = got[-2], got[-1]
    if bad["costs"]:
        raise ValueError(f"{OP}: costs must be finite and >= 0")
    if bad["values"]:
        raise ValueError(f"{OP}: values must be finite")
    if bad["budgets"]:
        raise ValueError(f"{OP}: budgets must be >= 0")
    if bad["integer"]:
        raise ValueError(f"{OP}: costs[..., 0:3] (pages, raw nodes, images) must be integers")
    if bad["groups"]:
        raise ValueError(f"{OP}: groups must be >= -1 (-1 = no group)")
    if bad["gc_rows"]:
        raise ValueError(f"{OP}: group_costs must be [B, G, 4] or [G, 4] with G > max(groups)"
                         f"={G_host - 1}, got {list(gc.shape)}")
    if bad["gc_values"]:
        raise ValueError(f"{OP}: group_costs must be >= 0 with integer page/raw/image costs")
    if bad["lengths"]:
        raise ValueError(f"{OP}: lengths must be [B]=[{B}] ints in [0, M={M}], got {list(n.shape)} {n.dtype}")
    if s_max_host > max_states:  # the error path may fetch what its message names
        b = int(states.argmax())
        raise ValueError(
            f"{OP}: instance {b} needs {int(states[b])} DP states (> {max_states}) for clipped "
            f"budgets {caps[b].tolist()} (pages, raw, images, token buckets); lower "
            f"token_buckets or the count budgets")
    if gc is None:  # the host path's default group costs (one page per group, G = max(groups) + 1), in DP units
        gi = torch.zeros((B, G_host if groups is not None else 0, 4), dtype=i64, device=dev)
        gi[:, :, 0] = 1
    return Prepared(v, icost, order, bstart, bend, pos_gc, caps, n, int(s_max_host), g, gi)
