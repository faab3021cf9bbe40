"""``benchmarks/e2e/write.py --smoke`` runs end to end and writes its table, CSV and plot (timings are never
asserted; the stage clock's bookkeeping is)."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "e2e"))
from _write_stages import STAGES, StageClock  # noqa: E402


def test_smoke_writes_table_csv_and_plot(tmp_path):
    out = tmp_path / "e2e-write"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "e2e" / "write.py"), "--smoke", "--methods",
                           "c3m,dense-topk", "--text-embedder", "hashing", "--perception", "none", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert [r["method"] for r in rows] == ["c3m", "dense-topk"]
    for r in rows:
        stages = sum(float(r[f"{s}_s"]) for s in STAGES + ("other",))
        assert abs(stages - float(r["total_s"])) < 0.01 + 1e-3 * float(r["total_s"])  # exclusive stages + other
        assert int(r["sessions"]) > 0 and int(r["raw_nodes"]) > 0
    assert float(rows[0]["capacity_s"]) > 0 and float(rows[0]["ramu_s"]) > 0
    assert "| c3m |" in out.with_suffix(".md").read_text()
    try:
        import matplotlib  # noqa: F401  (the `bench` extra; CI's `dev` install has no plotting)
    except ImportError:
        return
    assert out.with_suffix(".png").stat().st_size > 0


def test_stage_clock_is_exclusive():
    clock = StageClock()
    with clock.stage("ramu"):
        with clock.stage("capacity"):
            with clock.stage("store"):
                pass
    assert all(v >= 0 for v in clock.totals.values())
    assert clock.totals["ramu"] + clock.totals["capacity"] + clock.totals["store"] > 0
