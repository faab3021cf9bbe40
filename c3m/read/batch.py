"""Stages the batched read path shares: every question embedded in one call, every (question, tenant) scored in
one ragged ``candidate_topk`` launch (every context is then selected in one solve: ``c3m.read.select``).

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
    idx [B, k] int64, -1 padded) as numpy. ``keys``: a ``KeyArena`` (its rows where ``placement`` says: the numpy
    matrix on the host, its cached device mirror otherwise), a numpy matrix, or a torch tensor already on
    ``device``. The one dense top-k of the read path: every caller (the Cold-Store channel, ``dense-topk``, the index
    pools through ``segments_topk``) comes here, so one device rule decides for all."""
    from c3m_kernels.candidate_topk import candidate_topk
    from c3m_kernels.dispatch import placement

    from .arena import KeyArena

    B = len(spans)
    if B == 0 or k == 0:
        return np.zeros((B, k), np.float32), np.full((B, k), -1, np.int64)
    ranges = np.asarray(spans, np.int64).reshape(B, 2)
    q = np.ascontiguousarray(queries, np.float32)
    at = placement(device, "candidate_topk")
    if isinstance(keys, KeyArena):
        keys = keys.device_keys(at.device) if at.tensors else keys.data
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
