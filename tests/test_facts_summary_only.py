"""The issue-#14 reference baselines: ``summary-only`` (one summary per session) and ``facts`` (a mem0-style
fact store with ADD / UPDATE / DELETE / NOOP decided by the relation head)."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from factories import png_bytes

import c3m.methods.facts  # registers "facts"
import c3m.methods.summary_only  # registers "summary-only"
from c3m.budget import measure_context, measure_index
from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.memory import Memory
from c3m.methods.base import available_methods
from c3m.methods.facts import negates
from c3m.types import EvidenceForm, ReaderBudget, Session, Turn, node_id_for

BASE = datetime(2026, 3, 1, 9, 0)
#: the hashing test embedder is lexical: a paraphrase ("painted ... red" / "repainted ... blue") scores ~0.25
#: where a sentence embedder scores higher, so the fact tests lower mem0's similarity gate to match it
HASHING_MIN_SIM = 0.15


def _session(i: int, *texts: str, image_turn: int | None = None, user: bool = True) -> Session:
    turns = [Turn("user" if j % 2 == 0 and user else "assistant", t,
                  (png_bytes((30 * i % 255, 60, 90)),) if j == image_turn else ())
             for j, t in enumerate(texts)]
    return Session(f"s{i}", BASE + timedelta(days=i), tuple(turns))


def _mem(path, models, method, **options) -> Memory:
    return Memory(path, "u", models=models, config=MemoryConfig(method=method, method_options=options))


def _measure(mem: Memory, ctx, budget):
    return measure_context(ctx, budget, mem.store.get_nodes, mem.namespace, mem.models.token_counter.count)


def _key(ctx):
    return [(i.node_id, i.form, i.text, round(i.score, 6)) for i in ctx.items], ctx.trace.entries, ctx.trace.pool


def test_registered():
    assert {"facts", "summary-only"} <= set(available_methods())
    assert c3m.methods.facts.Facts.paper == "Mem0 (Chhikara et al., 2025)"
    assert c3m.methods.summary_only.SummaryOnly.reads == "session summaries"


# -- summary-only ---------------------------------------------------------------------------------------------
def _summary_history(mem: Memory) -> None:
    mem.add_session(_session(1, "My mug is on the kitchen shelf. It is a red ceramic mug from Lisbon.",
                             "Nice, a red mug.", "I also bought a plant for the window.", "Lovely."))
    mem.add_session(_session(2, "I started learning the cello with a teacher called Marta.", "How exciting!"))
    mem.add_session(_session(3, "We booked a trip to Kyoto for April, flights are done.", "Have fun!",
                             image_turn=0))
    mem.add_session(_session(4, "Okay.", "The parcel arrives on Friday.", user=False))  # no user turn


def test_summary_only_one_summary_item_per_session(store_path, models):
    budget = ReaderBudget()
    with _mem(store_path, models, "summary-only") as mem:
        _summary_history(mem)
        assert not mem.method.bounded and mem.method.complete_provenance
        assert mem.method.pointers() == {n.node_id for n in mem.nodes()}  # every turn of every session
        nodes = {n.node_id: n for n in mem.nodes()}
        ctx = mem.retrieve("where is my red mug?", budget)
        assert 0 < len(ctx.items) <= 4
        sessions = [i.provenance.session_id for i in ctx.items]
        assert len(sessions) == len(set(sessions))
        for item in ctx.items:
            assert item.form is EvidenceForm.SUMMARY and item.images == ()
            assert nodes[item.node_id].session_id == item.provenance.session_id
            assert item.text_tokens == models.token_counter.count(item.text)
        assert [i.provenance.time for i in ctx.items] == sorted(i.provenance.time for i in ctx.items)
        best = max(ctx.items, key=lambda i: i.score)
        assert best.provenance.session_id == "s1" and "red ceramic mug" in best.text
        assert ctx.trace.scored == 4 and set(ctx.trace.pool) == {i.node_id for i in ctx.items}
        assert ctx.trace.entries[0][0].startswith("sum:")
        measured = _measure(mem, ctx, budget)
        assert measured.violation is None and measured.use.raw_nodes == 0
        assert measured.use == ctx.use
        state = mem.method.state()
        by_session = {e["session"]: e["routing_text"] for e in state["entries"]}
        assert by_session["s4"] == "Okay.\nThe parcel arrives on Friday."  # no user turn: all turns
        assert "plant" in by_session["s1"] and "Nice" not in by_session["s1"]  # user turns only
        use = measure_index(state, models.token_counter.count)
        assert use.entries == 4 and use.index_tokens == sum(models.token_counter.count(t) for t in by_session.values())


def test_summary_only_tight_budget_and_summary_length(store_path, models):
    with _mem(store_path, models, "summary-only", summary_tokens=8) as mem:
        _summary_history(mem)
        assert all(models.token_counter.count(e["routing_text"]) <= 8 for e in mem.method.state()["entries"])
        count = models.token_counter.count
        for tokens in (0, 5, 9, 20):
            budget = ReaderBudget(raw_nodes=0, images=0, text_tokens=tokens)
            ctx = mem.retrieve("what about the cello teacher?", budget)
            assert ctx.use.text_tokens == sum(count(i.text) for i in ctx.items) <= tokens
            assert _measure(mem, ctx, budget).violation is None
        assert mem.retrieve("cello?", ReaderBudget(text_tokens=0)).items == ()
    with pytest.raises(InvalidInput, match="method_options.summary_tokens"):
        _mem(store_path, models, "summary-only", summary_tokens=4)


def test_summary_only_state_round_trip(store_path, models):
    q = "when is the Kyoto trip?"
    with _mem(store_path, models, "summary-only") as mem:
        _summary_history(mem)
        before = mem.retrieve(q, ReaderBudget(text_tokens=60))
        state = mem.method.state()
        fresh = type(mem.method)(mem.store, mem.namespace, models)
        fresh.load_state(state)
        assert fresh.state() == state
        assert _key(fresh.retrieve(q, ReaderBudget(text_tokens=60))) == _key(before)
    with _mem(store_path, models, "summary-only") as again:  # loads the committed snapshot
        assert again.method.state() == state
        assert _key(again.retrieve(q, ReaderBudget(text_tokens=60))) == _key(before)


def test_summary_only_forgotten_session_is_not_shown(store_path, models):
    with _mem(store_path, models, "summary-only") as mem:
        _summary_history(mem)
        mem.forget(session_id="s2", reason="test")
        ctx = mem.retrieve("cello teacher Marta", ReaderBudget())
        assert "s2" not in {i.provenance.session_id for i in ctx.items}
        assert all("Marta" not in i.text for i in ctx.items)
        assert _measure(mem, ctx, ReaderBudget()).violation is None


# -- facts ----------------------------------------------------------------------------------------------------
BIKE_RED = "I painted my bike red last weekend."
BIKE_BLUE = "I repainted my bike blue because the red paint was peeling."
SISTER = "My sister Anna moved to Lisbon in May."
SOLD = "I no longer have the bike, I sold it."


def _acts(result) -> list[str]:
    return [a["action"] for a in result.actions]


def _live(mem: Memory):
    return list(mem.method.facts.values())


def test_facts_mem0_operations(store_path, models):
    """ADD, UPDATE (text replaced, both sources kept), NOOP (a repeat), ADD (unrelated), DELETE (negation)."""
    with _mem(store_path, models, "facts", min_sim=HASHING_MIN_SIM) as mem:
        assert not mem.method.bounded and not mem.method.complete_provenance
        r1 = mem.add_session(_session(1, BIKE_RED, "Sounds fun."))
        assert _acts(r1) == ["add"]
        bike = r1.actions[0]["fact"]

        r2 = mem.add_session(_session(2, BIKE_BLUE, "Blue suits it."))
        assert _acts(r2) == ["update"] and r2.actions[0]["fact"] == bike and r2.actions[0]["relation"] == "update"
        facts = _live(mem)
        assert len(facts) == 1
        fact = facts[0]
        assert fact.text == BIKE_BLUE and fact.sources == [("s1", 0), ("s2", 0)]
        assert [h["text"] for h in fact.history] == [BIKE_RED]
        assert mem.method.pointers() == {node_id_for("u", "s1", 0), node_id_for("u", "s2", 0)}

        r3 = mem.add_session(_session(3, BIKE_BLUE, "You said."))  # the same statement again
        assert _acts(r3) == ["noop"] and r3.actions[0]["relation"] == "same"
        assert len(_live(mem)) == 1 and _live(mem)[0].text == BIKE_BLUE
        assert _live(mem)[0].sources == [("s1", 0), ("s2", 0), ("s3", 0)]

        r4 = mem.add_session(_session(4, SISTER, "Lisbon is lovely."))
        assert _acts(r4) == ["add"] and len(_live(mem)) == 2

        ctx = mem.retrieve("what colour is my bike?", ReaderBudget())
        shown = {i.text: i for i in ctx.items}
        assert BIKE_BLUE in shown and BIKE_RED not in shown  # only the current text, mem0's behaviour
        assert shown[BIKE_BLUE].provenance.session_id == "s3"  # cites the most recent source

        r5 = mem.add_session(_session(5, SOLD, "Oh, okay."))
        assert _acts(r5) == ["delete", "add"]
        assert r5.actions[0]["fact"] == bike and r5.actions[0]["text"] == BIKE_BLUE
        assert r5.actions[1]["replaces"] == bike
        texts = sorted(f.text for f in _live(mem))
        assert texts == sorted([SISTER, SOLD])
        # DELETE never touches the Cold Store: every Raw Node is still there, unredacted and unchanged
        ids = [node_id_for("u", f"s{i}", t) for i in range(1, 6) for t in (0, 1)]
        stored = mem.store.get_nodes(ids)
        assert set(stored) == set(ids) and not any(n.redacted for n in stored.values())
        assert stored[node_id_for("u", "s1", 0)].text == BIKE_RED
        assert node_id_for("u", "s2", 0) not in mem.method.pointers()  # the deleted fact's sources are gone
        ctx = mem.retrieve("what colour is my bike?", ReaderBudget())
        assert BIKE_BLUE not in {i.text for i in ctx.items} and SOLD in {i.text for i in ctx.items}


def test_facts_default_similarity_gate_with_the_hashing_embedder(store_path, models):
    """With mem0's default gate (0.5) the lexical hashing embedder sees the paraphrased repaint as new (ADD);
    an exact repeat (cosine 1) is still a NOOP."""
    with _mem(store_path, models, "facts") as mem:
        mem.add_session(_session(1, BIKE_RED, "Sounds fun."))
        assert _acts(mem.add_session(_session(2, BIKE_BLUE, "Okay."))) == ["add"]
        assert _acts(mem.add_session(_session(3, BIKE_RED, "Okay."))) == ["noop"]


def test_facts_extraction_and_contexts(store_path, models):
    budget = ReaderBudget()
    with _mem(store_path, models, "facts", min_sim=HASHING_MIN_SIM) as mem:
        r = mem.add_session(_session(1, "Hi! My kayak is stored in the garage. Ok. Thanks a lot!",
                                     "The assistant's turn about the kayak is never a fact.",
                                     "", "Fine.", image_turn=2))
        assert [a["text"] for a in r.actions] == ["My kayak is stored in the garage."]  # >= 4 words, content
        mem.add_session(_session(2, BIKE_RED, "Okay."))
        mem.add_session(_session(3, "Okay.", "Only the assistant spoke of the green tent in the attic.", user=False))
        assert any("green tent" in f.text for f in _live(mem))  # no user words: all turns
        ctx = mem.retrieve("where is my kayak?", budget)
        assert ctx.items and all(i.form is EvidenceForm.SUMMARY and i.images == () for i in ctx.items)
        assert ctx.items[[i.text for i in ctx.items].index("My kayak is stored in the garage.")].node_id == \
            node_id_for("u", "s1", 0)
        assert [i.provenance.time for i in ctx.items] == sorted(i.provenance.time for i in ctx.items)
        measured = _measure(mem, ctx, budget)
        assert measured.violation is None and measured.use == ctx.use and measured.use.images == 0
        assert ctx.trace.scored == 3 and set(ctx.trace.pool) == {i.node_id for i in ctx.items}
        tight = ReaderBudget(text_tokens=10)
        ctx = mem.retrieve("where is my kayak?", tight)
        assert ctx.use.text_tokens <= 10 and _measure(mem, ctx, tight).violation is None
    with _mem(store_path, models, "facts", min_sim=HASHING_MIN_SIM, top_k=1) as one:
        assert len(one.retrieve("where is my kayak?", budget).items) == 1


def test_facts_cap_per_session(store_path, models):
    text = " ".join(f"My number {i} plant sits on shelf {i}." for i in range(10))
    with _mem(store_path, models, "facts", max_facts_per_session=3) as mem:
        r = mem.add_session(_session(1, text, "Okay."))
        assert len(r.actions) == 3 and len(_live(mem)) <= 3


def test_facts_state_round_trip(store_path, models):
    q = "what happened to my bike?"
    with _mem(store_path, models, "facts", min_sim=HASHING_MIN_SIM) as mem:
        for i, t in enumerate((BIKE_RED, BIKE_BLUE, SISTER, "My kayak is stored in the garage."), 1):
            mem.add_session(_session(i, t, "Okay."))
        before = mem.retrieve(q, ReaderBudget())
        state = mem.method.state()
        assert state["n_docs"] == 4 and state["next_id"] == 4 and len(state["entries"]) == 3
        entry = next(e for e in state["entries"] if e["routing_text"] == BIKE_BLUE)
        assert entry["sources"] == [["s1", 0], ["s2", 0]] and entry["history"][0]["text"] == BIKE_RED
        assert measure_index(state, models.token_counter.count).entries == 3
        fresh = type(mem.method)(mem.store, mem.namespace, models, options={"min_sim": HASHING_MIN_SIM})
        fresh.load_state(state)
        assert fresh.state() == state and fresh.pointers() == mem.method.pointers()
        assert _key(fresh.retrieve(q, ReaderBudget())) == _key(before)
        # the reloaded store decides the next session exactly as the original does
        nxt = _session(5, SOLD, "Okay.")
        mem.add_session(nxt)
        fresh.observe("s5", mem.store.nodes_for_session("u", "s5"))
        assert fresh.state()["entries"] == mem.method.state()["entries"]
        after = _key(fresh.retrieve(q, ReaderBudget()))
        assert after == _key(mem.retrieve(q, ReaderBudget()))
        entries = fresh.state()["entries"]
    with _mem(store_path, models, "facts", min_sim=HASHING_MIN_SIM) as again:  # the committed snapshot
        assert again.method.state()["entries"] == entries
        assert _key(again.retrieve(q, ReaderBudget())) == after


def test_facts_forgotten_sources(store_path, models):
    with _mem(store_path, models, "facts", min_sim=HASHING_MIN_SIM) as mem:
        mem.add_session(_session(1, BIKE_RED, "Okay."))
        mem.add_session(_session(2, BIKE_BLUE, "Okay."))
        mem.add_session(_session(3, SISTER, "Okay."))
        mem.forget(node_ids=[node_id_for("u", "s3", 0)], reason="test")
        ctx = mem.retrieve("where does Anna live?", ReaderBudget())
        assert SISTER not in {i.text for i in ctx.items}
        assert _measure(mem, ctx, ReaderBudget()).violation is None


def test_facts_negation_rule_and_options(store_path, models):
    assert negates(SOLD) and negates("We gave away the old sofa.") and negates("I don't have a car anymore.")
    assert negates("I threw away the broken lamp.") and negates("Finally got rid of the printer.")
    assert not negates(BIKE_BLUE) and not negates(SISTER)
    with pytest.raises(InvalidInput, match="method_options.relation_head"):
        _mem(store_path, models, "facts", relation_head="nope")
    with pytest.raises(InvalidInput, match="method_options.candidates"):
        _mem(store_path, models, "facts", candidates=0)
    with pytest.raises(InvalidInput, match="method_options.anchors"):
        _mem(store_path, models, "facts", anchors="nope")
    with _mem(store_path, models, "facts") as mem:
        ctx = mem.retrieve("anything?", ReaderBudget())
        assert ctx.items == () and ctx.trace.notes == ("empty memory",) and mem.method.pointers() == set()


def test_image_captions_become_facts_and_summary_text(store_path, models):
    """An image turn with perception records contributes its captions ("[image] <caption>" as a fact, and to the
    session summary); without records the image is lost."""
    from c3m.methods.summary_only import session_text
    from c3m.types import ImagePerception

    with _mem(store_path, models, "facts") as mem:
        mem.add_session(_session(1, "", "Nice photo.", image_turn=0))
        node = mem.store.get_nodes([node_id_for("u", "s1", 0)])[node_id_for("u", "s1", 0)]
        assert mem.method.extract([node]) == []  # no perception: the image is lost
        rec = ImagePerception(node.node_id, node.images[0], "test", "1", "a red bike leaning on a wall")
        mem.method.remember_perception({node.node_id: [rec]})
        assert [x.text for x in mem.method.extract([node])] == ["[image] a red bike leaning on a wall"]
        assert session_text([node], {node.node_id: [rec]}) == "[image: a red bike leaning on a wall]"
