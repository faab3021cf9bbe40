"""The c3m method through the ``Memory`` API: invariants checked after every commit on random session
streams (immutability, provenance, budgets, Eq. 3/4), snapshot replay, query-blindness, options, inspect."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from factories import png_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.types import ReaderBudget, Session, Turn, WriteBudget, node_id_for
from c3m.index import ActiveIndex
from c3m.methods import register
from c3m.methods.c3m import C3M

T0 = datetime(2026, 2, 1, 8, 0)
DELTA = 0.6
OBJECTS = ["mug", "clock", "lamp", "kettle"]
COLOURS = ["red", "blue", "green", "yellow"]
ROOMS = ["kitchen", "garage", "hallway"]
SMALL_TALK = ["How are you doing today?", "The weather was lovely this morning.", "Thanks, talk soon!",
              "Quick update: nothing much happened, a nice change."]
REPLIES = ["Nice!", "Thanks for the update!", "Got it.", "Take care."]
QUESTIONS = ["What colour is my mug?", "Where is the clock?", "What did I repaint?", "Which lamp is in the garage?"]
READER_BUDGETS = [ReaderBudget(pages=1, raw_nodes=2, images=0, text_tokens=30), ReaderBudget(1, 1, 1, 500),
                  ReaderBudget(2, 4, 0, 60), ReaderBudget(0, 3, 3, 100), ReaderBudget()]
WRITE_BUDGETS = [WriteBudget(entries=6, pages=2), WriteBudget(entries=3, pages=1, index_tokens=120, index_bytes=6000),
                 WriteBudget()]


def _fact(kind: int, obj: int, colour: int, room: int) -> str:
    o, c, r = OBJECTS[obj], COLOURS[colour], ROOMS[room]
    return [f"I repainted my {o} {c}.", f"Here's my {c} {o} in the {r}.", f"I used my {o} again today.",
            f"I moved my {o} to the {r}.", SMALL_TALK[colour], f"My {o} is {c} now."][kind]


user_turn = st.builds(lambda kind, o, c, r, img, reply: (_fact(kind, o, c, r), img, reply),
                      st.integers(0, 5), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2),
                      st.booleans(), st.integers(-1, 3))
session_strategy = st.lists(user_turn, min_size=1, max_size=3)
stream_strategy = st.lists(session_strategy, min_size=1, max_size=6)


def _build(stream) -> list[Session]:
    """Sessions from a drawn stream, after an opening small-talk session: it keeps every question key's IDF
    above 0 and so steps around LEXICAL_BUG (tested on its own by ``test_retrieve_when_every_unit_...``)."""
    sessions = [Session("s-hello", T0 - timedelta(days=1), (Turn("user", "Hello there, nice to meet you!"),
                                                            Turn("assistant", "Hello!")))]
    for i, spec in enumerate(stream):
        turns = []
        for j, (text, img, reply) in enumerate(spec):
            images = (png_bytes((40 * j % 255, 60 * i % 255, 90)),) if img else ()
            turns.append(Turn("user", text, images))
            if reply >= 0:
                turns.append(Turn("assistant", REPLIES[reply]))
        sessions.append(Session(f"s{i:02d}", T0 + timedelta(days=i, hours=i % 3), tuple(turns)))
    return sessions


def _cfg(budget: WriteBudget = WriteBudget(), **options) -> MemoryConfig:
    return MemoryConfig(method="c3m", write_budget=budget, method_options=options)


def _check_reads(mem: Memory, questions=QUESTIONS, budgets=READER_BUDGETS) -> None:
    for q in questions:
        for b in budgets:
            ctx = mem.retrieve(q, b)
            assert ctx.use.fits(b), (q, b, ctx.use)
            assert ctx.use.raw_nodes == len({i.node_id for i in ctx.items if i.form.value in ("raw_text", "raw_image")})
            assert ctx.use.images == sum(len(i.images) for i in ctx.items)
            keys = [(i.provenance.time, i.provenance.session_id, i.provenance.turn_index) for i in ctx.items]
            assert keys == sorted(keys), "context items must be in time order"
            assert set(ctx.trace.selected_nodes) <= set(ctx.trace.expanded_nodes)
            assert list(ctx.trace.selected_nodes) == list(dict.fromkeys(i.node_id for i in ctx.items))
            assert {i.node_id for i in ctx.items} <= mem.method.pointers()
            if b.pages == 0:
                assert ctx.items == ()


def _check_actions(actions, before: ActiveIndex, after: ActiveIndex, session_id: str, delta: float = DELTA) -> None:
    """Eq. 3 (thresholded actions) and Eq. 4 (Src(e') ⊇ Src(e*) ∪ P_t) for one commit's log."""
    everything = after.sources()
    for a in actions:
        act = a["action"]
        if act in ("merge", "update"):
            assert a["relation"] == {"merge": "same", "update": "update"}[act]
            assert a["confidence"] >= delta
            assert a["candidate"] == a["entry"] and a["candidate"] in {c[0] for c in a["candidates"]}
            need = {session_id: set(a["turns"])}
            if a["entry"] in before.entries:  # e* existed before this commit: its old sources must stay
                for s, t in before.entries[a["entry"]].sources().items():
                    need.setdefault(s, set()).update(t)
            e = after.entries.get(a["entry"])
            have = e.sources() if e is not None and e.kind == "entry" else everything
            for s, t in need.items():
                assert t <= have.get(s, set()), (a, s, t, have.get(s))
        elif act == "add":
            assert a["candidates"] == [] and a["candidate"] is None
        elif act == "keep":
            assert a["candidates"]
            assert not (a["relation"] in ("same", "update") and a["confidence"] >= delta)
        elif act == "consolidate":
            assert a["relation"] == "same" and a["confidence"] >= delta
        else:
            assert act in ("compact", "overflow_repair"), a
        if act in ("merge", "update", "add", "keep"):
            assert a["session"] == session_id
            for t in a["turns"]:
                assert t in everything.get(session_id, set())


def _run_stream(store: Path, models, sessions, budget: WriteBudget, options=None) -> Memory:
    mem = Memory(store, "u", config=_cfg(budget, **(options or {})), models=models)
    first_seen: dict[str, object] = {}
    count = models.token_counter.count
    for k, session in enumerate(sessions):
        before = ActiveIndex.from_state(mem.method.index.state())
        res = mem.add_session(session)
        assert res.created and res.raw_nodes == len(session.turns)

        # Raw Nodes never change; the new ones are exactly the session's turns
        nodes = mem.nodes()
        for n in nodes:
            if n.node_id in first_seen:
                assert n == first_seen[n.node_id]
            else:
                assert n.session_id == session.id
                turn = session.turns[n.turn_index]
                assert (n.text, n.role, len(n.images), n.time) == (turn.text, turn.role, len(turn.images), session.time)
                assert n.node_id == node_id_for("u", session.id, n.turn_index)
                first_seen[n.node_id] = n
        assert len(first_seen) == sum(len(s.turns) for s in sessions[:k + 1])
        stored = mem.store.get_nodes(list(first_seen))
        assert all(stored[i] == n for i, n in first_seen.items())

        # every ingested Raw Node is reachable, and nothing else
        assert mem.method.pointers() == set(first_seen)

        # write budget holds after every commit
        use = mem.method.index.usage(count)
        assert all(u <= b for u, b in zip(use, budget.as_tuple())), (use, budget)

        _check_actions(res.actions, before, mem.method.index, session.id, float((options or {}).get("delta", DELTA)))
        _check_reads(mem, QUESTIONS[:2], READER_BUDGETS[:3])
    return mem


HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=15, deadline=None, suppress_health_check=HC)
@given(stream=stream_strategy, budget=st.sampled_from(WRITE_BUDGETS))
def test_invariants_hold_after_every_session(tmp_path_factory, models, stream, budget):
    sessions = _build(stream)
    mem = _run_stream(tmp_path_factory.mktemp("c3m"), models, sessions, budget)
    try:
        _check_reads(mem)
    finally:
        mem.close()


@settings(max_examples=15, deadline=None, suppress_health_check=HC)
@given(stream=stream_strategy, unit_tokens=st.sampled_from([0, 12, 10_000]), delta=st.sampled_from([0.0, 0.45, 1.0]))
def test_invariants_hold_for_other_options(tmp_path_factory, models, stream, unit_tokens, delta):
    mem = _run_stream(tmp_path_factory.mktemp("c3m"), models, _build(stream), WriteBudget(entries=5, pages=2),
                      {"delta": delta, "unit_tokens": unit_tokens, "candidates": 2})
    mem.close()


@settings(max_examples=15, deadline=None, suppress_health_check=HC)
@given(stream=stream_strategy, budget=st.sampled_from(WRITE_BUDGETS))
def test_snapshot_round_trip_gives_the_same_index_and_answers(tmp_path_factory, models, stream, budget):
    store = tmp_path_factory.mktemp("c3m")
    sessions = _build(stream)
    with Memory(store, "u", config=_cfg(budget), models=models) as mem:
        for s in sessions:
            mem.add_session(s)
        state = mem.method.state()
        contexts = {(q, b): mem.retrieve(q, b) for q in QUESTIONS for b in READER_BUDGETS[:3]}
    with Memory(store, "u", config=_cfg(budget), models=models) as again:  # loads the snapshot
        assert again.version == len(sessions)
        assert again.method.state() == state
        assert json.dumps(again.method.state(), sort_keys=True) == json.dumps(state, sort_keys=True)
        for (q, b), ctx in contexts.items():
            assert again.retrieve(q, b) == ctx
    with Memory(store, "u", config=_cfg(budget), models=models) as replayed:  # no snapshot: replays Raw Nodes
        replayed.store.conn.execute("DELETE FROM index_snapshots")
    with Memory(store, "u", config=_cfg(budget), models=models) as replayed:
        assert replayed.method.state() == state
        for (q, b), ctx in contexts.items():
            assert replayed.retrieve(q, b) == ctx


def test_snapshot_round_trip_in_a_fresh_process(tmp_path, models):
    sessions = _build([[(_fact(1, 0, 1, 0), True, 0)], [(_fact(0, 0, 0, 0), False, 1), (SMALL_TALK[0], False, 2)],
                       [(_fact(3, 1, 2, 2), True, -1)], [(_fact(2, 0, 3, 1), False, 3)]])
    store = tmp_path / "store"
    budget = ReaderBudget(pages=1, raw_nodes=2, images=1, text_tokens=40)
    with Memory(store, "u", config=_cfg(WriteBudget(entries=3, pages=2)), models=models) as mem:
        for s in sessions:
            mem.add_session(s)
        state = mem.method.state()
        ctx = mem.retrieve("What colour is my mug?", budget)
    script = textwrap.dedent(f"""
        import json, sys
        from c3m.config import MemoryConfig
        from c3m.memory import Memory
        from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models
        from c3m.types import ReaderBudget, WriteBudget, as_json_dict
        models = Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer())
        cfg = MemoryConfig(method="c3m", write_budget=WriteBudget(entries=3, pages=2))
        with Memory(sys.argv[1], "u", config=cfg, models=models) as mem:
            ctx = mem.retrieve("What colour is my mug?", ReaderBudget(*{list(budget.as_tuple())}))
            print(json.dumps({{"state": mem.method.state(), "ctx": as_json_dict(ctx)}}))
    """)
    out = subprocess.run([sys.executable, "-c", script, str(store)], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    from c3m.types import as_json_dict

    assert got["state"] == json.loads(json.dumps(state))
    assert got["ctx"] == json.loads(json.dumps(as_json_dict(ctx)))


@pytest.mark.parametrize("question", ["Where is the clock?", "Which clock did I repaint?"])
def test_retrieve_when_every_unit_mentions_the_question_keys(store_path, models, question):
    with Memory(store_path, "u", config=_cfg(), models=models) as mem:
        mem.add_session(Session("s1", T0, (Turn("user", "I repainted my clock red."),)))
        ctx = mem.retrieve(question, ReaderBudget(pages=1, raw_nodes=2, images=0, text_tokens=30))
        assert [i.text for i in ctx.items] == ["I repainted my clock red."]


# ---------------------------------------------------------------------------------------------
# query-blindness on a synthetic dataset
# ---------------------------------------------------------------------------------------------
def _inline_images(history):
    """Turn the loader's image paths into bytes *before* the write phase, so the whole dataset folder can be
    guarded (the store would otherwise open the dataset's image files while ingesting)."""
    def turn(t):
        return dataclasses.replace(t, images=tuple(Path(i).read_bytes() if isinstance(i, (str, Path)) else i
                                                   for i in t.images))
    return dataclasses.replace(history, sessions=tuple(dataclasses.replace(s, turns=tuple(map(turn, s.turns)))
                                                       for s in history.sessions))


def test_replay_is_query_blind_on_a_synthetic_history(tmp_path, models):
    from c3m.dataset import load_dataset
    from c3m.eval.replay import replay_history
    from c3m.eval.synth import generate_dataset

    dataset = generate_dataset(tmp_path / "synth", length=4000, episodes=1, seed=0, progress=False)
    (history,) = load_dataset(dataset)
    history = _inline_images(history)
    assert history.questions
    cfg = MemoryConfig(method="c3m", text_embedder="hashing", token_counter="approx")
    result = replay_history(history, tmp_path / "store", config=cfg, models=models, guard_paths=[dataset])
    assert result.pointers == result.raw_nodes == sum(len(s.turns) for s in history.sessions)
    assert len(result.questions) == len(history.questions)
    assert len(result.write_seconds) == len(history.sessions)


def test_replay_guard_catches_a_c3m_write_path_that_peeks(tmp_path, models, monkeypatch):
    """Control for the test above: the guard is armed for the c3m method's write path (a c3m whose observe reads
    the dataset; it runs in the harness's method process, so it finds the path in the environment)."""
    from c3m.dataset import load_dataset
    from c3m.eval import QueryBlindnessViolation
    from c3m.eval.replay import replay_history
    from c3m.eval.synth import generate_dataset

    dataset = generate_dataset(tmp_path / "synth", length=2000, episodes=1, seed=1, progress=False)
    (history,) = load_dataset(dataset)
    history = _inline_images(history)
    monkeypatch.setenv("C3M_TEST_PEEK", str(dataset / "episodes.jsonl"))
    cfg = MemoryConfig(method="test-c3m-peeks", text_embedder="hashing", token_counter="approx")
    with pytest.raises(QueryBlindnessViolation):
        replay_history(history, tmp_path / "store", config=cfg, models=models, guard_paths=[dataset])


@register
class PeekingC3M(C3M):
    name = "test-c3m-peeks"

    def observe(self, session_id, nodes):
        open(os.environ["C3M_TEST_PEEK"]).read()
        return super().observe(session_id, nodes)


# ---------------------------------------------------------------------------------------------
# options and inspection
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, field", [({"nope": 1}, "method_options.nope"),
                                             ({"delta": 2}, "method_options.delta"),
                                             ({"delta": -0.1}, "method_options.delta"),
                                             ({"relation_head": "llm"}, "method_options.relation_head")])
def test_invalid_options_are_named(store_path, models, options, field):
    with pytest.raises(InvalidInput, match=field.replace(".", r"\.")) as exc:
        Memory(store_path, "u", config=MemoryConfig(method="c3m", method_options=options), models=models)
    assert exc.value.field == field and exc.value.fix


def test_valid_options_are_accepted(store_path, models):
    opts = {"delta": 0.0, "candidates": 2, "unit_tokens": 64, "gamma": 0.2, "entries_k": 3, "pool": 8}
    with Memory(store_path, "u", config=MemoryConfig(method="c3m", method_options=opts), models=models) as mem:
        assert mem.method.read_cfg.entries_k == 3 and mem.method.cfg.delta == 0.0


def test_describe_shows_usage_pages_and_the_update_chain(store_path, models):
    texts = ["Here is my blue mug in the kitchen.", "My green lamp sits in the garage.", "The weather is nice today.",
             "My old clock hangs in the hallway.", "I repainted my mug red."]
    with Memory(store_path, "u", config=_cfg(), models=models) as mem:
        actions = []
        for i, t in enumerate(texts):
            res = mem.add_session(Session(f"s{i}", T0 + timedelta(days=i), (Turn("user", t), Turn("assistant", "Ok."))))
            actions += res.actions
        d = mem.method.describe()
        stats = mem.stats()
    assert set(d["usage"]) == {"entries", "pages", "index_tokens", "index_bytes"}
    used, limit = d["usage"]["entries"].split("/")
    assert int(used) == len(d["entries"]) and int(limit) == 36
    assert d["pointers"] == 10 and stats["pointers"] == 10
    assert {e for p in d["pages"] for e in p["entries"]} == {e["id"] for e in d["entries"]}
    updates = [a for a in actions if a["action"] == "update"]
    assert updates, [(a["action"], a.get("candidates")) for a in actions]
    entry = next(e for e in d["entries"] if e["id"] == updates[-1]["entry"])
    assert len(entry["chain"]) >= 2
    assert entry["chain"][0]["states"] == ["blue"] and entry["chain"][-1]["states"] == ["red"]
    assert entry["labels"].get("update", 0) >= 1
    assert all(e["chain"] == [] for e in d["entries"] if e["id"] != entry["id"])
    # the "before" state stays reachable: the old turn is still one of the entry's pointers
    assert entry["pointers"] == 4


def test_default_config_is_still_roomy_for_a_short_history(store_path, models):
    with Memory(store_path, "u", config=_cfg(), models=models) as mem:
        for s in _build([[(_fact(k % 6, k % 4, k % 3, k % 2), k % 2 == 0, k % 4)] for k in range(12)]):
            mem.add_session(s)
        log = mem.store.maintenance_log("u", "c3m")
        assert not [m for m in log if m["action"] == "overflow_repair"]
        assert len(mem.method.pointers()) == len(mem.nodes())
