"""Cold Store: append-only Raw Nodes, idempotent ingest, blob integrity/atomicity, namespaces, snapshots,
forget and verify."""
from __future__ import annotations

import os
import sqlite3

import pytest
from factories import DB_INTEGRITY_ERRORS, make_session, png_bytes

from c3m.config import DEFAULT_METHOD
from c3m.errors import InvalidInput, SessionConflict, StoreError
from c3m.memory import Memory
from c3m.store import BlobStore, ColdStore, verify_store
from c3m.types import Session, Turn


@pytest.fixture
def store_path(store_location):
    """Every test here runs on both backends (a folder, a PostgreSQL schema); folder-only tests ask for
    ``sqlite_path``."""
    return store_location


@pytest.fixture
def sqlite_path(tmp_path):
    return tmp_path / "store"


def _commit(store: ColdStore, namespace: str, session: Session):
    prepared = store.prepare_session(namespace, session)
    with store.transaction():
        return store.insert_session(prepared)


def test_raw_nodes_refuse_update_and_delete(store_path):
    with ColdStore(store_path) as store:
        _commit(store, "alice", make_session(1))
        for sql in ("UPDATE raw_nodes SET text='tampered'", "DELETE FROM raw_nodes",
                    "UPDATE raw_nodes SET redacted=1, text=''",  # a redaction without a forget_log record
                    "UPDATE node_images SET sha256='00'", "DELETE FROM node_images",
                    "DELETE FROM sessions", "UPDATE sessions SET time='2020-01-01T00:00:00'"):
            with pytest.raises(DB_INTEGRITY_ERRORS, match="append-only"):
                store.conn.execute(sql)
        assert {n.text for n in store.iter_nodes("alice")} == {"Session 1: my mug number 1 is on shelf 1.",
                                                               "Noted mug 1."}


def test_triggers_hold_for_a_plain_database_client(store_path):
    """Not c3m's code refuses the rewrite but the database: a plain client (sqlite3, psql) is refused too,
    including PostgreSQL's TRUNCATE, which skips row triggers."""
    with ColdStore(store_path) as store:
        _commit(store, "alice", make_session(1))
    if isinstance(store_path, str):
        import psycopg

        from c3m.store.db import split_blobs_param

        with psycopg.connect(split_blobs_param(store_path)[0], autocommit=True) as raw:
            for sql in ("DELETE FROM raw_nodes", "TRUNCATE raw_nodes CASCADE", "TRUNCATE sessions CASCADE",
                        "TRUNCATE forget_log", "UPDATE sessions SET n_turns=0"):
                with pytest.raises(psycopg.IntegrityError, match="append-only|audit log"):
                    raw.execute(sql)
            assert raw.execute("SELECT COUNT(*) FROM raw_nodes").fetchone()[0] == 2
        return
    raw = sqlite3.connect(store_path / "store.sqlite")
    with pytest.raises(sqlite3.IntegrityError):
        raw.execute("DELETE FROM raw_nodes")
    raw.close()


def test_reingest_same_session_is_a_noop(store_path):
    with ColdStore(store_path) as store:
        rec1, created1 = _commit(store, "alice", make_session(1))
        rec2, created2 = _commit(store, "alice", make_session(1))
        assert created1 and not created2 and rec1 == rec2
        assert store.count_nodes("alice") == 2
        assert len(store.sessions("alice")) == 1


def test_same_id_different_content_is_refused(store_path):
    with ColdStore(store_path) as store:
        _commit(store, "alice", make_session(1))
        with pytest.raises(SessionConflict, match="different content") as exc:
            _commit(store, "alice", make_session(1, text="something else"))
        assert "new id" in exc.value.fix
        assert store.count_nodes("alice") == 2  # nothing half-written


def test_namespaces_are_isolated(store_path, models):
    with Memory(store_path, "alice", models=models) as a, Memory(store_path, "bob", models=models) as b:
        a.add_session(make_session(1, text="Alice keeps a green kayak in the garage."))
        b.add_session(make_session(1, text="Bob owns a yellow submarine."))
        assert [n.text for n in a.nodes()][0].startswith("Alice")
        assert [n.text for n in b.nodes()][0].startswith("Bob")
        ctx = b.retrieve("What colour is the kayak?")
        assert all(item.provenance.namespace == "bob" for item in ctx.items)
        assert "kayak" not in ctx.text()
        assert a.store.namespaces() == ["alice", "bob"]


def test_invalid_namespace_names_the_fix(store_path, models):
    with pytest.raises(InvalidInput, match="namespace") as exc:
        Memory(store_path, "../etc", models=models)
    assert "letters" in exc.value.fix


def test_blob_roundtrip_and_integrity(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    data = png_bytes()
    sha = blobs.put(data)
    assert blobs.put(data) == sha  # idempotent
    assert blobs.get(sha) == data
    assert blobs.path_for(sha).parent.name == sha[:2]
    assert blobs.check(sha) is None
    blobs.path_for(sha).write_bytes(data[:-3] + b"xyz")
    assert "mismatch" in blobs.check(sha)
    assert blobs.leftover_temp_files() == []


def test_blob_write_is_atomic_when_interrupted(tmp_path, monkeypatch):
    blobs = BlobStore(tmp_path / "blobs")
    data = png_bytes((1, 2, 3))

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        blobs.put(data)
    monkeypatch.undo()
    assert list(blobs.iter_digests()) == []  # no torn blob under a valid name
    assert blobs.leftover_temp_files() == []


def test_verify_detects_corrupt_and_missing_blobs(store_path):
    with ColdStore(store_path) as store:
        _commit(store, "alice", make_session(1))
        _commit(store, "alice", make_session(2))
        assert verify_store(store).ok
        shas = [im.sha256 for n in store.iter_nodes("alice") for im in n.images]
        store.blobs.path_for(shas[0]).write_bytes(b"not the image")
        store.blobs.path_for(shas[1]).unlink()
        rep = verify_store(store)
        assert not rep.ok
        assert any("hash mismatch" in e for e in rep.errors) and any("missing" in e for e in rep.errors)


def test_verify_detects_tampering_behind_the_triggers(store_path):
    with ColdStore(store_path) as store:
        _commit(store, "alice", make_session(1))
        store.conn.execute("DROP TRIGGER raw_nodes_no_update" + (" ON raw_nodes" if store.backend != "sqlite" else ""))
        store.conn.execute("UPDATE raw_nodes SET text='rewritten history' WHERE turn_index=0")
        rep = verify_store(store)
        assert any("content hash mismatch" in e for e in rep.errors)



def test_verify_reads_in_pages_and_finds_damage_on_any_page(store_path, monkeypatch):
    """verify streams sessions and Raw Nodes a page at a time; page boundaries must not hide a session or node."""
    import c3m.store.verify as verify_mod

    with ColdStore(store_path) as store:
        for ns in ("alice", "bob"):
            for i in range(1, 4):
                _commit(store, ns, make_session(i))
        whole = verify_store(store)
        monkeypatch.setattr(verify_mod, "PAGE", 2)  # 6 sessions, 12 nodes: several pages, boundaries mid-namespace
        paged = verify_store(store)
        assert paged.ok and paged.counts == whole.counts and paged.counts["raw_nodes"] == 12
        store.conn.execute("DROP TRIGGER raw_nodes_no_update" + (" ON raw_nodes" if store.backend != "sqlite" else ""))
        store.conn.execute("UPDATE raw_nodes SET text='rewritten' WHERE namespace='bob' AND session_id='s3'"
                           " AND turn_index=1")
        store.conn.execute("DROP TRIGGER sessions_no_update" + (" ON sessions" if store.backend != "sqlite" else ""))
        store.conn.execute("UPDATE sessions SET n_turns=5 WHERE namespace='bob' AND session_id='s3'")
        nid = store.conn.execute("SELECT node_id FROM raw_nodes WHERE namespace='bob' AND session_id='s3'"
                                 " AND turn_index=1").fetchone()[0]
        errors = verify_store(store).errors
        assert f"node {nid}: content hash mismatch (text or images changed)" in errors
        assert any(e.startswith("session bob/s3: has 2 nodes, expected 5") for e in errors)

def test_orphan_blob_is_a_warning_not_an_error(store_path):
    with ColdStore(store_path) as store:
        store.blobs.put(png_bytes((9, 9, 9)))  # as left by a crash between blob write and commit
        rep = verify_store(store)
        assert rep.ok and any("orphan" in w for w in rep.warnings)


def test_snapshot_roundtrip_per_session(store_path, models):
    with Memory(store_path, "alice", models=models) as mem:
        for i in range(1, 5):
            mem.add_session(make_session(i))
        assert mem.store.snapshot_versions("alice", mem.method_name) == [1, 2, 3, 4]
        for v in range(1, 5):
            snap = mem.snapshot(v)
            assert snap.version == v and snap.session_id == f"s{v}"
            assert len(snap.pointers) == 2 * v  # every Raw Node ingested so far, none later
            assert snap.complete_provenance
        state = mem.method.state()
    with Memory(store_path, "alice", models=models) as again:  # reload from the latest snapshot
        assert again.version == 4
        assert again.method.state() == state
        assert again.retrieve("mug number 3").items


def test_snapshot_can_rebuild_an_older_state(store_path, models):
    with Memory(store_path, "alice", models=models) as mem:
        for i in range(1, 4):
            mem.add_session(make_session(i))
        mem.method.load_state(mem.snapshot(1).state)
        assert mem.method.pointers() == {n.node_id for n in mem.store.nodes_for_session("alice", "s1")}


def test_forget_redacts_logs_and_rebuilds(store_path, models):
    with Memory(store_path, "alice", models=models) as mem:
        mem.add_session(make_session(1, text="My bank PIN is 4321."))
        mem.add_session(make_session(2))
        sha = mem.nodes()[0].images[0].sha256
        with pytest.raises(InvalidInput, match="reason"):
            mem.forget(session_id="s1", reason=" ")
        rep = mem.forget(session_id="s1", reason="user asked to delete")
        assert len(rep.node_ids) == 2 and rep.blobs_deleted == 1
        nodes = {n.node_id: n for n in mem.nodes()}
        assert [n.text for n in nodes.values() if n.session_id == "s1"] == ["", ""]
        assert not mem.store.blobs.exists(sha)
        assert "4321" not in mem.retrieve("What is my bank PIN?").text()
        log = mem.store.conn.execute("SELECT reason FROM forget_log").fetchall()
        assert [r[0] for r in log] == ["user asked to delete"] * 2
        assert mem.store.snapshot_versions("alice", mem.method_name) == [1, 2]  # rebuilt by replay
        with pytest.raises(DB_INTEGRITY_ERRORS):
            mem.store.conn.execute("DELETE FROM forget_log")
        assert mem.verify().ok


def test_store_refuses_newer_schema(store_path):
    with ColdStore(store_path) as store:
        store.conn.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    with pytest.raises(StoreError, match="newer"):
        ColdStore(store_path)


def test_open_missing_store_without_create(tmp_path):
    with pytest.raises(StoreError, match="no c3m store"):
        ColdStore(tmp_path / "nope", create=False)


@pytest.mark.parametrize("turns, field", [
    ((Turn("robot", "hi"),), "turns[0].role"),
    ((Turn("user", b"bytes"),), "turns[0].text"),
    ((Turn("user", "x", (b"not an image",)),), "turns[0].images[0]"),
    ((Turn("user", "x", ("/no/such/file.png",)),), "turns[0].images[0]"),
    ((), "session.turns"),
])
def test_bad_session_input_names_field_and_stores_nothing(store_path, models, turns, field):
    from datetime import datetime

    with Memory(store_path, "alice", models=models) as mem:
        with pytest.raises(InvalidInput) as exc:
            mem.add_session(Session("bad", datetime(2026, 1, 1), turns))
        assert exc.value.field == field and exc.value.fix
        assert mem.sessions() == []


def test_two_processes_can_write_one_store(store_path):
    """Separate processes append to one namespace concurrently; every session lands exactly once."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[3])
        from factories import make_session
        from c3m.memory import Memory
        from c3m.models import Models, HashingEmbedder, ApproxTokenCounter, ExtractiveAnswerer
        models = Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer())
        with Memory(sys.argv[1], "shared", models=models) as mem:
            for i in range(int(sys.argv[2]), int(sys.argv[2]) + 6):
                mem.add_session(make_session(i))
    """)
    tests_dir = os.path.dirname(os.path.dirname(__file__))  # tests/, where factories.py is
    procs = [subprocess.Popen([sys.executable, "-c", code, str(store_path), str(start), tests_dir])
             for start in (1, 101)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with ColdStore(store_path) as store:
        assert len(store.sessions("shared")) == 12
        assert [s.seq for s in store.sessions("shared")] == list(range(1, 13))
        assert store.snapshot_versions("shared", DEFAULT_METHOD) == list(range(1, 13))
        assert verify_store(store).ok  # each snapshot reaches exactly the nodes committed before it


def test_extraction_cache_survives_reopen(store_path):
    with ColdStore(store_path) as store:
        assert store.get_extraction("oracle", "v1", "caption", "ab" * 32) is None
        store.put_extraction("oracle", "v1", "caption", "ab" * 32, {"text": "a red mug"})
    with ColdStore(store_path) as store:
        assert store.get_extraction("oracle", "v1", "caption", "ab" * 32) == {"text": "a red mug"}
        assert store.get_extraction("oracle", "v2", "caption", "ab" * 32) is None


def test_a_granted_postgres_role_can_ingest_and_forget_but_not_delete(pg_store_url, models):
    """Privileges as the second wall behind the triggers: the application role cannot DELETE, TRUNCATE or drop
    a trigger, and still does everything c3m does (ingest, read, forget)."""
    import uuid

    import psycopg

    from c3m.store.db import split_blobs_param

    url, _ = split_blobs_param(pg_store_url)
    role = "c3m_app_" + uuid.uuid4().hex[:8]
    with ColdStore(pg_store_url) as owner:
        owner.conn.execute(f"CREATE ROLE {role} LOGIN")
        owner.grant(role)
        with pytest.raises(InvalidInput, match="role"):
            owner.grant("x; DROP TABLE sessions")
    app_url = pg_store_url.replace("postgresql://c3m@", f"postgresql://{role}@", 1)
    assert app_url != pg_store_url, "the test server's URL is expected to name the user c3m"
    try:
        with Memory(app_url, "alice", models=models) as mem:
            mem.add_session(make_session(1))
            mem.add_session(make_session(2))
            assert mem.retrieve("Where is mug 2?").items
            mem.forget(session_id="s1", reason="user request")
        app = url.replace("postgresql://c3m@", f"postgresql://{role}@", 1)
        with psycopg.connect(app, autocommit=True) as raw:
            for sql in ("DELETE FROM raw_nodes", "TRUNCATE sessions CASCADE", "DROP TRIGGER raw_nodes_no_update ON "
                        "raw_nodes", "DELETE FROM forget_log", "ALTER TABLE raw_nodes DISABLE TRIGGER ALL"):
                with pytest.raises(psycopg.Error, match="permission denied|must be owner|append-only|audit"):
                    raw.execute(sql)
        with ColdStore(pg_store_url) as owner:
            assert verify_store(owner).ok and owner.namespace_stats("alice")["redacted_nodes"] == 2
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_writer_that_waits_too_long_gets_store_busy_and_the_holder_commits(store_path):
    """Over the busy timeout a waiting writer gets StoreBusy (a StoreError with the fix), never a raw
    'database is locked'; the writer holding the lock is unaffected."""
    from c3m.errors import StoreBusy

    with ColdStore(store_path) as holder, ColdStore(store_path, busy_timeout_s=0.3) as waiter:
        with holder.transaction("alice"):
            holder.insert_session(holder.prepare_session("alice", make_session(1)))
            with pytest.raises(StoreBusy) as exc:
                with waiter.transaction("alice"):
                    waiter.insert_session(waiter.prepare_session("alice", make_session(2)))
            assert "retry" in exc.value.fix
        assert [s.session_id for s in waiter.sessions("alice")] == ["s1"]
        with waiter.transaction("alice"):  # and the waiter's connection is usable afterwards
            waiter.insert_session(waiter.prepare_session("alice", make_session(2)))
        assert [s.session_id for s in holder.sessions("alice")] == ["s1", "s2"]
