"""A ragged batch of budget selections gives every instance what it gets alone (the batched read path needs it)."""
import numpy as np
import pytest

from c3m_kernels import budget_solve


def _instance(rng, M, L):
    values = rng.random(M) + 0.1
    costs = np.zeros((M, 4))
    costs[:, 1] = 1
    costs[:, 2] = rng.integers(0, 2, M)
    costs[:, 3] = rng.integers(5, 80, M)
    groups = rng.integers(0, max(1, M // 3), M)
    cover = rng.random((M, L)) < 0.3
    budget = np.array([rng.integers(1, 4), rng.integers(1, 8), rng.integers(0, 3), rng.integers(50, 400)], float)
    return values, costs, groups, cover, budget


def _pad(arrs, M, fill=0):
    out = np.full((len(arrs), M) + arrs[0].shape[1:], fill, dtype=arrs[0].dtype)
    for b, a in enumerate(arrs):
        out[b, :len(a)] = a
    return out


@pytest.mark.parametrize("mode", ["exact", "coverage"])
@pytest.mark.parametrize("seed", range(4))
def test_ragged_batch_equals_each_instance_alone(mode, seed):
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 3, 7, 12, 20, 33, 48][: 4 + seed]
    L = 6
    inst = [_instance(rng, M, L) for M in sizes]
    alone = []
    for v, c, g, cov, bud in inst:
        got = budget_solve(v[None], c[None], bud, groups=g[None], mode=mode, coverage=cov[None], lam=0.5)
        alone.append(got[0])
    M = max(sizes)
    batch = budget_solve(_pad([i[0] for i in inst], M), _pad([i[1] for i in inst], M),
                         np.stack([i[4] for i in inst]), groups=_pad([i[2] for i in inst], M, fill=-1),
                         mode=mode, coverage=_pad([i[3] for i in inst], M, fill=False), lam=0.5,
                         lengths=np.array(sizes))
    for b, M_b in enumerate(sizes):
        assert batch[b, :M_b].tolist() == alone[b].tolist(), f"instance {b} (M={M_b})"
        assert not batch[b, M_b:].any()


def test_padding_is_never_chosen_even_when_free_and_valuable():
    v = np.array([[1.0, 5.0, 5.0]])
    c = np.zeros((1, 3, 4))
    got = budget_solve(v, c, np.array([1, 3, 0, 10.0]), lengths=np.array([1]))
    assert got.tolist() == [[True, False, False]]


def test_lengths_are_checked():
    with pytest.raises(ValueError, match="lengths"):
        budget_solve(np.ones((2, 3)), np.zeros((2, 3, 4)), np.ones(4), lengths=np.array([4, 1]))
