"""budget_solve: instances/s over batch sizes, optimality gaps (bucketing, coverage mode), and the
reader's own instances (``real=True``): CPU (numba) vs Triton at up to 4,096 instances per call.

The reader's instances, as ``c3m/read/compose.py`` (``solve_instance``) and ``c3m/read/bmer.py``
(``_solve``) build them and ``c3m/read/batch.py`` (``solve_many``) pads them into one call:

* ``compose`` (the unified reader, what ``retrieve_many`` batches): 40-58 items (evidence forms of
  the pooled memories; padded to the batch's longest with ``lengths=``), raw forms grouped by their
  node (group cost = one Raw-Node slot, [0, 1, 0, 0]), derived forms ungrouped, costs
  [0, 0, images, text tokens], ReaderBudget (3 pages, 12 Raw Nodes, 8 images, 12,288 tokens),
  64 token buckets; lambda = 0 under the shipped config, i.e. ``mode="exact"`` (solve_many's
  shortcut);
* ``bmer`` (the c3m-paper reader): 48 pooled nodes, costs [0, 1, images, tokens], groups = the
  routed page (<= 6, one page each), coverage over source sessions + index entries (<= 40 labels),
  ``mode="coverage"``, lambda = 0.05 (one question at a time in that reader; measured up to 256
  instances: its CPU coverage search takes ~50 ms per instance on one core).
"""
from __future__ import annotations

import numpy as np

from c3m_kernels.budget_solve import budget_solve, budget_solve_bruteforce, objective


def instances(rng, B, M, tok_budget=2048, n_pages=6):
    v = rng.random((B, M))
    c = np.zeros((B, M, 4))
    c[:, :, 1] = rng.integers(0, 2, (B, M))
    c[:, :, 2] = (rng.random((B, M)) < 0.25).astype(float)
    c[:, :, 3] = rng.integers(20, tok_budget // 3, (B, M))
    g = rng.integers(-1, n_pages, (B, M))
    bud = np.tile(np.array([3, 4, 2, tok_budget], float), (B, 1))
    cov = rng.random((B, M, 8)) < 0.25
    return v, c, g, bud, cov


def _page_costs(B, G):
    gc = np.zeros((B, G, 4))
    gc[:, :, 0] = 1
    return gc


#: ReaderBudget() as a budget_solve row: pages, Raw Nodes, images, text tokens
READER_BUDGET = np.array([3, 12, 8, 12 * 1024], float)


def reader_instances(rng, B, kind="compose"):
    """``B`` reader instances as the library builds them (see the module docstring):
    ``(values, costs, groups, group_costs, lengths, coverage or None, lam, mode)``."""
    if kind == "compose":
        M = 58
        lengths = rng.integers(40, M + 1, B)
        slots = 48
        g = rng.integers(0, slots, (B, M))           # raw forms: their node's slot
        derived = rng.random((B, M)) < 0.2           # summaries / captions / crops: no slot
        g[derived] = -1
        c = np.zeros((B, M, 4))
        c[:, :, 2] = (~derived & (rng.random((B, M)) < 0.15)).astype(float)  # raw images
        c[:, :, 3] = np.where(c[:, :, 2] > 0, 0, rng.integers(15, 400, (B, M)))
        v = rng.random((B, M)) * 1.8 + 0.05
        gc = np.zeros((B, slots, 4))
        gc[:, :, 1] = 1.0
        return v, c, g, gc, lengths, None, 0.0, "exact"
    M, pages, L = 48, 6, 40
    v = rng.random((B, M)) + 1.0                     # Rel = cos + eta * s(q, e), shifted positive
    c = np.zeros((B, M, 4))
    c[:, :, 1] = 1
    c[:, :, 2] = (rng.random((B, M)) < 0.3).astype(float)
    c[:, :, 3] = rng.integers(20, 600, (B, M))
    g = rng.integers(0, pages, (B, M))
    gc = np.zeros((B, pages, 4))
    gc[:, :, 0] = 1.0
    sess = rng.integers(0, 16, (B, M))               # each node covers its session and its entry
    ent = 16 + rng.integers(0, L - 16, (B, M))
    cov = np.zeros((B, M, L), bool)
    np.put_along_axis(cov, sess[:, :, None], True, axis=2)
    np.put_along_axis(cov, ent[:, :, None], True, axis=2)
    return v, c, g, gc, np.full(B, M), cov, 0.05, "coverage"


def run_reader(res, device="cpu", smoke=False, log=print):
    """The reader's instances at growing batch sizes: CPU (numba, every core) vs Triton (CUDA).
    CSV rows ``op=budget_solve_reader``; the Triton rows carry ratio_vs_peer = CPU time / Triton
    time (the speed-up; benchmarks/run_gpu.sh reports the one at 4,096 compose instances)."""
    from _common import timeit

    cuda = device == "cuda"
    rng = np.random.default_rng(2)
    rows = []
    plan = ([("compose", (1, 16)), ("bmer", (1, 4))] if smoke else
            [("compose", (1, 64, 1024, 4096)), ("bmer", (1, 64, 256))])
    try:
        import numba

        threads = numba.get_num_threads()
    except Exception:
        threads = "?"
    for kind, batches in plan:
        for B in batches:
            v, c, g, gc, n, cov, lam, mode = reader_instances(rng, B, kind)
            kw = dict(groups=g, group_costs=gc, lengths=n, mode=mode, coverage=cov, lam=lam)
            reps = 3 if B <= 1024 else 2
            t_cpu = timeit(lambda: budget_solve(v, c, READER_BUDGET, backend="cpu", **kw), reps=reps)
            shape = f"{kind} B={B} M={v.shape[1]} {mode}" + (f" lam={lam}" if lam else "")
            res.add("budget_solve_reader", "cpu", "-", shape, "ms", t_cpu * 1e3)
            t_tr, agree = float("nan"), ""
            if cuda:
                import torch

                tk = {k: (torch.from_numpy(x).cuda() if isinstance(x, np.ndarray) else x)
                      for k, x in kw.items()}
                vt, ct, bt = (torch.from_numpy(x).cuda() for x in (v, c, READER_BUDGET))
                t_tr = timeit(lambda: budget_solve(vt, ct, bt, backend="triton", **tk), reps=reps)
                got = budget_solve(vt, ct, bt, backend="triton", **tk).cpu().numpy()
                ref = budget_solve(v, c, READER_BUDGET, backend="cpu", **kw)
                obj = lambda ch: (ch * v).sum(1)  # noqa: E731
                agree = f"{np.mean(np.isclose(obj(got), obj(ref), rtol=1e-6)):.3f}"
                res.add("budget_solve_reader", "triton", f"cpu (numba, {threads} threads)", shape, "ms",
                        t_tr * 1e3, t_cpu / t_tr)
            rows.append([kind, B, v.shape[1], mode, f"{t_cpu * 1e3:.2f}", f"{B / t_cpu:,.0f}",
                         "-" if t_tr != t_tr else f"{t_tr * 1e3:.2f}",
                         "-" if t_tr != t_tr else f"{t_cpu / t_tr:.1f}", agree or "-"])
            log(f"  reader {shape}: cpu {t_cpu * 1e3:.2f} ms" +
                ("" if t_tr != t_tr else f", triton {t_tr * 1e3:.2f} ms ({t_cpu / t_tr:.1f}x)"))
    res.section("budget_solve — the reader's instances, CPU (numba) vs Triton",
                ["reader", "instances", "M (padded)", "mode", "cpu ms", "cpu inst/s", "triton ms",
                 "cpu/triton", "same objective"], rows,
                f"ReaderBudget (3 pages, 12 Raw Nodes, 8 images, 12,288 tokens), 64 token buckets; CPU "
                f"= numba on {threads} threads. 'same objective': share of instances where Triton's "
                f"choice scores what the CPU's does (GPU runs only). Triton is not timed without a "
                f"GPU (the interpreter needs a minute for two instances).")
    return rows


def run(res, device="cpu", quick=False, log=print, real=False, smoke=False):
    """``real``: only the reader's instances (run_reader); ``smoke``: tiny sizes, seconds on a CPU."""
    from _common import timeit

    if real or smoke:
        return run_reader(res, device=device, smoke=smoke, log=log)
    rng = np.random.default_rng(0)
    M = 16
    batches = (1, 16) if smoke else (1, 64, 1024) if quick else (1, 64, 1024, 16384, 65536)
    rows = []
    for B in batches:
        v, c, g, bud, cov = instances(rng, B, M)
        reps = 3 if B <= 1024 else 1
        t_ex = timeit(lambda: budget_solve(v, c, bud, groups=g, token_buckets=32), reps=reps)
        t_cov = timeit(lambda: budget_solve(v, c, bud, groups=g, token_buckets=32, mode="coverage",
                                            coverage=cov, lam=0.5), reps=reps) \
            if B <= 16384 else float("nan")
        shape = f"B={B} M={M} budgets=(3,4,2,2048 tok) buckets=32"
        res.add("budget_solve", "cpu", "-", shape, "instances/s exact", B / t_ex)
        if not np.isnan(t_cov):
            res.add("budget_solve", "cpu", "-", shape, "instances/s coverage", B / t_cov)
        t_tr = float("nan")
        if device == "cuda":
            import torch

            vt, ct, bt, gt = (torch.from_numpy(x).cuda() for x in (v, c, bud, g))
            t_tr = timeit(lambda: budget_solve(vt, ct, bt, groups=gt, token_buckets=32,
                                               backend="triton"), reps=reps)
            res.add("budget_solve", "triton", "cpu (numba)", shape, "instances/s exact triton",
                    B / t_tr, t_ex / t_tr)
        rows.append([B, M, f"{B/t_ex:,.0f}", f"{t_ex*1e3:.1f}",
                     "-" if np.isnan(t_cov) else f"{B/t_cov:,.0f}",
                     "-" if np.isnan(t_tr) else f"{B/t_tr:,.0f}"])
        log(f"  budget B={B}: exact {B/t_ex:,.0f}/s coverage {B/t_cov:,.0f}/s")
    res.section("budget_solve — throughput (numba DP, 2 threads)",
                ["batch", "M", "exact inst/s", "exact ms", "coverage inst/s",
                 "exact inst/s, Triton (GPU runs only)"], rows,
                "Coverage mode = 2 DP starts + modular-minorant iterations (3 DP calls each) + "
                "add/swap local search.")

    # optimality gaps vs brute force (M = 12, raw tokens)
    Bg, Mg = (8, 8) if smoke else (100, 10) if quick else (400, 12)
    v, c, g, bud, cov = instances(rng, Bg, Mg)
    gc = _page_costs(Bg, 6)
    gap_rows = []
    for buckets in (16, 32, 64, 2048):
        ch = budget_solve(v, c, bud, groups=g, token_buckets=buckets)
        ref = budget_solve_bruteforce(v, c, bud, g, gc)
        o, r = objective(ch, v), objective(ref, v)
        gap = float(np.mean((r - o) / np.maximum(r, 1e-12)))
        res.add("budget_solve", "cpu", "bruteforce", f"B={Bg} M={Mg} exact buckets={buckets}",
                "mean gap", gap)
        gap_rows.append([f"exact, {buckets} token buckets", f"{gap:.4%}",
                         f"{np.mean(r - o > 1e-9):.1%}"])
    for lam in (0.25, 0.5, 1.0, 2.0):
        ch = budget_solve(v, c, bud, groups=g, token_buckets=2048, mode="coverage", coverage=cov,
                          lam=lam)
        ref = budget_solve_bruteforce(v, c, bud, g, gc, coverage=cov, lam=lam)
        base = budget_solve(v, c, bud, groups=g, token_buckets=2048)
        o, r = objective(ch, v, cov, None, lam), objective(ref, v, cov, None, lam)
        ob = objective(base, v, cov, None, lam)
        gap = float(np.mean((r - o) / np.maximum(r, 1e-12)))
        gap_b = float(np.mean((r - ob) / np.maximum(r, 1e-12)))
        res.add("budget_solve", "cpu", "bruteforce", f"B={Bg} M={Mg} coverage lam={lam}",
                "mean gap", gap)
        gap_rows.append([f"coverage, lambda={lam}", f"{gap:.4%}", f"{np.mean(r - o > 1e-9):.1%}",
                         f"{gap_b:.4%}"])
        log(f"  coverage lam={lam}: gap {gap:.4%} (ignoring coverage: {gap_b:.4%})")
    res.section(f"budget_solve — optimality gap vs brute force ({Bg} instances, M={Mg})",
                ["solver", "mean relative gap", "instances below optimum",
                 "gap if coverage ignored"], gap_rows,
                "Exact mode is exact up to token bucketing (costs rounded up, always feasible); "
                "with 2048 buckets for a 2048-token budget it is exact.")
    # one reader query: BMER's pool (M=48 candidates on 6 pages) under c3m's default ReaderBudget
    lat_rows = []
    rng = np.random.default_rng(1)  # own stream: the gap instances above stay comparable over runs
    Ml = 48
    v1 = rng.random((1, Ml)) + 1.0
    c1 = np.zeros((1, Ml, 4))
    c1[:, :, 1] = 1
    c1[:, :, 2] = (rng.random((1, Ml)) < 0.3)
    c1[:, :, 3] = rng.integers(100, 1500, (1, Ml))
    g1 = rng.integers(0, 6, (1, Ml))
    cov1 = rng.random((1, Ml, 40)) < 0.05
    bud1 = np.array([3, 12, 8, 12288.0])
    t_e = timeit(lambda: budget_solve(v1, c1, bud1, groups=g1), reps=5)
    t_c = timeit(lambda: budget_solve(v1, c1, bud1, groups=g1, mode="coverage", coverage=cov1,
                                      lam=0.05), reps=5)
    lat_shape = "B=1 M=48 budgets=(3,12,8,12288 tok) buckets=64 labels=40"
    res.add("budget_solve", "cpu", "-", lat_shape, "ms exact", t_e * 1e3)
    res.add("budget_solve", "cpu", "-", lat_shape, "ms coverage", t_c * 1e3)
    lat_rows.append([lat_shape, f"{t_e*1e3:.1f}", f"{t_c*1e3:.1f}"])
    res.section("budget_solve — one reader query (latency)", ["instance", "exact ms", "coverage ms"],
                lat_rows, "What BMER pays per question with c3m's defaults (pool 48, ReaderBudget "
                "3 pages / 12 Raw Nodes / 8 images / 12,288 tokens, 64 token buckets).")

    return rows
