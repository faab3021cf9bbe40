"""Shared setup for the c3m_kernels tests.

TRITON_INTERPRET=1 must be in the environment before anything imports triton, so that Triton kernels
run on CPU tensors (slowly) when no CUDA device exists. Set it here, at conftest import time.
"""
import os

import numpy as np
import pytest

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # torch missing: only the numpy-level tests can run
    torch = None
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def topk_violations(q, keys, k, scores, idx, starts=None, ends=None, mask=None, atol=1e-4):
    """Tie-aware check of a top-k answer against float64 ground truth; returns a list of problems.

    Accepts any order among equal scores: instead of comparing index lists, it checks that every
    returned index is searchable for that query, unique, reported with its true score, and scores at
    least the true k-th best score (minus ``atol``), and that the padding count is exact.
    """
    q = np.asarray(q, np.float64)
    keys = np.asarray(keys, np.float64)
    scores = np.asarray(scores, np.float64)
    idx = np.asarray(idx)
    B, N = q.shape[0], keys.shape[0]
    probs = []
    if scores.shape != (B, k) or idx.shape != (B, k):
        return [f"shapes {scores.shape}/{idx.shape} != {(B, k)}"]
    for b in range(B):
        lo = 0 if starts is None else int(starts[b])
        hi = N if ends is None else int(ends[b])
        allowed = np.arange(lo, hi)
        if mask is not None:
            m = np.asarray(mask)
            allowed = allowed[(m[lo:hi] if m.ndim == 1 else m[b, lo:hi]).astype(bool)]
        truth = keys[allowed] @ q[b] if len(allowed) else np.zeros(0)
        nv = min(k, len(allowed))
        if not np.all(idx[b, nv:] == -1) or not np.all(np.isneginf(scores[b, nv:])):
            probs.append(f"b={b}: padding wrong after {nv} valid: {idx[b].tolist()}")
            continue
        got = idx[b, :nv]
        if len(set(got.tolist())) != nv:
            probs.append(f"b={b}: duplicate indices {got.tolist()}")
            continue
        if nv == 0:
            continue
        if not np.all(np.isin(got, allowed)):
            probs.append(f"b={b}: indices outside the allowed set: {sorted(set(got) - set(allowed))}")
            continue
        true_of_got = keys[got] @ q[b]
        err = np.abs(true_of_got - scores[b, :nv])
        if err.max() > atol:
            j = int(err.argmax())
            probs.append(f"b={b}: slot {j} idx {got[j]} reported {scores[b, j]} true {true_of_got[j]}")
        if np.any(np.diff(scores[b, :nv]) > atol):
            probs.append(f"b={b}: scores not descending {scores[b, :nv].tolist()}")
        kth = np.sort(truth)[::-1][nv - 1]
        if true_of_got.min() < kth - atol:
            probs.append(f"b={b}: idx {got[true_of_got.argmin()]} scores {true_of_got.min()} "
                         f"below the true k-th score {kth}")
    return probs


@pytest.fixture
def check_topk():
    def _check(*args, **kwargs):
        probs = topk_violations(*args, **kwargs)
        assert not probs, "top-k mismatch (worst first 5):\n" + "\n".join(probs[:5])
    return _check
