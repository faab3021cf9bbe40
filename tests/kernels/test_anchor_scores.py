"""anchor_scores / build_anchor_graph: numba CPU path vs dense truth (tie-aware), edge cases."""
import numpy as np
import pytest

from c3m_kernels import dispatch
from c3m_kernels.anchor_scores import anchor_scores, build_anchor_graph, build_anchor_index


def _corpus(seed, E=60, A=40, max_len=6, B=5, S=3):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, max_len, E)
    indptr = np.concatenate([[0], np.cumsum(lens)])
    anchors = rng.integers(0, A, indptr[-1])
    idf = np.round(rng.random(A) * 4, 1) + 0.1  # coarse values -> many exactly tied scores
    sim = rng.normal(size=(B, A))
    seeds = rng.integers(-1, E, (B, S))
    return indptr, anchors, idf, sim, seeds


def _truth_expand(indptr, anchors, idf, sim, seeds, canonical=None):
    E, A = len(indptr) - 1, len(idf)
    can = np.arange(A) if canonical is None else np.asarray(canonical)
    sets = [set(can[anchors[indptr[e]:indptr[e + 1]]].tolist()) for e in range(E)]
    T = np.full((len(sim), E), -np.inf)
    for b in range(len(sim)):
        sd = {int(s) for s in seeds[b] if s >= 0}
        U = set().union(*[sets[s] for s in sd]) if sd else set()
        for n in range(E):
            if n in sd:
                continue
            shared = sets[n] & U
            if shared:
                T[b, n] = sum(idf[a] * sim[b, a] for a in shared)
    return T


def _truth_graph(indptr, anchors, idf, max_postings=None):
    E = len(indptr) - 1
    sets = [set(anchors[indptr[e]:indptr[e + 1]].tolist()) for e in range(E)]
    df = {}
    for s in sets:
        for a in s:
            df[a] = df.get(a, 0) + 1
    T = np.full((E, E), -np.inf)
    for e in range(E):
        for n in range(E):
            if n == e:
                continue
            shared = {a for a in sets[e] & sets[n] if not max_postings or df[a] <= max_postings}
            if shared:
                T[e, n] = sum(idf[a] for a in shared)
    return T


def _check_rows(T, k, s, i, atol=1e-9):
    """Tie-aware: the returned ids are valid, distinct, carry their true score, and reach the k-th."""
    for b in range(T.shape[0]):
        cand = np.nonzero(np.isfinite(T[b]))[0]
        nv = min(k, len(cand))
        assert np.all(i[b, nv:] == -1) and np.all(np.isneginf(s[b, nv:])), (b, i[b], nv)
        got = i[b, :nv]
        assert len(set(got.tolist())) == nv
        assert np.all(np.isfinite(T[b, got])), (b, got)
        np.testing.assert_allclose(s[b, :nv], T[b, got], atol=atol)
        if nv:
            kth = np.sort(T[b, cand])[::-1][nv - 1]
            assert T[b, got].min() >= kth - atol
            assert np.all(np.diff(s[b, :nv]) <= atol)


BACKENDS = ["cpu", "reference", "triton"]
TOL = {"cpu": 1e-9, "reference": 1e-9, "triton": 1e-4}  # triton: fp32 atomics


def _np_out(x):
    return x.cpu().numpy() if hasattr(x, "cpu") else x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed,k", [(0, 5), (1, 1), (2, 40), (3, 200)])
def test_expand_matches_truth(backend, seed, k):
    indptr, anchors, idf, sim, seeds = _corpus(seed)
    s, i = anchor_scores(indptr, anchors, idf, sim, seeds, k, backend=backend)
    _check_rows(_truth_expand(indptr, anchors, idf, sim, seeds), k, s, i, TOL[backend])


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_cross_modal_and_duplicates(backend):
    # anchors 0..9 text, 10..19 visual; visual a+10 is the same concept as text a
    indptr = np.array([0, 3, 5, 8, 8, 10])
    anchors = np.array([0, 0, 12, 12, 3, 2, 13, 3, 15, 5])
    canonical = np.concatenate([np.arange(10), np.arange(10)])
    idf = np.linspace(0.5, 2.0, 20)
    sim = np.random.default_rng(0).random((2, 20))
    seeds = np.array([[0, -1], [3, 1]])
    s, i = anchor_scores(indptr, anchors, idf, sim, seeds, 4, canonical=canonical, backend=backend)
    T = _truth_expand(indptr, anchors, idf, sim, seeds, canonical)
    _check_rows(T, 4, s, i, TOL[backend])
    assert 2 in set(i[0].tolist())  # shares concept 2 with episode 0 only through a visual anchor
    assert (i[1] == -1).sum() == 4 - np.isfinite(T[1]).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_edge_cases(backend):
    indptr, anchors, idf, sim, seeds = _corpus(4)
    s, i = anchor_scores(indptr, anchors, idf, sim, np.full((5, 2), -1), 3, backend=backend)
    assert (i == -1).all() and np.isneginf(s).all()  # no seeds -> no neighbours
    s, i = anchor_scores(indptr, anchors, idf, sim[:0], seeds[:0], 3, backend=backend)
    assert s.shape == (0, 3)
    s, i = anchor_scores(indptr, anchors, idf, sim, seeds, 0, backend=backend)
    assert s.shape == (5, 0)
    s, i = anchor_scores(np.zeros(1, int), np.zeros(0, int), idf, sim, np.zeros((5, 0), int), 2,
                         backend=backend)
    assert (i == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed,k_edge,maxp", [(0, 3, None), (1, 1, None), (2, 100, None), (3, 5, 4)])
def test_graph_matches_truth(backend, seed, k_edge, maxp):
    indptr, anchors, idf, _, _ = _corpus(seed, E=45)
    ip, nb, w = build_anchor_graph(indptr, anchors, idf, k_edge, max_postings=maxp, backend=backend)
    E = len(indptr) - 1
    assert ip.shape == (E + 1,) and np.all(np.diff(ip) <= k_edge)
    dense_n = np.full((E, k_edge), -1)
    dense_w = np.full((E, k_edge), -np.inf)
    for e in range(E):
        r = ip[e + 1] - ip[e]
        dense_n[e, :r] = nb[ip[e]:ip[e + 1]]
        dense_w[e, :r] = w[ip[e]:ip[e + 1]]
    _check_rows(_truth_graph(indptr, anchors, idf, maxp), k_edge, dense_w, dense_n, TOL[backend])


def test_cpu_larger_against_reference():
    indptr, anchors, idf, sim, seeds = _corpus(9, E=400, A=300, max_len=12, B=64, S=5)
    s1, i1 = anchor_scores(indptr, anchors, idf, sim, seeds, 16, backend="cpu")
    s2, _ = anchor_scores(indptr, anchors, idf, sim, seeds, 16, backend="reference")
    np.testing.assert_allclose(s1, s2, atol=1e-9)
    _, _, w1 = build_anchor_graph(indptr, anchors, idf, 8, backend="cpu")
    _, _, w2 = build_anchor_graph(indptr, anchors, idf, 8, backend="reference")
    np.testing.assert_allclose(w1, w2, atol=1e-9)


def test_index_normalisation():
    idx = build_anchor_index(np.array([0, 3, 3, 5]), np.array([2, 2, 0, 1, 1]), 4)
    assert idx.ep_indptr.tolist() == [0, 2, 2, 3] and idx.ep_anchors.tolist() == [0, 2, 1]
    assert idx.an_indptr.tolist() == [0, 1, 2, 3, 3] and idx.an_episodes.tolist() == [0, 2, 0]


@pytest.mark.parametrize("kw,match", [
    (dict(ep_indptr=np.array([0, 2, 1, 5])), "non-decreasing"),
    (dict(ep_anchors=np.array([0, 1, 2, 3, 99])), "num_anchors"),
    (dict(sim=np.zeros((2, 7))), "sim must be"),
    (dict(seeds=np.array([[0], [50]])), "seeds must lie"),
    (dict(seeds=np.zeros((3, 1), int)), "seeds must be"),
    (dict(k_exp=-1), "k_exp"),
])
def test_errors_name_the_argument(kw, match):
    args = dict(ep_indptr=np.array([0, 2, 3, 5]), ep_anchors=np.array([0, 1, 2, 3, 4]),
                idf=np.ones(5), sim=np.zeros((2, 5)), seeds=np.array([[0], [1]]), k_exp=2)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        anchor_scores(args.pop("ep_indptr"), args.pop("ep_anchors"), args.pop("idf"),
                      args.pop("sim"), args.pop("seeds"), args.pop("k_exp"))


def test_backend_errors(monkeypatch):
    indptr, anchors, idf, sim, seeds = _corpus(0)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(dispatch.BackendUnavailable, match="TRITON_INTERPRET"):
        anchor_scores(indptr, anchors, idf, sim, seeds, 3, backend="triton")
    with pytest.raises(dispatch.BackendUnavailable, match="TRITON_INTERPRET"):
        build_anchor_graph(indptr, anchors, idf, 3, backend="triton")


@pytest.mark.gpu
def test_gpu_inputs_run_and_return_on_device():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    indptr, anchors, idf, sim, seeds = _corpus(0)
    s, i = anchor_scores(indptr, anchors, idf, torch.from_numpy(sim).cuda(), seeds, 4)
    assert s.device.type == "cuda"
    _check_rows(_truth_expand(indptr, anchors, idf, sim, seeds), 4, s.cpu().numpy(), i.cpu().numpy(),
                1e-4)
    ip, nb, w = build_anchor_graph(indptr, anchors, idf, 5, device="cuda")
    ip2, nb2, w2 = build_anchor_graph(indptr, anchors, idf, 5)
    np.testing.assert_allclose(w, w2, atol=1e-4)
