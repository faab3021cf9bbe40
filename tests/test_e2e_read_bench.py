"""benchmarks/e2e/read.py runs end to end (its --smoke mode) and finds every batched context identical to the
loop's. Slow: it synthesises and ingests a small history with MiniLM first."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_read_benchmark_smoke(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "e2e" / "read.py"), "--smoke",
                          "--store", str(tmp_path / "store"), "--out", str(out)], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = list(csv.DictReader(open(out / "e2e-read.csv")))
    assert {r["path"] for r in rows} >= {"loop", "batched"}
    assert {r["method"] for r in rows} == {"dense-topk", "c3m"}
    for r in rows:
        if r["path"] == "batched":
            done, total = r["identical"].split("/")
            assert done == total
    assert "| method | tenants | path |" in (out / "e2e-read.md").read_text()
