"""Time-aware answering: update chains, current/superseded marks, and answerers that use them."""
from __future__ import annotations

from datetime import datetime

import pytest

from c3m import Memory, Session, Turn
from c3m.models import ExtractiveAnswerer
from c3m.language.question import temporal_intent
from c3m.language.timeline import annotate, index_chain
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, Provenance, ReaderBudget, RouteTrace,
                       chain_lines, item_header)
from c3m.write.units import describer

DESCRIBE = describer("heuristic").describe
T1, T2, T3 = datetime(2026, 3, 1, 10), datetime(2026, 3, 8, 10), datetime(2026, 4, 2, 10)


def item(session: str, turn: int, time: datetime, text: str, score: float = 1.0, role: str = "user") -> ContextItem:
    return ContextItem(f"n-{session}-{turn}", Provenance("me", session, turn, time), role, EvidenceForm.RAW_TEXT, text,
                       (), score, len(text.split()))


def context(question: str, *items: ContextItem) -> Context:
    return Context(question, tuple(items), BudgetUse(), ReaderBudget(), RouteTrace("test"))


RED = item("s1", 0, T1, "I painted my bike red this weekend.", score=1.6)
BREAD = item("s2", 0, T2, "I started baking sourdough bread on Sundays.", score=1.0)
BLUE = item("s3", 0, T3, "The red paint was peeling, so I repainted my bike blue.", score=1.5)


@pytest.mark.parametrize("question,intent", [
    ("What colour is my bike now?", "now"), ("What colour is my bike currently?", "now"),
    ("What colour was my bike before?", "past"), ("What colour was the mug originally?", "past"),
    ("When did I repaint my bike?", "when"), ("What colour is my bike?", ""),
    ("Which bike did I use first?", "past")])
def test_temporal_intent(question, intent):
    assert temporal_intent(question) == intent


def test_read_time_chain_orders_states_and_marks_items():
    ctx = annotate(context("What colour is my bike now?", RED, BREAD, BLUE), describe=DESCRIBE)
    (chain,) = ctx.chains
    assert chain.subject == "bike" and chain.source == "read"
    assert [s.states for s in chain.steps] == [("red",), ("blue",)]  # "red" in the new turn is not new
    assert [s.turns for s in chain.steps] == [("s1#0",), ("s3#0",)]
    status = {i.provenance.session_id: (i.status, i.superseded_at) for i in ctx.items}
    assert status == {"s1": ("superseded", T3), "s2": ("", None), "s3": ("current", None)}
    assert "(superseded on 2026-04-02)" in item_header(ctx.items[0]) and "(current)" in item_header(ctx.items[2])
    assert chain_lines(ctx.chains)[1] == "- bike: red (s1#0, 2026-03-01) -> blue (s3#0, 2026-04-02, current)"
    assert "Updates (oldest first):" in ctx.text()


def test_no_chain_without_a_change_or_a_subject():
    same = item("s3", 0, T3, "My bike is still red.")
    assert annotate(context("What colour is my bike?", RED, same), describe=DESCRIBE).chains == ()
    assert annotate(context("What did I bake?", RED, BLUE), describe=DESCRIBE).chains == ()  # bike not asked
    assert annotate(context("What colour is my bike?"), describe=DESCRIBE).items == ()


def test_index_chain_names_only_shown_turns():
    versions = [(T1, {"s1": {0, 1}}, ["red"]), (T3, {"s3": {0, 1}}, ["blue", "red"])]
    chain = index_chain("bike", "e1", versions, [BLUE])  # the old turn was not selected
    assert chain.source == "index" and chain.entry_id == "e1"
    assert chain.steps[0].node_ids == () and chain.steps[0].states == ()  # its time only: no unpaid content
    assert chain.steps[1].states == ("blue",)
    assert "not in context" in chain_lines([chain])[1]
    assert index_chain("bike", "e1", versions, [BREAD]) is None


def test_index_chains_are_held_to_the_question_chain_definition():
    """RAMU's chain lends its source to the question's own chain over the same turns; a question that asks no
    attribute of the bike, or a chain about another subject, shows no chain at all."""
    versions = [(T1, {"s1": {0}}, ["red"]), (T3, {"s3": {0}}, ["blue", "red"])]
    bike = index_chain("bike", "e1", versions, [RED, BLUE])
    ctx = annotate(context("What colour is my bike now?", RED, BLUE), index_chains=[bike])
    assert [i.status for i in ctx.items] == ["superseded", "current"]
    assert [(c.source, c.entry_id) for c in ctx.chains] == [("index", "e1")]
    assert annotate(context("q", RED, BLUE), index_chains=[bike]).chains == ()
    assert annotate(context("What did I bake?", RED, BREAD, BLUE), index_chains=[bike]).chains == ()
    # RAMU merged the bread turn into the bike's entry: the definition keeps only what it can read about the bike
    mixed = index_chain("bike", "e1", [(T1, {"s1": {0}}, ["red"]), (T2, {"s2": {0}}, ["red"])], [RED, BREAD])
    ctx = annotate(context("What colour is my bike now?", RED, BREAD, BLUE), index_chains=[mixed])
    assert [s.turns for s in ctx.chains[0].steps] == [("s1#0",), ("s3#0",)]
    assert ctx.items[1].status == ""


@pytest.mark.parametrize("question,span,lead,cited", [
    ("What colour is my bike now?", "blue", "blue (since 2026-04-02): ", "s3"),
    ("What colour is my bike?", "blue", "blue (since 2026-04-02): ", "s3"),
    ("What colour was my bike before?", "red", "red (until 2026-04-02): ", "s1"),
    ("What colour was my bike originally?", "red", "red (until 2026-04-02): ", "s1"),
    ("When did I repaint my bike?", "2 April 2026", "2 April 2026 (blue): ", "s3")])
def test_extractive_answers_from_the_state_asked_about(question, span, lead, cited):
    ctx = annotate(context(question, RED, BREAD, BLUE), describe=DESCRIBE)
    answer = ExtractiveAnswerer().answer(question, ctx)
    assert answer.text.startswith(lead) and answer.span == span and not answer.declined
    assert answer.cited == (f"n-{cited}-0",)
    assert 0.5 <= answer.confidence <= 1.0


def test_extractive_reads_the_same_chain_without_marks():
    """The answerer follows the chain definition itself: an unannotated context (RED scores higher) still
    answers *now* with the latest state, never the best-overlapping old sentence."""
    answer = ExtractiveAnswerer().answer("What colour is my bike now?", context("q", RED, BREAD, BLUE))
    assert answer.span == "blue" and answer.cited == ("n-s3-0",)


def bike_sessions() -> list[Session]:
    return [Session("s1", T1, (Turn("user", RED.text), Turn("assistant", "Red is a bold choice!"))),
            Session("s2", T2, (Turn("user", BREAD.text), Turn("assistant", "Sourdough takes patience."))),
            Session("s3", T3, (Turn("user", BLUE.text), Turn("assistant", "Blue should look great."))),
            Session("s4", datetime(2026, 4, 20, 10), (Turn("user", "My sister visited and we went hiking by the lake."),
                                                       Turn("assistant", "Sounds lovely.")))]


@pytest.mark.parametrize("method", ["c3m", "dense-topk", "bm25"])
def test_memory_ask_uses_the_latest_state(method, models, store_path):
    from c3m.config import MemoryConfig

    cfg = MemoryConfig(method=method, method_options={"anchors": "heuristic"} if method == "c3m" else {})
    with Memory(store_path, "me", config=cfg, models=models) as mem:
        for s in bike_sessions():
            mem.add_session(s)
        now = mem.ask("What colour is my bike now?")
        before = mem.ask("What colour was my bike before?")
    assert now.text.startswith("blue") and "repainted my bike blue" in now.text
    assert before.text.startswith("red") and "painted my bike red" in before.text
    assert any(i.status == "superseded" for i in now.context.items) and now.context.chains
    assert now.context.use.raw_nodes <= now.context.budget.raw_nodes  # marks charge and select nothing


def test_c3m_chain_comes_from_the_index_when_ramu_recorded_the_update(models, store_path):
    """RAMU's Update keeps the old state as a version; the chain is then the index's, not re-inferred."""
    from c3m.config import MemoryConfig

    cfg = MemoryConfig(method="c3m", method_options={"anchors": "heuristic"})
    with Memory(store_path, "me", config=cfg, models=models) as mem:
        for s in bike_sessions():
            mem.add_session(s)
        updated = [e for e in mem.method.index.entries.values() if e.versions]
        ctx = mem.method.annotate(mem.retrieve("What colour is my bike now?"))
    chains = {c.source for c in ctx.chains}
    assert chains == ({"index"} if updated else {"read"})
    assert any("repainted my bike blue" in i.text and i.status == "current" for i in ctx.items)


def test_api_prompt_carries_marks_and_chains():
    from c3m.models.api import ANSWER_SYSTEM, ApiAnswerer

    class Client:  # messages() needs no endpoint
        model = "stub"

    ctx = annotate(context("What colour is my bike now?", RED, BREAD, BLUE), describe=DESCRIBE)
    system, user = ApiAnswerer(Client()).messages(ctx.question, ctx)
    texts = [p["text"] for p in user["content"] if p.get("type") == "text"] if isinstance(user["content"], list) \
        else user["content"].splitlines()
    assert "(current)" in ANSWER_SYSTEM and "(superseded)" in ANSWER_SYSTEM
    assert any(t.startswith("[s1#0 2026-03-01 10:00 user] (superseded on 2026-04-02)") for t in texts)
    assert "- bike: red (s1#0, 2026-03-01) -> blue (s3#0, 2026-04-02, current)" in texts
    assert texts[-1] == "Question: What colour is my bike now?"


def test_extractive_never_quotes_a_crop_marker():
    crop = ContextItem("n-s3-0", Provenance("me", "s3", 0, T3), "user", EvidenceForm.GROUNDED_CROP, "[crop: jar]", (),
                       2.0, 3)
    cap = ContextItem("n-s3-0", Provenance("me", "s3", 0, T3), "user", EvidenceForm.CAPTION,
                      "[image: A green jar; a shelf. The jar is left of the shelf.]", (), 0.5, 12)
    answer = ExtractiveAnswerer().answer("Where is my jar?", context("q", crop, cap))
    assert answer.span == "left of the shelf" and "[crop" not in answer.text
    assert answer.text == "left of the shelf (since 2026-04-02): the photo of s3#0 shows: The jar is left of the shelf."
    alone = ExtractiveAnswerer().answer("Where is my jar?", context("q", crop))
    assert alone.declined and alone.text.startswith("Not in memory")
