"""Fault injection (#17): SIGKILL mid-ingest with the `c3m` method, disk full mid-ingest, corrupt blobs, a truncated
SQLite WAL. The store recovers or refuses with a clear message; nothing committed is lost. The fast tests run a
few trials each; the slow ones run the campaigns of ``benchmarks/reliability/faults.py`` at a larger size (the full
campaign and its results: ``benchmarks/results/reliability-faults.md``)."""
from __future__ import annotations

import errno
import os
import random
import shutil
import sqlite3
import subprocess
from argparse import Namespace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from c3m import cli
from c3m.config import MemoryConfig
from c3m.errors import StoreError
from c3m.memory import Memory
from c3m.store import ColdStore, verify_store
from c3m.store.blobs import BlobDamaged, BlobMissing, BlobStore, StoreFull
from c3m.types import Session, Turn
from factories import load_script

REPO = Path(__file__).resolve().parents[1]
faults = load_script(REPO / "benchmarks" / "reliability" / "faults.py", "c3m_faults")


def _png(i: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (i * 37 % 255, i * 11 % 255, 120)).save(buf, "PNG")
    return buf.getvalue()


def _sessions(n: int, offset: int = 0):
    return [Session(f"s{i}", datetime(2026, 1, 1) + timedelta(hours=i),
                    (Turn("user", f"session {i}: the lamp is colour {i % 7}", (_png(i + offset),)),
                     Turn("assistant", f"noted {i}")))
            for i in range(n)]


@pytest.fixture
def c3m_store(tmp_path, models):
    """A small store written with the c3m method: two namespaces, one image per session."""
    path = tmp_path / "store"
    cfg = MemoryConfig().with_(method="c3m")
    with Memory(path, "alice", config=cfg, models=models) as mem:
        for s in _sessions(4):
            mem.add_session(s)
        other = mem.tenant("bob")
        for s in _sessions(3, offset=50):
            other.add_session(s)
    return path


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    return faults.make_dataset(root, episodes=2, length="4000")


def _args(tmp_path, **kw) -> Namespace:
    base = dict(store_root=str(tmp_path), store_url="{store_root}/sigkill/chain-{chain}",
                ref_store_url="{store_root}/sigkill/ref", trials=3, kills_per_chain=3, quick=True, seed=5)
    return Namespace(**(base | kw))


# -- corrupt blob -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["flip", "truncate", "delete", "append"])
def test_corrupt_blob_is_named_with_its_file_and_session(c3m_store, models, mode):
    with ColdStore(c3m_store) as store:
        node = store.nodes_for_session("alice", "s2")[0]
        sha = node.images[0].sha256
        path = store.blobs.path_for(sha)
        good = path.read_bytes()
        if mode == "flip":
            path.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])
        elif mode == "truncate":
            path.write_bytes(good[: len(good) // 2])
        elif mode == "delete":
            path.unlink()
        else:
            path.write_bytes(good + b"junk")
        rep = verify_store(store)
        assert not rep.ok
        hit = [e for e in rep.errors if sha in e]
        assert hit, rep.errors
        assert str(path) in hit[0] and "alice/s2" in hit[0] and node.node_id in hit[0], hit[0]
        with pytest.raises(BlobMissing if mode == "delete" else BlobDamaged) as info:
            store.image_bytes(sha)
        assert isinstance(info.value, StoreError) and str(path) in info.value.message and info.value.fix
        other = store.nodes_for_session("alice", "s1")[0].images[0].sha256
        assert store.image_bytes(other) == store.blobs.path_for(other).read_bytes()  # the rest still reads
    with Memory(c3m_store, "alice", config=MemoryConfig().with_(method="c3m"), models=models) as mem:
        with pytest.raises(StoreError):
            mem.image_bytes(sha)
    assert cli.main(["verify", "--store", str(c3m_store)]) == 1


def test_missing_blob_is_still_a_file_not_found_error(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    with pytest.raises(FileNotFoundError):
        blobs.get("0" * 64)


# -- disk full ----------------------------------------------------------------------------------------
def test_blob_write_on_a_full_disk_is_a_store_error(tmp_path, monkeypatch):
    blobs = BlobStore(tmp_path / "blobs")

    def full(fd):  # a full disk often surfaces only at fsync (delayed allocation)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StoreFull) as info:
        blobs.put(b"x" * 1000)
    monkeypatch.undo()
    assert str(blobs.root) in info.value.message and "free space" in info.value.fix
    assert not blobs.leftover_temp_files() and not list(blobs.iter_digests())  # no torn file left


@pytest.mark.parametrize("exc", [sqlite3.OperationalError("database or disk is full"),
                                 OSError(errno.ENOSPC, "No space left on device")])
def test_cli_names_a_full_disk_and_the_fix(tmp_path, monkeypatch, capsys, demo_dataset, exc):
    def add_session(self, session):
        raise exc

    monkeypatch.setattr(Memory, "add_session", add_session)
    store = tmp_path / "store"
    rc = cli.main(["ingest", str(demo_dataset), "--store", str(store), "--text-embedder", "hashing",
                   "--method", "dense-topk", "-q"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"the disk holding the store {store} is full" in err and "fix: free space" in err, err
    assert "Traceback" not in err


def _can_mount(tmp_path) -> str | None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "needs root to mount a tmpfs (the campaign falls back to RLIMIT_FSIZE)"
    probe = tmp_path / "probe"
    probe.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True)
    if ok.returncode != 0:
        return f"mount -t tmpfs is not permitted here: {ok.stderr.decode().strip()}"
    subprocess.run(["umount", str(probe)], check=True)
    return None


def test_disk_full_mid_ingest_on_a_tmpfs(tmp_path, small_dataset):
    why = _can_mount(tmp_path)
    if why:
        pytest.skip(why)
    expected = faults.expected_hashes(small_dataset)
    args = _args(tmp_path, trials=0)
    faults.campaign_sigkill(args, small_dataset, expected, random.Random(0))  # the clean reference ingest
    row = faults.campaign_disk_full(_args(tmp_path, quick=True), small_dataset, expected, random.Random(1))
    assert row["trials"] == 2 and row["enospc_hit"] == 2, row
    assert not row["failures"] and row["data_lost"] == 0, row["failures"]
    assert "is full" in row["messages"][0] and "fix:" in row["messages"][0]
    assert not any(str(tmp_path) in line for line in Path("/proc/mounts").read_text().splitlines())


# -- truncated WAL ------------------------------------------------------------------------------------
def test_truncated_wal_keeps_a_whole_prefix(tmp_path, models):
    """A writer's WAL (copied while it is still open, like after a SIGKILL) cut at random offsets: the store opens,
    verifies, keeps whole sessions only, and a namespace keeps a prefix of its sessions."""
    src = tmp_path / "live"
    cfg = MemoryConfig().with_(method="c3m")
    mem = Memory(src, "alice", config=cfg, models=models)
    sessions = _sessions(6)
    for s in sessions:
        mem.add_session(s)
    frozen = tmp_path / "frozen"
    shutil.copytree(src, frozen, ignore=shutil.ignore_patterns("store.sqlite-shm"))  # the writer is still open
    mem.close()
    wal = (frozen / "store.sqlite-wal").read_bytes()
    assert len(wal) > 32
    rng = random.Random(3)
    cuts = [0, 32, len(wal)] + [rng.randrange(32, len(wal)) for _ in range(4)]
    lost = []
    for k, cut in enumerate(cuts):
        t = tmp_path / f"t{k}"
        shutil.copytree(frozen, t)
        (t / "store.sqlite-wal").write_bytes(wal[:cut] + (os.urandom(999) if cut == len(wal) else b""))
        with ColdStore(t, create=False) as store:
            rep = verify_store(store)
            assert rep.ok, (cut, str(rep))
            recs = store.sessions("alice")
            assert [r.seq for r in recs] == list(range(1, len(recs) + 1))
            versions = set(store.snapshot_versions("alice", store.snapshot_methods("alice")[0])) if recs else set()
            for r in recs:
                assert len(store.nodes_for_session("alice", r.session_id)) == r.n_turns == 2
                assert r.seq in versions
            lost.append(len(sessions) - len(recs))
        with Memory(t, "alice", config=cfg, models=models) as again:  # a rerun restores the rest
            for s in sessions:
                again.add_session(s)
            assert len(again.sessions()) == len(sessions)
    assert lost[2] == 0  # the whole WAL plus garbage: nothing lost
    assert max(lost) > 0  # and a cut WAL does lose its tail (inherent), counted, never half a session


# -- SIGKILL with the c3m method ---------------------------------------------------------------------------
def test_sigkill_c3m_method_few_trials(tmp_path, small_dataset):
    expected = faults.expected_hashes(small_dataset)
    row = faults.campaign_sigkill(_args(tmp_path, trials=2, kills_per_chain=2), small_dataset, expected,
                                  random.Random(2))
    assert row["trials"] == row["kills"] == 2 and row["runs"] >= 2
    assert not row["failures"], row["failures"]
    assert row["data_lost"] == 0


# -- the campaigns at a larger size ------------------------------------------------------------------------
@pytest.mark.slow
def test_sigkill_c3m_method_many_trials(tmp_path, small_dataset):
    expected = faults.expected_hashes(small_dataset)
    row = faults.campaign_sigkill(_args(tmp_path, trials=25, kills_per_chain=5), small_dataset, expected,
                                  random.Random(11))
    assert row["kills"] >= 10 and row["partial_stores"] >= 1, row
    assert not row["failures"] and row["data_lost"] == 0, row["failures"]


@pytest.mark.slow
def test_disk_full_campaign(tmp_path, small_dataset):
    why = _can_mount(tmp_path)
    if why:
        pytest.skip(why)
    expected = faults.expected_hashes(small_dataset)
    faults.campaign_sigkill(_args(tmp_path, trials=0), small_dataset, expected, random.Random(0))
    row = faults.campaign_disk_full(_args(tmp_path, quick=False), small_dataset, expected, random.Random(4))
    assert not row["failures"] and row["data_lost"] == 0, row["failures"]


@pytest.mark.slow
def test_wal_and_blob_campaigns(tmp_path, small_dataset):
    expected = faults.expected_hashes(small_dataset)
    faults.campaign_sigkill(_args(tmp_path, trials=0), small_dataset, expected, random.Random(0))
    for fn in (faults.campaign_corrupt_blob, faults.campaign_wal):
        row = fn(_args(tmp_path, quick=False), small_dataset, expected, random.Random(6))
        assert not row["failures"] and row["data_lost"] == 0, row["failures"]


def test_store_url_is_passed_through(tmp_path):
    cmd = faults.ingest_cmd(Path("ds"), "postgresql://u@h/db?blobs=/x/3")
    assert cmd[cmd.index("--store") + 1] == "postgresql://u@h/db?blobs=/x/3"
