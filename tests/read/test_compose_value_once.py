"""Composition values a node once and duplicates add nothing twice (``c3m.read.compose``, issue #43 items 2–3):
an older photo turn never outweighs a newer, better-ranked turn about the same subject, and a turn that shows
nothing new gets no slot.

Hand-built candidates in the reranked reader's shape (one node per memory, score = rank-derived relevance), the
shipped rule-v1 selector, and a vector stub that gives every node the same cosine with the question, so the only
thing that orders nodes is their rank: what the reader's values should follow."""
from __future__ import annotations

import hashlib
import random
import re
from datetime import datetime, timedelta

import numpy as np
import pytest

from c3m.budget import measure_context
from c3m.models import ApproxTokenCounter
from c3m.read.compose import Candidate, ComposeConfig, RuleSelector, compose
from c3m.types import EvidenceForm, ImageRef, Provenance, RawNode, ReaderBudget, RouteTrace, node_id_for

NS = "u"
T0 = datetime(2026, 3, 1, 9, 0)
COUNT = ApproxTokenCounter().count
DIM = 16
Q_VEC = np.eye(DIM, dtype=np.float32)[0]
VISUAL = "What colour is the shop sign now?"
PLAIN = "What did we talk about at the shop?"


def img(tag: str) -> ImageRef:
    return ImageRef(hashlib.sha256(tag.encode()).hexdigest(), "image/png", 256, 192, 100)


def node(session: str, text: str, images=(), *, day: int, turn: int = 0, role: str = "user") -> RawNode:
    return RawNode(node_id_for(NS, session, turn), Provenance(NS, session, turn, T0 + timedelta(days=day)), role, text,
                   tuple(images))


def same_cos(nodes) -> np.ndarray:
    """Every node as close to the question as every other: relevance is the rank alone."""
    return np.tile(Q_VEC, (len(nodes), 1))


def ranked(nodes) -> list[Candidate]:
    """Candidates in rank order with the reranked reader's relevance (1 for the first, falling linearly)."""
    n = len(nodes)
    return [Candidate(nd.node_id, (nd,), 1.0 - k / n) for k, nd in enumerate(nodes)]


def run(cands, budget: ReaderBudget, question: str = VISUAL, **cfg):
    return compose(question, Q_VEC, cands, budget, ComposeConfig(**cfg), selector=RuleSelector(), vectors=same_cos,
                   count=COUNT, trace=RouteTrace("test"))


def raw_nodes(ctx) -> set[str]:
    return {i.node_id for i in ctx.items if i.form in (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)}


def with_image(ctx) -> set[str]:
    return {i.node_id for i in ctx.items if i.form is EvidenceForm.RAW_IMAGE}


def budget(raw: int, images: int = 8, tokens: int = 12_288) -> ReaderBudget:
    return ReaderBudget(pages=3, raw_nodes=raw, images=images, text_tokens=tokens)


# -- (a) a node is valued once ------------------------------------------------------------------------------------
def _shop_sign():
    """Issue #43's loss: the newest value said in words (ranked 2nd) and two older photo turns ranked below it."""
    top = node("s1", "We went to the shop on the corner to buy paint.", day=1)
    gold = node("s9", "I repainted the shop sign, it is green now.", day=9)
    photos = [node(f"s{d}", f"one more photo of the shop sign from day {d}", (img(f"sign-{d}"),), day=d)
              for d in (3, 5)]
    return top, gold, photos


def test_an_older_photo_turn_does_not_take_the_slot_of_a_newer_higher_ranked_text_turn():
    top, gold, photos = _shop_sign()
    ctx = run(ranked([top, gold, *photos]), budget(2))
    assert raw_nodes(ctx) == {top.node_id, gold.node_id}  # rank order; per-form values gave both slots to photos
    ctx = run(ranked([top, gold, *photos]), budget(3))
    assert raw_nodes(ctx) == {top.node_id, gold.node_id, photos[0].node_id}
    assert with_image(ctx) == {photos[0].node_id}  # an image is an upgrade of a node that has a slot


def test_precedence_is_for_the_present_state_only():
    """Asked about the first time (or a count), the older photo keeps its image's value over newer text turns."""
    top, gold, photos = _shop_sign()
    ctx = run(ranked([top, gold, *photos]), budget(2), "When I first showed you the shop sign, what colour was it?")
    assert photos[0].node_id in raw_nodes(ctx) and photos[0].node_id in with_image(ctx)


def test_images_go_to_the_best_ranked_photo_turns():
    _, _, photos = _shop_sign()
    later = node("s7", "and the shop sign again", (img("sign-7"),), day=7)
    ctx = run(ranked([later, *photos]), budget(3, images=1))
    assert raw_nodes(ctx) == {later.node_id, *(p.node_id for p in photos)}  # slots for all three
    assert with_image(ctx) == {later.node_id}  # the one image to the best-ranked photo turn


def test_a_photo_still_outweighs_a_better_ranked_turn_about_something_else():
    """Precedence binds only a newer, better-ranked turn about the same subject: against small talk ranked just above
    it, the photo of the asked-about sign keeps its image's value for a visual question."""
    talk = node("s9", "We watched a film about the weather on the coast last night.", day=9)
    photo = node("s3", "one more photo of the shop sign", (img("sign-3"),), day=3)
    ctx = run(ranked([talk, photo]), budget(1))
    assert raw_nodes(ctx) == {photo.node_id} and with_image(ctx) == {photo.node_id}
    older = node("s1", "We talked about the shop sign colour last year.", day=1)  # same subject, but older
    ctx = run(ranked([older, photo]), budget(1))
    assert raw_nodes(ctx) == {photo.node_id}


def test_every_form_still_shows_when_everything_fits():
    top, gold, photos = _shop_sign()
    ctx = run(ranked([top, gold, *photos]), budget(12))
    assert raw_nodes(ctx) == {top.node_id, gold.node_id, *(p.node_id for p in photos)}
    assert with_image(ctx) == {p.node_id for p in photos}


# -- (b) duplicates take one slot -----------------------------------------------------------------------------------
SMALL_TALK = ["Haha, that is so true! Anyway, how was your day?", "haha that is so true anyway how was your day",
              "Haha -- that is SO true... anyway, how was your day??"]
DISTINCT = ["I bought a blue lamp at the market.", "My sister moved to Lisbon last spring.",
            "The kettle broke, so I ordered a new one."]


def test_word_for_word_repeats_take_one_slot():
    talk = [node(f"r{k}", t, day=k, role="assistant") for k, t in enumerate(SMALL_TALK * 2)]
    facts = [node(f"f{k}", t, day=10 + k) for k, t in enumerate(DISTINCT)]
    ctx = run(ranked([*talk, *facts]), budget(4), PLAIN)
    assert raw_nodes(ctx) == {talk[0].node_id, *(f.node_id for f in facts)}  # the best-ranked copy, then new turns
    assert any("repeat" in n for n in ctx.trace.notes)


def test_near_duplicates_take_one_slot():
    base = node("a", "haha that is so true anyway how was your day", day=1)
    near = node("b", "Haha, that is so true! Anyway, how was your day today?", day=2)  # one term more: 10 / 11
    facts = [node(f"f{k}", t, day=10 + k) for k, t in enumerate(DISTINCT)]
    ctx = run(ranked([base, near, *facts]), budget(4), PLAIN)
    assert raw_nodes(ctx) == {base.node_id, *(f.node_id for f in facts)}


def test_a_repeated_text_with_a_different_image_is_not_a_duplicate_for_a_visual_question():
    photos = [node(f"p{d}", "one more photo of the shop sign", (img(f"sign-{d}"),), day=d) for d in (1, 2, 3)]
    text = node("t", "We talked about the weather all afternoon.", day=4)
    ctx = run(ranked([*photos, text]), budget(3))
    assert raw_nodes(ctx) == {p.node_id for p in photos} and with_image(ctx) == {p.node_id for p in photos}
    # each photo turn keeps its words beside its image
    assert {i.node_id for i in ctx.items if i.form is EvidenceForm.RAW_TEXT} == {p.node_id for p in photos}
    # without an image form on offer the words are all they show: one slot, the rest to other turns
    ctx = run(ranked([*photos, text]), budget(3), PLAIN)
    assert raw_nodes(ctx) == {photos[0].node_id, text.node_id}


def test_the_same_image_with_the_same_words_is_a_duplicate():
    same = img("sign")
    photos = [node(f"p{d}", "one more photo of the shop sign", (same,), day=d) for d in (1, 2)]
    text = node("t", "We talked about the weather all afternoon.", day=4)
    ctx = run(ranked([*photos, text]), budget(2))
    assert raw_nodes(ctx) == {photos[0].node_id, text.node_id}


def test_a_node_in_two_memories_is_valued_once():
    n = node("s1", "I repainted the shop sign, it is green now.", day=1)
    other = node("s2", "We talked about the weather all afternoon.", day=2)
    cands = [Candidate("m1", (n,), 1.0), Candidate("m2", (n,), 0.9), Candidate("m3", (other,), 0.5)]
    ctx = run(cands, budget(2), PLAIN)
    assert [i.node_id for i in ctx.items if i.form is EvidenceForm.RAW_TEXT] == [n.node_id, other.node_id]


# -- (c) distinct texts are untouched -------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [
    ("the sign is red now", "the sign is blue now"),                      # short: only exact repeats collapse
    ("I paid 30 dollars for the blue lamp at the market on Sunday",       # numbers are terms
     "I paid 45 dollars for the blue lamp at the market on Sunday"),
    ("ok", "okay"),
])
def test_distinct_texts_are_untouched(a, b):
    na, nb = node("a", a, day=1), node("b", b, day=2)
    ctx = run(ranked([na, nb]), budget(2), PLAIN)
    assert raw_nodes(ctx) == {na.node_id, nb.node_id}


def test_text_key_ignores_case_spacing_and_punctuation_only():
    from c3m.read.compose import text_key

    assert text_key("Haha,  that is SO true!") == text_key("haha that is so true") == ("haha", "that", "is", "so",
                                                                                         "true")
    assert text_key("paid 30") != text_key("paid 45")
    assert text_key("!!!") == ("!!!",) and text_key("?") != text_key("!!!")


# -- (d) the budget still holds ---------------------------------------------------------------------------------------
class _Store:
    def __init__(self, nodes):
        self.nodes = {n.node_id: n for n in nodes}

    def get_nodes(self, ids):
        return {i: self.nodes[i] for i in ids if i in self.nodes}


@pytest.mark.parametrize("seed", range(3))
def test_the_budget_holds_with_repeats_and_photos(seed):
    rng = random.Random(seed)
    lines = SMALL_TALK + DISTINCT + ["one more photo of the shop sign", "", "ok"]
    for trial in range(25):
        nodes = []
        for k in range(rng.randint(1, 30)):
            ims = tuple(img(f"{rng.randint(0, 6)}") for _ in range(rng.randint(0, 2)))
            text = rng.choice(lines) if ims else rng.choice([t for t in lines if t])
            nodes.append(node(f"s{k}", text, ims, day=k))
        b = ReaderBudget(pages=3, raw_nodes=rng.choice([0, 1, 3, 12]), images=rng.choice([0, 1, 8]),
                         text_tokens=rng.choice([0, 10, 60, 12_288]))
        ctx = run(ranked(nodes), b, rng.choice([VISUAL, PLAIN]), lam_tokens=rng.choice([0.0, 0.5]))
        m = measure_context(ctx, b, _Store(nodes).get_nodes, NS, COUNT)
        assert not m.problems and not m.over, (seed, trial, m.use, b)
        assert m.use == ctx.use
        plain = {n.node_id for n in nodes if not n.images}
        alone = [tuple(re.findall(r"\w+", i.text.casefold())) for i in ctx.items
                 if i.form is EvidenceForm.RAW_TEXT and i.node_id in plain]
        assert len(alone) == len(set(alone)), (seed, trial, alone)  # a turn without images: its text once
