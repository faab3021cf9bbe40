"""The PostgreSQL server stopped mid-ingest (a crash-like immediate stop) and restarted, on a private cluster:
a clear error, nothing committed lost, the rerun completes (benchmarks/reliability/pg_restart.py; its 12-trial
run is in benchmarks/results/reliability.md)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from factories import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "pg_restart.py"


def _campaign():
    return load_script(SCRIPT, "c3m_pg_restart_campaign")


@pytest.fixture
def campaign():
    mod = _campaign()
    if mod.pg_bin() is None:
        if os.environ.get("C3M_REQUIRE_PG") == "1":
            pytest.fail("C3M_REQUIRE_PG=1 but PostgreSQL's server binaries are not installed")
        pytest.skip("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)")
    pytest.importorskip("psycopg")
    return mod


def test_server_stopped_mid_ingest_loses_nothing(campaign, tmp_path):
    res = campaign.run(1, method="c3m", embedder="hashing", delay=(1.5, 2.5), workdir=tmp_path / "w", port=55472,
                       episodes=1)
    row = res["rows"][0]
    assert row["problems"] == [] and row["lost"] == 0, row
    assert row["sessions_after_rerun"] == 58  # the generated history, whole
    if row["interrupted"]:
        assert any("PostgreSQL" in line for line in row["message"]), row["message"]


@pytest.mark.slow
def test_server_stopped_mid_ingest_five_times(campaign, tmp_path):
    res = campaign.run(5, method="c3m", embedder="hashing", workdir=tmp_path / "w", port=55473)
    assert res["lost"] == 0 and res["failures"] == 0, res["rows"]
