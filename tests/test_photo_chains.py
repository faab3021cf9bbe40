"""Update chains where a photo changed a state (#43 item 5).

A photo whose words say little ("Another shot of the bike.") states its new value only in its caption. The chain
definition (``c3m.language.timeline``) reads that caption — from a scripted perception backend here — so the
photo gets its step and the older turn is marked superseded; a photo of another thing, a photo showing the same
value, and a history without perception change nothing.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime

import pytest

from c3m import Memory, Session, Turn
from c3m.config import MemoryConfig
from c3m.language.timeline import annotate, found_values, index_chain
from c3m.language.question import analyse
from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models
from c3m.read.answer_view import answer_view
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, ImageRef, Provenance, ReaderBudget,
                       RouteTrace)

from factories import png_bytes

T1, T2, T3, T4 = (datetime(2026, 3, 1, 10), datetime(2026, 3, 8, 10), datetime(2026, 3, 15, 10),
                  datetime(2026, 3, 22, 10))
QUESTION = "What colour is my bike now?"
EVERYTHING = ReaderBudget(pages=8, raw_nodes=32, images=8)


class ScriptedPerception:
    """A perception backend that captions each image by a script ({image bytes: caption}); no anchors, no boxes."""

    name = "scripted"
    version = "scripted.1"

    def __init__(self, captions: dict[bytes, str]):
        self.captions = {hashlib.sha256(k).hexdigest(): v for k, v in captions.items()}

    def caption(self, image: bytes) -> str:
        return self.captions.get(hashlib.sha256(image).hexdigest(), "A picture.")

    def visual_anchors(self, image: bytes):
        return []

    def ground(self, image: bytes, phrase: str):
        return None

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        return text


BIKE_PHOTO, KETTLE_PHOTO, ANNA_PHOTO = png_bytes((30, 30, 200)), png_bytes((220, 220, 20)), png_bytes((20, 160, 20))


def history(photo_caption: str = "A blue bike leaning on a wall.") -> tuple[list[Session], dict[bytes, str]]:
    """The bike's colour stated in words, then photos: the kettle, Anna's bike, and the user's bike again."""
    sessions = [
        Session("s1", T1, (Turn("user", "I painted my bike red this weekend."), Turn("assistant", "Red suits it."))),
        Session("s2", T2, (Turn("user", "A photo of my kettle.", (KETTLE_PHOTO,)), Turn("assistant", "Shiny!"))),
        Session("s3", T3, (Turn("user", "Here's Anna's bike.", (ANNA_PHOTO,)), Turn("assistant", "Nice ride."))),
        Session("s4", T4, (Turn("user", "Another shot of the bike.", (BIKE_PHOTO,)), Turn("assistant", "Lovely."))),
    ]
    captions = {KETTLE_PHOTO: "A yellow kettle on a shelf.", ANNA_PHOTO: "A green bike by a fence.",
                BIKE_PHOTO: photo_caption}
    return sessions, captions


def read_view(tmp_path, perception: ScriptedPerception | None, sessions, *, sees_images: bool = False,
              images_only: bool = True):
    """The context c3m retrieved for ``QUESTION`` (every turn), and what its answer path hands the answerer
    (``answer_view``) and answers. ``images_only``: the retrieved context keeps each photo as its raw image, without
    the caption items c3m's composition may add, as a reader that chose the image form would; the answer path must
    then find the captions itself."""
    answerer = ExtractiveAnswerer()
    answerer.sees_images = sees_images
    models = Models(HashingEmbedder(64), ApproxTokenCounter(), answerer, perception=perception)
    cfg = MemoryConfig(method="c3m", method_options={"anchors": "heuristic"})
    with Memory(tmp_path / "store", "me", config=cfg, models=models) as mem:
        for s in sessions:
            mem.add_session(s)
        ctx = mem.retrieve(QUESTION, EVERYTHING)
        if images_only:
            ctx = replace(ctx, items=tuple(i for i in ctx.items if i.form is not EvidenceForm.CAPTION))
        view = answer_view(ctx, mem.method, answerer)
        return ctx, view, answerer.answer(QUESTION, view, image_loader=mem.store.image_bytes)


def marks(ctx: Context) -> dict[str, set[str]]:
    """{session: the marks on its user turn's items}."""
    out: dict[str, set[str]] = {}
    for i in ctx.items:
        if i.role == "user":
            out.setdefault(i.provenance.session_id, set()).add(i.status)
    return out


def test_a_photo_whose_caption_shows_a_new_colour_supersedes_the_words(tmp_path):
    sessions, captions = history()
    ctx, view, answer = read_view(tmp_path, ScriptedPerception(captions), sessions)
    assert {i.provenance.session_id for i in ctx.items} >= {"s1", "s4"}  # both bike turns were retrieved
    assert any(i.form is EvidenceForm.RAW_IMAGE and i.provenance.session_id == "s4" for i in ctx.items)
    (chain,) = view.chains
    assert chain.subject == "bike"
    assert [s.turns for s in chain.steps] == [("s1#0",), ("s4#0",)]
    assert [s.states for s in chain.steps] == [("red",), ("blue",)]
    got = marks(view)
    assert got["s1"] == {"superseded"} and got["s4"] == {"current"}
    # the kettle and Anna's green bike are other things: never in the chain, never marked
    assert got.get("s2", {""}) == {""} and got.get("s3", {""}) == {""}
    assert answer.span == "blue" and answer.cited == (chain.steps[-1].node_ids[0],)


def test_a_photo_with_the_same_colour_adds_no_step(tmp_path):
    sessions, captions = history("A red bike leaning on a wall.")
    _, view, _ = read_view(tmp_path, ScriptedPerception(captions), sessions)
    assert view.chains == () and not any(i.status for i in view.items)


def test_without_perception_nothing_changes(tmp_path):
    sessions, _ = history()
    ctx, view, answer = read_view(tmp_path, None, sessions)
    assert view.chains == () and not any(i.status for i in view.items)
    assert not any(i.form is EvidenceForm.CAPTION for i in view.items)
    assert answer.span == "red"  # all memory can say: the colour stated in words


def test_an_answerer_that_sees_images_gets_the_marks_without_the_captions(tmp_path):
    """The captions are read for the chain, then taken out: such an answerer reads the image itself, and its
    context shows (and is charged) nothing beyond what was retrieved."""
    sessions, captions = history()
    ctx, view, _ = read_view(tmp_path, ScriptedPerception(captions), sessions, sees_images=True)
    assert [(i.node_id, i.form) for i in view.items] == [(i.node_id, i.form) for i in ctx.items]
    (chain,) = view.chains
    assert [s.states for s in chain.steps] == [("red",), ("blue",)]
    got = marks(view)
    assert got["s1"] == {"superseded"} and got["s4"] == {"current"}


# -- the definition on hand-built contexts ---------------------------------------------------------------------
PHOTO = ImageRef("ab" * 32, "image/png", 24, 16, 100)


def turn(session: str, time: datetime, text: str, caption: str | None = None) -> list[ContextItem]:
    """A user turn's items as ``with_captions`` leaves them: its raw text (with its image), then its caption."""
    prov = Provenance("me", session, 0, time)
    node = f"n-{session}-0"
    out = [ContextItem(node, prov, "user", EvidenceForm.RAW_TEXT, text, (PHOTO,) if caption else (), 1.0,
                       len(text.split()))]
    if caption:
        out.append(ContextItem(node, prov, "user", EvidenceForm.CAPTION, f"[image: {caption}]", (), 1.0, 0))
    return out


def ctx_of(*turns: list[ContextItem], question: str = QUESTION) -> Context:
    return Context(question, tuple(i for t in turns for i in t), BudgetUse(), ReaderBudget(), RouteTrace("test"))


RED_WORDS = turn("s1", T1, "I painted my bike red this weekend.")


@pytest.mark.parametrize("words,caption,steps", [
    ("Another shot of the bike.", "A blue bike.", [("red",), ("blue",)]),         # the caption says the change
    ("Another shot of the bike.", "A red bike.", None),                           # the same value: no step
    ("Another shot of the bike.", "A blue kettle.", None),                        # the caption names another thing
    ("Another shot of the bike, still the same.", "A blue bike.", None),         # the words say nothing changed
    ("Here's Anna's bike.", "A blue bike.", None),                                # someone else's bike
    ("A photo of my garden.", "A blue bike.", None),                              # the words are about another thing
    ("I repainted my bike green.", "A blue bike.", [("red",), ("green",)]),      # the user's word wins
    ("", "A blue bike.", [("red",), ("blue",)]),                                  # a photo without words
    ("Another shot of the bike.", "A blue tall metal bike; a mug.", [("red",), ("blue",)]),  # stacked attributes
])
def test_which_photos_open_a_step(words, caption, steps):
    ctx = annotate(ctx_of(RED_WORDS, turn("s2", T2, words, caption)))
    assert ([s.states for s in ctx.chains[0].steps] if ctx.chains else None) == steps


def test_a_backend_that_names_colours_otherwise_than_the_user_is_not_compared_with_the_words():
    """A turn whose words say olive while its caption says gold shows the backend does not name colours as this
    user does: its captions then never open a step against the user's words (no chain beats a wrong one)."""
    trunk = turn("s0", T1, "My trunk got a new olive paint job.", "A gold trunk.")
    photo = turn("s2", T2, "Another shot of the bike.", "A blue bike.")
    assert annotate(ctx_of(RED_WORDS, photo)).chains  # alone, the photo opens a step
    ctx = annotate(ctx_of(trunk, RED_WORDS, photo))
    assert ctx.chains == () and not any(i.status for i in ctx.items)
    found, _ = found_values(analyse(QUESTION), ctx.items)
    assert [f.item.provenance.session_id for f in found] == ["s1"]


def test_photo_after_photo_and_the_photo_found_is_marked():
    later = turn("s3", T3, "One more photo of the bike.", "A white bike.")
    ctx = annotate(ctx_of(RED_WORDS, turn("s2", T2, "Another shot of the bike.", "A blue bike."), later))
    assert [s.states for s in ctx.chains[0].steps] == [("red",), ("blue",), ("white",)]
    assert [i.status for i in ctx.items] == ["superseded", "superseded", "superseded", "current", "current"]
    found, _ = found_values(analyse(QUESTION), ctx.items)
    assert [f.photo for f in found] == [False, True, True]


def test_an_index_chain_that_merged_the_photo_does_not_lend_its_source():
    """RAMU merged the photo into the red state (no Update at write time): its chain does not record the question's
    chain as it is, so the chain shown is the read path's own; one that records the photo's step lends its source."""
    photo = turn("s2", T2, "Another shot of the bike.", "A blue bike.")
    merged = index_chain("bike", "e1", [(T1, {"s0": {0}}, ["red"]), (T2, {"s1": {0}, "s2": {0}}, ["red"])],
                         RED_WORDS + photo)
    ctx = annotate(ctx_of(RED_WORDS, photo), index_chains=[merged])
    assert [(c.source, c.entry_id) for c in ctx.chains] == [("read", None)]
    updated = index_chain("bike", "e1", [(T1, {"s1": {0}}, ["red"]), (T2, {"s2": {0}}, ["blue"])], RED_WORDS + photo)
    ctx = annotate(ctx_of(RED_WORDS, photo), index_chains=[updated])
    assert [(c.source, c.entry_id) for c in ctx.chains] == [("index", "e1")]
