"""The offline answerer on dialogs in the style of real multi-session chats (#42): a person talks to an assistant
about their days, shares photos (their descriptions are in the turn's words), and later asks whether something was
mentioned, which photo showed a thing, or on which day something happened.

Hand-written for this test (no dataset text): two sessions of a person learning to bake, with photos.
"""
from __future__ import annotations

from datetime import datetime

import pytest

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
    from c3m.language.question import detail_question, speaker_names

    assert detail_question("Did Julian mention attending an art school in Japan?")[0] == "yesno"
    assert detail_question("Based on the conversation, would the user hire a plumber?") == \
        ("yesno", "would the user hire a plumber?")
    assert detail_question("Which exact brand of sofa did Lin buy?")[0] == "detail"
    for q in ("Did Lin finish the essay before moving on to the slides?", "Is the claim contradictory?",
              "Which image shows a paint brush?", "Did Lin switch majors or stay in her current one?",
              "Is my toolbox still mine?", "Why should the user choose lock-specific lubricants?"):
        assert detail_question(q) is None, q
    assert speaker_names("Has Lin Wei decided on a sofa?") == {"lin", "wei"}


# -- which photo: the photo of the conversation that shows the thing ---------------------------------------------
def test_which_image_points_at_the_photo_that_shows_it():
    """The dutch oven photo is D1's second; its number is known (every earlier turn of D1 is in the context) but a
    photo's number is right too rarely on dev data to be stated (``CALIBRATION['image-id']``): the answer declines
    and names the photo it would pick, with its turn."""
    ans = ask("Which image shows the cast iron dutch oven?")
    assert ans.declined and not ans.refused
    assert ans.cited == ("n-D1-4",), ans.text
    assert "most likely the one" in ans.text and "D1#4" in ans.text


def test_which_image_in_a_named_period():
    ans = ask("Which of the pictures shared on 2025-03-09 is about baking with a child?")
    assert ans.cited == ("n-D2-0",), ans.text


def test_a_photo_number_is_read_only_when_it_is_known():
    from c3m.models.answer import _image_id

    items = context("q").items
    by_turn = {(i.provenance.session_id, i.provenance.turn_index): i for i in items}
    assert _image_id(by_turn[("D1", 4)], items) == "D1:IMG_002"
    assert _image_id(by_turn[("D1", 2)], items) == "D1:IMG_001"
    assert _image_id(by_turn[("D2", 0)], items) == "D2:IMG_001"
    partial = context("q", drop=(("D1", 1),)).items
    assert _image_id(by_turn[("D1", 4)], partial) is None  # an earlier turn is missing: its number is unknown
    named = ContextItem("n-x", Provenance("maya", "D5", 9, DAY2), "user", EvidenceForm.RAW_TEXT,
                        "Look! [shared a photo D5:IMG_004: a sourdough starter in a jar]", (), 1.0, 9)
    assert _image_id(named, (named,)) == "D5:IMG_004"  # the chat names its photo


def test_asks_for_image_shapes():
    from c3m.language.question import asks_for_image

    for q in ("Which image shows a paint brush?", "Which of the pictures uploaded in 2024-07-07 is about the oil "
              "painting?", "In which image was the standing desk mentioned?", "Which sweater did Lin choose? Only "
              "return the image_id."):
        assert asks_for_image(q), q
    for q in ("What is the name of the product in the picture?", "Search for photos of the same species as this "
              "image.", "What was the image D2:IMG_001 about?"):
        assert not asks_for_image(q), q


# -- on which date: the day of the round that states the event -----------------------------------------------------
@pytest.mark.parametrize("question, node, day", [
    ("On which date did Maya bake cinnamon rolls with her daughter? Return in the format YYYY-MM-DD.", "n-D2-0",
     "2025-03-09"),
    ("Which date did Maya buy the cast iron pot? Return in the format YYYY-MM-DD.", "n-D1-4", "2025-03-02"),
])
def test_on_which_date_cites_the_round_that_states_the_event(question, node, day):
    """The date is read off the round that best states the event; on dev data that date is right too rarely
    (``CALIBRATION['date-event']``) to be stated as an answer, so it comes back as the cited evidence's date."""
    answerer = ExtractiveAnswerer()
    ans = answerer.answer(question, annotate(context(question)))
    assert ans.cited == (node,), ans.text
    assert day in ans.text
    assert answerer.last_route.startswith("date-event") and answerer.last_span == day
