"""anchor_scores / build_anchor_graph vs a scipy.sparse formulation (postings per second).

``real=True`` (``run_all.py --real-shapes``) measures the library's shapes instead (run_real): the
anchor graph of one index (36 entries, a few hundred anchor keys, ``k_edge`` = 4), rebuilt when the
index changes, and one-hop expansion scores for 1 question (``c3m/read/expand.py``) or a batch of
64, each from 12 routed seed entries, k = every entry; CPU kernels vs Triton on CUDA.
"""
from __future__ import annotations

import os

import numpy as np

from c3m_kernels.anchor_scores import anchor_scores, build_anchor_graph, build_anchor_index


def corpus(rng, E, A, mean_len):
    lens = rng.poisson(mean_len, E)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    # Zipf-like anchor popularity: a few common anchors, a long tail
    p = 1.0 / np.arange(1, A + 1) ** 0.8
    p /= p.sum()
    anchors = rng.choice(A, size=int(indptr[-1]), p=p)
    df = np.bincount(anchors, minlength=A)
    idf = np.log((E + 1) / (df + 1)) + 1.0
    return indptr, anchors, idf


def run_real(res, device="cpu", smoke=False, log=print):
    """The library's shapes (module docstring); CSV rows ``op=anchor_scores_real``, ratio_vs_peer =
    CPU time / Triton time on the Triton rows."""
    from _common import timeit

    cuda = device == "cuda"
    # Triton on the GPU; under --smoke with TRITON_INTERPRET=1 once on CPU tensors (checks the
    # script's GPU branch; timings meaningless)
    triton_dev = "cuda" if cuda else ("cpu" if smoke and os.environ.get("TRITON_INTERPRET") == "1" else None)
    rng = np.random.default_rng(4)
    E, A, L, S, k_edge = 36, 240, 8, 12, 4
    p = 1.0 / np.arange(1, A + 1) ** 0.8  # Zipf-like key popularity, as corpus()
    sets = [np.unique(rng.choice(A, size=max(1, rng.poisson(L)), p=p / p.sum())) for _ in range(E)]
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in sets])]).astype(np.int64)
    anchors = np.concatenate(sets).astype(np.int64)  # each entry's keys once, as expand.py builds them
    df = np.bincount(anchors, minlength=A)
    idf = np.log((2 + E) / (1 + df))
    rows = []
    t_g = timeit(lambda: build_anchor_graph(indptr, anchors, idf, k_edge), reps=5)
    shape_g = f"graph E={E} anchors={A} anchors/entry~{L} k_edge={k_edge}"
    res.add("anchor_scores_real", "cpu", "-", shape_g, "us", t_g * 1e6)
    t_gt = float("nan")
    if triton_dev:
        t_gt = timeit(lambda: build_anchor_graph(indptr, anchors, idf, k_edge, device=triton_dev,
                                                 backend="triton"), reps=5 if cuda else 1, warmup=1 if cuda else 0)
        res.add("anchor_scores_real", "triton", "cpu (numba)", shape_g, "us", t_gt * 1e6, t_g / t_gt)
    rows.append(["build_anchor_graph", shape_g, f"{t_g * 1e6:.0f}",
                 "-" if t_gt != t_gt else f"{t_gt * 1e6:.0f}",
                 "-" if t_gt != t_gt else f"{t_g / t_gt:.2f}"])
    for B in ((4,) if smoke else (1, 64)):
        sim = np.maximum(0.0, rng.random((B, A)) * 2 - 1)
        seeds = np.stack([rng.choice(E, S, replace=False) for _ in range(B)]).astype(np.int64)
        t_c = timeit(lambda: anchor_scores(indptr, anchors, idf, sim, seeds, E), reps=5)
        shape = f"scores E={E} anchors={A} B={B} seeds={S} k={E}"
        res.add("anchor_scores_real", "cpu", "-", shape, "us", t_c * 1e6)
        t_t = float("nan")
        if triton_dev:
            import torch

            sim_t = torch.from_numpy(sim).to(triton_dev)
            seeds_t = torch.from_numpy(seeds).to(triton_dev)
            t_t = timeit(lambda: anchor_scores(indptr, anchors, idf, sim_t, seeds_t, E, backend="triton"),
                         reps=5 if cuda else 1, warmup=1 if cuda else 0)
            res.add("anchor_scores_real", "triton", "cpu (numba)", shape, "us", t_t * 1e6, t_c / t_t)
        rows.append(["anchor_scores", shape, f"{t_c * 1e6:.0f}", "-" if t_t != t_t else f"{t_t * 1e6:.0f}",
                     "-" if t_t != t_t else f"{t_c / t_t:.2f}"])
        log(f"  real anchor_scores B={B}: cpu {t_c * 1e6:.0f} us"
            + ("" if t_t != t_t else f", triton {t_t * 1e6:.0f} us"))
    res.section("anchor_scores / anchor graph — the library's shapes", ["op", "shape", "cpu us",
                "triton us", "cpu/triton"], rows,
                "One index of 36 entries; best of 5 calls. Triton is timed on CUDA (under --smoke it "
                "runs once in the interpreter, timings meaningless). Launch-bound: at these sizes the "
                "CPU kernels may well win, which is what the read path's device choice should know.")
    return rows


def run(res, device="cpu", quick=False, log=print, real=False, smoke=False):
    """``real``: only the library's shapes (run_real); ``smoke``: tiny sizes, seconds on a CPU."""
    if real or smoke:
        return run_real(res, device=device, smoke=smoke, log=log)
    import scipy.sparse as sp
    from _common import timeit

    rng = np.random.default_rng(0)
    E, A, L = (20_000, 10_000, 8) if quick else (100_000, 50_000, 8)
    B, S, K = 256, 5, 32
    indptr, anchors, idf = corpus(rng, E, A, L)
    index = build_anchor_index(indptr, anchors, A)
    sim = rng.random((B, A))
    seeds = rng.integers(0, E, (B, S))
    X = sp.csr_matrix((np.ones(len(index.ep_anchors)), index.ep_anchors, index.ep_indptr),
                      shape=(E, A))
    XT = X.T.tocsr()

    # postings visited by the CPU path (for nnz/s)
    lens_a = np.diff(index.an_indptr)
    visited = 0
    for b in range(B):
        U = np.unique(np.concatenate([index.ep_anchors[index.ep_indptr[s]:index.ep_indptr[s + 1]]
                                      for s in seeds[b]]))
        visited += int(lens_a[U].sum())

    def ours():
        return anchor_scores(None, None, idf, sim, seeds, K, index=index)

    def scipy_version():
        rows = np.repeat(np.arange(B), S)
        Sm = sp.csr_matrix((np.ones(B * S), (rows, seeds.ravel())), shape=(B, E))
        U = (Sm @ X)  # [B, A] counts
        U.data[:] = 1.0
        W = U.multiply(sim * idf[None, :]).tocsr()  # only the seeds' anchors
        scores = (W @ XT).toarray()  # [B, E]
        nbr = (U @ XT).toarray() > 0
        scores[~nbr] = -np.inf
        scores[np.arange(B)[:, None], seeds] = -np.inf
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        return top

    ours()
    t_ours = timeit(ours, reps=3)
    t_sp = timeit(scipy_version, reps=3)
    shape = f"E={E} A={A} anchors/ep~{L} B={B} seeds={S} k={K}"
    res.add("anchor_scores", "cpu", "-", shape, "ms", t_ours * 1e3)
    res.add("anchor_scores", "cpu", "-", shape, "postings/s", visited / t_ours)
    res.add("anchor_scores", "cpu", "scipy.sparse", shape, "ms", t_sp * 1e3, t_sp / t_ours)
    log(f"  anchor_scores: ours {t_ours*1e3:.1f} ms scipy {t_sp*1e3:.1f} ms "
        f"({visited/t_ours/1e6:.1f} M postings/s)")
    extra = []
    if device == "cuda":
        import torch

        sim_c = torch.from_numpy(sim).cuda()
        t_tr = timeit(lambda: anchor_scores(None, None, idf, sim_c, seeds, K, index=index), reps=3)
        res.add("anchor_scores", "triton", "cpu (numba)", shape, "ms", t_tr * 1e3, t_ours / t_tr)
        res.add("anchor_scores", "triton", "-", shape, "postings/s", visited / t_tr)
        extra.append(["anchor_scores (triton)", shape, f"{t_tr*1e3:.1f}", f"{t_sp*1e3:.1f}",
                      f"{t_sp/t_tr:.2f}", f"{visited/t_tr/1e6:.1f} M postings/s"])

    Eg = 5_000 if quick else 30_000
    ip_g, an_g, idf_g = corpus(rng, Eg, Eg // 2, L)
    idx_g = build_anchor_index(ip_g, an_g, len(idf_g))
    lens_g = np.diff(idx_g.an_indptr)
    pairs = int((lens_g.astype(np.int64) ** 2).sum())
    Xg = sp.csr_matrix((np.ones(len(idx_g.ep_anchors)), idx_g.ep_anchors, idx_g.ep_indptr),
                       shape=(Eg, len(idf_g)))
    k_edge = 16

    def ours_g():
        return build_anchor_graph(None, None, idf_g, k_edge, index=idx_g)

    def scipy_g():
        Wm = (Xg.multiply(idf_g[None, :]).tocsr() @ Xg.T).tocsr()
        Wm.setdiag(0)
        Wm.eliminate_zeros()
        out = []
        for e in range(Eg):  # top-k per row
            lo, hi = Wm.indptr[e], Wm.indptr[e + 1]
            d = Wm.data[lo:hi]
            if hi - lo > k_edge:
                sel = np.argpartition(-d, k_edge)[:k_edge]
            else:
                sel = np.arange(hi - lo)
            out.append(Wm.indices[lo:hi][sel])
        return out

    ours_g()
    t_g = timeit(ours_g, reps=2)
    t_gs = timeit(scipy_g, reps=2)
    shape_g = f"E={Eg} anchors/ep~{L} k_edge={k_edge}"
    res.add("anchor_graph", "cpu", "-", shape_g, "ms", t_g * 1e3)
    res.add("anchor_graph", "cpu", "-", shape_g, "postings pairs/s", pairs / t_g)
    res.add("anchor_graph", "cpu", "scipy.sparse X@X.T + row top-k", shape_g, "ms", t_gs * 1e3,
            t_gs / t_g)
    log(f"  anchor_graph: ours {t_g*1e3:.1f} ms scipy {t_gs*1e3:.1f} ms")
    if device == "cuda":
        t_gt = timeit(lambda: build_anchor_graph(None, None, idf_g, k_edge, index=idx_g,
                                                 device="cuda"), reps=2)
        res.add("anchor_graph", "triton", "cpu (numba)", shape_g, "ms", t_gt * 1e3, t_g / t_gt)
        extra.append(["build_anchor_graph (triton)", shape_g, f"{t_gt*1e3:.1f}", f"{t_gs*1e3:.1f}",
                      f"{t_gs/t_gt:.2f}", f"{pairs/t_gt/1e6:.1f} M posting pairs/s"])
    res.section("anchor_scores / anchor graph vs scipy.sparse",
                ["op", "shape", "ours ms", "scipy ms", "scipy/ours", "throughput"],
                [["anchor_scores", shape, f"{t_ours*1e3:.1f}", f"{t_sp*1e3:.1f}",
                  f"{t_sp/t_ours:.2f}", f"{visited/t_ours/1e6:.1f} M postings/s"],
                 ["build_anchor_graph", shape_g, f"{t_g*1e3:.1f}", f"{t_gs*1e3:.1f}",
                  f"{t_gs/t_g:.2f}", f"{pairs/t_g/1e6:.1f} M posting pairs/s"]] + extra,
                "scipy: U = onehot(seeds)@X, scores = (U∘sim∘idf)@Xᵀ densified, argpartition; "
                "graph: (X∘idf)@Xᵀ then per-row argpartition.")
