"""Eight writer processes and two readers on one store, on each backend: no lost session, no lock error
surfaced, every namespace's snapshot sequence and every read a prefix state (benchmarks/reliability/concurrency.py
holds the workload and the checks; its long runs are in benchmarks/results/reliability.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from factories import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "concurrency.py"


def _campaign():
    return load_script(SCRIPT, "c3m_concurrency_campaign")


def _run(location, tmp_path, *, writers, readers, seconds, max_sessions=10_000) -> dict:
    """The campaign as its own process (its workers are spawned processes that import the script by path)."""
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--store", str(location), "--writers", str(writers),
                           "--readers", str(readers), "--seconds", str(seconds), "--max-sessions", str(max_sessions),
                           "--json", str(out)], capture_output=True, text=True, timeout=seconds + 600)
    assert out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


def _assert_clean(res, writers=8):
    assert res["n_errors"] == 0, res["errors"]
    assert res["problems"] == [] and res["lost"] == 0 and res["non_prefix_reads"] == 0
    assert all(code == 0 for code in res["exit_codes"]), res["exit_codes"]
    assert res["committed"] == res["sessions"] and res["committed"] >= writers  # every writer got through
    assert res["reads"] > 0


def test_eight_writers_and_readers_lose_nothing(store_location, tmp_path):
    _assert_clean(_run(store_location, tmp_path, writers=8, readers=2, seconds=4, max_sessions=40))


@pytest.mark.slow
def test_eight_writers_for_a_minute(store_location, tmp_path):
    _assert_clean(_run(store_location, tmp_path, writers=8, readers=2, seconds=60))


def test_the_check_catches_a_lost_session_and_a_non_prefix_read(tmp_path):
    """The checker itself: a session a writer was told was committed but is not there, and a read whose pointers
    are not the prefix at its version, are both reported."""
    _assert_clean(_run(tmp_path / "s", tmp_path, writers=2, readers=1, seconds=1, max_sessions=3), writers=2)
    mod = _campaign()
    verdict = mod.check(str(tmp_path / "s"), [("own-0", "never-stored", 99)], [("own-0", 1, "0" * 64)])
    assert verdict["lost"] == 1 and verdict["non_prefix_reads"] == 1
