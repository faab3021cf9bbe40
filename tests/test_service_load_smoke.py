"""benchmarks/service/load_test.py runs end to end (its --smoke mode: the real `c3m serve` in a subprocess, two
clients for 3 s, both methods) and sees no errors and no "database is locked". Slow: two server start-ups
with the packaged MiniLM embedder."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")


@pytest.mark.slow
def test_service_load_smoke(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "service" / "load_test.py"), "--smoke",
                          "--out", str(out), "--stem", "service"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "service.csv")))
    assert {r["method"] for r in rows} == {"c3m", "dense-topk"}
    by = {(r["method"], r["endpoint"]): r for r in rows}
    for method in ("c3m", "dense-topk"):
        assert int(by[method, "retrieve"]["requests"]) > 0
        assert int(by[method, "sessions"]["requests"]) > 0
    for r in rows:
        assert int(r["errors"]) == 0, r
        assert int(r["locked"]) == 0, r
    md = (out / "service.md").read_text()
    assert "| method | clients | endpoint | requests |" in md
    assert md.count("| c3m | 2 |") >= 2
