"""benchmarks/read_latency.py runs (its --smoke mode: a small hard history, c3m and dense-topk) and times every stage
it names: a renamed or moved read-path stage fails here instead of crashing the benchmark later."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_read_latency_smoke():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "read_latency.py"), "--smoke"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "| c3m |" in out and "| dense-topk |" in out
    stages = next(line for line in out.splitlines() if line.startswith("| method | embed |"))
    for stage in ("embed", "describe", "route", "index pool", "channels + features", "rerank", "compose + solve"):
        assert stage in stages
    row = next(line for line in out.splitlines() if line.startswith("| c3m | ") and "/" in line)
    assert all(cell.strip() != "0.0 / 0.0" for cell in row.split("|")[2:-1]), row  # every stage was timed
