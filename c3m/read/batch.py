"""Stages the batched read path shares: every question embedded in one call, every (question, tenant) scored in
one ragged ``candidate_topk`` launch, every context selected in one ``budget_solve``.

A service answers many users at once; per question, call overhead (an embedding call, a kernel launch, a
solver call on 48 items) dominates the arithmetic. ``MemoryMethod.retrieve_many`` implementations hand their
whole batch to these functions. Each is *batch-invariant*: a request's result is bit for bit what it gets in a
batch of one (pad-free embedding, per-(query, key) dot products in the ragged scan, per-instance padding in
the solver), which is what lets the per-question path be the batch path of one and the two be tested equal.

Device: every function takes the memory's device (``MemoryConfig.device``) and asks ``c3m_kernels.dispatch.placement``
(the one rule) which arrays to build: ``"cpu"`` keeps numpy arrays (the numba kernels; no torch import on the CLI
path; results exactly as before devices existed); ``"cuda"`` uploads each stage's inputs once as torch tensors, the
kernels take their Triton path, and each stage's output comes back to the host once, whole. (``"cpu"`` with Triton
forced by environment under ``TRITON_INTERPRET=1`` takes the CUDA code path on CPU tensors: the tests.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..models.base import embed_exact


def query_vectors(embedders: Sequence, questions: Sequence[str]) -> np.ndarray:
    """[n, dim] float32: question i embedded by ``embedders[i]``, one call per distinct embedder."""
    out: np.ndarray | None = None
    groups: dict[int, list[int]] = {}
    for i, e in enumerate(embedders):
        groups.setdefault(id(e), []).append(i)
    for idx in groups.values():
        emb = embedders[idx[0]]
        texts = list(dict.fromkeys(questions[i] for i in idx))
        got = dict(zip(texts, embed_exact(emb, texts)))
        if out is None:
            out = np.zeros((len(questions), emb.dim), np.float32)
        for i in idx:
            out[i] = got[questions[i]]
    return out if out is not None else np.zeros((0, 0), np.float32)


def ragged_topk(queries: np.ndarray, keys, spans: Sequence[tuple[int, int]], k: int, *, device: str = "cpu"):
    """Top-``k`` rows of ``keys[start:end]`` for each query (one launch): (scores [B, k] float32, global row
    idx [B, k] int64, -1 padded) as numpy. ``keys`` is a numpy matrix, or a torch tensor already on ``device``."""
    from c3m_kernels.candidate_topk import candidate_topk
    from c3m_kernels.dispatch import placement

    B = len(spans)
    if B == 0 or k == 0:
        return np.zeros((B, k), np.float32), np.full((B, k), -1, np.int64)
    ranges = np.asarray(spans, np.int64).reshape(B, 2)
    q = np.ascontiguousarray(queries, np.float32)
    at = placement(device, "candidate_topk")
    if not at.tensors:
        kk = keys if isinstance(keys, np.ndarray) else keys.numpy()
        return candidate_topk(q, np.ascontiguousarray(kk, np.float32), k, offsets=ranges)
    import torch

    kt = at.put(keys) if not torch.is_tensor(keys) else keys.to(at.device)
    s, i = candidate_topk(at.put(q, kt.dtype), kt, k, offsets=at.put(ranges))
    return s.float().cpu().numpy(), i.cpu().numpy()


def segments_topk(queries: np.ndarray, segments: Sequence[np.ndarray], k: int | Sequence[int], *,
                  device: str = "cpu") -> list[tuple[np.ndarray, np.ndarray]]:
    """Query b against its own small key set ``segments[b]`` ([n_b, d]), all in one ragged launch: per query
    (scores, local row idx) of its top ``k`` (or ``k[b]``), best first, no padding."""
    ks = [k] * len(segments) if isinstance(k, int) else list(k)
    sizes = [len(s) for s in segments]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    dim = queries.shape[1] if len(queries) else 0
    keys = (np.concatenate([np.asarray(s, np.float32).reshape(-1, dim) for s in segments])
            if segments and starts[-1] else np.zeros((0, dim), np.float32))
    kmax = max([min(kb, n) for kb, n in zip(ks, sizes)], default=0)
    scores, idx = ragged_topk(queries, keys, list(zip(starts[:-1], starts[1:])), kmax, device=device)
    out = []
    for b, (kb, n) in enumerate(zip(ks, sizes)):
        m = min(kb, n)
        out.append((scores[b, :m], idx[b, :m] - starts[b]))
    return out


def segments_scores(queries: np.ndarray, segments: Sequence[np.ndarray], *, device: str = "cpu") -> list[np.ndarray]:
    """Query b's inner products with every row of ``segments[b]``, in row order, from the same ragged launch (so
    a score is the same number whether it ranks a pool or routes a question)."""
    out = []
    for (scores, idx), seg in zip(segments_topk(queries, segments, [len(s) for s in segments], device=device),
                                  segments):
        row = np.zeros(len(seg), np.float32)
        row[idx] = scores
        out.append(row)
    return out


@dataclass
class SolveInstance:
    """One budget selection (``c3m_kernels.budget_solve``'s per-instance arrays) in coverage mode."""

    values: np.ndarray       # [M]
    costs: np.ndarray        # [M, 4]
    groups: np.ndarray       # [M] int, -1 = none
    group_costs: np.ndarray  # [G, 4]
    cover: np.ndarray        # [M, L] bool
    budget: np.ndarray       # [4]
    lam: float


def solve_many(instances: Sequence[SolveInstance], *, device: str = "cpu") -> list[np.ndarray]:
    """Every instance's chosen mask [M_b] bool, from one padded ``budget_solve`` call per distinct λ (padding is
    inert: ``lengths=``), each exactly what the instance gets alone; λ = 0 solves the exact knapsack. ``device``: the
    memory's device (module docstring): on CUDA the padded batch goes up once and the DP runs in Triton (fp32 values:
    an exact tie may pick another, equally good set); the masks come back once."""
    from c3m_kernels.budget_solve import budget_solve
    from c3m_kernels.dispatch import placement

    at = placement(device, "budget_solve")

    out: list[np.ndarray | None] = [None] * len(instances)
    by_lam: dict[float, list[int]] = {}
    for i, inst in enumerate(instances):
        if len(inst.values) == 0:
            out[i] = np.zeros(0, bool)
        else:
            by_lam.setdefault(float(inst.lam), []).append(i)
    for lam, idx in by_lam.items():
        group = [instances[i] for i in idx]
        B = len(group)
        M = max(len(g.values) for g in group)
        G = max(1, max(len(g.group_costs) for g in group))
        L = max(1, max(g.cover.shape[1] for g in group))
        values, costs = np.zeros((B, M)), np.zeros((B, M, 4))
        groups, gcost = np.full((B, M), -1, np.int64), np.zeros((B, G, 4))
        cover, budgets = np.zeros((B, M, L), bool), np.zeros((B, 4))
        for b, g in enumerate(group):
            m = len(g.values)
            values[b, :m], costs[b, :m], groups[b, :m] = g.values, g.costs, g.groups
            gcost[b, :len(g.group_costs)] = g.group_costs
            cover[b, :m, :g.cover.shape[1]] = g.cover
            budgets[b] = g.budget
        # λ = 0: nothing to cover, so the exact knapsack is the same objective (one DP, no coverage search)
        lengths = np.array([len(g.values) for g in group])
        if at.tensors:
            values, costs, budgets, groups, gcost, cover, lengths = (
                at.put(x) for x in (values, costs, budgets, groups, gcost, cover, lengths))
        chosen = at.host(budget_solve(values, costs, budgets, groups=groups, group_costs=gcost,
                                      mode="coverage" if lam else "exact", coverage=cover if lam else None, lam=lam,
                                      lengths=lengths))
        for b, i in enumerate(idx):
            out[i] = np.asarray(chosen[b, :len(instances[i].values)], bool)
    return out  # type: ignore[return-value]
