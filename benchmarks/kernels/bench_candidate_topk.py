"""candidate_topk vs faiss IndexFlatIP and torch.topk(q @ k.T): dense and ragged multi-tenant.

Effective GB/s = bytes of keys that must be read / time (each key row once per call).

``real=True`` (``run_all.py --real-shapes``) measures the library's own shapes instead (run_real):
one tenant's index (36-37 routing rows: entries + pages) or Cold-Store (1,024-5,000 Raw Nodes) of
384-d MiniLM vectors searched by B <= 64 queries, and the batched read's ragged launch (one query
per tenant against its own index or Cold-Store segment), k as ``c3m/read`` asks (37 routing rows,
64 pooled nodes). These are launch- and latency-bound, not bandwidth-bound: the large-shape HBM
figure is ``bench_topk_bandwidth.py``'s.
"""
from __future__ import annotations

import os
import time

import numpy as np

from c3m_kernels.candidate_topk import candidate_topk


def _keys(rng, n, d, dtype=np.float32):
    return rng.standard_normal((n, d), dtype=np.float32).astype(dtype, copy=False)


def _faiss_for(cuda):
    """``(faiss module or None, gpu resources or None, note)``: faiss-gpu on CUDA, faiss-cpu on the CPU."""
    try:
        import faiss
    except Exception as exc:  # ImportError, or a faiss-gpu wheel without its CUDA libraries
        return None, None, f"faiss not importable ({type(exc).__name__})"
    if not cuda:
        return faiss, None, f"faiss {getattr(faiss, '__version__', '?')} IndexFlatIP (CPU)"
    if not (hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0):
        return None, None, "faiss has no GPU support here (faiss-cpu?)"
    return faiss, faiss.StandardGpuResources(), f"faiss {getattr(faiss, '__version__', '?')} GpuIndexFlatIP"


def run_real(res, device="cpu", smoke=False, log=print):
    """The library's shapes (module docstring). CSV rows ``op=candidate_topk_real``; ratio_vs_peer =
    peer time / our time (> 1: ours faster)."""
    import torch

    from _common import timeit as _timeit

    cuda = device == "cuda"
    tdev = "cuda" if cuda else "cpu"
    # Triton on the GPU; under --smoke with TRITON_INTERPRET=1 the same Triton code on CPU tensors
    # (checks this script's GPU branch end to end; its timings say nothing), else the CPU kernels
    backend = "triton" if (cuda or (smoke and os.environ.get("TRITON_INTERPRET") == "1")) else None
    be = backend or "cpu"
    faiss, fres, fnote = _faiss_for(cuda)
    log(f"  real shapes: ours = {be}; faiss: {fnote}")
    gen = torch.Generator(device=tdev).manual_seed(0)
    d = 32 if smoke else 384  # smoke: the interpreter needs seconds per call at d = 384
    dtypes = ["fp32", "fp16"] if cuda else ["fp32"]
    tdt = {"fp32": torch.float32, "fp16": torch.float16}
    reps = 5 if cuda else 1 if smoke else 3

    def timeit(fn, reps):
        return _timeit(fn, reps=reps, warmup=0 if smoke else 1)

    rows = []
    # one tenant: B queries against one index / Cold-Store
    dense = ([(36, (8,)), (100, (1,))] if smoke else
             [(36, (1, 8, 64)), (1024, (1, 8, 64)), (5000, (1, 8, 64))])
    for dt in dtypes:
        for N, batches in dense:
            keys = torch.randn(N, d, device=tdev, generator=gen)
            keys = torch.nn.functional.normalize(keys, dim=1).to(tdt[dt])
            index, why = None, ""
            if faiss is not None:
                try:
                    if fres is not None:
                        cfg = faiss.GpuIndexFlatConfig()
                        cfg.useFloat16 = dt != "fp32"
                        index = faiss.GpuIndexFlatIP(fres, d, cfg)
                    else:
                        index = faiss.IndexFlatIP(d)
                    index.add(keys.float().cpu().numpy())
                except Exception as exc:
                    index, why = None, f"faiss: {type(exc).__name__}"
            for B in batches:
                k = min(64, N) if N > 64 else min(37, N)
                q = torch.randn(B, d, device=tdev, generator=gen).to(tdt[dt])
                qn = q.float().cpu().numpy()
                t_ours = timeit(lambda: candidate_topk(q, keys, k, backend=backend), reps=reps)
                t_torch = timeit(lambda: torch.topk(q @ keys.T, k, dim=1), reps=reps)
                t_faiss = (timeit(lambda: index.search(qn, k), reps=reps) if index is not None
                           else float("nan"))
                shape = f"one tenant N={N} d={d} B={B} k={k} {dt}"
                res.add("candidate_topk_real", be, "-", shape, "us", t_ours * 1e6)
                res.add("candidate_topk_real", be, "torch.topk(q@k.T)", shape, "us", t_torch * 1e6,
                        t_torch / t_ours)
                if index is not None:
                    res.add("candidate_topk_real", be, "faiss", shape, "us", t_faiss * 1e6,
                            t_faiss / t_ours)
                rows.append(["one tenant", N, B, k, dt, f"{t_ours * 1e6:.0f}", f"{t_torch * 1e6:.0f}",
                             f"{t_torch / t_ours:.2f}",
                             f"{t_faiss * 1e6:.0f}" if t_faiss == t_faiss else (why or "-"),
                             f"{t_faiss / t_ours:.2f}" if t_faiss == t_faiss else "-"])
                log(f"  real {shape}: ours {t_ours * 1e6:.0f} us torch {t_torch * 1e6:.0f} us"
                    + (f" faiss {t_faiss * 1e6:.0f} us" if t_faiss == t_faiss else ""))
            del keys, index
    # the batched read's ragged launch: one query per tenant, each against its own segment
    rng = np.random.default_rng(3)
    ragged = ([("index", 4, (37, 37), 37), ("Cold-Store", 4, (20, 80), 64)] if smoke else
              [("index", 64, (37, 37), 37), ("index", 4096, (37, 37), 37),
               ("Cold-Store", 64, (1024, 5000), 64), ("Cold-Store", 1024 if cuda else 256, (1024, 5000), 64)])
    for what, T, (lo, hi), k in ragged:
        sizes = rng.integers(lo, hi + 1, T)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        ntot = int(offsets[-1])
        keys = torch.nn.functional.normalize(torch.randn(ntot, d, device=tdev, generator=gen), dim=1)
        q = torch.randn(T, d, device=tdev, generator=gen)
        off_t = torch.from_numpy(offsets).to(tdev)
        t_ours = timeit(lambda: candidate_topk(q, keys, k, offsets=off_t, backend=backend), reps=reps)
        # torch peer: every tenant padded to the longest segment (built once, not timed), one bmm
        width = int(sizes.max())
        pad_gb = T * width * d * 4 / 1e9
        t_torch, note = float("nan"), ""
        if pad_gb <= (16 if cuda else 1):
            padded = torch.zeros(T, width, d, device=tdev)
            valid = torch.zeros(T, width, dtype=torch.bool, device=tdev)
            for t in range(T):
                n = int(sizes[t])
                padded[t, :n] = keys[offsets[t]:offsets[t + 1]]
                valid[t, :n] = True
            kk = min(k, int(sizes.min()))

            def torch_padded():
                sc = torch.bmm(padded, q[:, :, None])[:, :, 0].masked_fill(~valid, float("-inf"))
                return torch.topk(sc, kk, dim=1)

            t_torch = timeit(torch_padded, reps=reps)
            del padded, valid
        else:
            note = f"torch padded batch skipped ({pad_gb:.0f} GB)"
        shape = f"ragged {what} tenants={T} rows={lo}..{hi} (total {ntot}) d={d} k={k} fp32"
        res.add("candidate_topk_real", be, "-", shape, "us", t_ours * 1e6)
        if t_torch == t_torch:
            res.add("candidate_topk_real", be, "torch padded bmm+topk", shape, "us", t_torch * 1e6,
                    t_torch / t_ours)
        rows.append([f"ragged {what}", f"{T} x {lo}..{hi}", T, k, "fp32", f"{t_ours * 1e6:.0f}",
                     f"{t_torch * 1e6:.0f}" if t_torch == t_torch else note,
                     f"{t_torch / t_ours:.2f}" if t_torch == t_torch else "-",
                     "-", "-"])
        log(f"  real {shape}: ours {t_ours * 1e6:.0f} us torch {t_torch * 1e6:.0f} us {note}")
        del keys
    if cuda:
        torch.cuda.empty_cache()
    res.section("candidate_topk — the library's shapes (one tenant; the batched read's ragged launch)",
                ["case", "rows", "queries", "k", "dtype", "ours us", "torch us", "torch/ours",
                 "faiss us", "faiss/ours"], rows,
                f"ours = {be}; best of {reps} calls. One tenant: B queries against one index (36 "
                f"routing rows) or Cold-Store (Raw Nodes); torch = topk(q @ keys.T); faiss: {fnote}. "
                "Ragged: one query per tenant, each against its own segment, one launch; torch = the "
                "segments padded to the longest (untimed) and one bmm + masked topk. These shapes are "
                "launch-bound: microseconds, not bandwidth, are the figure.")
    return rows


def run(res, device="cpu", quick=False, log=print, dense=True, real=False, smoke=False):
    """``dense=False`` leaves out the one-shared-index table (``bench_topk_bandwidth.py`` measures
    that case on the GPU, with faiss-gpu and bandwidth columns) and runs the ragged case only.
    ``real``: only the library's shapes (run_real); ``smoke``: tiny sizes, seconds on a CPU."""
    import torch

    if real or smoke:
        return run_real(res, device=device, smoke=smoke, log=log)

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
