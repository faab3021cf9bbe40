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
def test_which_image_answers_with_the_photo_that_shows_it():
    """The dutch oven photo is D1's second and every earlier turn of D1 is in the context, so its number is known:
    the answer names it, cites the turn that shared it and says when and what it shows."""
    ans = ask("Which image shows the cast iron dutch oven?")
    assert not ans.declined and not ans.refused, ans.text
    assert ans.cited == ("n-D1-4",), ans.text
    assert ans.span == "D1:IMG_002"
    assert ans.text.startswith("The photo you shared on 2025-03-02 (D1:IMG_002): A black cast iron dutch oven")
    assert ans.confidence >= 0.7


def test_which_image_with_an_unknown_number_names_its_turn():
    """An earlier turn of D1 is not in the context: the photo's number is unknown, so the answer names the photo by
    its session and turn, still citing it."""
    ans = ask("Which image shows the cast iron dutch oven?", drop=(("D1", 1),))
    assert not ans.declined, ans.text
    assert ans.cited == ("n-D1-4",) and ans.span == "the photo of D1 turn 4"
    assert "(session D1, turn 4)" in ans.text and "D1:IMG" not in ans.text


def test_which_image_in_a_named_period():
    ans = ask("Which of the pictures shared on 2025-03-09 is about baking with a child?")
    assert ans.cited == ("n-D2-0",), ans.text
    assert not ans.declined and ans.span == "D2:IMG_001"


def test_two_photos_that_fit_alike_are_not_answered():
    """Both D1 photos' rounds talk of a crust (the loaf's caption, the reply to the pot): which one is meant is
    unsure, so the answer declines with the closest as evidence."""
    answerer = ExtractiveAnswerer()
    ans = answerer.answer("Which image shows a crust?", annotate(context("q")))
    assert ans.declined and not ans.refused, ans.text
    assert answerer.last_route == "image-close (declined)" and ans.text.startswith("Not sure")


def test_a_question_for_several_photos_is_declined_with_one_of_them():
    answerer = ExtractiveAnswerer()
    ans = answerer.answer("Which images show the cast iron dutch oven?", annotate(context("q")))
    assert ans.declined and not ans.refused, ans.text
    assert ans.cited == ("n-D1-4",) and answerer.last_route == "image-several (declined)"


def test_which_image_with_stored_images_names_the_image_itself():
    """Outside converted chats a turn carries its images (sha256) and the context a caption item for them: the
    answer names the image the caption describing the asked thing belongs to."""
    from c3m.types import ImageRef

    cat, bike = ImageRef("a" * 64, "image/jpeg", 640, 480, 1000), ImageRef("b" * 64, "image/jpeg", 640, 480, 1000)
    kettle = ImageRef("c" * 64, "image/jpeg", 640, 480, 1000)
    when = datetime(2025, 5, 4, 9, 30)
    prov = Provenance("sam", "S3", 6, when)
    items = (
        ContextItem("n-S3-6", prov, "user", EvidenceForm.RAW_TEXT, "Two snaps from this morning!", (cat, bike),
                    1.0, 5),
        ContextItem("n-S3-6", prov, "user", EvidenceForm.CAPTION, "[image: a grey cat asleep on a windowsill] "
                    "[image: a red road bike leaning against a garden fence]", (), 1.0, 0),
        ContextItem("n-S3-7", Provenance("sam", "S3", 7, when), "assistant", EvidenceForm.RAW_TEXT,
                    "Lovely morning light on both!", (), 1.0, 5),
        ContextItem("n-S4-0", Provenance("sam", "S4", 0, datetime(2025, 5, 9, 18)), "user", EvidenceForm.RAW_TEXT,
                    "Finally replaced the old one.", (kettle,), 1.0, 5),
        ContextItem("n-S4-0", Provenance("sam", "S4", 0, datetime(2025, 5, 9, 18)), "user", EvidenceForm.CAPTION,
                    "[image: a steel kettle on a gas stove]", (), 1.0, 0),
    )
    ctx = Context("q", items, BudgetUse(), ReaderBudget(), RouteTrace("real-images"))
    ans = ExtractiveAnswerer().answer("Which photo showed my road bike?", annotate(ctx))
    assert not ans.declined, ans.text
    assert ans.cited == ("n-S3-6",) and ans.span == "sha256:" + "b" * 64
    assert ans.text.startswith("The photo you shared on 2025-05-04 (session S3, turn 6; image sha256:bbbbbbbbbbbb")
    assert "red road bike" in ans.text and "cat" not in ans.text
    ans = ExtractiveAnswerer().answer("Which picture shows the kettle?", annotate(ctx))
    assert ans.cited == ("n-S4-0",) and ans.span == "sha256:" + "c" * 64, ans.text


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


def test_a_turn_with_two_photos_names_the_one_asked_about():
    """A converted turn that shared two photos: the second one's caption states the asked thing, so it is the
    turn's second photo (its number one past the first's)."""
    two = ContextItem("n-D3-0", Provenance("maya", "D3", 0, DAY2), "user", EvidenceForm.RAW_TEXT,
                      "Both of today's bakes. [shared a photo: a plate of oatmeal cookies] [shared a photo: a lemon "
                      "tart with a glossy glaze]", (), 1.0, 20)
    other = ContextItem("n-D3-2", Provenance("maya", "D3", 2, DAY2), "user", EvidenceForm.RAW_TEXT,
                        "And the mess afterwards. [shared a photo: flour spilled across a kitchen counter]", (), 1.0, 9)
    filler = ContextItem("n-D3-1", Provenance("maya", "D3", 1, DAY2), "assistant", EvidenceForm.RAW_TEXT,
                         "Both look delicious.", (), 1.0, 3)
    ctx = Context("q", (two, filler, other), BudgetUse(), ReaderBudget(), RouteTrace("real-style"))
    ans = ExtractiveAnswerer().answer("Which image shows the lemon tart?", annotate(ctx))
    assert not ans.declined and ans.span == "D3:IMG_002", ans.text
    assert ans.text.endswith("a lemon tart with a glossy glaze")


def test_asks_for_images_shapes():
    from c3m.language.question import asks_for_images

    for q in ("Which images did Leo upload about Taylor Swift?", "What two images are related to the door lock?",
              "Which of the images from early January are related to the air conditioner?",
              "Which two additional pictures of skirts did Sophie share later?"):
        assert asks_for_images(q), q
    for q in ("Which image shows a paint brush?", "Which of the pictures shown is about the oil painting?",
              "In which of the images that the user looked at is the necklace planned as a gift?",
              "Which of the images shared in the conversation corresponds to the test ride?",
              "Among the pictures shared in March, which one is about the cast iron pot?"):
        assert not asks_for_images(q), q
    ans = ask("Among the pictures shared in March, which one is about the cast iron pot?")
    assert ans.cited == ("n-D1-4",) and not ans.declined, ans.text


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
