"""Crash safety: `c3m ingest` killed with SIGKILL at random points leaves a store that verifies, with every
session either fully present (all nodes, images and its index snapshot) or absent; a rerun completes it."""
from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from c3m.dataset import write_dataset
from c3m.store import ColdStore, verify_store
from c3m.types import History, Session, Turn
from factories import load_script

#: the fault campaign's helpers: one definition of "every session's expected content hash"
faults = load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "faults.py", "c3m_faults")


def _png(i: int) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (64, 48), (i * 37 % 255, i * 11 % 255, 120))
    ImageDraw.Draw(img).rectangle((i % 40, 5, i % 40 + 20, 30), fill=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash") / "dataset"
    histories = []
    for h in range(3):
        sessions = tuple(
            Session(f"s{i}", datetime(2026, 1, 1) + timedelta(hours=i), (
                Turn("user", f"History {h} session {i}: the lamp is now colour {i % 7}.", (_png(100 * h + i),)),
                Turn("assistant", f"Noted lamp colour {i % 7}."),
                Turn("user", f"Filler text {i} " * 10)))
            for i in range(300))
        histories.append(History(f"h{h}", sessions))
    write_dataset(histories, root)
    return root


def _ingest_cmd(dataset, store):
    return [sys.executable, "-m", "c3m.cli", "ingest", str(dataset), "--store", str(store), "--quiet",
            "--text-embedder", "hashing", "--method", "dense-topk"]


def _check_consistent(store_path, expected) -> int:
    with ColdStore(store_path) as store:
        report = verify_store(store)
        assert report.ok, str(report)
        present = 0
        for ns in store.namespaces():
            versions = set(store.snapshot_versions(ns, "dense-topk"))
            for rec in store.sessions(ns):
                assert rec.content_sha256 == expected[(ns, rec.session_id)], "partial or altered session"
                nodes = store.nodes_for_session(ns, rec.session_id)
                assert len(nodes) == rec.n_turns == 3
                assert all(store.blobs.exists(im.sha256) for n in nodes for im in n.images)
                assert rec.seq in versions, "session committed without its index snapshot"
                present += 1
        return present


def _crash_trials(big_dataset, tmp_path, trials: int, seed: int):
    rng = random.Random(seed)
    expected = faults.expected_hashes(big_dataset)
    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()  # a clean run in a scratch store sets the kill window
    subprocess.run(_ingest_cmd(big_dataset, tmp_path / "scratch"), env=env, check=True, capture_output=True)
    full = time.perf_counter() - t0
    killed, partial = 0, 0
    for _ in range(trials):
        proc = subprocess.Popen(_ingest_cmd(big_dataset, store), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.15, 0.9) * full)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(timeout=60)
        if (store / "store.sqlite").exists():
            partial += 0 < _check_consistent(store, expected) < len(expected)
    final = subprocess.run(_ingest_cmd(big_dataset, store), env=env, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr
    assert _check_consistent(store, expected) == len(expected)  # every session exactly once
    assert killed >= 1 and partial >= 1, f"kills {killed}, partial stores {partial}: no kill landed mid-ingest"


def test_sigkill_mid_ingest_leaves_store_consistent(big_dataset, tmp_path):
    _crash_trials(big_dataset, tmp_path, trials=4, seed=7)


@pytest.mark.slow
def test_sigkill_many_trials(big_dataset, tmp_path):
    _crash_trials(big_dataset, tmp_path, trials=25, seed=11)
