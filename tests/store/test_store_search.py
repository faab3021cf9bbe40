"""Cold-Store text search (schema v4): ``ColdStore.search_text`` on both backends, kept in step with the Raw Nodes
by ``insert_session``, purged by ``forget``, backfilled when a v3 store is opened, and checked by ``verify``."""
from __future__ import annotations

import sqlite3
from datetime import datetime

from c3m.store import ColdStore, verify_store
from c3m.store.schema import SCHEMA_VERSION
from c3m.types import Session, Turn, node_id_for


def _add(store: ColdStore, namespace: str, sid: str, texts, day: int = 1) -> None:
    session = Session(sid, datetime(2024, 3, day, 12), tuple(Turn("user" if i % 2 == 0 else "assistant", t)
                                                          for i, t in enumerate(texts)))
    prepared = store.prepare_session(namespace, session)
    with store.transaction(namespace):
        store.insert_session(prepared)


def _fill(store: ColdStore) -> None:
    _add(store, "alice", "s1", ["I repainted my bicycle teal last weekend.", "Teal suits it!",
                                "My cat Ziggy sleeps on the sofa.", ""])
    _add(store, "alice", "s2", ["The bicycle got a new bell.", "Ring ring."], day=2)
    _add(store, "team/bob", "s1", ["Bob's bicycle is orange.", "Orange is bright."])


def test_search_finds_the_namespace_nodes_holding_the_terms_best_first(store_location):
    with ColdStore(store_location) as store:
        _fill(store)
        hits = store.search_text("alice", ["repainted", "bicycle", "teal"], 10)
        ids = [n for n, _ in hits]
        assert ids[0] == node_id_for("alice", "s1", 0)            # all three words
        assert set(ids) == {node_id_for("alice", "s1", 0), node_id_for("alice", "s1", 1),
                            node_id_for("alice", "s2", 0)}         # no node of team/bob, no empty turn
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        assert store.search_text("alice", ["bicycles"], 10)       # stemmed (porter / english)
        assert store.search_text("team/bob", ["bicycle"], 10) == [(node_id_for("team/bob", "s1", 0),
                                                                   store.search_text("team/bob", ["bicycle"], 1)[0][1])]
        assert len(store.search_text("alice", ["bicycle", "teal"], 1)) == 1
        assert store.search_text("alice", ["zebra"], 10) == []
        assert store.search_text("nobody", ["bicycle"], 10) == []


def test_search_terms_are_words_never_query_syntax(store_location):
    with ColdStore(store_location) as store:
        _fill(store)
        for hostile in (['"', 'OR', '*'], ['ns', ':', 'x'], ["a'b", "c) OR (d"], ["-", "&", "|", "!"], []):
            store.search_text("alice", hostile, 5)  # no syntax error, whatever the words
        assert store.search_text("alice", ["ziggy", "NEAR(", ")"], 5)[0][0] == node_id_for("alice", "s1", 2)


def test_forget_removes_the_searchable_copy(store_location):
    with ColdStore(store_location) as store:
        _fill(store)
        target = node_id_for("alice", "s1", 2)
        assert target in dict(store.search_text("alice", ["ziggy"], 5))
        store.forget("alice", node_ids=[target], reason="user request")
        assert store.search_text("alice", ["ziggy", "sofa", "cat"], 5) == []
        assert store.search_stats("alice")["search_rows"] == 4
        assert verify_store(store).ok


def test_search_stats_count_rows_and_text(store_location):
    with ColdStore(store_location) as store:
        _fill(store)
        stats = store.search_stats("alice")
        assert stats["search_rows"] == 5 and stats["search_bytes"] > 0
        assert store.search_stats("team/bob")["search_rows"] == 2


def test_a_v3_store_is_backfilled_on_open(tmp_path):
    path = tmp_path / "store"
    with ColdStore(path) as store:
        _fill(store)
    raw = sqlite3.connect(path / "store.sqlite")
    raw.execute("DROP TABLE node_search")
    raw.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    raw.commit()
    raw.close()
    with ColdStore(path) as store:
        assert store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == \
            str(SCHEMA_VERSION)
        assert [n for n, _ in store.search_text("alice", ["ziggy"], 5)] == [node_id_for("alice", "s1", 2)]
        assert verify_store(store).counts["searchable_nodes"] == 7


def test_verify_flags_a_forgotten_node_left_searchable(tmp_path):
    with ColdStore(tmp_path / "store") as store:
        _fill(store)
        target = node_id_for("alice", "s1", 2)
        store.forget("alice", node_ids=[target], reason="user request")
        rowid = store.conn.execute("SELECT rowid FROM raw_nodes WHERE node_id=?", (target,)).fetchone()[0]
        store.conn.execute("INSERT INTO node_search(rowid, body, ns, node_id) VALUES (?, 'ziggy', 'x', ?)",
                           (rowid, target))
        report = verify_store(store)
        assert not report.ok and any("still searchable" in e for e in report.errors)
