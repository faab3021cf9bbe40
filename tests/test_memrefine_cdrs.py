"""The bounded baselines ``memrefine`` and ``cdrs`` (issue #14): their write policies on tiny hand-made histories
under a small write budget, the shared budgets, snapshots, and CDRs's read-time graph expansion and conflicts."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from factories import png_bytes

import c3m.methods.cdrs as cdrs_mod
import c3m.methods.memrefine as memrefine_mod
from c3m.budget import measure_context, measure_index
from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.methods import available_methods
from c3m.methods.memrefine import judge_messages, parse_decision
from c3m.types import ReaderBudget, Session, Turn, WriteBudget

BASE = datetime(2026, 3, 1, 9, 0)
SMALL = WriteBudget(entries=4)
BIKE_RED, BIKE_BLUE = "My bike is red.", "My bike is blue now."
#: the two bike turns are the most similar pair; the head reads the second as an update of the first
DELETE_HISTORY = (BIKE_RED, "I bought a green kettle for the kitchen.", "Dentist appointment moved to Friday afternoon.",
                  "Our holiday flight leaves from Gatwick.", BIKE_BLUE)
#: the bike turn and its "again" are the most similar pair and say the same thing
MERGE_HISTORY = (BIKE_RED, "I bought a green kettle for the kitchen.", "Dentist appointment moved to Friday afternoon.",
                 "Our holiday flight leaves from Gatwick.", "My bike is red again.")
#: bike/car (the most similar pair) are distinct things: preserved; the two kettle turns then merge
PRESERVE_HISTORY = (BIKE_RED, "The kettle in the kitchen is green.", "My car is red.",
                    "Dentist appointment moved to Friday afternoon.", "I bought a green kettle for the kitchen.")
#: five unrelated things: every pair is preserved, so the budget needs the forced merge
DISTINCT_HISTORY = (BIKE_RED, "I bought a green kettle for the kitchen.", "Dentist appointment moved to Friday afternoon.",
                    "Our holiday flight leaves from Gatwick.", "The piano lesson is at noon.")


def _session(i: int, *texts: str, images: int = 0) -> Session:
    turns = [Turn("user" if j % 2 == 0 else "assistant", t,
                  tuple(png_bytes((j * 40 % 255, i, 9)) for _ in range(images)) if j == 0 else ())
             for j, t in enumerate(texts)]
    return Session(f"s{i}", BASE + timedelta(days=i), tuple(turns))


def _mem(path, models, method, budget=SMALL, **options) -> Memory:
    return Memory(path, "u", models=models,
                  config=MemoryConfig(method=method, method_options=options, write_budget=budget))


def _add(mem: Memory, texts) -> None:
    for i, t in enumerate(texts, start=1):
        mem.add_session(_session(i, t))


def _log(mem: Memory) -> list[dict]:
    return [r["detail"] if isinstance(r["detail"], dict) else json.loads(r["detail"])
            for r in mem.store.maintenance_log(mem.namespace, mem.method.snapshot_key)]


def _node(mem: Memory, text: str) -> str:
    return next(n.node_id for n in mem.nodes() if n.text == text)


def test_registered_with_their_descriptions():
    assert {"memrefine", "cdrs"} <= set(available_methods())
    m, c = memrefine_mod.MemRefine, cdrs_mod.CDRs
    assert m.bounded and not m.complete_provenance and c.bounded and c.complete_provenance
    assert m.paper == "MemRefine (as in C3M §3.2)" and c.paper == "CDRs (as in C3M §3.2)"
    assert m.reads == "Raw Nodes via entries" and c.reads == "Raw Nodes via graph nodes"
    assert m.summary.startswith("LLM-guided Delete/Merge/Preserve") and "conflict detection" in c.summary


# -- memrefine ---------------------------------------------------------------------------------------------
def test_memrefine_delete_drops_pointers_never_raw_nodes(store_path, models):
    with _mem(store_path, models, "memrefine") as mem:
        _add(mem, DELETE_HISTORY)
        deletes = [a for a in _log(mem) if a["action"] == "delete"]
        assert len(deletes) == 1 and deletes[0]["judge"] == "relation-head:feature-v1" and deletes[0]["sim"] > 0
        old, new = _node(mem, BIKE_RED), _node(mem, BIKE_BLUE)
        ids = [n.node_id for n in mem.nodes()]
        assert len(ids) == 5
        stored = mem.store.get_nodes(ids)
        assert set(stored) == set(ids) and not any(n.redacted for n in stored.values())  # the store is untouched
        assert old not in mem.method.pointers() and new in mem.method.pointers()
        assert mem.method.pointers() == set(ids) - {old}
        entries = mem.method.index.entries
        assert deletes[0]["entries"][0] not in entries and deletes[0]["kept"] in entries
        assert entries[deletes[0]["kept"]].states == ["blue"] and "bike" in entries[deletes[0]["kept"]].entities


def test_memrefine_same_content_pair_is_merged(store_path, models):
    with _mem(store_path, models, "memrefine") as mem:
        _add(mem, MERGE_HISTORY)
        merges = [a for a in _log(mem) if a["action"] == "merge"]
        assert len(merges) == 1 and not merges[0].get("forced")
        e = mem.method.index.entries[merges[0]["into"]]
        assert e.sources() == {"s1": {0}, "s5": {0}} and e.support == 2  # sources united
        assert len(mem.method.pointers()) == 5 and len(mem.method.index.entries) == 4


def test_memrefine_distinct_pair_is_preserved_and_the_mark_persists(store_path, models):
    with _mem(store_path, models, "memrefine") as mem:
        _add(mem, PRESERVE_HISTORY)
        actions = [a for a in _log(mem) if a["action"] in ("preserve", "merge", "delete")]
        assert [a["action"] for a in actions] == ["preserve", "merge"]
        bike = next(e.entry_id for e in mem.method.index.entries.values() if "bike" in e.entities)
        car = next(e.entry_id for e in mem.method.index.entries.values() if "car" in e.entities)
        assert actions[0]["entries"] == sorted([bike, car])
        state = mem.method.state()
        assert state["preserved"] == [sorted([bike, car])]
        assert actions[1]["entries"] == sorted(actions[1]["entries"]) and len(mem.method.pointers()) == 5
        fresh = memrefine_mod.MemRefine(mem.store, mem.namespace, models, write_budget=SMALL)
        fresh.load_state(json.loads(json.dumps(state)))
        assert fresh.state() == state and fresh.preserved() == {tuple(sorted([bike, car]))}
    with _mem(store_path, models, "memrefine") as again:  # the committed snapshot holds the mark
        assert again.method.state()["preserved"] == [sorted([bike, car])]


def test_memrefine_forced_merge_when_every_pair_is_preserved(store_path, models):
    with _mem(store_path, models, "memrefine") as mem:
        _add(mem, DISTINCT_HISTORY)
        log = [a for a in _log(mem) if a["action"] != "add"]
        assert [a["action"] for a in log] == ["preserve", "merge"] and log[0]["pairs"] == 10
        assert log[-1]["forced"] is True and log[-1]["judge"] == "forced"
        assert len(mem.method.index.entries) == 4 and len(mem.method.pointers()) == 5
        marks = mem.method.state()["preserved"]
        assert marks and all(set(p) <= set(mem.method.index.entries) for p in marks)
        assert not any(set(p) & set(log[-1]["entries"]) for p in marks)  # marks of the merged entries dropped


def test_memrefine_llm_judge_prompt_and_parser(store_path, models):
    assert parse_decision("DELETE") == "delete" and parse_decision(" merge.") == "merge"
    assert parse_decision("Preserve both memories") == "preserve" and parse_decision("keep them") == "preserve"
    assert parse_decision("The answer: Merge (they repeat)") == "merge"
    assert parse_decision("I cannot tell") == "preserve" and parse_decision("") == "preserve"
    assert parse_decision(None) == "preserve" and parse_decision("undeleted") == "preserve"
    calls = []

    def stub(messages):
        calls.append(messages)
        return "Delete." if "bike" in messages[-1]["content"] else "no idea"

    with _mem(store_path, models, "memrefine", judge="smollm2") as mem:
        assert mem.method.head is None and mem.method.write_options() == {"judge": "smollm2"}
        mem.method.llm = stub  # never a real model in the tests
        _add(mem, DELETE_HISTORY)
        deletes = [a for a in _log(mem) if a["action"] == "delete"]
        assert len(deletes) == 1 and deletes[0]["judge"] == "smollm2"
        assert _node(mem, BIKE_RED) not in mem.method.pointers()
    system, user = calls[0]
    assert system["role"] == "system" and "DELETE" in system["content"] and "PRESERVE" in system["content"]
    assert user["content"].index(BIKE_RED) < user["content"].index(BIKE_BLUE)  # older first, with dates
    assert "(2026-03-02)" in user["content"] and "(2026-03-06)" in user["content"]
    kettle, bike = mem.method.index.entries["e00002"], mem.method.index.entries["e00005"]
    msgs = judge_messages(kettle, bike)
    assert msgs[1]["content"].startswith("Older memory (2026-03-03): I bought a green kettle")


def test_memrefine_bad_options(store_path, models):
    with pytest.raises(InvalidInput, match="method_options.judge"):
        _mem(store_path, models, "memrefine", judge="oracle")
    with pytest.raises(InvalidInput, match="method_options.relation_head"):
        _mem(store_path, models, "memrefine", relation_head="nope")


# -- both: the shared budgets ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["memrefine", "cdrs"])
def test_write_and_reader_budgets_hold(tmp_path_factory, models, method):
    budget = WriteBudget(entries=4, pages=2, index_tokens=200, index_bytes=6000)
    count = models.token_counter.count
    with _mem(tmp_path_factory.mktemp("s"), models, method, budget=budget) as mem:
        things = ["bike", "kettle", "mug", "lamp", "bike", "mug", "piano", "kettle", "bike", "lamp"]
        colours = ["red", "green", "blue", "white", "blue", "black", "brown", "silver", "green", "pink"]
        for i, (thing, colour) in enumerate(zip(things, colours), start=1):
            mem.add_session(_session(i, f"My {thing} is {colour} now, number {i}.",
                                     f"Noted: your {thing} is {colour} " + "and more words " * (i % 4),
                                     f"Also the {thing} sits by the window {i}.", images=i % 2))
            use = measure_index(mem.method.state(), count)
            assert not use.over(budget), (i, use)
            assert use.pages <= budget.pages and use.entries <= budget.entries
        assert mem.method.describe()["entries"] <= 4
        if method == "cdrs":
            assert mem.method.pointers() == {n.node_id for n in mem.nodes()}  # complete provenance
        for rb in [ReaderBudget(), ReaderBudget(0, 0, 0, 0), ReaderBudget(1, 2, 1, 20), ReaderBudget(3, 12, 0, 40),
                   ReaderBudget(2, 3, 8, 10_000)]:
            for q in ("what colour is my bike?", "where is the lamp?"):
                ctx = mem.retrieve(q, rb, check=False)
                m = measure_context(ctx, rb, mem.store.get_nodes, mem.namespace, count)
                assert m.violation is None, (rb, m)
                assert set(ctx.trace.selected_nodes) <= set(ctx.trace.pool) <= set(ctx.trace.expanded_nodes)


@pytest.mark.parametrize("method", ["memrefine", "cdrs"])
def test_empty_memory(store_path, models, method):
    with _mem(store_path, models, method) as mem:
        ctx = mem.retrieve("anything?", ReaderBudget())
        assert ctx.items == () and ctx.trace.notes == ("empty memory",) and mem.method.pointers() == set()


# -- cdrs ------------------------------------------------------------------------------------------------------
def test_cdrs_newer_state_ranked_first_older_kept(store_path, models):
    q = "what colour is my bike?"
    with _mem(store_path, models, "cdrs") as mem:
        _add(mem, DELETE_HISTORY)
        merges = [a for a in _log(mem) if a["action"] == "merge"]
        assert len(merges) == 1 and merges[0]["edge"] > 0  # the only edge: the two bike nodes
        old, new = _node(mem, BIKE_RED), _node(mem, BIKE_BLUE)
        assert {old, new} <= mem.method.pointers() and len(mem.method.pointers()) == 5
        ctx = mem.retrieve(q, ReaderBudget())
        ranked = [nid for nid, _ in ctx.trace.candidates]
        assert ranked.index(new) < ranked.index(old)
        assert ranked[-1] == old  # demoted below every non-conflicting candidate
        assert {old, new} <= {i.node_id for i in ctx.items}  # both shown when the budget has room
        assert any(n.startswith("conflicts (older demoted)") for n in ctx.trace.notes)
        one = mem.retrieve(q, ReaderBudget(raw_nodes=1))
        assert [i.node_id for i in one.items] == [new]
        nodes = {n.node_id: n for n in mem.nodes()}
    assert cdrs_mod.conflicts([nodes[new], nodes[old]], q) == [(old, new, "bike")]
    assert cdrs_mod.conflicts([nodes[new], nodes[old]], "where is the kettle?") == [(old, new, "bike")]
    assert cdrs_mod.conflicts([nodes[new]], q) == []


def test_cdrs_one_hop_expansion_reaches_the_neighbour(store_path, models):
    with _mem(store_path, models, "cdrs", budget=WriteBudget(), entries_k=1) as mem:
        _add(mem, DELETE_HISTORY)
        old, new = _node(mem, BIKE_RED), _node(mem, BIKE_BLUE)
        state = mem.method.state()
        assert len(state["entries"]) == 5 and len(state["edges"]) == 1  # two bike graph nodes, one edge
        ctx = mem.retrieve("what colour is my bike?", ReaderBudget())
        assert len(ctx.trace.entries) == 1  # one entry routed; its graph neighbour is expanded too
        assert {old, new} <= set(ctx.trace.pool) and {old, new} <= {i.node_id for i in ctx.items}
        assert any(n.startswith("graph expansion: 1 neighbour") for n in ctx.trace.notes)
        assert [nid for nid, _ in ctx.trace.candidates].index(new) < [nid for nid, _ in ctx.trace.candidates].index(old)


def test_cdrs_edges_are_in_the_snapshot_and_counted(store_path, models):
    count = models.token_counter.count
    texts = (BIKE_RED, BIKE_BLUE, "My bike has a flat tyre.", "I bought a green kettle for the kitchen.")
    with _mem(store_path, models, "cdrs", budget=WriteBudget(), k_edge=1, join_sim=0.99) as mem:
        _add(mem, texts)
        state = mem.method.state()
        edges = state["edges"]
        assert edges and all(len(e) == 3 and e[2] > 0 for e in edges)
        degree: dict[str, int] = {}
        for a, b, _ in edges:
            degree[a], degree[b] = degree.get(a, 0) + 1, degree.get(b, 0) + 1
        assert max(degree.values()) == 1  # k_edge per node
        without = {k: v for k, v in state.items() if k != "edges"}
        assert measure_index(state, count).index_bytes > measure_index(without, count).index_bytes
    with _mem(store_path, models, "cdrs", budget=WriteBudget()) as wide:  # default k_edge = 4: the bike triangle
        _add(wide, texts)
        assert len(wide.method.state()["edges"]) == 3


def test_cdrs_join_and_state_round_trip(store_path, models):
    q = "what colour is my bike?"
    with _mem(store_path, models, "cdrs", join_sim=0.3) as mem:
        _add(mem, DELETE_HISTORY)
        joins = [a for a in _log(mem) if a["action"] == "join"]
        assert len(joins) == 1 and joins[0]["key"] == "bike" and joins[0]["sim"] >= 0.3
        bike = mem.method.index.entries[joins[0]["into"]]
        assert bike.sources() == {"s1": {0}, "s5": {0}} and bike.states[0] == "blue"  # newest state first
        before = mem.retrieve(q, ReaderBudget(raw_nodes=3))
        state = mem.method.state()
    with _mem(store_path, models, "cdrs", join_sim=0.3) as again:
        assert again.method.state() == state
        after = again.retrieve(q, ReaderBudget(raw_nodes=3))
        assert after.items == before.items and after.trace == before.trace
        fresh = cdrs_mod.CDRs(again.store, again.namespace, models, write_budget=SMALL, options={"join_sim": 0.3})
        fresh.load_state(json.loads(json.dumps(state)))
        assert fresh.state() == state and fresh.edges() == state["edges"]
        assert fresh.retrieve(q, ReaderBudget(raw_nodes=3)).items == before.items
