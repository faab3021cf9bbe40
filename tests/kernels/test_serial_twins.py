"""The serial twins of the parallel CPU kernels (used for small inputs: one query, a few dozen entries) give the
same results as the parallel kernels."""
import numpy as np

from c3m_kernels import anchor_scores, build_anchor_graph
from c3m_kernels.anchor_scores import cpu as anchor_cpu
from c3m_kernels.candidate_topk import candidate_topk
from c3m_kernels.candidate_topk import cpu as topk_cpu


def test_ragged_scan_serial_equals_parallel(monkeypatch):
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((400, 32)).astype(np.float32)
    keys[7] = keys[3]  # a tie
    q = rng.standard_normal((5, 32)).astype(np.float32)
    offsets = np.array([0, 0, 37, 200, 201, 400])
    monkeypatch.setattr(topk_cpu, "SERIAL_SCAN_WORK", 1 << 60)
    serial = candidate_topk(q, keys, 9, offsets=offsets, backend="cpu")
    monkeypatch.setattr(topk_cpu, "SERIAL_SCAN_WORK", 0)
    parallel = candidate_topk(q, keys, 9, offsets=offsets, backend="cpu")
    assert np.array_equal(serial[0], parallel[0]) and np.array_equal(serial[1], parallel[1])


def test_anchor_kernels_serial_equal_parallel(monkeypatch):
    rng = np.random.default_rng(1)
    E, A = 60, 40
    sets = [sorted(rng.choice(A, size=rng.integers(0, 6), replace=False)) for _ in range(E)]
    indptr = np.zeros(E + 1, np.int64)
    np.cumsum([len(s) for s in sets], out=indptr[1:])
    flat = np.array([a for s in sets for a in s], np.int64)
    idf = rng.random(A) + 0.1
    sim = rng.random((3, A))
    seeds = np.array([[0, 5, -1], [10, -1, -1], [3, 4, 50]], np.int64)
    out = {}
    for name, limit in (("serial", 1 << 60), ("parallel", 0)):
        monkeypatch.setattr(anchor_cpu, "SERIAL_POSTINGS", limit)
        g = build_anchor_graph(indptr, flat, idf, 4, backend="cpu")
        s = anchor_scores(indptr, flat, idf, sim, seeds, 5, backend="cpu")
        out[name] = (g, s)
    (g1, s1), (g2, s2) = out["serial"], out["parallel"]
    assert all(np.array_equal(a, b) for a, b in zip(g1, g2))
    assert all(np.array_equal(a, b) for a, b in zip(s1, s2))


def test_budget_dp_serial_equals_parallel(monkeypatch):
    from c3m_kernels import budget_solve
    from c3m_kernels.budget_solve import cpu as dp_cpu

    rng = np.random.default_rng(2)
    B, M = 6, 30
    values = rng.random((B, M))
    costs = np.zeros((B, M, 4))
    costs[:, :, 1] = 1
    costs[:, :, 2] = rng.integers(0, 2, (B, M))
    costs[:, :, 3] = rng.integers(5, 90, (B, M))
    groups = rng.integers(0, 5, (B, M))
    cover = rng.random((B, M, 4)) < 0.4
    budget = np.array([3, 8, 2, 400.0])
    got = {}
    for name, limit in (("serial", 1 << 60), ("parallel", 0)):
        monkeypatch.setattr(dp_cpu, "SERIAL_MAX_WORK", limit)
        got[name] = (budget_solve(values, costs, budget, groups=groups),
                     budget_solve(values, costs, budget, groups=groups, mode="coverage", coverage=cover, lam=0.5))
    for a, b in zip(got["serial"], got["parallel"]):
        assert np.array_equal(a, b)
