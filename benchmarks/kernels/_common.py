"""Shared helpers for the kernel benchmarks: timing, machine facts, CSV/Markdown/PNG writers.

CSV columns (stable, so runs can be compared over time):
op, backend, peer, shape, metric, value, ratio_vs_peer, machine, date, commit
``ratio_vs_peer`` is peer_time / our_time (> 1: we are faster) for time metrics, blank otherwise.
"""
from __future__ import annotations

import csv
import datetime as _dt
import os
import subprocess
import time
from pathlib import Path

import numpy as np

CSV_FIELDS = ["op", "backend", "peer", "shape", "metric", "value", "ratio_vs_peer", "machine",
              "date", "commit"]


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, cwd=Path(__file__).parent)
        sha = out.stdout.strip()
        return sha if out.returncode == 0 and sha else "uncommitted"
    except Exception:
        return "unknown"


def machine(device: str = "cpu") -> str:
    if device == "cuda":
        import torch

        return f"{torch.cuda.get_device_name(0)}"
    from c3m.machine import cpu_model  # benchmarks sit on top of c3m (docs/architecture.md)

    return f"{cpu_model()} x{os.cpu_count()} cores"


def timeit(fn, reps: int = 3, warmup: int = 1, max_seconds: float = 8.0) -> float:
    """Best-of-``reps`` wall time in seconds after ``warmup`` calls (stops early past max_seconds)."""
    sync = _sync_fn()
    for _ in range(warmup):
        fn()
        sync()
    best = float("inf")
    t_start = time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - t_start > max_seconds:
            break
    return best


def _sync_fn():
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.synchronize
    except Exception:
        pass
    return lambda: None


def _parallel_sum():
    """A numba sum on every core: numpy's sum reads with one core, which understates what a
    parallel kernel can stream (the B=1 top-k scan beat it by 25%)."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(parallel=True, fastmath=True)
    def psum(a):  # pragma: no cover - numba
        s = np.float32(0.0)
        for i in numba.prange(a.shape[0]):  # a prange reduction vectorises; a chunk loop did not
            s += a[i]
        return s

    return psum


def stream_bandwidth_gbs(n_bytes: int = 1 << 30) -> dict:
    """Measured memory bandwidth on this CPU in GB/s: read-only with one core (numpy sum) and with
    every core (numba), and copy (read+write, numpy)."""
    a = np.ones(n_bytes // 4, np.float32)
    b = np.empty_like(a)
    t_read = timeit(lambda: a.sum(), reps=3)
    t_copy = timeit(lambda: np.copyto(b, a), reps=3)
    psum = _parallel_sum()
    t_all = timeit(lambda: psum(a), reps=3) if psum is not None else float("nan")
    return {"read": n_bytes / t_read / 1e9, "copy": 2 * n_bytes / t_copy / 1e9,
            "read_all": n_bytes / t_all / 1e9}


class Results:
    """Collects rows, writes CSV (appending header once) and Markdown sections."""

    def __init__(self, device: str):
        self.device = device
        self.rows: list[dict] = []
        self.md: list[str] = []
        self.machine = machine(device)
        self.date = now_utc()
        self.commit = commit()

    def add(self, op, backend, peer, shape, metric, value, ratio=None):
        self.rows.append(dict(op=op, backend=backend, peer=peer, shape=shape, metric=metric,
                              value=f"{value:.6g}" if isinstance(value, float) else value,
                              ratio_vs_peer="" if ratio is None else f"{ratio:.4g}",
                              machine=self.machine, date=self.date, commit=self.commit))

    def section(self, title: str, header: list, rows: list, note: str = ""):
        self.md.append(f"\n## {title}\n")
        if note:
            self.md.append(note + "\n")
        self.md.append("| " + " | ".join(header) + " |")
        self.md.append("|" + "---|" * len(header))
        for r in rows:
            self.md.append("| " + " | ".join(str(x) for x in r) + " |")

    def write(self, out_dir: Path, stem: str, preface: str = ""):
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / f"{stem}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            w.writeheader()
            w.writerows(self.rows)
        (out_dir / f"{stem}.md").write_text(preface + "\n".join(self.md) + "\n")
