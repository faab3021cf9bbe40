"""Coverage mode on the Triton path with device tensors runs its loop on the device (``coverage_device``) and
gives the numpy loop's selection bit for bit (the same Triton DP as the oracle), with no "download"."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from c3m_kernels import dispatch  # noqa: E402
from c3m_kernels.budget_solve import budget_solve  # noqa: E402

from test_device_resident import DEV, H, T, _solve_case, no_host_copies  # noqa: E402,F401


def _case(seed, B, M, L=4, weights=None, lam=0.7, max_iter=6, **kw):
    v, c, bud, extra = _solve_case(seed, B, M, **kw)
    rng = np.random.default_rng(seed + 100)
    args = dict(mode="coverage", coverage=rng.random((B, M, L)) < 0.4, lam=lam, max_iter=max_iter, **extra)
    if weights == "int":
        args["coverage_weights"] = rng.integers(0, 4, (B, L)).astype(float)
    elif weights == "float":
        args["coverage_weights"] = rng.random((B, L)) * 2
    return v, c, bud, args


CASES = [dict(seed=s, B=3, M=6) for s in range(5)] + [
    dict(seed=20, B=4, M=7, weights="int", group_costs=True),
    dict(seed=21, B=4, M=6, ragged=True),
    dict(seed=22, B=3, M=5, groups=False, lam=0.0),
    dict(seed=23, B=3, M=5, lam=3.0, max_iter=1, weights="int"),
    dict(seed=24, B=3, M=6, inf_tokens=True, group_costs=True, ragged=True, max_iter=0),
    dict(seed=25, B=2, M=9, L=9, weights="int", ragged=True),
    dict(seed=26, B=3, M=5, L=0),
    dict(seed=27, B=1, M=1),
    dict(seed=28, B=0, M=4),
    dict(seed=29, B=3, M=0),
]


def _dev(args):
    return {k: T(x) if isinstance(x, np.ndarray) else x for k, x in args.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_coverage_on_device_equals_the_numpy_loop(case, no_host_copies):
    v, c, bud, args = _case(**case)
    got = budget_solve(T(v), T(c), T(bud), backend="triton", **_dev(args))
    moved = dispatch.transfers()
    B, M = v.shape
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.device.type == DEV
    assert ("budget_solve", "download") not in moved, moved
    assert set(moved) <= {("budget_solve", "sync"), ("budget_solve", "upload")}, moved  # uploads: variant-2 noise
    assert dispatch.counts() == ({("budget_solve", "triton"): 1} if B and M else {})
    want = budget_solve(v, c, bud, backend="triton", **args)  # the numpy loop, same Triton DP
    assert np.array_equal(H(got), want)


def test_coverage_on_device_with_float_weights_takes_the_host_loop():
    """Non-integer label weights: numpy's einsum order can't be reproduced, so the host loop runs (downloads)."""
    v, c, bud, args = _case(30, 3, 6, weights="float")
    dispatch.reset_counts()
    got = budget_solve(T(v), T(c), T(bud), backend="triton", **_dev(args))
    assert dispatch.transfers().get(("budget_solve", "download"), 0) > 0
    assert np.array_equal(H(got), budget_solve(v, c, bud, backend="triton", **args))
    dispatch.reset_counts()


def test_coverage_on_device_errors():
    v, c, bud, args = _case(31, 2, 3)
    with pytest.raises(ValueError, match="needs coverage"):
        budget_solve(T(v), T(c), T(bud), backend="triton", mode="coverage")
    with pytest.raises(ValueError, match="coverage must be"):
        budget_solve(T(v), T(c), T(bud), backend="triton", mode="coverage", coverage=T(np.ones((2, 2, 3), bool)))
    with pytest.raises(ValueError, match="coverage_weights must be"):
        budget_solve(T(v), T(c), T(bud), backend="triton", mode="coverage", coverage=T(args["coverage"]),
                     coverage_weights=T(np.ones((2, 7))))
