"""budget_solve: feasibility (hypothesis), exact == brute force, coverage mode's gap, contracts."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from c3m_kernels import dispatch
from c3m_kernels.budget_solve import (budget_solve, budget_solve_bruteforce, objective,
                                      selection_cost)


def _instances(seed, B, M, n_groups=4, integer_tokens=True, tok_hi=20):
    rng = np.random.default_rng(seed)
    v = rng.random((B, M))
    c = np.zeros((B, M, 4))
    c[:, :, 1] = rng.integers(0, 3, (B, M))
    c[:, :, 2] = rng.integers(0, 2, (B, M))
    c[:, :, 3] = rng.integers(1, tok_hi, (B, M)) if integer_tokens else rng.random((B, M)) * tok_hi
    g = rng.integers(-1, n_groups, (B, M))
    bud = np.stack([rng.integers(0, 4, B), rng.integers(0, 6, B), rng.integers(0, 3, B),
                    rng.integers(0, 60, B)], axis=1).astype(float)
    return v, c, g, bud


def _page_costs(B, G=4):
    gc = np.zeros((B, G, 4))
    gc[:, :, 0] = 1
    return gc


@pytest.mark.parametrize("seed,M", [(0, 1), (1, 6), (2, 10), (3, 12)])
def test_exact_equals_bruteforce(seed, M):
    B = 150
    v, c, g, bud = _instances(seed, B, M)
    # token budgets <= token_buckets -> bucket size 1 -> the DP is exact on the raw problem
    got = budget_solve(v, c, bud, groups=g, token_buckets=64)
    ref = budget_solve_bruteforce(v, c, bud, g, _page_costs(B))
    np.testing.assert_allclose(objective(got, v), objective(ref, v), atol=1e-9)
    assert np.all(selection_cost(got, c, g, _page_costs(B)) <= bud + 1e-9)


def test_exact_without_groups_and_custom_group_costs():
    B, M = 100, 9
    v, c, g, bud = _instances(7, B, M)
    c[:, :, 0] = np.random.default_rng(0).integers(0, 2, (B, M))
    got = budget_solve(v, c, bud)
    ref = budget_solve_bruteforce(v, c, bud)
    np.testing.assert_allclose(objective(got, v), objective(ref, v), atol=1e-9)
    gc = np.zeros((B, 4, 4))
    gc[:, :, 0] = 1
    gc[:, :, 3] = 5  # each page also costs a 5-token header
    got = budget_solve(v, c, bud, groups=g, group_costs=gc)
    ref = budget_solve_bruteforce(v, c, bud, g, gc)
    np.testing.assert_allclose(objective(got, v), objective(ref, v), atol=1e-9)


def test_bucketed_tokens_stay_feasible_and_near_optimal():
    B, M = 100, 10
    v, c, g, bud = _instances(5, B, M, integer_tokens=False, tok_hi=400)
    bud[:, 3] = np.random.default_rng(1).integers(100, 1200, B)
    got = budget_solve(v, c, bud, groups=g, token_buckets=32)
    assert np.all(selection_cost(got, c, g, _page_costs(B)) <= bud + 1e-9)
    ref = budget_solve_bruteforce(v, c, bud, g, _page_costs(B))
    gap = 1 - objective(got, v).sum() / objective(ref, v).sum()
    assert 0 <= gap < 0.1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 31 - 1), M=st.integers(0, 14), B=st.integers(1, 6),
       mode=st.sampled_from(["exact", "coverage"]), buckets=st.sampled_from([1, 7, 64]),
       grouped=st.booleans())
def test_never_exceeds_any_budget(seed, M, B, mode, buckets, grouped):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(B, M))
    c = np.zeros((B, M, 4))
    c[:, :, :3] = rng.integers(0, 3, (B, M, 3))
    c[:, :, 3] = rng.random((B, M)) * rng.choice([1, 50, 5000])
    bud = np.concatenate([rng.integers(0, 5, (B, 3)), rng.random((B, 1)) * 3000], axis=1)
    g = rng.integers(-1, 3, (B, M)) if grouped else None
    gc = None
    if grouped:
        gc = rng.integers(0, 2, (B, 3, 4)).astype(float)
        gc[:, :, 3] = rng.random((B, 3)) * 100
    cov = rng.random((B, M, 4)) < 0.4
    chosen = budget_solve(v, c, bud, groups=g, group_costs=gc, mode=mode, coverage=cov, lam=0.7,
                          token_buckets=buckets)
    assert chosen.shape == (B, M) and chosen.dtype == bool
    spent = selection_cost(chosen, c, g, gc if gc is not None else _page_costs(B, 3)) \
        if grouped else selection_cost(chosen, c)
    assert np.all(spent <= bud + 1e-6), (spent, bud)


@pytest.mark.parametrize("lam", [0.3, 1.0])
def test_coverage_mode_gap_to_bruteforce(lam, capsys):
    B, M = 200, 10
    v, c, g, bud = _instances(11, B, M)
    cov = np.random.default_rng(2).random((B, M, 6)) < 0.3
    got = budget_solve(v, c, bud, groups=g, mode="coverage", coverage=cov, lam=lam)
    ref = budget_solve_bruteforce(v, c, bud, g, _page_costs(B), coverage=cov, lam=lam)
    exact_rel = budget_solve(v, c, bud, groups=g)
    o_got, o_ref = objective(got, v, cov, None, lam), objective(ref, v, cov, None, lam)
    o_rel = objective(exact_rel, v, cov, None, lam)
    assert np.all(o_got <= o_ref + 1e-9)
    assert np.all(o_got >= o_rel - 1e-9)  # never worse than ignoring coverage
    gap = float(np.mean((o_ref - o_got) / np.maximum(o_ref, 1e-12)))
    with capsys.disabled():
        print(f"\n[coverage mode lam={lam}] mean relative gap to brute force = {gap:.4f}, "
              f"suboptimal instances = {np.mean(o_ref - o_got > 1e-9):.2%}")
    assert gap < 0.05
    # the brute-force backend through the public function is exact
    ref2 = budget_solve(v, c, bud, groups=g, mode="coverage", coverage=cov, lam=lam,
                        backend="reference")
    np.testing.assert_allclose(objective(ref2, v, cov, None, lam), o_ref, atol=1e-9)


def test_edge_cases():
    assert budget_solve(np.zeros((0, 3)), np.zeros((0, 3, 4)), np.zeros(4)).shape == (0, 3)
    assert budget_solve(np.zeros((2, 0)), np.zeros((2, 0, 4)), np.ones(4)).shape == (2, 0)
    v = np.array([[1.0, -1.0, 0.0, 2.0]])
    c = np.zeros((1, 4, 4))
    ch = budget_solve(v, c, np.zeros(4))  # zero budgets, zero costs: take every positive item
    assert ch.tolist() == [[True, False, False, True]]
    c[0, :, 3] = 10
    assert not budget_solve(v, c, np.array([9, 9, 9, 9.0])).any()
    assert budget_solve(v, c, np.array([0, 0, 0, np.inf])).tolist() == [[True, False, False, True]]


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    v, c, g, bud = _instances(0, 4, 5)
    out = budget_solve(torch.from_numpy(v), torch.from_numpy(c), torch.from_numpy(bud),
                       groups=torch.from_numpy(g))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool


@pytest.mark.parametrize("kw,match", [
    (dict(costs=np.zeros((2, 3, 3))), "costs must be"),
    (dict(costs=-np.ones((2, 3, 4))), ">= 0"),
    (dict(budgets=np.ones(3)), "budgets must be"),
    (dict(groups=np.zeros((2, 2), int)), "groups must be"),
    (dict(mode="greedy"), "mode must be"),
    (dict(mode="coverage"), "needs coverage"),
    (dict(costs=np.full((2, 3, 4), 0.5)), "must be integers"),
    (dict(token_buckets=0), "token_buckets"),
])
def test_errors_name_the_argument(kw, match):
    args = dict(values=np.ones((2, 3)), costs=np.ones((2, 3, 4)), budgets=np.ones(4))
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        budget_solve(args.pop("values"), args.pop("costs"), args.pop("budgets"), **args)


@pytest.mark.parametrize("mode", ["exact", "coverage"])
def test_triton_dp_matches(mode):
    """The Triton DP (interpreter on CPU: tiny instances) gives the same objective as brute force."""
    pytest.importorskip("torch")
    B, M = 3, 5
    v, c, g, bud = _instances(21, B, M, n_groups=2, tok_hi=6)
    bud[:, 3] = np.minimum(bud[:, 3], 12)
    cov = np.random.default_rng(3).random((B, M, 3)) < 0.4
    kw = dict(groups=g, mode=mode, coverage=cov, lam=0.5, max_iter=1)
    got = budget_solve(v, c, bud, backend="triton", **kw)
    ref = budget_solve(v, c, bud, backend="reference", **kw)
    assert np.all(selection_cost(got, c, g, _page_costs(B, 2)) <= bud + 1e-9)
    lam = 0.5 if mode == "coverage" else 0.0
    o_got = objective(got, v, cov, None, lam)
    o_ref = objective(ref, v, cov, None, lam)
    if mode == "exact":
        np.testing.assert_allclose(o_got, o_ref, rtol=1e-5)
    else:
        assert np.all(o_got <= o_ref + 1e-9)


def test_backends():
    v, c, g, bud = _instances(0, 3, 25)
    with pytest.raises(dispatch.BackendUnavailable, match="brute force"):
        budget_solve(v, c, bud, groups=g, backend="reference")
    with pytest.raises(ValueError, match="DP states"):
        budget_solve(v, c * 0 + 10, np.array([1e6, 1e6, 1e6, 1e6]), token_buckets=10 ** 6)


@pytest.mark.gpu
def test_gpu_inputs_solved_and_returned_on_device():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    v, c, g, bud = _instances(0, 64, 10)
    out = budget_solve(torch.from_numpy(v).cuda(), torch.from_numpy(c).cuda(),
                       torch.from_numpy(bud).cuda(), groups=torch.from_numpy(g).cuda())
    assert out.device.type == "cuda"
    ref = budget_solve_bruteforce(v, c, bud, g, _page_costs(64))
    np.testing.assert_allclose(objective(out.cpu().numpy(), v), objective(ref, v), rtol=1e-5)
    big = _instances(1, 4096, 16)
    out = budget_solve(*[torch.from_numpy(x).cuda() for x in (big[0], big[1], big[3])],
                       groups=torch.from_numpy(big[2]).cuda(), backend="triton")
    cpu = budget_solve(big[0], big[1], big[3], groups=big[2], backend="cpu")
    np.testing.assert_allclose(objective(out.cpu().numpy(), big[0]), objective(cpu, big[0]),
                               rtol=1e-5)
