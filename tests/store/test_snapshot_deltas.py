"""Index snapshots stored as deltas (schema v3): the generic JSON diff round-trips exactly, every stored version of
a real history loads as the state the method had then (c3m, dense-topk, hivemem), forget and replay keep chains
whole, a v2 store (full rows only) still loads and grows deltas, a damaged row is refused naming
namespace/method/version (and `c3m verify` says which), and a sync after one new session applies one delta."""
from __future__ import annotations

import copy
import json
import os
import sqlite3
import zlib

import pytest
from factories import make_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import c3m.store.snapshots as cold  # ColdStore's snapshot part: put_snapshot, the checkpoint rule, the row decoder
from c3m.config import MemoryConfig
from c3m.demo import demo_history
from c3m.errors import StoreError
from c3m.memory import Memory
from c3m.store import ColdStore, verify_store
from c3m.store.delta import apply, canonical, diff
from c3m.store.schema import SCHEMA_VERSION
from c3m.types import Session


@pytest.fixture
def store_path(store_location):
    """Every test here runs on both store backends (a folder, a PostgreSQL schema)."""
    return store_location


# -- the diff: apply(prev, diff(prev, new)) == new ------------------------------------------------------------

_scalars = (st.none() | st.booleans() | st.integers(-5, 5) | st.integers() | st.floats(allow_nan=True)
            | st.sampled_from([0.0, -0.0, 1.0, 1]) | st.text(max_size=4))
_keys = st.text(alphabet="abcdei", max_size=3)


def _trees(leaves):
    return st.recursive(leaves, lambda kids: (st.lists(kids, max_size=6)
                                              | st.dictionaries(_keys, kids, max_size=6)
                                              | st.lists(st.fixed_dictionaries({"id": st.integers(0, 8)},
                                                                              optional={"v": kids, "w": kids}),
                                                         max_size=6)),
                        max_leaves=25)


_json = _trees(_scalars)


def _norm(x):
    return json.loads(canonical(x))


@st.composite
def _mutated(draw, tree):
    """A tree like ``tree`` with a few random edits (what successive index states look like)."""
    def walk(x, depth=0):
        r = draw(st.integers(0, 9))
        if r == 0:
            return draw(_json)
        if isinstance(x, dict):
            out = {k: walk(v, depth + 1) if draw(st.booleans()) else v for k, v in x.items() if draw(st.integers(0, 7))}
            if draw(st.booleans()):
                out[draw(_keys)] = draw(_json)
            return out
        if isinstance(x, list):
            out = [walk(v, depth + 1) if draw(st.integers(0, 3)) == 0 else v for v in x if draw(st.integers(0, 7))]
            for _ in range(draw(st.integers(0, 2))):
                out.insert(draw(st.integers(0, len(out))), draw(_json) if draw(st.booleans()) else
                           {"id": draw(st.integers(0, 12)), "v": draw(_scalars)})
            if len(out) > 1 and draw(st.integers(0, 4)) == 0:
                i, j = draw(st.integers(0, len(out) - 1)), draw(st.integers(0, len(out) - 1))
                out[i], out[j] = out[j], out[i]
            return out
        return x
    return walk(tree)


def _roundtrip(a, b):
    a, b = _norm(a), _norm(b)
    patch = diff(a, b)
    stored = json.loads(canonical(patch))  # what the store keeps is the patch's JSON
    before = canonical(a)
    assert canonical(apply(copy.deepcopy(a), stored)) == canonical(b)
    assert canonical(a) == before  # diff never changes its inputs
    if canonical(a) == canonical(b):
        assert patch is None


#: the fast selection draws a fifth of the examples (the round trips took 74 s of CI); `C3M_FUZZ_FULL=1` draws all
FULL = os.environ.get("C3M_FUZZ_FULL") == "1"


@settings(max_examples=3000 if FULL else 600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_diff_round_trips_on_related_json_trees(data):
    a = data.draw(_json)
    _roundtrip(a, data.draw(_mutated(a)))


@settings(max_examples=2000 if FULL else 400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json, _json)
def test_diff_round_trips_on_unrelated_json_trees(a, b):
    _roundtrip(a, b)


def test_diff_is_type_strict_and_patches_entries_by_id():
    for a, b in [(1, 1.0), (1, True), (0.0, -0.0), ([1], [True]), ({"a": 1}, {"a": 1.0}), (float("nan"), 1.0)]:
        _roundtrip(a, b)
        assert diff(a, b) is not None
    old = {"entries": [{"id": f"e{i}", "text": "x" * 50, "support": i} for i in range(100)]}
    new = copy.deepcopy(old)
    new["entries"][40]["support"] = 999
    new["entries"].insert(0, new["entries"].pop(70))  # a moved entry is patched, not re-sent
    new["entries"].append({"id": "e100", "text": "y", "support": 0})
    patch = diff(old, new)
    assert len(canonical(patch)) < 200
    _roundtrip(old, new)


# -- real histories: every version loads as the method's state at that version --------------------------------

def _sessions():
    """The demo history's sessions, then 14 small ones (a mug that keeps moving)."""
    extra = [make_session(i, with_image=i % 3 == 0,
                          text=f"Session {i}: the {['red', 'blue'][i % 2]} mug number {i % 4} is on shelf {i % 3}.")
             for i in range(1, 15)]
    return list(demo_history().sessions) + [Session(f"x{s.id}", s.time, s.turns) for s in extra]


def _ingest(path, models, method, sessions, namespace="u"):
    states = {}
    with Memory(path, namespace, models=models, config=MemoryConfig(method=method)) as mem:
        for s in sessions:
            r = mem.add_session(s)
            states[r.seq] = (canonical(mem.method.state()), frozenset(mem.method.pointers()))
        key = mem.method_name
    return states, key


def _check_all_versions(path, key, states, order=None, namespace="u"):
    with ColdStore(path) as store:  # a fresh connection: nothing cached
        assert store.snapshot_versions(namespace, key) == sorted(states)
        assert store.latest_snapshot_version(namespace, key) == max(states)
        for v in order or sorted(states):
            snap = store.snapshot(namespace, key, v)
            assert canonical(snap.state) == states[v][0], (key, v)
            assert set(snap.pointers) == states[v][1] and list(snap.pointers) == sorted(snap.pointers)
        assert verify_store(store).ok, verify_store(store).errors


@pytest.mark.parametrize("method", ["c3m", "dense-topk", "hivemem"])
def test_every_version_of_a_real_history_loads_exactly(store_path, models, method, monkeypatch):
    monkeypatch.setattr(cold, "SNAPSHOT_CHECKPOINT_EVERY", 5)  # several checkpoints in a short history
    states, key = _ingest(store_path, models, method, _sessions())
    with ColdStore(store_path) as store:
        kinds = dict(store.conn.execute("SELECT version, kind FROM index_snapshots WHERE namespace='u'"))
        bases = [r for r in store.conn.execute("SELECT version, base_version FROM index_snapshots WHERE kind='delta'")]
    assert "delta" in kinds.values() and kinds[1] == "full"
    assert all(b == v - 1 for v, b in bases)  # deltas point at the previous version
    run = 0
    for v in sorted(kinds):  # at most K - 1 deltas after a full row
        run = 0 if kinds[v] == "full" else run + 1
        assert run < 5
    newest_first = sorted(states, reverse=True)
    _check_all_versions(store_path, key, states)
    _check_all_versions(store_path, key, states, order=newest_first)
    with Memory(store_path, "u", models=models, config=MemoryConfig(method=method)) as again:
        assert canonical(again.method.state()) == states[max(states)][0]


def test_deltas_keep_snapshot_bytes_linear_in_sessions(store_path):
    """Each version adds an entry and bumps one counter: the rows grow by about one entry each, not by the state."""
    import hashlib

    n, state, full_sizes = 60, {"next_id": 0, "entries": []}, []
    with ColdStore(store_path) as store:
        for v in range(1, n + 1):
            state = copy.deepcopy(state)
            state["next_id"] = v
            state["entries"].append({"id": f"e{v}", "text": hashlib.sha256(str(v).encode()).hexdigest(),
                                     "support": 1})
            state["entries"][(v * 7) % len(state["entries"])]["support"] += 1
            full_sizes.append(len(zlib.compress(canonical(state).encode(), 6)))
            with store.transaction():
                store.put_snapshot("u", "m", v, f"s{v}", state, [f"n{i}" for i in range(2 * v)],
                                   complete_provenance=False)
        rows = store.conn.execute("SELECT version, kind, length(state) + length(pointers) FROM index_snapshots"
                                  " ORDER BY version").fetchall()
        fulls = [v for v, kind, _ in rows if kind == "full"]  # tiny early states: a delta would not be half
        assert fulls[-1] - fulls[-2] == cold.SNAPSHOT_CHECKPOINT_EVERY and all(v <= 5 for v in fulls[:-1])
        deltas = [size for _, kind, size in rows if kind == "delta"]
        assert max(deltas) < 200 < full_sizes[-1] / 5  # a delta is about one entry, whatever the state's size
        assert sum(size for *_, size in rows) < sum(full_sizes) / 4
        assert canonical(store.snapshot("u", "m", n).state) == canonical(state)


# -- the cache ------------------------------------------------------------------------------------------------

def test_a_sync_after_one_new_session_applies_one_delta(store_path, models, monkeypatch):
    cfg = MemoryConfig(method="c3m")
    writer = Memory(store_path, "u", config=cfg, models=models)
    for s in _sessions()[:6]:
        writer.add_session(s)
    reader = Memory(store_path, "u", config=cfg, models=models)
    decoded = []
    real = cold.decode_snapshot_row

    def counting(tag, row, *a, **k):
        decoded.append((row["version"], row["kind"]))
        return real(tag, row, *a, **k)

    monkeypatch.setattr(cold, "decode_snapshot_row", counting)
    writer.add_session(_sessions()[6])  # the writer diffs against its cached state: no row decoded
    assert decoded == []
    assert reader.sync() == 7
    assert decoded == [(7, "delta")]
    assert canonical(reader.method.state()) == canonical(writer.method.state())
    writer.close()
    reader.close()


def test_a_cached_state_rewritten_by_another_connection_is_not_served(store_path, models):
    cfg = MemoryConfig(method="c3m")
    a = Memory(store_path, "u", config=cfg, models=models)
    b = Memory(store_path, "u", config=cfg, models=models)
    for s in _sessions()[:8]:
        a.add_session(s)
    stale = canonical(a.store.snapshot("u", "c3m", 8).state)  # a's cache now holds version 8
    b.forget(session_id=_sessions()[6].id, reason="user request")
    b.sync()  # replays 7 and 8 on the redacted nodes
    fresh = canonical(b.method.state())
    assert fresh != stale
    assert canonical(a.store.snapshot("u", "c3m", 8).state) == fresh
    a.close()
    b.close()


def test_replacing_a_version_keeps_the_deltas_built_on_it(store_path):
    with ColdStore(store_path) as store:
        states = {v: {"n": v, "xs": list(range(v * 10))} for v in range(1, 6)}
        for v, s in states.items():
            with store.transaction():
                store.put_snapshot("u", "m", v, f"s{v}", s, [f"p{v}"], complete_provenance=False)
        with store.transaction():
            store.put_snapshot("u", "m", 2, "s2", {"other": True}, ["q"], complete_provenance=False)
    with ColdStore(store_path) as store:
        assert store.snapshot("u", "m", 2).state == {"other": True}
        assert store.snapshot("u", "m", 2).pointers == ("q",)
        for v in (1, 3, 4, 5):
            assert store.snapshot("u", "m", v).state == states[v] and store.snapshot("u", "m", v).pointers == (f"p{v}",)


# -- forget ---------------------------------------------------------------------------------------------------

def test_forget_then_reload_every_version(store_path, models, monkeypatch):
    monkeypatch.setattr(cold, "SNAPSHOT_CHECKPOINT_EVERY", 4)
    put = {}
    real_put = ColdStore.put_snapshot

    def recording(self, namespace, method, version, session_id, state, pointers, **kw):
        put[version] = (canonical(state), frozenset(pointers))
        return real_put(self, namespace, method, version, session_id, state, pointers, **kw)

    monkeypatch.setattr(ColdStore, "put_snapshot", recording)
    sessions = _sessions()[:12]
    before, key = _ingest(store_path, models, "c3m", sessions)
    with Memory(store_path, "u", models=models, config=MemoryConfig(method="c3m")) as mem:
        rep = mem.forget(session_id=sessions[6].id, reason="user request")  # seq 7
        assert rep.snapshots_dropped == 12 - 6
        assert mem.store.snapshot_versions("u", key) == list(range(1, 7))
        mem.sync()
    assert sorted(put) == list(range(1, 13))
    assert all(put[v] == before[v] for v in range(1, 7))
    assert put[7] != before[7]
    _check_all_versions(store_path, key, put, order=[12, 3, 7, 1, 8, 11, 6])


# -- a v2 store (full rows, old layout) still loads -----------------------------------------------------------

OLD_TABLE = """CREATE TABLE index_snapshots (
    namespace TEXT NOT NULL, method TEXT NOT NULL, version INTEGER NOT NULL, session_id TEXT NOT NULL,
    created_at TEXT NOT NULL, state BLOB NOT NULL, state_sha256 TEXT NOT NULL, pointers BLOB NOT NULL,
    n_pointers INTEGER NOT NULL, complete_provenance INTEGER NOT NULL, PRIMARY KEY (namespace, method, version))"""


def _make_v2_store(path, models, sessions):
    """A store as v2 c3m left it: the old index_snapshots layout, one full zlib(JSON) row per session hashed on
    its blob, schema_version 2."""
    import hashlib

    states, key = _ingest(path, models, "c3m", sessions)
    raw = sqlite3.connect(path / "store.sqlite")
    meta = raw.execute("SELECT version, session_id, created_at, complete_provenance FROM index_snapshots"
                       " ORDER BY version").fetchall()
    raw.execute("DROP TABLE index_snapshots")
    raw.execute(OLD_TABLE)
    for version, session_id, created_at, complete in meta:
        blob = zlib.compress(states[version][0].encode(), 6)  # v2's _pack: the same canonical JSON
        ptrs = sorted(states[version][1])
        raw.execute("INSERT INTO index_snapshots VALUES (?,?,?,?,?,?,?,?,?,?)",
                    ("u", key, version, session_id, created_at, blob, hashlib.sha256(blob).hexdigest(),
                     zlib.compress(json.dumps(ptrs, separators=(",", ":"), sort_keys=True).encode(), 6), len(ptrs),
                     complete))
    raw.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    raw.commit()
    raw.close()
    return states, key


def test_a_v2_store_loads_and_grows_deltas(tmp_path, models):  # v2 stores were folders only
    store_path = tmp_path / "store"
    sessions = _sessions()
    states, key = _make_v2_store(store_path, models, sessions[:8])
    _check_all_versions(store_path, key, states)  # opening it migrates the table
    with ColdStore(store_path) as store:
        assert store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        assert {tuple(r) for r in store.conn.execute("SELECT kind, encoding FROM index_snapshots")} == {("full", 1)}
    with Memory(store_path, "u", models=models, config=MemoryConfig(method="c3m")) as mem:
        assert canonical(mem.method.state()) == states[8][0]
        for s in sessions[8:12]:
            r = mem.add_session(s)
            states[r.seq] = (canonical(mem.method.state()), frozenset(mem.method.pointers()))
    with ColdStore(store_path) as store:
        assert tuple(store.conn.execute("SELECT kind, base_version, encoding FROM index_snapshots WHERE version=9"
                                        ).fetchone()) == ("delta", 8, 2)  # a delta on a v2 row
    _check_all_versions(store_path, key, states, order=[12, 1, 9, 8, 10])


# -- damage ---------------------------------------------------------------------------------------------------

def _damage(path, version, how):
    """Overwrite one snapshot row behind c3m's back (snapshots have no triggers: they are derived data)."""
    store = ColdStore(path)
    raw = store.conn
    (blob,) = raw.execute("SELECT state FROM index_snapshots WHERE version=?", (version,)).fetchone()
    if how == "flip":
        blob = bytes(blob[:4]) + bytes(b ^ 0xFF for b in blob[4:12]) + bytes(blob[12:])
    else:  # a well-formed patch that rebuilds the wrong state
        blob = zlib.compress(canonical(["d", {"next_id": ["r", -1]}, []]).encode(), 6)
    raw.execute("UPDATE index_snapshots SET state=? WHERE version=?", (blob, version))
    store.close()


@pytest.mark.parametrize("how", ["flip", "wrong-patch"])
def test_a_damaged_delta_is_refused_and_verify_names_it(store_path, models, how, capsys):
    from c3m.cli import main

    states, key = _ingest(store_path, models, "c3m", _sessions()[:8])
    with ColdStore(store_path) as store:
        assert store.conn.execute("SELECT kind FROM index_snapshots WHERE version=5").fetchone()[0] == "delta"
    _damage(store_path, 5, how)
    with ColdStore(store_path) as store:
        for v in (5, 6, 8):  # the damaged version and every one built on it name the damaged row
            with pytest.raises(StoreError, match=f"snapshot u/{key}@5: ") as err:
                store.snapshot("u", key, v)
            assert v == 5 or f"snapshot u/{key}@{v} cannot be rebuilt" in str(err.value)
        assert canonical(store.snapshot("u", key, 4).state) == states[4][0]  # earlier versions are fine
        rep = verify_store(store)
    assert not rep.ok
    assert any(f"snapshot u/{key}@5:" in e for e in rep.errors), rep.errors
    assert any(f"snapshot u/{key}@6:" in e and "base version 5" in e for e in rep.errors), rep.errors
    assert main(["verify", "--store", str(store_path)]) == 1
    assert f"snapshot u/{key}@5" in capsys.readouterr().out


def test_a_damaged_full_row_is_refused(store_path, models):
    states, key = _ingest(store_path, models, "c3m", _sessions()[:4])
    with ColdStore(store_path) as store:
        store.conn.execute("UPDATE index_snapshots SET state=? WHERE version=1", (zlib.compress(b'{"x":1}'),))
    with ColdStore(store_path) as store:
        with pytest.raises(StoreError, match=f"u/{key}@1: state hash mismatch"):
            store.snapshot("u", key, 1)
        assert any(f"snapshot u/{key}@1: state hash mismatch" in e for e in verify_store(store).errors)


def test_a_damaged_base_makes_the_next_version_a_full_row(store_path):
    with ColdStore(store_path) as store:
        for v in range(1, 6):
            with store.transaction():
                store.put_snapshot("u", "m", v, f"s{v}", {"xs": list(range(50 * v))}, ["p"], complete_provenance=False)
    _damage(store_path, 5, "flip")
    with ColdStore(store_path) as store:  # nothing cached: the base must be rebuilt, and cannot be
        with store.transaction():
            store.put_snapshot("u", "m", 6, "s6", {"xs": list(range(300))}, ["p"], complete_provenance=False)
        assert store.conn.execute("SELECT kind FROM index_snapshots WHERE version=6").fetchone()[0] == "full"
        assert store.snapshot("u", "m", 6).state == {"xs": list(range(300))}
