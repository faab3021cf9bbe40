"""Run every kernel benchmark side by side; write Markdown + CSV + PNG.

Usage:
    python benchmarks/kernels/run_all.py                       # CPU -> benchmarks/results/kernels-cpu.*
    python benchmarks/kernels/run_all.py --device cuda --out benchmarks/results/gpu
    python benchmarks/kernels/run_all.py --quick               # smoke run, small shapes
    python benchmarks/kernels/run_all.py --device cuda --real-shapes   # as benchmarks/run_gpu.sh
    python benchmarks/kernels/run_all.py --smoke               # seconds: tiny real-shape sections

``--real-shapes``: each kernel at the library's own shapes (candidate_topk: one tenant's index or
Cold-Store, B <= 64, and the batched read's ragged launch; budget_solve: the reader's instances, CPU
vs Triton up to 4,096; anchor_scores: one 36-entry index) instead of the large synthetic tables.
``--smoke``: the same sections at tiny sizes (under TRITON_INTERPRET=1 the Triton branches of
candidate_topk and anchor_scores run once on CPU tensors), to check the scripts without a GPU.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import Results, stream_bandwidth_gbs  # noqa: E402


def plot(res: Results, out_dir: Path, stem: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    rows = [r for r in res.rows if r["op"] == "candidate_topk" and r["metric"] == "ms"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    peers = list(dict.fromkeys(r["peer"] for r in rows))
    if shapes:
        fig, ax = plt.subplots(figsize=(max(8, len(shapes) * 0.9), 4.5))
        w = 0.8 / len(peers)
        for j, p in enumerate(peers):
            ys = []
            for s in shapes:
                v = [float(r["value"]) for r in rows if r["shape"] == s and r["peer"] == p]
                ys.append(v[0] if v else 0)
            ax.bar([i + j * w for i in range(len(shapes))], ys, w,
                   label="ours" if p == "-" else p)
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(shapes))])
        ax.set_xticklabels([s.replace(" ", "\n") for s in shapes], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title(f"candidate_topk, {res.machine}")
        ax.legend()
        fig.tight_layout()
        p = out_dir / f"{stem}-candidate_topk.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    rows = [r for r in res.rows if r["op"] == "budget_solve" and r["metric"].startswith("instances/s")]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for metric in dict.fromkeys(r["metric"] for r in rows):
            pts = [(int(r["shape"].split()[0][2:]), float(r["value"])) for r in rows
                   if r["metric"] == metric]
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=metric)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("instances / s")
        ax.set_title("budget_solve throughput")
        ax.legend()
        fig.tight_layout()
        p = out_dir / f"{stem}-budget_solve.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", default=None, help="output folder (default benchmarks/results[/gpu])")
    ap.add_argument("--stem", default=None, help="file stem (default kernels-<device>)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=["candidate_topk", "budget_solve", "anchor_scores"])
    ap.add_argument("--real-shapes", action="store_true",
                    help="the library's shapes only (module docstring); what benchmarks/run_gpu.sh runs")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the scripts, seconds on a CPU")
    ap.add_argument("--no-dense-topk", action="store_true",
                    help="candidate_topk: ragged case only (benchmarks/run_gpu.sh measures the dense "
                         "case with bench_topk_bandwidth.py instead of twice)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else HERE.parent / "results" / ("gpu" if args.device == "cuda" else "")
    stem = args.stem or f"kernels-{args.device}" + ("-smoke" if args.smoke else "-quick" if args.quick else "")
    res = Results(args.device)
    t0 = time.time()
    load0 = os.getloadavg()[0]
    bw = stream_bandwidth_gbs(1 << 24 if args.smoke else 1 << 30)
    size = "16 MiB" if args.smoke else "1 GiB"
    import torch

    preface = (f"# c3m_kernels benchmarks ({args.device})\n\n"
               f"- machine: {res.machine}; torch {torch.__version__}, {torch.get_num_threads()} threads\n"
               f"- date: {res.date}; commit: {res.commit}\n"
               f"- command: `python benchmarks/kernels/run_all.py {' '.join(argv or sys.argv[1:])}`\n"
               f"- measured memory bandwidth ({size}): read {bw['read_all']:.1f} GB/s on all "
               f"{os.cpu_count()} cores (numba; the CPU limit for 'ours GB/s'), read {bw['read']:.1f} "
               f"GB/s on one core and copy {bw['copy']:.1f} GB/s (numpy)"
               + (f"; GPU {res.machine} (its HBM peak: bench_topk_bandwidth.py --peak-tbs)"
                  if args.device == "cuda" else "")
               + "\n"
               f"- 1-minute load average at start: {load0:.2f} on {os.cpu_count()} cores (other "
               f"processes compete for the cores when it exceeds the core count; faiss' OpenMP "
               f"search suffers most, so compare ratios only from runs on an idle machine)\n")
    res.add("system", "-", "-", size.replace(" ", ""), "read GB/s", bw["read"])
    res.add("system", "-", "-", size.replace(" ", ""), "copy GB/s", bw["copy"])
    res.add("system", "-", "-", size.replace(" ", ""), "read all cores GB/s", bw["read_all"])
    print(preface)
    for name in args.only:
        print(f"[{name}]", flush=True)
        mod = __import__(f"bench_{name}")
        kw = {"dense": False} if (name == "candidate_topk" and args.no_dense_topk) else {}
        if args.real_shapes or args.smoke:
            kw.update(real=args.real_shapes, smoke=args.smoke)
        mod.run(res, device=args.device, quick=args.quick, log=lambda s: print(s, flush=True), **kw)
    out.mkdir(parents=True, exist_ok=True)
    pngs = plot(res, out, stem)
    if pngs:
        res.md.append("\n" + "\n".join(f"![{p.stem}]({p.name})" for p in pngs))
    res.md.append(f"\nTotal benchmark wall time: {time.time() - t0:.0f} s; 1-minute load average at "
                  f"the end: {os.getloadavg()[0]:.2f}.")
    res.write(out, stem, preface)
    print(f"wrote {out / (stem + '.md')}, {out / (stem + '.csv')}, {[str(p) for p in pngs]}")


if __name__ == "__main__":
    main()
