"""Dense top-k key-read bandwidth: candidate_topk (Triton) vs torch.topk(q @ k.T) vs faiss-gpu.

The performance target this measures: the dense Triton ``candidate_topk`` reads fp16/bf16 keys at
>= 80% of the HBM bandwidth (``--peak-tbs``, 4.8 TB/s for an H200) for B <= 64 queries and
k <= 128. Achieved key-read bandwidth = N * d * bytes per key element / time per call: every method
has to read every key once per call, so this figure can be set against the memory's peak, and a
method that reads the keys more than once, or writes and re-reads a B x N score matrix, shows a
lower one. fp32 rows are for reference (IEEE fp32 dot products on CUDA cores, not the target).

Peers, all in the same process on the same keys:
* ``torch.topk(q @ keys.T, k)``: cuBLAS GEMM into a B x N score matrix, then torch's top-k;
* faiss-gpu ``GpuIndexFlatIP`` (``StandardGpuResources``), fp16 storage for fp16/bf16 keys (faiss
  stores no bf16) and fp32 storage for fp32 keys; skipped, with the reason in the report, when
  faiss with GPU support is not importable. Index build is not timed.

Timing: for every method the same way: ``torch.cuda.synchronize()`` before and after each call and
the wall clock in between (faiss runs on its own stream, so CUDA events on torch's stream would
not cover it); median of ``--reps`` calls after ``--warmup`` untimed calls (the first call also
compiles the Triton kernel). Synchronise + launch overhead is ~10-20 us, a few % of the smallest
call here. ``recall vs torch`` is the overlap of the returned index sets with torch's, a sanity
check only: fp16/bf16 scores round differently in each method, so near-ties may swap.

Usage (repository root):
    python benchmarks/kernels/bench_topk_bandwidth.py --out benchmarks/results/gpu        # one CUDA GPU
    python benchmarks/kernels/bench_topk_bandwidth.py --smoke --out /tmp/bw
        (no GPU: tiny shapes on the CPU, Triton under TRITON_INTERPRET=1, faiss-cpu as the faiss
        stand-in if importable; checks the script end to end, timings meaningless)
Writes ``<stem>.md``, ``<stem>.csv`` and, with matplotlib, ``<stem>.png`` into ``--out``; stem
default ``topk-bandwidth-cuda`` (``topk-bandwidth-smoke`` under --smoke). Check a GPU run in as
``benchmarks/results/topk-bandwidth-h200.{md,csv,png}``.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the first triton import

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import commit, now_utc  # noqa: E402

CSV_COLUMNS = ["machine", "date", "commit", "dtype", "N", "d", "B", "k", "key_GB",
               "ours_ms", "ours_TBs", "ours_pct_peak", "torch_ms", "torch_TBs", "torch_pct_peak",
               "faiss_ms", "faiss_TBs", "faiss_pct_peak", "torch_over_ours", "faiss_over_ours",
               "recall_vs_torch", "faiss_recall_vs_torch", "note"]
MD_COLUMNS = ["dtype", "N", "d", "B", "k", "ours ms", "ours TB/s", "ours % peak", "torch ms",
              "torch TB/s", "torch/ours", "faiss ms", "faiss TB/s", "faiss/ours",
              "recall vs torch"]
#: the issue's target: >= this share of the peak for these dtypes, B and k
TARGET_SHARE, TARGET_DTYPES, TARGET_MAX_B, TARGET_MAX_K = 0.80, ("fp16", "bf16"), 64, 128


def _ints(s):
    return [int(float(x)) for x in str(s).split(",") if x.strip()]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, Triton interpreter, tiny shapes: checks the script, not the speed")
    ap.add_argument("--out", default=None, help="output folder (default benchmarks/results/gpu)")
    ap.add_argument("--stem", default=None, help="file stem (default topk-bandwidth-cuda|smoke)")
    ap.add_argument("--peak-tbs", type=float, default=4.8,
                    help="memory peak in TB/s for the %% column (default 4.8: H200 HBM3e)")
    ap.add_argument("--dtypes", default="fp16,bf16,fp32")
    ap.add_argument("--dims", default=None, help="comma list of d (default 384,768; smoke 32)")
    ap.add_argument("--n", default=None,
                    help="keys per index (default 4000000: 3.1/6.1 GB fp16 at d=384/768; smoke 256)")
    ap.add_argument("--batches", default=None, help="comma list of B (default 1,8,32,64; smoke 1,8)")
    ap.add_argument("--ks", default="10,128")
    ap.add_argument("--reps", type=int, default=None, help="timed calls (median; default 20, smoke 1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed calls first (default 3; smoke 0: the one call is timed)")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="start no new configuration after this many seconds (rest listed as skipped)")
    ap.add_argument("--no-faiss", action="store_true", help="leave faiss out")
    a = ap.parse_args(argv)
    a.dims = _ints(a.dims or ("32" if a.smoke else "384,768"))
    a.n = _ints(a.n or ("256" if a.smoke else "4000000"))[0]
    a.batches = _ints(a.batches or ("1,8" if a.smoke else "1,8,32,64"))
    a.ks = _ints(a.ks)
    a.dtypes = [x.strip() for x in a.dtypes.split(",") if x.strip()]
    a.reps = a.reps or (1 if a.smoke else 20)
    a.warmup = a.warmup if a.warmup is not None else (0 if a.smoke else 3)
    return a


def setup_faiss(want_gpu: bool, disabled: bool):
    """``(faiss module or None, use_gpu, torch_utils_loaded, note)``."""
    if disabled:
        return None, False, False, "faiss left out (--no-faiss)"
    try:
        import faiss
    except Exception as exc:  # ImportError, or a faiss-gpu wheel whose CUDA libraries are missing
        return None, False, False, (f"faiss not importable ({type(exc).__name__}: {exc}); "
                                    f"`pip install faiss-gpu` (CUDA 12 wheels) adds the faiss columns")
    try:
        import faiss.contrib.torch_utils  # noqa: F401  (tensors in and out, CUDA ones stay on the GPU)
        tu = True
    except Exception:
        tu = False
    gpu = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    ver = getattr(faiss, "__version__", "?")
    if want_gpu and not gpu:
        return None, False, tu, (f"faiss {ver} has no GPU support here (faiss-cpu?); "
                                 f"`pip install faiss-gpu` adds the faiss columns")
    if not want_gpu:
        return faiss, False, tu, f"faiss {ver} CPU IndexFlatIP as the smoke stand-in for GpuIndexFlatIP"
    return faiss, True, tu, (f"faiss {ver} GpuIndexFlatIP, StandardGpuResources; fp16 storage for "
                             f"fp16/bf16 keys, fp32 for fp32; torch_utils {'on' if tu else 'off'}")


def build_faiss_index(faiss, gpu, tu, res, keys, dtype_name, chunk=1 << 20):
    import torch

    d = keys.shape[1]
    if gpu:
        cfg = faiss.GpuIndexFlatConfig()
        cfg.device = torch.cuda.current_device()
        cfg.useFloat16 = dtype_name != "fp32"
        index = faiss.GpuIndexFlatIP(res, d, cfg)
    else:
        index = faiss.IndexFlatIP(d)
    for lo in range(0, keys.shape[0], chunk):
        x = keys[lo:lo + chunk].float().contiguous()
        index.add(x if tu else x.cpu().numpy())
    return index


def _recall(a, b):
    """Mean overlap of two [B, k] index sets (tensors), ignoring -1 padding."""
    import torch

    a, b = torch.as_tensor(a).long().cpu(), torch.as_tensor(b).long().cpu()
    hit = (a[:, :, None] == b[:, None, :]).any(-1) & (a >= 0)
    return float(hit.float().sum() / max(1, int((b >= 0).sum())))


def _why(exc) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"


def _fmt(x, spec):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def run(args, log=print):
    import torch

    from c3m_kernels.candidate_topk import candidate_topk

    try:  # dense calls up to this many queries take the ragged kernel (no tl.dot)
        from c3m_kernels.candidate_topk.triton_impl import DENSE_AS_RAGGED_MAX_B as ragged_max_b
    except Exception:
        ragged_max_b = 2

    cuda = not args.smoke
    if cuda and not torch.cuda.is_available():
        raise SystemExit("bench_topk_bandwidth: needs a CUDA GPU (or --smoke for the CPU check)")
    dev = "cuda" if cuda else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    bad = [x for x in args.dtypes if x not in dtypes]
    if bad:
        raise SystemExit(f"bench_topk_bandwidth: unknown dtype(s) {bad}; use fp16, bf16, fp32")
    faiss, fgpu, tu, faiss_note = setup_faiss(cuda, args.no_faiss)
    fres = faiss.StandardGpuResources() if (faiss is not None and fgpu) else None
    log(f"faiss: {faiss_note}")
    peak = args.peak_tbs * 1e12

    def bench(fn):
        out = None
        for _ in range(args.warmup):  # the first call also compiles; its result is kept for recall
            r = fn()
            out = r if out is None else out
            sync()
        ts, t_start = [], time.perf_counter()
        for _ in range(args.reps):
            sync()
            t0 = time.perf_counter()
            r = fn()
            sync()
            ts.append(time.perf_counter() - t0)
            out = r if out is None else out
            if time.perf_counter() - t_start > 10.0 and len(ts) >= 3:
                break
        return statistics.median(ts), out

    def attempt(fn, what, notes):
        try:
            return bench(fn)
        except Exception as exc:  # report and keep going: one failing method must not end the run
            notes.append(f"{what}: {_why(exc)}")
            return float("nan"), None

    machine = torch.cuda.get_device_name(0) if cuda else "CPU (smoke, Triton interpreter)"
    meta = dict(machine=machine, date=now_utc(), commit=os.environ.get("COMMIT") or commit())
    rows, skipped = [], []
    t0 = time.time()
    gen = torch.Generator(device=dev).manual_seed(0)
    groups = [(dt, d) for dt in args.dtypes for d in args.dims]
    for dt_name, d in groups:
        cfgs = [(B, k) for B in args.batches for k in args.ks]
        if time.time() - t0 > args.budget_s:
            skipped += [(dt_name, args.n, d, B, k) for B, k in cfgs]
            continue
        N = args.n
        try:
            keys = torch.randn(N, d, device=dev, dtype=dtypes[dt_name], generator=gen)
        except Exception as exc:  # out of memory: say so, measure the other groups
            log(f"  {dt_name} N={N} d={d}: keys not allocated ({_why(exc)})")
            skipped += [(dt_name, N, d, B, k) for B, k in cfgs]
            continue
        gb = N * d * keys.element_size() / 1e9
        index, build_note = None, ""
        if faiss is not None:
            try:
                tb = time.perf_counter()
                index = build_faiss_index(faiss, fgpu, tu, fres, keys, dt_name)
                sync()
                log(f"  faiss index {dt_name} N={N} d={d}: built in {time.perf_counter() - tb:.1f} s")
            except Exception as exc:
                build_note = f"faiss build: {_why(exc)}"
                log("  " + build_note)
        for B, k in cfgs:
            if time.time() - t0 > args.budget_s:
                skipped.append((dt_name, N, d, B, k))
                continue
            notes = [build_note] if build_note else []
            if args.smoke and dt_name == "bf16" and B > ragged_max_b:
                notes.append("smoke: the Triton interpreter's bf16 tl.dot returns garbage (dense "
                             f"route, B > {ragged_max_b}), so recall here says nothing about the GPU kernel")
            q = torch.randn(B, d, device=dev, dtype=dtypes[dt_name], generator=gen)
            t_ours, o_ours = attempt(lambda: candidate_topk(q, keys, k, backend="triton"), "ours",
                                     notes)
            t_torch, o_torch = attempt(lambda: torch.topk(q @ keys.T, k, dim=1), "torch", notes)
            t_faiss = float("nan")
            o_faiss = None
            if index is not None:
                qf = q.float().contiguous()
                qf = qf if tu else qf.cpu().numpy()
                t_faiss, o_faiss = attempt(lambda: index.search(qf, k), "faiss", notes)
            rec = _recall(o_ours[1], o_torch[1]) if (o_ours and o_torch) else float("nan")
            frec = _recall(o_faiss[1], o_torch[1]) if (o_faiss and o_torch) else float("nan")

            def tbs(t):
                return gb * 1e9 / t / 1e12 if t == t else float("nan")

            row = dict(meta, dtype=dt_name, N=N, d=d, B=B, k=k, key_GB=gb,
                       ours_ms=t_ours * 1e3, ours_TBs=tbs(t_ours),
                       ours_pct_peak=100 * tbs(t_ours) * 1e12 / peak,
                       torch_ms=t_torch * 1e3, torch_TBs=tbs(t_torch),
                       torch_pct_peak=100 * tbs(t_torch) * 1e12 / peak,
                       faiss_ms=t_faiss * 1e3, faiss_TBs=tbs(t_faiss),
                       faiss_pct_peak=100 * tbs(t_faiss) * 1e12 / peak,
                       torch_over_ours=t_torch / t_ours, faiss_over_ours=t_faiss / t_ours,
                       recall_vs_torch=rec, faiss_recall_vs_torch=frec, note="; ".join(notes))
            rows.append(row)
            log(f"  {dt_name} N={N} d={d} B={B} k={k}: ours {t_ours * 1e3:.3f} ms "
                f"({row['ours_TBs']:.2f} TB/s, {row['ours_pct_peak']:.0f}% peak) torch "
                f"{t_torch * 1e3:.3f} ms faiss {t_faiss * 1e3:.3f} ms recall {rec:.3f}"
                + (f" [{row['note']}]" if notes else ""))
        del keys, index
        if cuda:
            torch.cuda.empty_cache()
    return rows, skipped, meta, faiss_note, time.time() - t0


def verdict(rows):
    tgt = [r for r in rows if r["dtype"] in TARGET_DTYPES and r["B"] <= TARGET_MAX_B
           and r["k"] <= TARGET_MAX_K and r["ours_pct_peak"] == r["ours_pct_peak"]]
    if not tgt:
        return "no target configuration (fp16/bf16, B <= 64, k <= 128) was measured"
    pcts = sorted(r["ours_pct_peak"] for r in tgt)
    met = sum(p >= 100 * TARGET_SHARE for p in pcts)
    worst = min(tgt, key=lambda r: r["ours_pct_peak"])
    return (f"target (>= {100 * TARGET_SHARE:.0f}% of peak for fp16/bf16 keys, B <= {TARGET_MAX_B}, "
            f"k <= {TARGET_MAX_K}): **{'met' if met == len(tgt) else 'not met'}** in {met} of "
            f"{len(tgt)} configurations; ours reached {pcts[0]:.0f}% (min) / "
            f"{statistics.median(pcts):.0f}% (median) / {pcts[-1]:.0f}% (max) of peak; weakest: "
            f"{worst['dtype']} d={worst['d']} B={worst['B']} k={worst['k']}")


def write(args, rows, skipped, meta, faiss_note, wall, argv):
    import torch

    out = Path(args.out) if args.out else HERE.parent / "results" / "gpu"
    stem = args.stem or ("topk-bandwidth-smoke" if args.smoke else "topk-bandwidth-cuda")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: (f"{r[c]:.6g}" if isinstance(r[c], float) else r[c]) for c in CSV_COLUMNS})
    try:
        import triton

        tver = triton.__version__
    except Exception as exc:
        tver = f"missing ({type(exc).__name__})"
    lines = [f"# Dense top-k key-read bandwidth — {meta['machine']}", ""]
    if args.smoke:
        lines += ["**SMOKE RUN** (CPU, Triton interpreter, tiny shapes): checks that the script runs; "
                  "every timing and bandwidth figure below is meaningless.", ""]
    lines += [f"- date: {meta['date']}; commit: {meta['commit']}",
              f"- command: `python benchmarks/kernels/bench_topk_bandwidth.py {' '.join(argv)}`",
              f"- torch {torch.__version__} (CUDA {torch.version.cuda}), triton {tver}; torch fp32 "
              f"matmul allow_tf32={torch.backends.cuda.matmul.allow_tf32} (ours: IEEE fp32)",
              f"- peak for the % column: {args.peak_tbs} TB/s; N = {args.n} keys per index; "
              f"median of {args.reps} calls after {args.warmup} untimed",
              f"- faiss: {faiss_note}",
              "- bandwidth = N·d·(2 bytes fp16/bf16, 4 fp32) / time per call: the keys each method "
              "must read once; ratios are peer time / our time (> 1: ours faster); keys and queries "
              "are standard normal; recall vs torch = overlap of the returned index sets (fp16/bf16 "
              "near-ties may swap, so slightly < 1 is expected)",
              f"- {'(smoke: meaningless) ' if args.smoke else ''}{verdict(rows)}", "",
              "| " + " | ".join(MD_COLUMNS) + " |", "|" + "---|" * len(MD_COLUMNS)]
    for r in rows:
        cells = [r["dtype"], r["N"], r["d"], r["B"], r["k"], _fmt(r["ours_ms"], ".3f"),
                 _fmt(r["ours_TBs"], ".2f"), _fmt(r["ours_pct_peak"], ".0f"),
                 _fmt(r["torch_ms"], ".3f"), _fmt(r["torch_TBs"], ".2f"),
                 _fmt(r["torch_over_ours"], ".2f"), _fmt(r["faiss_ms"], ".3f") or "-",
                 _fmt(r["faiss_TBs"], ".2f") or "-", _fmt(r["faiss_over_ours"], ".2f") or "-",
                 _fmt(r["recall_vs_torch"], ".3f")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    notes = [f"{r['dtype']} d={r['d']} B={r['B']} k={r['k']}: {r['note']}" for r in rows if r["note"]]
    if notes:
        lines += ["", "Errors and notes:", ""] + [f"- {n}" for n in notes]
    if skipped:
        lines += ["", f"Not measured (time budget {args.budget_s:.0f} s spent, or keys not allocated): "
                  + ", ".join(f"{dt} d={d} B={B} k={k}" for dt, _, d, B, k in skipped)]
    png = plot(rows, out / f"{stem}.png", meta["machine"], args.peak_tbs)
    if png:
        lines += ["", f"![{stem}]({png.name})"]
    lines += ["", f"Wall time of the measurements: {wall:.0f} s."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    return out / f"{stem}.md", out / f"{stem}.csv", png


def plot(rows, path, machine, peak_tbs):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    dts = list(dict.fromkeys(r["dtype"] for r in rows))
    if not dts:
        return None
    fig, axes = plt.subplots(1, len(dts), figsize=(5 * len(dts), 4), squeeze=False, sharey=True)
    colors = {"ours": "C0", "torch": "C1", "faiss": "C2"}
    for ax, dt in zip(axes[0], dts):
        for (d, k), ls in zip(sorted({(r["d"], r["k"]) for r in rows if r["dtype"] == dt}),
                              ["-", "--", ":", "-."] * 4):
            sel = sorted((r for r in rows if r["dtype"] == dt and r["d"] == d and r["k"] == k),
                         key=lambda r: r["B"])
            for m in ("ours", "torch", "faiss"):
                ys = [r[f"{m}_pct_peak"] for r in sel]
                if all(y != y for y in ys):
                    continue
                ax.plot([r["B"] for r in sel], ys, ls, color=colors[m], marker="o", ms=3,
                        label=f"{m} d={d} k={k}")
        ax.axhline(100 * TARGET_SHARE, color="k", lw=0.8, alpha=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("queries B")
        ax.set_title(f"{dt} keys")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel(f"% of {peak_tbs} TB/s (key reads)")
    fig.suptitle(f"dense top-k bandwidth, {machine}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    rows, skipped, meta, faiss_note, wall = run(args, log=lambda s: print(s, flush=True))
    md, csv_path, png = write(args, rows, skipped, meta, faiss_note, wall, argv)
    print(("(smoke: meaningless) " if args.smoke else "") + verdict(rows))
    print(f"wrote {md}, {csv_path}" + (f", {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
