"""Tile-size sweep for the dense Triton candidate_topk on one CUDA GPU (prints a table; ~3 minutes).

Why: on an H200 the default tiles reached 13% of HBM bandwidth at B=1 fp32 (benchmarks/results/
kernels-h200.md). This sweep shows which of BLOCK_N, BLOCK_D and the programs-per-query split move it,
so the next change is measured rather than guessed. Usage: python benchmarks/kernels/sweep_gpu_topk.py
"""
from __future__ import annotations

import itertools
import sys

import torch
from triton.testing import do_bench

from c3m_kernels.candidate_topk.triton_impl import candidate_topk_triton


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    hbm = 4.8e12
    N, D, k = 1_000_000, 384, 10
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"{torch.cuda.get_device_name(0)}: N={N} d={D} k={k}, {sms} SMs")
    print("| dtype | B | BLOCK_N | BLOCK_D | programs/query | ms | GB/s | % HBM | torch ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dtype, B in itertools.product((torch.float32, torch.float16), (1, 16)):
        keys = torch.randn(N, D, device="cuda", generator=gen).to(dtype)
        q = torch.randn(B, D, device="cuda", generator=gen).to(dtype)
        t_torch = do_bench(lambda: torch.topk(q @ keys.T, k, dim=1), warmup=5, rep=20)
        best = None
        for block_n, block_d, per_q in itertools.product((64, 128, 256), (32, 64, 128), (4, 16, 64)):
            chunk = max(block_n, -(-N // (per_q * sms)) // block_n * block_n)
            try:
                fn = lambda: candidate_topk_triton(q, keys, k, block_n=block_n, block_d=block_d, chunk=chunk)
                ms = do_bench(fn, warmup=3, rep=10)
            except Exception as exc:  # a tile shape the compiler refuses: report, keep sweeping
                print(f"| {dtype} | {B} | {block_n} | {block_d} | {per_q}x{sms} | error: {type(exc).__name__} |")
                continue
            gbs = N * D * keys.element_size() / (ms / 1e3) / 1e9
            row = (ms, f"| {str(dtype)[6:]} | {B} | {block_n} | {block_d} | {per_q}x{sms} | {ms:.3f} | {gbs:.0f} | "
                       f"{100 * gbs * 1e9 / hbm:.0f}% | {t_torch:.3f} |")
            best = row if best is None or row[0] < best[0] else best
            print(row[1])
        print(f"best for {dtype} B={B}: {best[1] if best else 'none'}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
