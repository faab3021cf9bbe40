"""Vertical composition (``c3m.read.compose``): selectors, thresholding and form ablations, the reader budget
measured by the harness's own accounting (``c3m.budget.measure_context``), image tokens, and Support Recall's
treatment of derived evidence."""
from __future__ import annotations

import hashlib
import random
from datetime import datetime, timedelta

import numpy as np
import pytest

from c3m.budget import measure_context
from c3m.errors import InvalidInput
from c3m.eval.metrics import score_context
from c3m.models import ApproxTokenCounter, HashingEmbedder
from c3m.models.tokens import image_tokens
from c3m.read.compose import (FORM_NAMES, FORMS, Candidate, ComposeConfig, MLPSelector, RuleSelector, compose,
                              make_selector)
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, EvidenceRef, ImagePerception, ImageRef,
                       Provenance, Question, RawNode, ReaderBudget, RouteTrace, VisualAnchor, node_id_for)

NS = "u"
T0 = datetime(2026, 3, 1, 9, 0)
EMB = HashingEmbedder(64)
COUNT = ApproxTokenCounter().count
BIG = ReaderBudget(pages=3, raw_nodes=50, images=50, text_tokens=10_000)


# -- builders -------------------------------------------------------------------------------------------------
def img(tag: str, w: int = 256, h: int = 192) -> ImageRef:
    return ImageRef(hashlib.sha256(tag.encode()).hexdigest(), "image/png", w, h, 100)


def node(session: str, turn: int, text: str, images=(), *, day: int = 0, role: str = "user",
         redacted: bool = False) -> RawNode:
    prov = Provenance(NS, session, turn, T0 + timedelta(days=day))
    return RawNode(node_id_for(NS, session, turn), prov, role, text, tuple(images), redacted)


def perception(n: RawNode, source: ImageRef, caption: str = "a red mug on a table", crop: ImageRef | None = None,
               phrase: str | None = "red mug") -> ImagePerception:
    return ImagePerception(n.node_id, source, "fake", "fake.1", caption,
                           (VisualAnchor("mug", "colour", "red", 0.9, (10, 10, 60, 60)),), crop,
                           (5, 5, 85, 65) if crop is not None else None, phrase if crop is not None else None)


def vectors(nodes) -> np.ndarray:
    return EMB.embed([n.text or n.node_id for n in nodes]).astype(np.float32)


def qvec(question: str) -> np.ndarray:
    return EMB.embed([question])[0].astype(np.float32)


class Fixed:
    """A selector stub: the same probabilities for every memory (or one row per memory)."""

    name = "fixed"

    def __init__(self, probs):
        self.probs = np.asarray(probs, float)
        self.calls = 0

    def probabilities(self, question, q_vec, candidates):
        self.calls += 1
        if self.probs.ndim == 1:
            return np.tile(self.probs, (len(candidates), 1))
        return self.probs[: len(candidates)].copy()


class World:
    """Nodes, their perception and crop blobs: what measure_context looks up in the store."""

    def __init__(self):
        self.nodes: dict[str, RawNode] = {}
        self.blobs: dict[str, dict] = {}
        self.perc: dict[str, list[ImagePerception]] = {}

    def add(self, n: RawNode) -> RawNode:
        self.nodes[n.node_id] = n
        return n

    def crop_of(self, n: RawNode, source: ImageRef, tag: str, w: int = 80, h: int = 60) -> ImageRef:
        c = img(tag, w, h)
        self.blobs[c.sha256] = {"node_id": n.node_id, "source_sha256": source.sha256, "node_ids": [n.node_id],
                                "links": [(n.node_id, source.sha256)]}
        return c

    def get_nodes(self, ids):
        return {i: self.nodes[i] for i in ids if i in self.nodes}

    def derived_blob(self, sha):
        return self.blobs.get(sha)

    def perceptions(self, ids):
        return {i: self.perc[i] for i in ids if i in self.perc}

    def measure(self, ctx: Context, budget: ReaderBudget, model: str = "qwen2-vl"):
        return measure_context(ctx, budget, self.get_nodes, NS, COUNT, derived_blob=self.derived_blob,
                               perceptions=self.perceptions, image_token_model=model)


def full_candidate(w: World, sid: str = "s1", day: int = 0, score: float = 0.5) -> Candidate:
    """A two-node memory that has every form: text, a summary, captions, original images and a grounded crop."""
    a_img = img(f"{sid}-a")
    a = w.add(node(sid, 0, "Here is my red mug from the market.", (a_img,), day=day))
    b = w.add(node(sid, 1, "Lovely mug!", day=day, role="assistant"))
    crop = w.crop_of(a, a_img, f"{sid}-crop")
    w.perc[a.node_id] = [perception(a, a_img, crop=crop)]  # the store holds the records compose is handed
    return Candidate(f"m-{sid}", (a, b), score, summary=f"the user showed a red mug ({sid})",
                     perceptions={a.node_id: w.perc[a.node_id]})


def run(cands, probs=0.9, budget: ReaderBudget = BIG, question="What colour is my mug?", **cfg) -> Context:
    sel = probs if hasattr(probs, "probabilities") else Fixed(np.full(5, probs) if np.isscalar(probs) else probs)
    return compose(question, qvec(question), cands, budget, ComposeConfig(**cfg), selector=sel, vectors=vectors,
                   count=COUNT, trace=RouteTrace("test"))


def forms_of(ctx: Context) -> set[EvidenceForm]:
    return {i.form for i in ctx.items}


# -- selectors ------------------------------------------------------------------------------------------------
def _mixed(w: World) -> list[Candidate]:
    """Memories lacking different forms: text only; image only (no perception); a full one; summary only."""
    t = w.add(node("s2", 0, "I moved the lamp to the garage.", day=1))
    i_img = img("s3-img")
    i = w.add(node("s3", 0, "", (i_img,), day=2))
    s = w.add(node("s4", 0, "", day=3))
    return [Candidate("text", (t,), 0.3), Candidate("image", (i,), 0.2), full_candidate(w, "s1"),
            Candidate("summary-only", (s,), 0.1, summary="a chat about nothing")]


EXPECTED_AVAILABLE = np.array([[1, 0, 0, 0, 0], [0, 0, 0, 1, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]], bool)


def test_available_forms():
    w = World()
    assert (np.stack([c.available() for c in _mixed(w)]) == EXPECTED_AVAILABLE).all()


@pytest.mark.parametrize("question", ["What colour is my mug?", "Where is the lamp?"])
def test_rule_selector_shape_and_missing_forms(question):
    w = World()
    cands = _mixed(w)
    p = RuleSelector().probabilities(question, qvec(question), cands)
    assert p.shape == (len(cands), len(FORMS))
    assert (p[~EXPECTED_AVAILABLE] == 0).all()
    assert (p[EXPECTED_AVAILABLE] > 0).all() and (p <= 1).all()
    assert RuleSelector().probabilities(question, qvec(question), []).shape == (0, 5)


def test_rule_selector_prefers_crop_when_its_object_is_named():
    w = World()
    c = full_candidate(w)
    sel = RuleSelector()
    named = sel.probabilities("What colour is my mug?", qvec("x"), [c])[0]
    other = sel.probabilities("What colour is my lamp?", qvec("x"), [c])[0]
    assert named[FORMS.index(EvidenceForm.GROUNDED_CROP)] > other[FORMS.index(EvidenceForm.GROUNDED_CROP)]
    assert named[FORMS.index(EvidenceForm.RAW_IMAGE)] < other[FORMS.index(EvidenceForm.RAW_IMAGE)]


def _mlp():
    pytest.importorskip("torch")
    return MLPSelector(EMB.dim, hidden=16, seed=3)


def test_mlp_selector_shape_missing_forms_and_one_forward_pass():
    sel = _mlp()
    w = World()
    cands = _mixed(w)
    q = qvec("What colour is my mug?")
    calls = []
    handle = sel.net.register_forward_hook(lambda *a: calls.append(1))
    try:
        p = sel.probabilities("q", q, cands, vectors)
    finally:
        handle.remove()
    assert calls == [1], "one forward pass for all memories"
    assert p.shape == (len(cands), 5)
    assert (p[~EXPECTED_AVAILABLE] == 0).all() and (p[EXPECTED_AVAILABLE] > 0).all()
    one_by_one = np.concatenate([sel.probabilities("q", q, [c], vectors) for c in cands])
    np.testing.assert_allclose(p, one_by_one, rtol=0, atol=1e-6)
    assert sel.probabilities("q", q, [], vectors).shape == (0, 5)
    # the summary embedding enters the features: a different summary vector changes the output
    c = cands[2]
    other = Candidate(c.memory_id, c.nodes, c.score, c.summary, summary_vec=np.ones(EMB.dim, np.float32) / 8,
                      perceptions=c.perceptions)
    assert not np.allclose(sel.probabilities("q", q, [c], vectors), sel.probabilities("q", q, [other], vectors))


def test_mlp_save_load_round_trip(tmp_path):
    sel = _mlp()
    w = World()
    cands = _mixed(w)
    q = qvec("What colour is my mug?")
    path = tmp_path / "sel.pt"
    sel.save(path, meta={"trained": "no"})
    again = make_selector(f"mlp:{path}")
    assert isinstance(again, MLPSelector) and (again.dim, again.hidden) == (EMB.dim, 16)
    assert again.name == "mlp:sel.pt"
    np.testing.assert_array_equal(sel.probabilities("q", q, cands, vectors),
                                  again.probabilities("q", q, cands, vectors))
    fresh = MLPSelector(EMB.dim, hidden=16, seed=4)  # a different init gives different outputs (the test can fail)
    assert not np.allclose(fresh.probabilities("q", q, cands, vectors), sel.probabilities("q", q, cands, vectors))


@pytest.mark.parametrize("name", ["mlp:/nonexistent", "mlp:/nonexistent/weights.pt", "ppo", ""])
def test_make_selector_rejects(name, monkeypatch, tmp_path):
    import c3m.read.compose as compose_mod

    monkeypatch.setattr(compose_mod, "PPO_WEIGHTS", tmp_path / "missing.pt")  # "ppo" without its shipped weights
    with pytest.raises(InvalidInput) as err:
        make_selector(name)
    assert err.value.field == "selector"


def test_make_selector_rule():
    assert isinstance(make_selector("rule"), RuleSelector) and make_selector().name == "rule-v1"


def test_compose_config_rejects_unknown_forms():
    with pytest.raises(InvalidInput) as err:
        ComposeConfig(forms=("raw_text", "thumbnail"))
    assert err.value.field == "forms"


# -- thresholding and form ablations ---------------------------------------------------------------------------
def test_everything_fits_gives_every_form():
    """The baseline of the ablation tests below: with a large budget and high probabilities all five show."""
    w = World()
    ctx = run([full_candidate(w, "s1"), full_candidate(w, "s2", day=1)])
    assert forms_of(ctx) == set(FORMS)
    m = w.measure(ctx, BIG)
    assert not m.problems and not m.over and m.use == ctx.use


@pytest.mark.parametrize("drop", FORM_NAMES)
def test_dropping_one_form_removes_only_it(drop):
    w = World()
    ctx = run([full_candidate(w, "s1"), full_candidate(w, "s2", day=1)],
              forms=tuple(f for f in FORM_NAMES if f != drop))
    assert forms_of(ctx) == set(FORMS) - {EvidenceForm(drop)}


@pytest.mark.parametrize("only", FORM_NAMES)
def test_a_single_form(only):
    w = World()
    ctx = run([full_candidate(w, "s1"), full_candidate(w, "s2", day=1)], forms=(only,))
    assert ctx.items and forms_of(ctx) == {EvidenceForm(only)}
    m = w.measure(ctx, BIG)
    assert not m.problems
    if only in ("summary", "caption", "grounded_crop"):
        assert m.use.raw_nodes == 0  # derived forms take no Raw-Node slot
    else:
        assert m.use.raw_nodes > 0


def test_summary_only_gives_summary_items():
    w = World()
    ctx = run([full_candidate(w, "s1")], forms=("summary",))
    assert [i.form for i in ctx.items] == [EvidenceForm.SUMMARY]
    assert ctx.items[0].text == "the user showed a red mug (s1)" and ctx.items[0].images == ()


def test_a_form_below_threshold_never_appears():
    w = World()
    cands = [full_candidate(w, "s1"), full_candidate(w, "s2", day=1)]
    probs = np.array([0.9, 0.49, 0.9, 0.5, 0.2])
    ctx = run(cands, probs, threshold=0.5)
    assert forms_of(ctx) == {EvidenceForm.RAW_TEXT, EvidenceForm.CAPTION, EvidenceForm.RAW_IMAGE}  # 0.5 >= 0.5
    ctx = run(cands, probs, threshold=0.51)
    assert forms_of(ctx) == {EvidenceForm.RAW_TEXT, EvidenceForm.CAPTION}
    # per memory: the second memory's raw text is under the threshold, the first's is not
    per = np.array([[0.9, 0.0, 0.0, 0.0, 0.0], [0.3, 0.0, 0.0, 0.0, 0.0]])
    ctx = run(cands, per)
    assert {i.provenance.session_id for i in ctx.items} == {"s1"}


def test_threshold_above_every_probability_gives_empty_context():
    w = World()
    cands = [full_candidate(w, "s1"), full_candidate(w, "s2", day=1)]
    ctx = run(cands, 0.9, threshold=0.95)
    assert ctx.items == () and ctx.use == BudgetUse()
    assert not w.measure(ctx, BIG).problems


def test_rule_selector_threshold_one_gives_nothing():
    w = World()
    ctx = run([full_candidate(w)], RuleSelector(), threshold=1.0)
    assert ctx.items == ()


def test_no_candidates_or_no_nodes():
    ctx = run([], 0.9)
    assert ctx.items == () and "nothing retrieved" in ctx.trace.notes
    ctx = run([Candidate("empty", (), 1.0, summary="x")], 0.9)
    assert ctx.items == ()


def test_forms_a_memory_lacks_are_not_shown_even_with_high_probability():
    w = World()
    t = w.add(node("s2", 0, "I moved the lamp to the garage."))
    ctx = run([Candidate("text", (t,), 0.5)], 1.0)
    assert [i.form for i in ctx.items] == [EvidenceForm.RAW_TEXT]


# -- the reader budget, measured by the harness -------------------------------------------------------------------
def _random_world(rng: random.Random) -> tuple[World, list[Candidate]]:
    w = World()
    cands = []
    words = "my red mug blue lamp garage kitchen shelf photo of the new kettle yesterday we".split()
    for m in range(rng.randint(1, 6)):
        sid = f"s{rng.randint(0, 4)}"
        nodes, percs = [], {}
        for _ in range(rng.randint(1, 3)):
            turn = rng.randint(0, 9)
            nid = node_id_for(NS, sid, turn)
            if nid in w.nodes:  # one stored node per (session, turn)
                n = w.nodes[nid]
            else:
                k = rng.randint(0, 3)
                ims = tuple(img(f"{sid}-{turn}-{j}", rng.choice([24, 256, 640]), rng.choice([16, 192, 480]))
                            for j in range(k))
                text = " ".join(rng.choice(words) for _ in range(rng.randint(0 if k else 1, 30)))
                n = w.add(node(sid, turn, text, ims, day=int(sid[1:]), role=rng.choice(["user", "assistant"])))
                recs = []
                for j, im in enumerate(n.images):
                    crop = w.crop_of(n, im, f"crop-{nid}-{j}", rng.randint(16, 120), rng.randint(16, 90)) \
                        if rng.random() < 0.6 else None
                    recs.append(perception(n, im, rng.choice(["", "a mug", "a lamp in a garage"]), crop=crop))
                w.perc[nid] = recs
            if n not in nodes:
                nodes.append(n)
        for n in nodes:
            if w.perc.get(n.node_id):
                percs[n.node_id] = w.perc[n.node_id]
        summary = rng.choice(["", "a short summary of the talk", "mugs and lamps " * rng.randint(1, 8)])
        cands.append(Candidate(f"m{m}", tuple(nodes), rng.uniform(-0.2, 1.0), summary, perceptions=percs))
    return w, cands


BUDGET_CHOICES = dict(raw_nodes=[0, 1, 2, 5, 40], images=[0, 1, 2, 8], text_tokens=[0, 3, 12, 40, 5000])


@pytest.mark.parametrize("seed", range(4))
def test_compose_never_exceeds_the_budget_on_random_inputs(seed):
    rng = random.Random(seed)
    questions = ["What colour is my mug?", "Where is the lamp?", "Show me the photo of the kettle"]
    for trial in range(30):
        w, cands = _random_world(rng)
        budget = ReaderBudget(pages=rng.choice([0, 3]), **{k: rng.choice(v) for k, v in BUDGET_CHOICES.items()})
        sel = RuleSelector() if trial % 3 == 0 else Fixed(rng.choice([0.9, 0.6]) * np.ones(5))
        forms = tuple(f for f in FORM_NAMES if rng.random() < 0.8) or ("raw_text",)
        q = rng.choice(questions)
        ctx = run(cands, sel, budget, q, forms=forms, lam_tokens=rng.choice([0.0, 0.5]),
                  threshold=rng.choice([0.0, 0.5]))
        m = w.measure(ctx, budget)
        assert not m.problems, (seed, trial, m.problems)
        assert not m.over, (seed, trial, m.use, budget)
        assert m.use == ctx.use, (m.use, ctx.use)
        keys = [(i.provenance.time, i.provenance.session_id, i.provenance.turn_index) for i in ctx.items]
        assert keys == sorted(keys), "items in time order"
        assert {i.form.value for i in ctx.items} <= set(forms)
        raw = {i.node_id for i in ctx.items if i.form in (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)}
        assert m.use.raw_nodes == len(raw)
        if budget.raw_nodes == 0:
            assert not raw
        if budget.images == 0:
            assert all(not i.images for i in ctx.items)


def test_raw_text_and_raw_image_of_one_node_share_one_slot():
    w = World()
    im = img("one")
    n = w.add(node("s1", 0, "My red mug.", (im,)))
    other = w.add(node("s2", 0, "My blue lamp.", day=1))
    budget = ReaderBudget(pages=0, raw_nodes=1, images=1, text_tokens=100)
    ctx = run([Candidate("a", (n,), 0.9), Candidate("b", (other,), 0.1)], 0.9, budget,
              forms=("raw_text", "raw_image"))
    assert [(i.node_id, i.form) for i in ctx.items] == [(n.node_id, EvidenceForm.RAW_TEXT),
                                                         (n.node_id, EvidenceForm.RAW_IMAGE)]
    m = w.measure(ctx, budget)
    assert m.use == BudgetUse(0, 1, 1, COUNT("My red mug.")) and not m.over and not m.problems
    assert m.image_tokens == 65


def test_time_order_and_summary_placement():
    w = World()
    late, early = full_candidate(w, "s9", day=9, score=0.9), full_candidate(w, "s1", day=1, score=0.1)
    ctx = run([late, early], 0.9)
    sessions = [i.provenance.session_id for i in ctx.items]
    assert sessions == sorted(sessions) and sessions[0] == "s1"
    first = [i.form for i in ctx.items if i.provenance.session_id == "s1" and i.provenance.turn_index == 0]
    assert first == [f for f in FORMS if f in first]  # within a node, forms in FORMS order


def test_image_budget_counts_crops():
    w = World()
    c = full_candidate(w)
    budget = ReaderBudget(pages=0, raw_nodes=5, images=1, text_tokens=1000)
    ctx = run([c], 0.9, budget)
    m = w.measure(ctx, budget)
    assert m.use.images == 1 and not m.over and not m.problems
    shown = [i.form for i in ctx.items if i.images]
    assert len(shown) == 1 and shown[0] in (EvidenceForm.RAW_IMAGE, EvidenceForm.GROUNDED_CROP)


def test_compose_does_not_cite_redacted_nodes_through_raw_forms():
    w = World()
    gone = w.add(node("s1", 0, "secret mug", (img("gone"),), redacted=True))
    kept = w.add(node("s1", 1, "my red mug is lovely"))
    ctx = run([Candidate("m", (gone, kept), 0.5)], 0.9, forms=("raw_text", "raw_image", "caption"))
    assert gone.node_id not in {i.node_id for i in ctx.items}
    assert kept.node_id in {i.node_id for i in ctx.items}


def test_summary_is_not_attributed_to_a_redacted_node():
    w = World()
    gone = w.add(node("s1", 0, "secret mug", redacted=True))
    kept = w.add(node("s1", 1, "my red mug is lovely"))
    ctx = run([Candidate("m", (gone, kept), 0.5, summary="about a mug")], 0.9, forms=("summary", "raw_text"))
    m = w.measure(ctx, BIG)
    assert not m.problems, m.problems


# -- measure_context on derived forms ------------------------------------------------------------------------------
def _item(n: RawNode, form: EvidenceForm, text: str = "", images=()) -> ContextItem:
    return ContextItem(n.node_id, n.provenance, n.role, form, text, tuple(images), 1.0, COUNT(text) if text else 0)


def _ctx(*items) -> Context:
    return Context("q", tuple(items), BudgetUse(), BIG, RouteTrace("test"))


def test_measure_crop_must_be_a_derived_blob_of_its_node():
    w = World()
    a_img, b_img = img("a"), img("b")
    a = w.add(node("s1", 0, "mug", (a_img,)))
    b = w.add(node("s1", 1, "lamp", (b_img,)))
    crop_a = w.crop_of(a, a_img, "crop-a")
    w.perc[a.node_id] = [perception(a, a_img, crop=crop_a, phrase="mug")]
    stray = img("not-derived", 40, 40)
    ok = w.measure(_ctx(_item(a, EvidenceForm.GROUNDED_CROP, "[crop: mug]", (crop_a,))), BIG)
    assert not ok.problems and ok.use.images == 1 and ok.use.raw_nodes == 0
    assert ok.image_tokens == image_tokens(80, 60)
    for bad in (_item(b, EvidenceForm.GROUNDED_CROP, "[crop: mug]", (crop_a,)),   # another node's crop
                _item(a, EvidenceForm.GROUNDED_CROP, "[crop: x]", (stray,)),      # not a derived blob at all
                _item(a, EvidenceForm.GROUNDED_CROP, "[crop: x]", (a_img,))):     # the original, not a crop
        m = w.measure(_ctx(bad), BIG)
        assert m.problems and "derived blob" in m.problems[0] and m.violation
    # a crop whose recorded source is not an image of the node
    w.blobs[crop_a.sha256] = {"node_id": a.node_id, "source_sha256": b_img.sha256, "node_ids": [a.node_id],
                              "links": [(a.node_id, b_img.sha256)]}
    assert w.measure(_ctx(_item(a, EvidenceForm.GROUNDED_CROP, "[crop: mug]", (crop_a,))), BIG).problems
    # without a derived_blob lookup no crop can be verified
    m = measure_context(_ctx(_item(a, EvidenceForm.GROUNDED_CROP, "", (crop_a,))), BIG, w.get_nodes, NS, COUNT)
    assert m.problems


@pytest.mark.parametrize("form", [EvidenceForm.SUMMARY, EvidenceForm.CAPTION])
def test_measure_summary_and_caption_items(form):
    w = World()
    a_img = img("a")
    a = w.add(node("s1", 0, "mug", (a_img,)))
    w.perc[a.node_id] = [perception(a, a_img, caption="a red mug")]
    good = w.measure(_ctx(_item(a, form, "[image: a red mug]")), BIG)
    assert not good.problems and good.use.raw_nodes == 0 and good.use.images == 0
    assert good.use.text_tokens == COUNT("[image: a red mug]")
    bad = w.measure(_ctx(_item(a, form, "[image: a red mug]", (a_img,))), BIG)
    assert bad.problems and "shows images" in bad.problems[0]


def test_measure_raw_forms_count_nodes_once_and_images_distinct():
    w = World()
    a_img, b_img = img("a"), img("b", 640, 480)
    a = w.add(node("s1", 0, "mug", (a_img,)))
    b = w.add(node("s1", 1, "lamp", (a_img, b_img)))
    crop = w.crop_of(b, b_img, "crop-b", 100, 90)
    w.perc[b.node_id] = [perception(b, b_img, caption="lamp", crop=crop, phrase="lamp")]
    ctx = _ctx(_item(a, EvidenceForm.RAW_TEXT, "mug"), _item(a, EvidenceForm.RAW_IMAGE, "", (a_img,)),
               _item(b, EvidenceForm.RAW_IMAGE, "", (a_img, b_img)), _item(b, EvidenceForm.CAPTION, "[image: lamp]"),
               _item(b, EvidenceForm.GROUNDED_CROP, "[crop: lamp]", (crop,)), _item(a, EvidenceForm.SUMMARY, "sum"))
    m = w.measure(ctx, BIG)
    assert not m.problems
    assert m.use.raw_nodes == 2 and m.use.images == 3
    assert m.image_tokens == image_tokens(256, 192) + image_tokens(640, 480) + image_tokens(100, 90)
    assert w.measure(ctx, BIG, "fixed:576").image_tokens == 3 * 576
    assert w.measure(ctx, BIG, "none").image_tokens == 0
    assert m.context_tokens == m.use.text_tokens + m.image_tokens
    tight = w.measure(ctx, ReaderBudget(pages=0, raw_nodes=1, images=2, text_tokens=100))
    assert set(tight.over) == {"raw_nodes", "images"}
    # raw items may show only their own node's images, and raw text must be the stored text
    assert w.measure(_ctx(_item(a, EvidenceForm.RAW_IMAGE, "", (b_img,))), BIG).problems
    assert w.measure(_ctx(_item(a, EvidenceForm.RAW_TEXT, "mug!")), BIG).problems


# -- image tokens -----------------------------------------------------------------------------------------------
def test_image_tokens_models():
    assert image_tokens(256, 192) == 65 == image_tokens(256, 192, "qwen2-vl")
    assert image_tokens(80, 60) < image_tokens(256, 192)
    assert image_tokens(80, 60) == 2 * 3 + 2
    assert image_tokens(24, 16) >= 2  # scaled up to the minimum area
    assert image_tokens(4000, 3000) <= 1280 + 2  # scaled down to the maximum area
    assert image_tokens(256, 192, "fixed:576") == 576 == image_tokens(10, 10, "fixed:576")
    assert image_tokens(256, 192, "none") == 0
    with pytest.raises(ValueError):
        image_tokens(256, 192, "llava-9000")


def test_image_tokens_stay_within_qwen_pixel_bounds():
    """Every image within Qwen2-VL's aspect-ratio limit (200:1) costs between 4 and 1280 patches (+2 markers)."""
    rng = random.Random(0)
    for _ in range(2000):
        w, h = rng.randint(1, 8000), rng.randint(1, 8000)
        if max(w, h) / min(w, h) > 200:
            continue
        assert 4 + 2 <= image_tokens(w, h) <= 1280 + 2, (w, h)


def test_compose_charges_image_tokens_through_lam_tokens():
    """With λ > 0 the cheaper crop wins over the full image under a one-image budget."""
    w = World()
    big = img("big", 1280, 960)
    n = w.add(node("s1", 0, "Here is my red mug.", (big,)))
    crop = w.crop_of(n, big, "small-crop", 64, 48)
    c = Candidate("m", (n,), 0.5, perceptions={n.node_id: [perception(n, big, crop=crop)]})
    budget = ReaderBudget(pages=0, raw_nodes=5, images=1, text_tokens=1000)
    probs = np.array([0.9, 0.0, 0.0, 0.9, 0.9])
    chosen = {i.form for i in run([c], probs, budget, lam_tokens=2.0).items}
    assert EvidenceForm.GROUNDED_CROP in chosen and EvidenceForm.RAW_IMAGE not in chosen


# -- Support Recall ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form, recall", [(EvidenceForm.SUMMARY, 0.0), (EvidenceForm.CAPTION, 1.0),
                                          (EvidenceForm.GROUNDED_CROP, 1.0), (EvidenceForm.RAW_TEXT, 1.0)])
def test_support_recall_ignores_summaries(form, recall):
    w = World()
    a_img = img("a")
    a = w.add(node("s1", 0, "Here is my red mug.", (a_img,)))
    crop = w.crop_of(a, a_img, "crop")
    w.perc[a.node_id] = [perception(a, a_img, caption="a red mug", crop=crop)]
    texts = {EvidenceForm.RAW_TEXT: a.text, EvidenceForm.GROUNDED_CROP: "[crop: red mug]"}  # a crop shows its phrase
    text = texts.get(form, "[image: a red mug]")
    ctx = _ctx(_item(a, form, text, (crop,) if form is EvidenceForm.GROUNDED_CROP else ()))
    q = Question("q1", "What colour is my mug?", "red", "IE", evidence=(EvidenceRef("s1", 0),))
    m = w.measure(ctx, BIG)
    assert not m.problems
    r = score_context(NS, q, ctx, 0.01, m)
    assert r.support_recall == recall and r.oracle_reader_acc == recall
    assert r.raw_support_recall == (1.0 if form is EvidenceForm.RAW_TEXT else 0.0)  # derived views never count raw
    assert r.route_hit == 1.0  # the item is in the pool either way


def test_untrained_mlp_selector_is_seeded_and_named():
    a, b = make_selector("mlp-init:0", dim=8), make_selector("mlp-init:0", dim=8)
    assert a.name == "mlp-init:0"
    for pa, pb in zip(a.net.parameters(), b.net.parameters()):
        assert (pa == pb).all()
    assert any((pa != pc).any() for pa, pc in zip(a.net.parameters(), make_selector("mlp-init:1", dim=8).net.parameters()))


@pytest.mark.parametrize("question", ["What brand is my trunk?", "What plate number does my motorbike have?",
                                      "What does the sign above the bakery say?", "Which logo is on my mug?"])
def test_a_question_about_writing_a_photo_shows_offers_the_image(question):
    """A photo turn whose words only name the thing ("Here's my trunk") holds its brand, number plate or sign in the
    image alone: the rule offers the raw image as for an appearance question (#43: on photo dev 48K the IE answers
    were visible in half of c3m's contexts without this)."""
    w = World()
    i_img = img("s5-img")
    photo = w.add(node("s5", 0, "Here's my trunk, just bought it.", (i_img,)))
    p = RuleSelector().probabilities(question, qvec(question), [Candidate("photo", (photo,), 0.5)])[0]
    text_only = RuleSelector().probabilities("Where do I keep my trunk?", qvec("x"), [Candidate("photo", (photo,), 0.5)])[0]
    raw_image = FORM_NAMES.index("raw_image")
    assert p[raw_image] == 0.7 and text_only[raw_image] == 0.1


def test_a_question_about_the_present_state_offers_the_image_of_a_photo_naming_its_subject():
    """"What's the current name of the shop on King's Way?" reads the shop's sign: a photo turn that names the shop
    offers its raw image, without any appearance word in the question (#43); a photo of something else, or a question
    not about the present, does not."""
    w = World()
    shop = w.add(node("s6", 0, "The shop on King's Way, today's photo.", (img("s6-img"),)))
    other = w.add(node("s7", 0, "My balcony, in today's photo.", (img("s7-img"),)))
    cands = [Candidate("shop", (shop,), 0.5), Candidate("other", (other,), 0.4)]
    raw_image = FORM_NAMES.index("raw_image")
    now = RuleSelector().probabilities("What's the current name of the shop on King's Way?", qvec("x"), cands)
    assert now[0, raw_image] == 0.7 and now[1, raw_image] == 0.1
    then = RuleSelector().probabilities("Which shop did I mention first?", qvec("x"), cands)
    assert then[0, raw_image] == 0.1
