"""Issue #35: on the Triton path, device tensors stay on their device inside ``budget_solve`` and ``anchor_scores``.

The tensors live on CUDA when there is a GPU; without one they are CPU tensors under ``TRITON_INTERPRET=1``
(tests/kernels/conftest.py): copies are free there, but the code path is the CUDA one, so ``dispatch.transfers()``
and a guard on the ops' own ``_np`` helpers (the only places they turn a tensor into numpy) catch a host round trip
without a GPU. The interpreter itself moves data to numpy to run a kernel, so nothing global (``torch.Tensor.cpu``,
``.numpy``) is patched.
"""
import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from c3m_kernels import dispatch  # noqa: E402
from c3m_kernels.anchor_scores import anchor_scores, build_anchor_index  # noqa: E402
from c3m_kernels.budget_solve import budget_solve  # noqa: E402

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


def T(x):
    """A host array as a tensor on the test device."""
    return torch.from_numpy(np.asarray(x)).to(DEV)


def H(x):
    """A tensor back on the host, for comparisons."""
    return x.cpu().numpy()

BS = importlib.import_module("c3m_kernels.budget_solve")
AS = importlib.import_module("c3m_kernels.anchor_scores")
AS_COMMON = importlib.import_module("c3m_kernels.anchor_scores.common")


@pytest.fixture
def no_host_copies(monkeypatch):
    """The ops' ``_np`` helpers raise when handed a tensor; ``dispatch.transfers()`` starts from zero."""
    for mod in (BS, AS, AS_COMMON):
        real = mod._np

        def guarded(x, *args, __real=real, **kwargs):
            if torch.is_tensor(x):
                raise AssertionError(f"host round trip: _np({type(x).__name__} {tuple(x.shape)})")
            return __real(x, *args, **kwargs)

        monkeypatch.setattr(mod, "_np", guarded)
    dispatch.reset_counts()
    yield
    dispatch.reset_counts()


def _solve_case(seed, B, M, *, groups=True, group_costs=False, ragged=False, inf_tokens=False):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(B, M))
    c = np.zeros((B, M, 4))
    c[:, :, :3] = rng.integers(0, 3, (B, M, 3))
    c[:, :, 3] = rng.random((B, M)) * rng.choice([1, 30, 500])
    bud = np.concatenate([rng.integers(0, 4, (B, 3)), rng.random((B, 1)) * 300], axis=1)
    if inf_tokens and B:
        bud[0, 3] = np.inf
    kw = {}
    if groups:
        kw["groups"] = rng.integers(-1, 3, (B, M))
    if group_costs:
        gc = rng.integers(0, 2, (B, 3, 4)).astype(float)
        gc[:, :, 3] = rng.random((B, 3)) * 20
        kw["group_costs"] = gc
    if ragged:
        kw["lengths"] = rng.integers(0, M + 1, B)
    return v, c, bud, kw


CASES = [dict(seed=s, B=3, M=5) for s in range(6)] + [
    dict(seed=10, B=4, M=6, group_costs=True),
    dict(seed=11, B=4, M=6, ragged=True),
    dict(seed=12, B=3, M=4, groups=False),
    dict(seed=13, B=3, M=4, inf_tokens=True, group_costs=True, ragged=True),
    dict(seed=14, B=1, M=1),
    dict(seed=15, B=0, M=4),
    dict(seed=16, B=3, M=0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_budget_solve_on_device_equals_the_cpu_path(case, no_host_copies):
    v, c, bud, kw = _solve_case(**case)
    got = budget_solve(T(v), T(c), T(bud), backend="triton", **{k: T(x) for k, x in kw.items()})
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.shape == v.shape
    moved = dispatch.transfers()
    B, M = v.shape
    assert moved == ({("budget_solve", "sync"): 1}), moved  # one small fetch, no download, no upload
    assert dispatch.counts() == ({("budget_solve", "triton"): 1} if B and M else {})
    cpu = budget_solve(v, c, bud, backend="cpu", **kw)
    assert got.device.type == DEV
    assert np.array_equal(H(got), cpu)  # fp32 values on Triton: these instances have no near-ties


def test_budget_solve_device_preparation_is_the_host_preparation():
    """The DP gets exactly the host path's arrays (``prepare_dp_inputs`` + ``block_structure``)."""
    from c3m_kernels.budget_solve.cpu import prepare_dp_inputs
    from c3m_kernels.budget_solve.device import prepare_on_device
    from c3m_kernels.budget_solve.triton_impl import block_structure

    for case in CASES[:10]:
        v, c, bud, kw = _solve_case(**case)
        B, M = v.shape
        g = kw.get("groups", np.full((B, M), -1))
        if "group_costs" in kw:
            gc = kw["group_costs"]
        else:
            gc = np.zeros((B, int(g.max()) + 1 if "groups" in kw else 0, 4))
            gc[:, :, 0] = 1
        n = kw.get("lengths", np.full(B, M))
        pad = np.arange(M)[None, :] >= n[:, None]
        g = np.where(pad, -1, g)
        icost, gi, caps, _ = prepare_dp_inputs(np.where(pad[:, :, None], 0.0, c),
                                               np.where(np.isinf(bud), 1e12, bud), g, gc, 64)
        order, bstart, bend, pos_gc = block_structure(g, gi)
        p = prepare_on_device(T(v), T(c), T(bud), *(None if k not in kw else T(kw[k])
                                                    for k in ("groups", "group_costs", "lengths")), 64, 1 << 21)
        for name, want in (("icost", icost), ("caps", caps), ("order", order), ("bstart", bstart),
                           ("bend", bend), ("pos_gc", pos_gc)):
            assert np.array_equal(H(getattr(p, name)), want), (case, name)
        assert p.s_max == int(np.prod(caps + 1, axis=1).max())


@pytest.mark.parametrize("kw,match", [
    (dict(costs=np.zeros((2, 3, 3))), "costs must be"),
    (dict(costs=-np.ones((2, 3, 4))), ">= 0"),
    (dict(costs=np.full((2, 3, 4), np.nan)), "finite"),
    (dict(values=np.full((2, 3), np.inf)), "values must be finite"),
    (dict(budgets=np.ones(3)), "budgets must be"),
    (dict(budgets=-np.ones(4)), "budgets must be >= 0"),
    (dict(costs=np.full((2, 3, 4), 0.5)), "must be integers"),
    (dict(groups=np.zeros((2, 2), int)), "groups must be"),
    (dict(groups=np.zeros((2, 3))), "groups must be an int array"),
    (dict(groups=np.full((2, 3), -2)), "groups must be >= -1"),
    (dict(groups=np.full((2, 3), 4), group_costs=np.ones((2, 2, 4))), r"max\(groups\)=4"),
    (dict(groups=np.zeros((2, 3), int), group_costs=-np.ones((2, 2, 4))), "group_costs must be >= 0"),
    (dict(lengths=np.array([4, 1])), "lengths must be"),
    (dict(lengths=np.array([1.0, 1.0])), "lengths must be"),
    (dict(token_buckets=0), "token_buckets"),
])
def test_budget_solve_on_device_raises_the_host_messages(kw, match):
    args = dict(values=np.ones((2, 3)), costs=np.ones((2, 3, 4)), budgets=np.ones(4))
    args.update(kw)
    host = dict(args, backend="cpu")
    dev = dict({k: T(x) if isinstance(x, np.ndarray) else x for k, x in args.items()}, backend="triton")
    for a in (host, dev):
        with pytest.raises(ValueError, match=match):
            budget_solve(a.pop("values"), a.pop("costs"), a.pop("budgets"), **a)


def test_budget_solve_states_limit_on_device():
    with pytest.raises(ValueError, match="DP states"):
        budget_solve(T(np.ones((3, 25))), T(np.full((3, 25, 4), 10.0)), T(np.full(4, 1e6)), token_buckets=10 ** 6,
                     backend="triton")


def test_budget_solve_coverage_mode_keeps_its_host_loop():
    """Coverage mode with device tensors (its loop now runs on the device, ``coverage_device``; see
    test_coverage_device.py) still gets the CPU path's selection here, and the answer on their device."""
    v, c, bud, kw = _solve_case(3, 3, 5)
    cov = np.random.default_rng(0).random((3, 5, 3)) < 0.4
    args = dict(mode="coverage", coverage=cov, lam=0.5, max_iter=2, **kw)
    host = budget_solve(v, c, bud, backend="cpu", **args)
    dev = budget_solve(T(v), T(c), T(bud), backend="triton",
                       **{k: T(x) if isinstance(x, np.ndarray) else x for k, x in args.items()})
    assert dev.device.type == DEV and np.array_equal(H(dev), host)


def _corpus(seed, E=50, A=30, B=5, S=3):
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 6, E))])
    anchors = rng.integers(0, A, indptr[-1])
    idf = np.round(rng.random(A) * 4, 1) + 0.1
    return indptr, anchors, idf, rng.normal(size=(B, A)), rng.integers(-1, E, (B, S))


@pytest.mark.parametrize("seed,k", [(0, 4), (1, 50), (2, 1)])
def test_anchor_scores_on_device_stays_there(seed, k, no_host_copies):
    indptr, anchors, idf, sim, seeds = _corpus(seed)
    index = build_anchor_index(indptr, anchors, len(idf))
    idf_t = T(idf)
    s, i = anchor_scores(indptr, anchors, idf_t, T(sim), T(seeds), k, index=index, backend="triton")
    assert dispatch.transfers() == {("anchor_scores", "upload"): 4, ("anchor_scores", "sync"): 1}  # CSR once
    dispatch.reset_counts()
    s2, i2 = anchor_scores(indptr, anchors, idf_t, T(sim), T(seeds).int(), k, index=index, backend="triton")
    assert dispatch.transfers() == {("anchor_scores", "sync"): 1}  # the index's CSR is already there
    assert s.device.type == DEV
    torch.testing.assert_close(s, s2, rtol=0, atol=1e-5)  # fp32 atomics: a GPU's summation order may vary
    if not CUDA:  # interpreted: one summation order, so the same answer bit for bit, host arrays included
        assert torch.equal(s, s2) and torch.equal(i, i2)
        hs, hi = anchor_scores(indptr, anchors, idf, sim, seeds, k, backend="triton")
        assert np.array_equal(H(s), hs) and np.array_equal(H(i), hi)
    cs, ci = anchor_scores(indptr, anchors, idf, sim, seeds, k, backend="cpu")
    np.testing.assert_allclose(H(s), cs, atol=1e-4)  # fp32 atomics; ids may swap on exact ties


def test_anchor_scores_on_device_edge_cases_and_errors(no_host_copies):
    indptr, anchors, idf, sim, seeds = _corpus(4)
    s, i = anchor_scores(indptr, anchors, T(idf), T(sim), T(np.full((5, 2), -1)), 3, backend="triton")
    assert (i == -1).all() and torch.isneginf(s).all()
    s, i = anchor_scores(indptr, anchors, T(idf), T(sim[:0]), T(seeds[:0]), 3, backend="triton")
    assert s.shape == (0, 3)
    s, i = anchor_scores(indptr, anchors, T(idf), T(sim), T(seeds[:, :0]), 3, backend="triton")
    assert (i == -1).all()
    with pytest.raises(ValueError, match="seeds must lie"):
        anchor_scores(indptr, anchors, T(idf), T(sim), T(seeds + 100), 3, backend="triton")
    with pytest.raises(ValueError, match="seeds must be an int array"):
        anchor_scores(indptr, anchors, T(idf), T(sim), T(seeds.astype(float)), 3, backend="triton")
    with pytest.raises(ValueError, match="sim must be"):
        anchor_scores(indptr, anchors, T(idf), T(sim[:, :3]), T(seeds), 3, backend="triton")


def test_transfer_counters():
    dispatch.reset_counts()
    dispatch.record_transfer("budget_solve", "download", 2)
    assert dispatch.transfers() == {("budget_solve", "download"): 2}
    with pytest.raises(ValueError, match="kind"):
        dispatch.record_transfer("budget_solve", "teleport")
    dispatch.reset_counts()
    assert dispatch.transfers() == {}


def test_the_guard_catches_a_host_round_trip(no_host_copies):
    """The CPU kernels need host arrays, so device tensors sent there are copied: the guard must see that."""
    v, c, bud, kw = _solve_case(0, 2, 3)
    with pytest.raises(AssertionError, match="host round trip"):
        budget_solve(T(v), T(c), T(bud), backend="cpu")
    indptr, anchors, idf, sim, seeds = _corpus(0)
    with pytest.raises(AssertionError, match="host round trip"):
        anchor_scores(indptr, anchors, idf, T(sim), T(seeds), 3, backend="cpu")
