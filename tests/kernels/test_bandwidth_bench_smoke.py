"""The dense top-k bandwidth benchmark's --smoke mode runs on the CPU (Triton interpreter) and writes
its table: the GPU session that runs it for real has minutes, so a broken script must show up here.
No timing is asserted; only that the script runs and its outputs have the documented shape."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernels" / "bench_topk_bandwidth.py"


def test_bandwidth_bench_smoke_writes_table(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    # fp16 and fp32, B=1 (ragged route) and B=8 (dense tl.dot route), one k, 128 keys:
    # ~6 s on an idle 2-core CPU
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path), "--stem", "bw",
           "--dtypes", "fp16,fp32", "--batches", "1,8", "--ks", "10", "--n", "128", "--no-faiss"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from bench_topk_bandwidth import CSV_COLUMNS, MD_COLUMNS
    finally:
        sys.path.remove(str(SCRIPT.parent))
    with open(tmp_path / "bw.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == CSV_COLUMNS
        rows = list(reader)
    assert {(r["dtype"], r["B"], r["k"]) for r in rows} == {
        (dt, B, "10") for dt in ("fp16", "fp32") for B in ("1", "8")}
    for r in rows:
        assert float(r["ours_ms"]) > 0 and float(r["torch_ms"]) > 0, r
        assert r["faiss_ms"] in ("", "nan"), r  # --no-faiss
        # same keys, same queries: the fused kernel finds torch's top-k; torch rounds fp16 scores
        # to fp16 (near-ties swap), the kernel keeps fp32 accumulators, so fp16 only mostly agrees
        assert float(r["recall_vs_torch"]) >= (0.99 if r["dtype"] == "fp32" else 0.8), r

    md = (tmp_path / "bw.md").read_text()
    assert "SMOKE RUN" in md and "faiss left out (--no-faiss)" in md
    assert "| " + " | ".join(MD_COLUMNS) + " |" in md
    table = [ln for ln in md.splitlines() if ln.startswith("| fp")]
    assert len(table) == 4 and all(ln.count("|") == len(MD_COLUMNS) + 1 for ln in table)
    assert "target (>= 80% of peak" in md
