"""dispatch.placement (the device-name rule callers use) and the (op, backend) call counters."""
import threading

import numpy as np
import pytest

from c3m_kernels import anchor_scores, budget_solve, candidate_topk, dispatch


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for var in [v for v in os.environ if v.startswith("C3M_KERNELS_BACKEND")]:
        monkeypatch.delenv(var)
    return monkeypatch


def test_placement_rule(clean_env):
    mp = clean_env
    assert dispatch.placement("cpu") is dispatch.HOST and dispatch.placement(None) is dispatch.HOST
    cuda = dispatch.placement("cuda:1", "budget_solve")
    assert (cuda.device, cuda.tensors, cuda.backend) == ("cuda:1", True, "triton")
    # the CPU path hands numpy through untouched: no copy, no dtype change
    x = np.arange(3, dtype=np.int32)
    assert dispatch.HOST.put(x, np.float64) is x and dispatch.HOST.host(x) is x
    # a forced Triton under the interpreter gets torch CPU tensors; per op, the specific variable wins
    mp.setenv("TRITON_INTERPRET", "1")
    mp.setenv("C3M_KERNELS_BACKEND", "triton")
    assert dispatch.placement("cpu", "anchor_scores") == dispatch.Placement("cpu", True, "triton")
    mp.setenv("C3M_KERNELS_BACKEND_ANCHOR_SCORES", "cpu")
    assert dispatch.placement("cpu", "anchor_scores") is dispatch.HOST
    assert dispatch.placement("cpu", "budget_solve").tensors
    mp.setenv("TRITON_INTERPRET", "0")
    assert dispatch.placement("cpu", "budget_solve") is dispatch.HOST  # no interpreter: numpy (and triton raises)
    mp.setenv("C3M_KERNELS_BACKEND", "auto")
    assert dispatch.forced_backend("budget_solve") is None and dispatch.forced_backend() is None


def test_placement_put_and_host_round_trip(clean_env):
    torch = pytest.importorskip("torch")
    clean_env.setenv("TRITON_INTERPRET", "1")
    clean_env.setenv("C3M_KERNELS_BACKEND", "triton")
    at = dispatch.placement("cpu", "candidate_topk")
    t = at.put(np.arange(4, dtype=np.int64), np.float32)
    assert torch.is_tensor(t) and t.dtype == torch.float32 and t.device.type == "cpu"
    assert at.put(np.ones(2), torch.float16).dtype == torch.float16
    s, i = at.host((t, t.long()))
    assert isinstance(s, np.ndarray) and s.dtype == np.float32 and i.tolist() == [0, 1, 2, 3]


def test_each_op_counts_its_executed_backend(clean_env):
    rng = np.random.default_rng(0)
    dispatch.reset_counts()
    candidate_topk(rng.random((2, 8), np.float32), rng.random((10, 8), np.float32), 3)
    candidate_topk(rng.random((2, 8), np.float32), rng.random((10, 8), np.float32), 3, backend="reference")
    budget_solve(np.ones((1, 3)), np.ones((1, 3, 4)), np.array([2, 2, 2, 2.0]))
    budget_solve(np.ones((1, 0)), np.ones((1, 0, 4)), np.array([2, 2, 2, 2.0]))  # nothing to solve: not counted
    anchor_scores(np.array([0, 2, 3]), np.array([0, 1, 1]), np.ones(2), np.ones((1, 2)), np.array([[0]]), 2)
    with pytest.raises(ValueError):  # raised before a backend ran: not counted
        candidate_topk(rng.random((2, 8), np.float32), rng.random((10, 4), np.float32), 3)
    assert dispatch.counts() == {("candidate_topk", "cpu"): 1, ("candidate_topk", "reference"): 1,
                                 ("budget_solve", "cpu"): 1, ("anchor_scores", "cpu"): 1}
    got = dispatch.counts()
    got[("candidate_topk", "cpu")] = 99  # a copy
    assert dispatch.counts()[("candidate_topk", "cpu")] == 1
    dispatch.reset_counts()
    assert dispatch.counts() == {}


def test_counters_are_thread_safe():
    dispatch.reset_counts()

    def work():
        for _ in range(2000):
            dispatch.record("candidate_topk", "cpu")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert dispatch.counts() == {("candidate_topk", "cpu"): 16000}
    dispatch.reset_counts()
