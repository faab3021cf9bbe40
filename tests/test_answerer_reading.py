"""The pieces the offline answerer and the update chains share (#42): what a question asks
(``c3m.language.question``), which values a sentence states about a subject (``c3m.language.attributes``) and where things
stand relative to each other (``c3m.language.spatial``)."""
from __future__ import annotations

from datetime import datetime

import pytest

from c3m.language.attributes import changed_without_value, hypothetical, mentions, values
from c3m.language.question import analyse
from c3m.language import spatial


@pytest.mark.parametrize("question,kind,attribute,subject,intent", [
    ("What colour is my kettle now?", "attr", "colour", "kettle", "now"),
    ("What was my parrot originally called?", "name", "name", "parrot", "past"),
    ("How many chairs do I have now?", "count", "count", "chair", "now"),
    ("How many garden chairs do we own?", "count", "count", "chair", ""),
    ("When did we move?", "date", "place", "i", "when"),
    ("When did I repaint the fence?", "date", "colour", "fence", "when"),
    ("Where do I keep my passport?", "place", "place", "passport", ""),
    ("What is the current wall colour of my kitchen?", "attr", "colour", "kitchen", "now"),
    ("What is my uncle Rafael's job?", "attr", "job", "rafael", ""),
    ("Which came up first, my kettle or my toaster?", "choice", None, "kettle", "past"),
    ("Did I paint the fence before or after the storm?", "choice", None, "fence", "past"),
    ("Is my kettle still blue?", "yesno", None, "kettle", "now"),
    ("When I first showed you my kettle, what was on its left side?", "open", None, "kettle", "past"),
    ("Why did I sell my kayak?", "open", None, "kayak", ""),
])
def test_question_reading(question, kind, attribute, subject, intent):
    q = analyse(question)
    assert (q.kind, q.attribute, q.subject, q.intent) == (kind, attribute, subject, intent)


def test_question_owner_qualifier_change_and_bound():
    q = analyse("What colour is my brother's kayak?")
    assert (q.subject, q.owner, q.possessed) == ("kayak", "brother", True)
    q = analyse("Which new colour did I give the lamp in the hallway?")
    assert (q.subject, q.qualifier, q.change, q.possessed) == ("lamp", "hallway", True, False)
    q = analyse("Before 3 March 2026, what was the colour of my kettle?", datetime(2026, 6, 1))
    assert q.before == datetime(2026, 3, 3) and q.subject == "kettle"


@pytest.mark.parametrize("text,subject,attribute,expected", [
    ("I painted my kettle teal yesterday.", "kettle", "colour", ["teal"]),
    ("My kettle sits next to the red toaster.", "kettle", "colour", []),        # the toaster's colour
    ("My brother's kettle is orange.", "kettle", "colour", []),                # someone else's kettle
    ("The toaster in the kitchen is red.", "kitchen", "colour", []),           # the kitchen only locates it
    ("I bought a kettle; it is matte black.", "kettle", "colour", ["black"]),   # the pronoun continues it
    ("The red paint chipped, so I repainted the kettle white.", "kettle", "colour", ["white"]),
    ("I almost painted my kettle green.", "kettle", "colour", []),             # it did not happen
    ("We got a parrot and named him Mango.", "parrot", "name", ["Mango"]),
    ("I have four chairs on the patio now.", "chair", "count", ["four"]),
    ("Moved my passport into a shoebox.", "passport", "place", []),             # no word for a place
    ("I keep my passport in the study.", "passport", "place", ["study"]),
    ("My sister Ana works as a pharmacist.", "ana", "job", ["pharmacist"]),
])
def test_values_are_stated_about_the_subject(text, subject, attribute, expected):
    assert values(text, subject, attribute) == expected


def test_renames_follow_the_subject_through_its_names():
    assert values("Mango learned to whistle, so the kids renamed him Pepper.", "parrot", "name", ("Mango",)) == \
        ["Pepper"]
    assert mentions("Pepper whistled all morning.", "parrot", ("Mango", "Pepper"))
    assert not mentions("The cat whistled all morning.", "parrot", ("Mango",))


def test_a_change_only_a_photo_shows_and_a_change_that_did_not_happen():
    assert changed_without_value("My kettle has a new colour, see the picture.", "kettle", "colour")
    assert not changed_without_value("My kettle is teal now.", "kettle", "colour")
    assert hypothetical("I was going to repaint the fence") and not hypothetical("I repainted the fence")


def test_spatial_relations_and_their_inverse():
    caption = "A grey kettle; two mugs on its left. The kettle is right of the mugs."
    assert ("two mugs", "left", "grey kettle") in spatial.facts(caption)
    rel, target, noun = spatial.asked("What is on the left side of my kettle?", "kettle")
    assert spatial.answer(rel, target, noun, caption) == "two mugs"
    rel, target, noun = spatial.asked("Which shop is below the Bluebell sign?", None)
    assert spatial.answer(rel, target, noun, "The Bluebell sign hangs above the Tally shop.") == "Tally"
    assert spatial.answer(rel, target, noun, "The Tally shop is next to the bakery.") is None
