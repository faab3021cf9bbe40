"""The offline answerer on dialogs in the style of real multi-session chats (#42): a person talks to an assistant
about their days, shares photos (their descriptions are in the turn's words), and later asks whether something was
mentioned, which photo showed a thing, or on which day something happened.

Hand-written for this test (no dataset text): two sessions of a person learning to bake, with photos.
"""
from __future__ import annotations

from datetime import datetime

import pytest

from c3m.language.question import detail_question, speaker_names
from c3m.language.timeline import annotate
from c3m.models import ExtractiveAnswerer
from c3m.types import BudgetUse, Context, ContextItem, EvidenceForm, Provenance, ReaderBudget, RouteTrace

DAY1 = datetime(2025, 3, 2, 12, 0)
DAY2 = datetime(2025, 3, 9, 12, 0)

#: (session, time, turn, role, text)
TURNS = [
    ("D1", DAY1, 0, "user", "I want to start baking bread at home. Where should a beginner start?"),
    ("D1", DAY1, 1, "assistant", "A simple no-knead loaf is a forgiving first project: flour, water, salt, yeast."),
    ("D1", DAY1, 2, "user", "This is my first loaf, a bit flat. [shared a photo: A round, pale loaf of bread with a "
                            "cracked crust cooling on a wire rack next to a bag of flour.]"),
    ("D1", DAY1, 3, "assistant", "A flat loaf usually means the dough over-proofed; try a shorter second rise."),
    ("D1", DAY1, 4, "user", "I also bought a cast iron pot for it. [shared a photo: A black cast iron dutch oven "
                            "with its lid off, sitting on a wooden kitchen counter.]"),
    ("D1", DAY1, 5, "assistant", "Great choice: baking inside a preheated dutch oven traps steam for a crisp crust."),
    ("D2", DAY2, 0, "user", "Today I tried cinnamon rolls with my daughter. [shared a photo: A tray of golden "
                            "cinnamon rolls topped with white icing, a child's hand reaching for one.]"),
    ("D2", DAY2, 1, "assistant", "They look wonderful! Cinnamon rolls are a lovely thing to bake with children."),
    ("D2", DAY2, 2, "user", "We used brown sugar and butter for the filling."),
    ("D2", DAY2, 3, "assistant", "Brown sugar gives the filling a deep caramel taste."),
]


def context(question: str, drop: tuple[tuple[str, int], ...] = ()) -> Context:
    items = []
    for session, time, turn, role, text in TURNS:
        if (session, turn) in drop:
            continue
        items.append(ContextItem(f"n-{session}-{turn}", Provenance("maya", session, turn, time), role,
                                 EvidenceForm.RAW_TEXT, text, (), 1.0, len(text.split())))
    return Context(question, tuple(items), BudgetUse(), ReaderBudget(), RouteTrace("real-style"))


def ask(question: str, drop: tuple[tuple[str, int], ...] = ()):
    return ExtractiveAnswerer().answer(question, annotate(context(question, drop)))


# -- a detail never stated: "Not in memory" --------------------------------------------------------------------
@pytest.mark.parametrize("question", [
    "Did Maya mention using sesame seeds in her bread?",              # a word no turn says
    "Was honey used in the cinnamon roll filling?",
    "Based on the conversation, did Maya buy a stand mixer?",
    "Which exact brand of flour did Maya use?",                       # an exact detail, never named
])
def test_a_detail_never_stated_is_not_in_memory(question):
    ans = ask(question)
    assert ans.refused and ans.declined, ans.text
    assert ans.text.startswith("Not in memory")


def test_words_stated_apart_are_not_a_detail_stated():
    """Every word is somewhere in the chat, but no turn states them together: the detail was not mentioned."""
    ans = ask("Did Maya bake the cinnamon rolls inside the cast iron pot?")
    assert ans.refused, ans.text


@pytest.mark.parametrize("question", [
    "Did Maya use brown sugar for the filling?",                      # stated: never refused
    "Did Maya bake cinnamon rolls with her daughter?",
    "Did Maya buy a cast iron pot before baking cinnamon rolls?",     # an order question: absence does not decide it
    "Does the claim that Maya baked alone contradict the conversation?",  # a claim to check, not a detail
])
def test_a_stated_detail_or_another_kind_of_question_is_never_refused(question):
    ans = ask(question)
    assert not ans.refused, ans.text


def test_detail_question_shapes():
    assert detail_question("Did Julian mention attending an art school in Japan?")[0] == "yesno"
    assert detail_question("Based on the conversation, would the user hire a plumber?") == \
        ("yesno", "would the user hire a plumber?")
    assert detail_question("Which exact brand of sofa did Lin buy?")[0] == "detail"
    for q in ("Did Lin finish the essay before moving on to the slides?", "Is the claim contradictory?",
              "Which image shows a paint brush?", "Did Lin switch majors or stay in her current one?",
              "Is my toolbox still mine?", "Why should the user choose lock-specific lubricants?"):
        assert detail_question(q) is None, q
    assert speaker_names("Has Lin Wei decided on a sofa?") == {"lin", "wei"}
