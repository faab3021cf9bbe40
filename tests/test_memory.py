"""The Memory API and the dense-topk baseline: budgets, provenance, query-blindness, replay."""
from __future__ import annotations

from datetime import datetime

import pytest
from factories import make_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.methods import METHOD_NAMES, available_methods
from c3m.types import ReaderBudget, Session, Turn


@pytest.fixture
def store_path(store_location):
    """Every test here runs on both store backends (a folder, a PostgreSQL schema)."""
    return store_location


def test_ask_returns_cited_time_ordered_context(store_path, models):
    with Memory(store_path, "u", models=models) as mem:
        mem.add_session(make_session(1, text="My kayak is green and lives in the garage."))
        mem.add_session(make_session(2, text="I repainted the kayak orange."))
        ans = mem.ask("What colour is the kayak?")
        times = [i.provenance.time for i in ans.context.items]
        assert times == sorted(times)
        assert ans.cited and ans.cited[0] in {i.node_id for i in ans.context.items}
        assert {"s1", "s2"} <= set(ans.context.trace.covered_sessions)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.integers(0, 3), raw=st.integers(0, 6), images=st.integers(0, 3), tokens=st.integers(0, 60))
def test_reader_budget_is_never_exceeded(tmp_path_factory, models, pages, raw, images, tokens):
    budget = ReaderBudget(pages, raw, images, tokens)
    with Memory(tmp_path_factory.mktemp("s"), "u", models=models) as mem:
        for i in range(1, 6):
            mem.add_session(make_session(i, with_image=i % 2 == 0))
        ctx = mem.retrieve("where is mug number 4?", budget)
        assert ctx.use.fits(budget)
        assert ctx.use.raw_nodes == len({i.node_id for i in ctx.items if i.form.value in ("raw_text", "raw_image")})
        assert ctx.use.images == sum(len(i.images) for i in ctx.items)


def test_pointer_count_equals_raw_nodes_ingested(store_path, models):
    with Memory(store_path, "u", models=models) as mem:
        for i in range(1, 8):
            mem.add_session(make_session(i))
            assert len(mem.method.pointers()) == mem.stats()["raw_nodes"] == 2 * i


def test_write_path_sees_only_the_session(store_path, models, monkeypatch):
    """observe() is handed the new session's Raw Nodes and nothing else (query-blindness)."""
    seen = []
    with Memory(store_path, "u", models=models) as mem:
        original = mem.method.observe
        monkeypatch.setattr(mem.method, "observe", lambda sid, nodes: seen.append((sid, nodes)) or original(sid, nodes))
        mem.add_session(make_session(1))
        mem.ask("anything about mugs?")
        assert len(seen) == 1 and seen[0][0] == "s1"
        assert {n.session_id for n in seen[0][1]} == {"s1"}


def test_a_second_method_replays_the_store(store_path, models):
    with Memory(store_path, "u", models=models) as mem:
        for i in range(1, 4):
            mem.add_session(make_session(i))
        mem.store.conn.execute("DELETE FROM index_snapshots")  # derived data only: safe to drop
    with Memory(store_path, "u", models=models) as again:  # rebuilds by replaying immutable Raw Nodes
        assert again.version == 3 and len(again.method.pointers()) == 6
        assert again.store.snapshot_versions("u", again.method_name) == [1, 2, 3]
        assert again.verify().ok


def test_two_handles_in_one_process_see_each_others_writes(store_path, models):
    with Memory(store_path, "u", models=models) as a, Memory(store_path, "u", models=models) as b:
        a.add_session(make_session(1))
        b.add_session(make_session(2))
        a.add_session(make_session(3))
        assert a.version == b.sync() == 3
        assert a.method.state() == b.method.state()


def test_empty_memory_and_bad_questions(store_path, models):
    with Memory(store_path, "u", models=models) as mem:
        ctx = mem.retrieve("anything?")
        assert ctx.items == () and ctx.trace.notes == ("empty memory",)
        with pytest.raises(InvalidInput, match="question"):
            mem.retrieve("   ")


def test_unknown_and_planned_methods_are_named(store_path, models, monkeypatch):
    import c3m.methods.base as base

    assert set(METHOD_NAMES) <= set(available_methods())  # every project method is implemented
    with pytest.raises(InvalidInput, match="unknown method") as exc:
        Memory(store_path, "u", models=models, method="no-such-method")
    assert "dense-topk" in exc.value.fix and "planned" not in str(exc.value)
    monkeypatch.setattr(base, "METHOD_NAMES", METHOD_NAMES + ("future-method",))
    with pytest.raises(InvalidInput, match="planned"):
        Memory(store_path, "u", models=models, method="future-method")


def test_image_only_turns_are_stored_and_retrievable(store_path, models):
    from factories import png_bytes

    with Memory(store_path, "u", models=models) as mem:
        mem.add_session(Session("s1", datetime(2026, 1, 1), [Turn("user", "", (png_bytes(),))]))
        ctx = mem.retrieve("show me the picture", ReaderBudget(images=1))
        assert ctx.items and ctx.items[0].images[0].mime == "image/png"
        assert mem.store.image_bytes(ctx.items[0].images[0]) == png_bytes()


def test_config_roundtrip_from_toml(tmp_path):
    path = tmp_path / "c3m.toml"
    path.write_text('method = "dense-topk"\n[reader_budget]\nraw_nodes = 5\n[write_budget]\nentries = 24\n')
    cfg = MemoryConfig.load(path)
    assert cfg.reader_budget.raw_nodes == 5 and cfg.reader_budget.pages == 3 and cfg.write_budget.entries == 24
    path.write_text('methd = "x"\n')
    with pytest.raises(InvalidInput, match="methd"):
        MemoryConfig.load(path)


def test_a_forget_through_another_connection_reaches_an_open_reader(store_path, models):
    """A forget keeps the head seq but drops snapshots: a reader that only compared heads kept serving the forgotten
    text from its in-memory index (a server's reader thread, or another process)."""
    from factories import make_session

    from c3m.config import MemoryConfig

    cfg = MemoryConfig(method="c3m")
    writer = Memory(store_path, "u", config=cfg, models=models)
    reader = Memory(store_path, "u", config=cfg, models=models)
    for i in range(3):
        writer.add_session(make_session(i, with_image=False, text=f"my locker code is {1000 + i}"))
    assert "1001" in reader.retrieve("locker code").text()
    entries_before = [e["text"] for e in reader.method.describe()["entries"]]
    assert any("1001" in t for t in entries_before)
    writer.forget(session_id="s1", reason="user request")
    ctx = reader.retrieve("locker code")
    assert "1001" not in ctx.text()
    assert not any("1001" in e["text"] for e in reader.method.describe()["entries"])  # the index was rebuilt
    writer.close()
    reader.close()


def test_an_oversized_turn_is_refused_naming_the_field_and_nothing_is_stored(store_path, models):
    """A 2 MB turn used to be stored whole and then silently dropped from every context by the token budget."""
    from datetime import datetime

    from factories import png_bytes

    from c3m.config import MemoryConfig
    from c3m.errors import InvalidInput
    from c3m.types import Session, Turn

    big = Session("s-big", datetime(2026, 3, 1), [Turn("user", "a photo", [png_bytes()]),
                                                 Turn("user", "x" * 2_000_000)])
    with Memory(store_path, "u", config=MemoryConfig(method="dense-topk"), models=models) as mem:
        with pytest.raises(InvalidInput) as exc:
            mem.add_session(big)
        assert exc.value.field == "turns[1].text" and "2000000 characters" in exc.value.message
        assert "split" in exc.value.fix and mem.sessions() == []
        assert not any(mem.store.blobs.root.glob("??/*"))  # checked before any image blob is written
    ok = MemoryConfig(method="dense-topk", max_turn_chars=3_000_000)
    with Memory(store_path, "u", config=ok, models=models) as mem:
        assert mem.add_session(big).created
    with pytest.raises(InvalidInput):
        MemoryConfig(max_turn_chars=0)
