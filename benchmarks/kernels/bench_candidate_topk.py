"""candidate_topk vs faiss IndexFlatIP and torch.topk(q @ k.T): dense and ragged multi-tenant.

Effective GB/s = bytes of keys that must be read / time (each key row once per call).
"""
from __future__ import annotations

import time

import numpy as np

from c3m_kernels.candidate_topk import candidate_topk


def _keys(rng, n, d, dtype=np.float32):
    return rng.standard_normal((n, d), dtype=np.float32).astype(dtype, copy=False)


def run(res, device="cpu", quick=False, log=print, dense=True):
    """``dense=False`` leaves out the one-shared-index table (``bench_topk_bandwidth.py`` measures
    that case on the GPU, with faiss-gpu and bandwidth columns) and runs the ragged case only."""
    import torch

    try:
        import faiss

        faiss.cvar.distance_compute_blas_threshold = 20  # BLAS path from 20 queries up: the strongest faiss CPU setting at these shapes
        faiss.omp_set_num_threads(torch.get_num_threads())
    except ImportError:
        faiss = None
    rng = np.random.default_rng(0)
    cuda = device == "cuda"
    if cuda:
        configs = [(1_000_000, 384, B, k) for B in (1, 16, 64, 256) for k in (10, 100)] + \
                  [(1_000_000, 768, B, k) for B in (1, 64) for k in (10, 100)] + \
                  [(4_000_000, 768, B, k, "fp16") for B in (1, 64) for k in (10, 100)] + \
                  [(4_000_000, 768, B, k, "bf16") for B in (1, 64) for k in (10, 100)]
    elif quick:
        configs = [(100_000, 384, B, k) for B in (1, 64) for k in (10,)]
    else:
        configs = sorted([(1_000_000, 384, B, k) for B in (1, 16, 64) for k in (10, 100)]
                         + [(1_000_000, 384, B, 10) for B in (4, 8, 256)]
                         + [(200_000, 768, B, k) for B in (1, 16, 256) for k in (10, 100)],
                         key=lambda c: (-c[0], c[1], c[2], c[3]))
    if not dense:
        configs = []
    rows = []
    keys_cache = {}
    for cfg in configs:
        N, d, B, k = cfg[:4]
        dt = cfg[4] if len(cfg) > 4 else "fp32"
        if (N, d, dt) not in keys_cache:
            keys_cache.clear()
            index = None
            if cuda:  # generate on the GPU: host RAM and PCIe time are not what we measure
                kn = None
                kt = torch.randn(N, d, device="cuda").to(
                    {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dt])
            else:
                kn = _keys(rng, N, d)
                if faiss is not None:
                    index = faiss.IndexFlatIP(d)
                    index.add(kn)
                kt = torch.from_numpy(kn)
            keys_cache[(N, d, dt)] = (kn, kt, index)
        kn, kt, index = keys_cache[(N, d, dt)]
        qn = _keys(rng, B, d)
        qt = torch.from_numpy(qn).to(kt.device).to(kt.dtype)
        from _common import timeit

        gb = N * d * kt.element_size() / 1e9
        reps = 3 if cuda else 5  # best of 5 on the CPU: a shared VM's bandwidth drifts within a run
        t_ours = timeit(lambda: candidate_topk(qt, kt, k), reps=reps)
        t_torch = timeit(lambda: torch.topk(qt @ kt.T, k, dim=1), reps=reps)
        t_faiss = timeit(lambda: index.search(qn, k), reps=reps) if (index is not None and not cuda) \
            else float("nan")
        shape = f"N={N} d={d} B={B} k={k}" + ("" if dt == "fp32" else f" {dt}")
        be = "triton" if cuda else "cpu"
        res.add("candidate_topk", be, "-", shape, "ms", t_ours * 1e3)
        res.add("candidate_topk", be, "-", shape, "GB/s", gb / t_ours)
        res.add("candidate_topk", be, "torch.topk(q@k.T)", shape, "ms", t_torch * 1e3, t_torch / t_ours)
        if not np.isnan(t_faiss):
            res.add("candidate_topk", be, "faiss.IndexFlatIP", shape, "ms", t_faiss * 1e3,
                    t_faiss / t_ours)
        rows.append([N, d if dt == "fp32" else f"{d} {dt}", B, k, f"{t_ours*1e3:.1f}", f"{gb/t_ours:.1f}", f"{t_faiss*1e3:.1f}",
                     f"{t_faiss/t_ours:.2f}", f"{t_torch*1e3:.1f}", f"{t_torch/t_ours:.2f}"])
        log(f"  topk {shape}: ours {t_ours*1e3:.1f} ms ({gb/t_ours:.1f} GB/s) faiss {t_faiss*1e3:.1f} "
            f"torch {t_torch*1e3:.1f}")
    keys_cache.clear()
    if rows:
        res.section("candidate_topk — one shared index (dense)",
                    ["N", "d", "B", "k", "ours ms", "ours GB/s", "faiss ms", "faiss/ours",
                     "torch ms", "torch/ours"], rows,
                    "Ratios are peer time / our time (> 1: ours faster). GB/s = bytes of keys / "
                    "time (N·d·4 for fp32, N·d·2 for fp16/bf16).")

    # ragged multi-tenant: one query per tenant, each tenant its own key range
    T = 4096 if cuda else (128 if quick else 1024)
    d = 384
    sizes = rng.integers(36, 5001, T)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    Ntot = int(offsets[-1])
    log(f"  ragged: {T} tenants, {Ntot} keys total")
    k = 10
    off_t = torch.from_numpy(offsets)
    if cuda:
        kn = qn = None
        kt, qt = torch.randn(Ntot, d, device="cuda"), torch.randn(T, d, device="cuda")
        off_t = off_t.cuda()
    else:
        kn = _keys(rng, Ntot, d)
        qn = _keys(rng, T, d)
        kt, qt = torch.from_numpy(kn), torch.from_numpy(qn)
    from _common import timeit

    t_ours = timeit(lambda: candidate_topk(qt, kt, k, offsets=off_t), reps=3)

    def torch_loop():
        for t in range(T):
            lo, hi = int(offsets[t]), int(offsets[t + 1])
            torch.topk(kt[lo:hi] @ qt[t], min(k, hi - lo))

    t_torch = timeit(torch_loop, reps=2, warmup=1)
    rows = []
    t_faiss = float("nan")
    if faiss is not None and not cuda:
        t0 = time.perf_counter()
        idxs = []
        for t in range(T):
            ix = faiss.IndexFlatIP(d)
            ix.add(kn[offsets[t]:offsets[t + 1]])
            idxs.append(ix)
        build = time.perf_counter() - t0

        def faiss_loop():
            for t in range(T):
                idxs[t].search(qn[t:t + 1], k)

        t_faiss = timeit(faiss_loop, reps=2, warmup=1)
        del idxs
        log(f"  (faiss: {T} per-tenant indexes built in {build:.1f} s, not timed)")
    gb = Ntot * d * 4 / 1e9
    shape = f"tenants={T} keys=36..5000 (total {Ntot}) d={d} k={k}"
    be = "triton" if cuda else "cpu"
    res.add("candidate_topk_ragged", be, "-", shape, "ms", t_ours * 1e3)
    res.add("candidate_topk_ragged", be, "-", shape, "GB/s", gb / t_ours)
    res.add("candidate_topk_ragged", be, "torch loop per tenant", shape, "ms", t_torch * 1e3,
            t_torch / t_ours)
    if not np.isnan(t_faiss):
        res.add("candidate_topk_ragged", be, "faiss IndexFlatIP per tenant", shape, "ms",
                t_faiss * 1e3, t_faiss / t_ours)
    res.section("candidate_topk — ragged multi-tenant (one query per tenant, one call)",
                ["tenants", "keys total", "d", "k", "ours ms", "ours GB/s", "faiss ms", "faiss/ours",
                 "torch loop ms", "torch/ours"],
                [[T, Ntot, d, k, f"{t_ours*1e3:.1f}", f"{gb/t_ours:.1f}", f"{t_faiss*1e3:.1f}",
                  f"{t_faiss/t_ours:.2f}", f"{t_torch*1e3:.1f}", f"{t_torch/t_ours:.2f}"]],
                "faiss needs one IndexFlatIP per tenant and one search call each (index build not "
                "timed); the torch peer loops over tenants with mv + topk.")
    log(f"  ragged: ours {t_ours*1e3:.1f} ms ({gb/t_ours:.1f} GB/s) faiss {t_faiss*1e3:.1f} "
        f"torch {t_torch*1e3:.1f}")
    return rows
