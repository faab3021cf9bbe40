"""Choice sweep for the dense Triton candidate_topk on one CUDA GPU (prints Markdown tables).

Why: on an H200 the dense kernel reached 13-17% of HBM bandwidth (benchmarks/results/
kernels-h200-sweep.md) while the ragged kernel streamed 67%. Two choices in ``triton_impl.py`` rest
on that and are measured here so they can be set from numbers:

* ``routes`` (default, ~1 minute): dense kernel vs the ragged kernel over ``[0, N)`` for small B
  (sets ``DENSE_AS_RAGGED_MAX_B``), BLOCK_B 16/32/64 for the dense kernel at B = 16 and 64, and
  fp32 with TF32 dots: at B = 64 IEEE fp32 needs 49 GFLOP per 1M x 384 keys, ~0.7 ms on CUDA cores
  against 0.3 ms to read the keys, so fp32 cannot reach the HBM limit without tensor cores.
* ``--tiles`` (~3 minutes): the older BLOCK_N x BLOCK_D x programs-per-query grid.

Usage: python benchmarks/kernels/sweep_gpu_topk.py [--tiles]
       python benchmarks/kernels/sweep_gpu_topk.py --smoke   (no GPU: tiny shapes under the Triton
       interpreter, to catch a broken script before it spends device time; timings meaningless)
"""
from __future__ import annotations

import itertools
import os
import sys
import time

SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the triton import

import torch  # noqa: E402

from c3m_kernels.candidate_topk.triton_impl import candidate_topk_triton  # noqa: E402

HBM = 4.8e12  # H200 HBM3e bytes/s: the physical limit the target refers to


def _row(cells):
    return "| " + " | ".join(str(c) for c in cells) + " |"


DEV = "cpu" if SMOKE else "cuda"


def do_bench(fn, warmup=3, rep=10):
    """triton.testing.do_bench on a GPU; one timed call under --smoke."""
    if SMOKE:
        fn()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench as triton_do_bench

    return triton_do_bench(fn, warmup=warmup, rep=rep)


def _bench(fn):
    try:
        return do_bench(fn, warmup=3, rep=10)
    except Exception as exc:  # a configuration the compiler refuses: report it, keep sweeping
        return f"error: {type(exc).__name__}"


def routes(N=1_000_000, D=384, k=10, batches=(1, 2, 4, 8, 16, 64)):
    gen = torch.Generator(device=DEV).manual_seed(0)
    print(f"\n### dense vs ragged route, BLOCK_B — N={N} d={D} k={k}\n")
    print(_row(["dtype", "B", "kernel", "BLOCK_B", "ms", "GB/s (keys once)", "% HBM", "torch ms"]))
    print(_row(["---"] * 8))
    for dtype in (torch.float32, torch.float16):
        keys = torch.randn(N, D, device=DEV, generator=gen).to(dtype)
        gb = N * D * keys.element_size() / 1e9
        for B in batches:
            q = torch.randn(B, D, device=DEV, generator=gen).to(dtype)
            t_torch = do_bench(lambda: torch.topk(q @ keys.T, k, dim=1), warmup=5, rep=20)
            variants = [("ragged", None, "ieee")] if B <= 8 else []
            variants += [("dense", bb, "ieee") for bb in (16, 32, 64) if B >= 16 or bb == 16]
            if dtype == torch.float32 and B >= 16:  # what TF32 tensor cores would buy (not the default)
                variants += [("dense", bb, "tf32") for bb in (16, 64)]
            for kernel, bb, dot in variants:
                ms = _bench(lambda: candidate_topk_triton(q, keys, k, kernel=kernel, block_b=bb,
                                                          fp32_dot=dot))
                name = str(dtype)[6:] + (" tf32" if dot == "tf32" else "")
                if isinstance(ms, str):
                    print(_row([name, B, kernel, bb or "-", ms, "", "", f"{t_torch:.3f}"]))
                    continue
                gbs = gb / (ms / 1e3)
                print(_row([name, B, kernel, bb or "-", f"{ms:.3f}", f"{gbs:.0f}",
                            f"{100 * gbs * 1e9 / HBM:.0f}%", f"{t_torch:.3f}"]))
            sys.stdout.flush()


def tiles(N=1_000_000, D=384, k=10):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device=DEV).manual_seed(0)
    print(f"\n### dense tiles — N={N} d={D} k={k}, {sms} SMs\n")
    print(_row(["dtype", "B", "BLOCK_N", "BLOCK_D", "programs/query", "ms", "GB/s", "% HBM"]))
    print(_row(["---"] * 8))
    for dtype, B in itertools.product((torch.float32, torch.float16), (1, 16)):
        keys = torch.randn(N, D, device=DEV, generator=gen).to(dtype)
        q = torch.randn(B, D, device=DEV, generator=gen).to(dtype)
        for block_n, block_d, per_q in itertools.product((64, 128, 256), (32, 64, 128), (4, 16, 64)):
            chunk = max(block_n, -(-N // (per_q * sms)) // block_n * block_n)
            ms = _bench(lambda: candidate_topk_triton(q, keys, k, block_n=block_n, block_d=block_d,
                                                      chunk=chunk, kernel="dense"))
            if isinstance(ms, str):
                print(_row([str(dtype)[6:], B, block_n, block_d, f"{per_q}x{sms}", ms, "", ""]))
                continue
            gbs = N * D * keys.element_size() / (ms / 1e3) / 1e9
            print(_row([str(dtype)[6:], B, block_n, block_d, f"{per_q}x{sms}", f"{ms:.3f}",
                        f"{gbs:.0f}", f"{100 * gbs * 1e9 / HBM:.0f}%"]))
        sys.stdout.flush()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if SMOKE:
        print("# candidate_topk Triton sweep — SMOKE (interpreter, tiny shapes, timings meaningless)")
        routes(N=200, D=20, k=4, batches=(1, 16))
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (or --smoke)")
        return 1
    print(f"# candidate_topk Triton sweep — {torch.cuda.get_device_name(0)}")
    routes()
    if "--tiles" in argv:
        tiles()
    return 0


if __name__ == "__main__":
    sys.exit(main())
