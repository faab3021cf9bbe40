"""candidate_topk: every backend against float64 truth (tie-aware), edge cases, dispatch rules."""
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from c3m_kernels import dispatch  # noqa: E402
from c3m_kernels.candidate_topk import candidate_topk as _candidate_topk  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
#: "cpu-numba" is the CPU backend with the tiny-problem numpy shortcut off, so the numba paths see every
#: small and edge-case shape too
BACKENDS = ["reference", "cpu", "cpu-numba", "triton"]


def candidate_topk(q, keys, k, backend=None, **kw):
    """Call the op; with a CUDA device the triton backend gets CUDA tensors (real kernel, not the
    interpreter) and the results come back to the CPU for checking."""
    if backend == "cpu-numba":
        from c3m_kernels.candidate_topk import cpu

        saved, cpu.SMALL_WORK = cpu.SMALL_WORK, 0
        try:
            return _candidate_topk(q, keys, k, backend="cpu", **kw)
        finally:
            cpu.SMALL_WORK = saved
    if backend == "triton" and HAS_CUDA and isinstance(q, torch.Tensor):
        q, keys = q.cuda(), keys.cuda()
        kw = {n: (v.cuda() if isinstance(v, torch.Tensor) else v) for n, v in kw.items()}
        s, i = _candidate_topk(q, keys, k, backend=backend, **kw)
        return s.cpu(), i.cpu()
    return _candidate_topk(q, keys, k, backend=backend, **kw)


def _data(B, N, d, seed=0, dup=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, d, generator=g)
    k = torch.randn(N, d, generator=g)
    if dup and N >= 4:  # duplicate rows -> exactly equal scores
        k[N // 2:] = k[: N - N // 2]
    return q, k


def _ranges(offsets, B):
    off = np.asarray(offsets)
    if off.ndim == 1:
        return off[:-1], off[1:]
    return off[:, 0], off[:, 1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("B,N,d,k", [(3, 100, 37, 5), (1, 70, 16, 1), (17, 45, 20, 8),
                                     (2, 33, 5, 40), (4, 64, 64, 16)],
                         ids=lambda v: str(v))
def test_dense_matches_truth(backend, B, N, d, k, check_topk):
    q, keys = _data(B, N, d, seed=B * N + d)
    s, i = candidate_topk(q, keys, k, backend=backend)
    assert s.dtype == torch.float32 and i.dtype == torch.int64
    check_topk(q, keys, k, s, i)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ragged_with_empty_segments(backend, check_topk):
    q, keys = _data(6, 90, 19, seed=3)
    offsets = torch.tensor([0, 0, 10, 10, 47, 89, 90])  # empty, 10, empty, 37, 42, 1
    s, i = candidate_topk(q, keys, 6, offsets=offsets, backend=backend)
    st, en = _ranges(offsets, 6)
    check_topk(q, keys, 6, s, i, st, en)
    assert (i[0] == -1).all() and (i[2] == -1).all()
    assert i[5, 0] == 89 and (i[5, 1:] == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ragged_overlapping_ranges(backend, check_topk):
    q, keys = _data(4, 60, 12, seed=4)
    ranges = np.array([[0, 60], [5, 9], [5, 9], [30, 31]])
    s, i = candidate_topk(q, keys, 5, offsets=ranges, backend=backend)
    check_topk(q, keys, 5, s, i, ranges[:, 0], ranges[:, 1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask_kind", ["keys", "per_query"])
@pytest.mark.parametrize("ragged", [False, True])
def test_mask(backend, mask_kind, ragged, check_topk):
    q, keys = _data(3, 50, 9, seed=5)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(50, generator=g) > 0.5 if mask_kind == "keys" else \
        torch.rand(3, 50, generator=g) > 0.7
    offsets = torch.tensor([0, 20, 20, 50]) if ragged else None
    s, i = candidate_topk(q, keys, 12, offsets=offsets, mask=mask, backend=backend)
    st, en = _ranges(offsets, 3) if ragged else (None, None)
    check_topk(q, keys, 12, s, i, st, en, mask=mask.numpy())


@pytest.mark.parametrize("mask_kind", ["keys", "per_query"])
def test_mask_cpu_sgemm_path(mask_kind, check_topk):
    """B > SCAN_MAX_B takes the sgemm + block-select path on the CPU; check masks there too."""
    q, keys = _data(9, 3000, 24, seed=8)
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(3000, generator=g) > 0.5 if mask_kind == "keys" else \
        torch.rand(9, 3000, generator=g) > 0.995
    s, i = candidate_topk(q, keys, 20, mask=mask, backend="cpu")
    check_topk(q, keys, 20, s, i, mask=mask.numpy(), atol=1e-3)


@pytest.mark.parametrize("path,B,N", [("sgemm", 11, 1203), ("tiled", 7, 9001), ("tiled", 1, 9001)])
@pytest.mark.parametrize("mask_kind", [None, "keys", "per_query"])
@pytest.mark.parametrize("k", [1, 5, 37])
def test_cpu_dense_paths_equal_scan_exactly(monkeypatch, path, B, N, mask_kind, k):
    """Both dense paths return exactly what the per-query streaming scan returns, indices included,
    on integer data full of exact ties: all keep the documented tie rule (equal scores: lower index
    first). sgemm: many 256-row blocks, strips crossing block ends; tiled: two key chunks of many
    64-row tiles, merged."""
    from c3m_kernels.candidate_topk import cpu

    rng = np.random.default_rng(k)
    q = rng.integers(-2, 3, (B, 6)).astype(np.float32)  # small integers: exact, heavily tied scores
    keys = rng.integers(-2, 3, (N, 6)).astype(np.float32)
    mask = None if mask_kind is None else (
        rng.random(N) > 0.3 if mask_kind == "keys" else rng.random((B, N)) > 0.6)
    monkeypatch.setattr(cpu, "BLOCK_ROWS", 256)  # 256-row blocks, a short last one
    assert (B > cpu.SCAN_MAX_B) == (path == "sgemm")
    s, i = cpu.dense_topk_numpy(q, keys, k, mask)
    st, en = np.zeros(B, np.int64), np.full(B, N, np.int64)
    s2, i2 = cpu.scan_topk_numpy(q, keys, k, st, en, mask)
    np.testing.assert_array_equal(s, s2)
    np.testing.assert_array_equal(i, i2)


@pytest.mark.parametrize("ragged,kernel", [(False, "dense"), (False, "ragged"), (True, None)])
@pytest.mark.parametrize("k", [1, 6, 16])
def test_triton_many_tiles_tie_heavy_equals_cpu(ragged, kernel, k):
    """One chunk of many small tiles per program, integer data full of exact ties: the running
    threshold prefilter skips most tiles, and the result must still equal the CPU scan exactly
    (indices included), because both keep the same tie rule (equal scores: lower index first)."""
    from c3m_kernels.candidate_topk.cpu import scan_topk_numpy
    from c3m_kernels.candidate_topk.triton_impl import candidate_topk_triton

    rng = np.random.default_rng(k)
    q = rng.integers(-2, 3, (5, 7)).astype(np.float32)
    keys = rng.integers(-2, 3, (300, 7)).astype(np.float32)
    st = np.array([0, 0, 17, 150, 299]) if ragged else np.zeros(5, np.int64)
    en = np.array([300, 9, 290, 150, 300]) if ragged else np.full(5, 300)
    dev = "cuda" if HAS_CUDA else "cpu"
    qt, kt = torch.from_numpy(q).to(dev), torch.from_numpy(keys).to(dev)
    kw = dict(starts=torch.from_numpy(st), ends=torch.from_numpy(en)) if ragged else {}
    s, i = candidate_topk_triton(qt, kt, k, block_n=16, block_d=16, chunk=304, kernel=kernel, **kw)
    s2, i2 = scan_topk_numpy(q, keys, k, st, en)
    np.testing.assert_array_equal(s.cpu().numpy(), s2)
    np.testing.assert_array_equal(i.cpu().numpy(), i2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicate_scores(backend, check_topk):
    q, keys = _data(3, 40, 8, seed=6, dup=True)
    s, i = candidate_topk(q, keys, 7, backend=backend)
    check_topk(q, keys, 7, s, i)
    # all-equal scores: any k distinct indices are right
    z = torch.ones(25, 8)
    s, i = candidate_topk(q[:1], z, 5, backend=backend)
    assert len(set(i[0].tolist())) == 5 and torch.allclose(s, s[:, :1].expand(1, 5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_shapes(backend):
    q, keys = _data(2, 0, 8)
    s, i = candidate_topk(q, keys, 3, backend=backend)  # N = 0
    assert s.shape == (2, 3) and torch.isneginf(s).all() and (i == -1).all()
    q, keys = _data(2, 5, 8)
    s, i = candidate_topk(q, keys, 9, backend=backend)  # k > N
    assert (i[:, :5] >= 0).all() and (i[:, 5:] == -1).all() and torch.isneginf(s[:, 5:]).all()
    s, i = candidate_topk(q, keys, 0, backend=backend)  # k = 0
    assert s.shape == (2, 0) and i.shape == (2, 0)
    q0 = torch.zeros(0, 8)
    s, i = candidate_topk(q0, keys, 3, backend=backend)  # B = 0
    assert s.shape == (0, 3)
    s, i = candidate_topk(q, keys, 3, offsets=torch.tensor([0, 0, 0]), backend=backend)
    assert (i == -1).all()


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_numpy_in_numpy_out(backend, check_topk):
    rng = np.random.default_rng(0)
    q, keys = rng.standard_normal((4, 13)).astype(np.float32), rng.standard_normal((30, 13))
    s, i = candidate_topk(q, keys, 4, offsets=np.array([0, 5, 5, 29, 30]), backend=backend)
    assert isinstance(s, np.ndarray) and isinstance(i, np.ndarray)
    check_topk(q, keys, 4, s, i, np.array([0, 5, 5, 29]), np.array([5, 5, 29, 30]))


def test_cpu_large_random_against_reference(check_topk):
    """Bigger shapes through the fast CPU paths only (the interpreter would be too slow)."""
    q, keys = _data(64, 5000, 96, seed=9)
    s, i = candidate_topk(q, keys, 50, backend="cpu")
    check_topk(q, keys, 50, s, i, atol=1e-3)
    offsets = torch.from_numpy(np.sort(np.random.default_rng(1).integers(0, 5000, 65)))
    offsets[0], offsets[-1] = 0, 5000
    s, i = candidate_topk(q, keys, 50, offsets=offsets, backend="cpu")
    st, en = _ranges(offsets, 64)
    check_topk(q, keys, 50, s, i, st, en, atol=1e-3)


@pytest.mark.parametrize("bad,match", [
    (dict(k=-1), "k must be"),
    (dict(offsets=torch.tensor([0, 3])), "offsets has length"),
    (dict(offsets=torch.tensor([0, 5, 3, 9])), "non-decreasing"),
    (dict(offsets=torch.tensor([0, 5, 9, 99])), r"lie in \[0, N"),
    (dict(offsets=torch.tensor([0.0, 1.0, 2.0, 3.0])), "integer"),
    (dict(mask=torch.ones(7, dtype=torch.bool)), "mask must have shape"),
])
def test_errors_name_the_argument(bad, match):
    q, keys = _data(3, 10, 4)
    kw = dict(k=2)
    kw.update(bad)
    k = kw.pop("k")
    with pytest.raises((ValueError, TypeError), match=match):
        candidate_topk(q, keys, k, **kw)
    with pytest.raises(ValueError, match="same embedding width"):
        candidate_topk(q, torch.zeros(5, 3), 2)


def test_dispatch_rules(monkeypatch, caplog):
    q, keys = _data(2, 10, 4)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(dispatch.BackendUnavailable, match="TRITON_INTERPRET"):
        candidate_topk(q, keys, 2, backend="triton")
    monkeypatch.setenv("C3M_KERNELS_BACKEND_CANDIDATE_TOPK", "triton")
    with pytest.raises(dispatch.BackendUnavailable, match="C3M_KERNELS_BACKEND_CANDIDATE_TOPK"):
        candidate_topk(q, keys, 2)
    monkeypatch.setenv("C3M_KERNELS_BACKEND_CANDIDATE_TOPK", "bogus")
    with pytest.raises(ValueError, match="unknown backend"):
        candidate_topk(q, keys, 2)
    monkeypatch.delenv("C3M_KERNELS_BACKEND_CANDIDATE_TOPK")
    # automatic choice: falls back, logs the reason once
    checks = {"cpu": lambda: (False, "pretend numba is broken"), "reference": lambda: (True, "")}
    with caplog.at_level(logging.WARNING, logger="c3m_kernels"):
        for _ in range(3):
            assert dispatch.resolve_backend("fake_op", None, is_cuda=False, checks=checks) == "reference"
    assert sum("pretend numba is broken" in r.message for r in caplog.records) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("B,N,d,k", [(1, 10000, 384, 10), (64, 20000, 768, 100), (5, 999, 100, 128)])
def test_gpu_triton(dtype, ragged, B, N, d, k, check_topk):
    q, keys = _data(B, N, d, seed=11)
    qc, kc = q.cuda(), keys.cuda().to(dtype)
    offsets = None
    st = en = None
    if ragged:
        cuts = np.sort(np.random.default_rng(0).integers(0, N, B - 1)) if B > 1 else np.zeros(0, int)
        off = np.concatenate([[0], cuts, [N]])
        offsets = torch.from_numpy(off).cuda()
        st, en = off[:-1], off[1:]
    s, i = candidate_topk(qc, kc, k, offsets=offsets, backend="triton")
    atol = 1e-3 if dtype == torch.float32 else 0.3
    check_topk(q.to(dtype).float(), keys.to(dtype).float(), k, s.cpu(), i.cpu(), st, en, atol=atol)



def test_triton_fp32_dot_option(check_topk):
    """fp32_dot='tf32' (measurement option) still returns a valid top-k within TF32 error; a typo
    is refused by name."""
    from c3m_kernels.candidate_topk.triton_impl import candidate_topk_triton

    q, keys = _data(17, 90, 24, seed=4)
    dev = "cuda" if HAS_CUDA else "cpu"
    s, i = candidate_topk_triton(q.to(dev), keys.to(dev), 5, kernel="dense", fp32_dot="tf32")
    check_topk(q, keys, 5, s.cpu(), i.cpu(), atol=5e-2)
    with pytest.raises(ValueError, match="fp32_dot"):
        candidate_topk_triton(q, keys, 5, fp32_dot="fp32")
    with pytest.raises(ValueError, match="kernel"):
        candidate_topk_triton(q, keys, 5, kernel="fused")
