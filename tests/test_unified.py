"""The unified reader of ``c3m``: entry-level anchor-graph expansion (``c3m.read.expand``), the typed options
(``C3MConfig``, the ``c3m-paper`` preset, harness method specs), and the whole read path through ``Memory`` with
write-time perception: budgets, evidence forms, and what each ablation does (or, where it cannot apply, does
not do)."""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
import pytest

from c3m.config import MemoryConfig
from c3m.errors import InvalidInput
from c3m.store import text_sha256 as text_sha
from c3m.eval.harness import method_spec
from c3m.index.active import ActiveIndex, IndexEntry, normalize
from c3m.memory import Memory
from c3m.methods.c3m import PAPER, C3MConfig
from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models
from c3m.read.compose import FORM_NAMES
from c3m.read.expand import entry_anchors, expand_entries
from c3m.types import EvidenceForm, ReaderBudget, Session, Turn, VisualAnchor
from factories import BOOK, H, MUG, TABLE, W, scene_png

T0 = datetime(2026, 3, 1, 9, 0)


# =============================================================================================================
# expand_entries on a hand-built index
# =============================================================================================================
DIM = 4
Q = np.array([1.0, 0.0, 0.0, 0.0])
#: cos(q, key) of each anchor key (key vectors are built to have exactly these cosines with Q)
COS = {"mug": 0.9, "market": 0.6, "kettle": 0.3, "tea": 0.8, "cat": 0.7, "cold": -0.5, "x": 0.4, "x2": 0.4,
       "x3": 0.4, "y": 0.9, "z": 0.9, "w": 0.9}


def key_vectors(keys):
    keys = list(keys)
    key_vectors.calls.append(keys)
    return np.array([[COS[k], math.sqrt(1 - COS[k] ** 2), 0.0, 0.0] for k in keys])


key_vectors.calls = []


def _index(spec: dict[str, tuple[tuple[str, ...], tuple[str, ...]]], pages: dict[str, int] | None = None):
    """spec: name -> (entity keys, visual keys). Entry ids follow the spec's order."""
    index = ActiveIndex(DIM)
    named = {}
    for i, (name, (ents, vis)) in enumerate(spec.items()):
        e = IndexEntry(index.new_id(), normalize(np.eye(DIM)[i % DIM].astype(np.float32)), {f"s{i}": {0}}, T0, T0,
                       name, page=(pages or {}).get(name, 0), entities=Counter(ents), visual=Counter(vis))
        index.entries[e.entry_id] = e
        named[name] = e
    return index, named


def _reference(index: ActiveIndex, seeds, *, use_idf=True, visual=True) -> dict[str, float]:
    """Expected one-hop scores straight from the docstring: Σ idf(a)·max(0, cos(q, a)) over the anchors a
    neighbour shares with the seeds' union, idf(a) = log((2 + N) / (1 + df(a))) over the index's entries."""
    entries = index.ordered()
    sets = {e.entry_id: entry_anchors(e, visual) for e in entries}
    df = Counter(k for s in sets.values() for k in s)
    n = len(entries)
    seed_ids = {e.entry_id for e in seeds}
    union = set().union(*(sets[s] for s in seed_ids))
    out = {}
    for e in entries:
        if e.entry_id in seed_ids or not sets[e.entry_id] & union:
            continue
        idf = (lambda a: math.log((2 + n) / (1 + df[a]))) if use_idf else (lambda a: 1.0)
        score = sum(idf(a) * max(0.0, COS[a]) for a in sets[e.entry_id] & union)
        if score > 0:
            out[e.entry_id] = score
    return out


SPEC = {
    "seed": (("mug", "market", "cold"), ("kettle",)),
    "a": (("mug",), ()),               # shares the common "mug"
    "b": (("market", "tea"), ()),      # shares the rarer "market"
    "c": (("tea",), ()),               # shares only with b: two hops away
    "v": ((), ("kettle",)),            # linked through a visual key only
    "d": (("mug",), ()),
    "e": (("mug",), ()),
    "neg": (("cold",), ()),            # shares only a key the question is opposed to (cos < 0)
    "z": (("cat",), ()),               # unrelated
}


def _ids(out):
    return [e.entry_id for e, _ in out]


def test_expand_one_hop_only_never_a_seed_and_exact_scores():
    index, E = _index(SPEC)
    out = expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10)
    got = {e.entry_id: s for e, s in out}
    assert E["seed"].entry_id not in got
    assert E["c"].entry_id not in got, "c shares anchors only with the non-seed b"
    assert E["z"].entry_id not in got and E["neg"].entry_id not in got
    assert set(got) == {E[k].entry_id for k in ("a", "b", "v", "d", "e")}
    ref = _reference(index, [E["seed"]])
    assert got == pytest.approx(ref)
    assert [s for _, s in out] == sorted((s for _, s in out), reverse=True)
    # the rare "market" outweighs the common "mug" under IDF (0.6·log(11/3) > 0.9·log(11/5))
    assert _ids(expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=1)) == [E["b"].entry_id]


def test_expand_without_idf_changes_scores_and_ranking():
    index, E = _index(SPEC)
    with_idf = dict((e.entry_id, s) for e, s in expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10))
    flat = expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10, use_idf=False)
    flat_scores = {e.entry_id: s for e, s in flat}
    assert flat_scores == pytest.approx(_reference(index, [E["seed"]], use_idf=False))
    assert flat_scores[E["a"].entry_id] == pytest.approx(0.9) and flat_scores[E["b"].entry_id] == pytest.approx(0.6)
    assert flat_scores != pytest.approx(with_idf)
    top = _ids(expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=1, use_idf=False))
    assert top[0] in {E[k].entry_id for k in ("a", "d", "e")}  # mug's cosine wins without IDF


def test_expand_visual_false_drops_visual_only_links():
    index, E = _index(SPEC)
    assert E["v"].entry_id in _ids(expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10))
    key_vectors.calls.clear()
    out = expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10, visual=False)
    assert E["v"].entry_id not in _ids(out)
    assert {e.entry_id: s for e, s in out} == pytest.approx(_reference(index, [E["seed"]], visual=False))
    assert all("kettle" not in keys for keys in key_vectors.calls)
    # a visual key that matches an entity key of the same concept links both ways (one vocabulary)
    index, E = _index({"seed": (("mug",), ()), "seen": ((), ("mug",)), "other": (("cat",), ())})
    assert _ids(expand_entries(index, [E["seed"]], Q, key_vectors)) == [E["seen"].entry_id]
    assert expand_entries(index, [E["seed"]], Q, key_vectors, visual=False) == []


def test_expand_allowed_filter():
    index, E = _index(SPEC, pages={"b": 1})
    out = expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10, allowed=lambda e: e.page == 0)
    assert E["b"].entry_id not in _ids(out) and out
    assert _ids(expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=1, allowed=lambda e: e.page == 0))[0] \
        != E["b"].entry_id
    assert expand_entries(index, [E["seed"]], Q, key_vectors, allowed=lambda e: False) == []


def test_expand_empty_cases():
    index, E = _index(SPEC)
    assert expand_entries(index, [], Q, key_vectors) == []
    assert expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=0) == []
    assert expand_entries(index, index.ordered(), Q, key_vectors) == []  # everything is a seed
    assert expand_entries(index, [E["z"]], Q, key_vectors) == []  # cat is nobody else's
    bare, B = _index({"p": ((), ()), "q": ((), ())})
    assert expand_entries(bare, [B["p"]], Q, key_vectors) == []
    assert expand_entries(ActiveIndex(DIM), [E["seed"]], Q, key_vectors) == []


def test_expand_an_anchor_shared_by_several_seeds_counts_once():
    index, E = _index({"s1": (("mug",), ()), "s2": (("mug", "tea"), ()), "n": (("mug", "tea"), ()),
                       "pad": (("cat",), ())})
    out = expand_entries(index, [E["s1"], E["s2"]], Q, key_vectors)
    assert _ids(out) == [E["n"].entry_id]
    assert out[0][1] == pytest.approx(_reference(index, [E["s1"], E["s2"]])[E["n"].entry_id])


def test_expand_respects_k_edge():
    """S shares x with A, {x2, x3} with C; A shares {y, z, w} with B. With k_edge=1 S keeps only C and A keeps
    only B, so A, though it shares an anchor with S, is no neighbour in the graph."""
    spec = {"s": (("x", "x2", "x3"), ()), "a": (("x", "y", "z", "w"), ()), "b": (("y", "z", "w"), ()),
            "c": (("x2", "x3"), ())}
    index, E = _index(spec)
    assert set(_ids(expand_entries(index, [E["s"]], Q, key_vectors, k_edge=4))) == {E["a"].entry_id, E["c"].entry_id}
    assert _ids(expand_entries(index, [E["s"]], Q, key_vectors, k_edge=1)) == [E["c"].entry_id]


def test_expand_k_exp_caps_and_keeps_the_best():
    index, E = _index(SPEC)
    full = expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=10)
    for k in (1, 2, 3):
        part = expand_entries(index, [E["seed"]], Q, key_vectors, k_exp=k)
        assert len(part) == k and [s for _, s in part] == pytest.approx([s for _, s in full[:k]])


# =============================================================================================================
# C3MConfig and method specs
# =============================================================================================================
@pytest.mark.parametrize("options, field", [
    ({"k_exps": 3}, "k_exps"), ({"expansion": "false"}, "expansion"), ({"expansion": 1}, "expansion"),
    ({"k_exp": True}, "k_exp"), ({"k_edge": False}, "k_edge"), ({"k_exp": 2.5}, "k_exp"), ({"k_exp": "2"}, "k_exp"),
    ({"threshold": "0.5"}, "threshold"), ({"threshold": True}, "threshold"), ({"idf": None}, "idf"),
    ({"reader": "gpu"}, "reader"), ({"forms": "raw_text+thumbnail"}, "forms"), ({"forms": ()}, "forms"),
    ({"forms": ""}, "forms"), ({"k_exp": -1}, "k_exp"), ({"delta": 1.5}, "delta"),
    ({"relation_head": "llm"}, "relation_head")])
def test_from_options_rejects(options, field):
    with pytest.raises(InvalidInput) as err:
        C3MConfig.from_options(options)
    assert err.value.field == f"method_options.{field}"


@pytest.mark.parametrize("options, field", [({"selector": 3}, "selector"), ({"anchors": 5}, "anchors"),
                                            ({"forms": 5}, "forms"),
                                            ({"image_token_model": "bogus"}, "image_token_model")])
def test_from_options_rejects_wrong_types_of_string_options(options, field):
    with pytest.raises(InvalidInput) as err:
        C3MConfig.from_options(options)
    assert err.value.field == f"method_options.{field}"


def test_from_options_parses_and_converts():
    cfg = C3MConfig.from_options({"forms": "raw_text+caption", "k_exp": 3.0, "threshold": 1, "expansion": False})
    assert cfg.forms == ("raw_text", "caption")
    assert cfg.k_exp == 3 and type(cfg.k_exp) is int
    assert cfg.threshold == 1.0 and type(cfg.threshold) is float
    assert cfg.expansion is False
    assert C3MConfig.from_options({"forms": "raw_text,summary"}).forms == ("raw_text", "summary")
    assert C3MConfig.from_options({"forms": ["grounded_crop"]}).forms == ("grounded_crop",)
    assert C3MConfig.from_options({}) == C3MConfig()
    comp = C3MConfig.from_options({"forms": "caption", "threshold": 0.3, "lam_tokens": 0.2}).compose()
    assert (comp.forms, comp.threshold, comp.lam_tokens) == (("caption",), 0.3, 0.2)


def test_paper_preset():
    assert (PAPER.reader, PAPER.expansion, PAPER.entity_candidates) == ("c3m", False, False)
    assert PAPER.unit_tokens >= 10**6 and PAPER.lexical == 0.0
    cfg = C3MConfig.from_options({"k_exp": 5}, "c3m-paper", PAPER)
    assert cfg == dataclasses.replace(PAPER, k_exp=5)
    with pytest.raises(InvalidInput) as err:
        C3MConfig.from_options({"nope": 1}, "c3m-paper", PAPER)
    assert err.value.field == "method_options.nope" and "c3m-paper" in str(err.value)


def test_method_spec_parses_to_typed_options():
    name, opts = method_spec("c3m:reader=c3m,expansion=false,k_exp=3")
    assert name == "c3m" and opts == {"reader": "c3m", "expansion": False, "k_exp": 3}
    assert type(opts["k_exp"]) is int and opts["expansion"] is False
    cfg = C3MConfig.from_options(opts)
    assert (cfg.reader, cfg.expansion, cfg.k_exp) == ("c3m", False, 3)
    name, opts = method_spec("c3m:forms=raw_text+caption,threshold=0.25,idf=TRUE,lam_tokens=-0.5")
    assert opts == {"forms": "raw_text+caption", "threshold": 0.25, "idf": True, "lam_tokens": -0.5}
    with pytest.raises(InvalidInput) as err:  # a negative token price would reward reading more
        C3MConfig.from_options(opts)
    assert err.value.field == "method_options.lam_tokens"
    assert C3MConfig.from_options({**opts, "lam_tokens": 0.5}).forms == ("raw_text", "caption")
    assert method_spec("c3m-paper") == ("c3m-paper", {})
    assert method_spec("hivemem:") == ("hivemem", {})
    with pytest.raises(InvalidInput) as err:
        method_spec("c3m:expansion")
    assert err.value.field == "methods"


# =============================================================================================================
# The read path through Memory, with write-time perception
# =============================================================================================================


class FakeExtractor:
    """Fixed perception of the drawn scene (a mug, a book, the table under both); captions name the bytes."""

    name = "fake"
    version = "fake.1"
    anchors = [VisualAnchor("table", None, None, 1.0, TABLE), VisualAnchor("mug", None, None, 0.9, MUG),
               VisualAnchor("mug", "colour", "red", 0.8, MUG), VisualAnchor("book", None, None, 0.7, BOOK)]

    def caption(self, image: bytes) -> str:
        return f"a mug and a book on a table ({hashlib.sha256(image).hexdigest()[:6]})"

    def visual_anchors(self, image: bytes):
        return list(self.anchors)

    def ground(self, image: bytes, phrase: str):
        return next((a.bbox for a in self.anchors if a.label in phrase), None)

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        return text


def _s(i: int, *turns) -> Session:
    return Session(f"s{i}", T0 + timedelta(days=i), tuple(Turn(r, t, ims) for r, t, ims in turns))


def image_history() -> list[Session]:
    return [
        _s(0, ("user", "Here is my red mug from the Leeds market.", (scene_png((200, 30, 30)),)),
           ("assistant", "Lovely mug!", ())),
        _s(1, ("user", "I moved the lamp to the garage.", ()), ("assistant", "Okay.", ())),
        _s(2, ("user", "Look at my new kettle on the kitchen shelf.", ()), ("user", "", (scene_png((30, 200, 30)),)),
           ("assistant", "Shiny!", ())),
        _s(3, ("user", "My sister Anna visited from York.", ()), ("assistant", "Nice.", ())),
        _s(4, ("user", "The novel on my desk is about Leeds history.", (scene_png((90, 90, 90)),)),
           ("assistant", "Sounds fun.", ())),
        _s(5, ("user", "Anna bought a blue mug in York.", ()), ("assistant", "Cool.", ())),
        _s(6, ("user", "The garage door is broken again.", ()), ("assistant", "Oh no.", ())),
        _s(7, ("user", "Anna and I walked through the Leeds market.", ()), ("assistant", "Fun.", ())),
        _s(8, ("user", "Photo from my trip.", (scene_png((10, 10, 10)),)), ("assistant", "Great shot.", ())),
        _s(9, ("user", "My kettle broke, so I bought a new one at the market.", ()), ("assistant", "Handy.", ())),
    ]


QUESTIONS = ["What colour is my mug?", "Where is the lamp?", "What did Anna buy?", "What is the novel about?",
             "Show me the kettle photo", "What is in the book photo?", "Where did Anna walk?"]
BUDGETS = [ReaderBudget(), ReaderBudget(1, 1, 1, 30), ReaderBudget(3, 0, 2, 200), ReaderBudget(3, 5, 0, 50),
           ReaderBudget(2, 3, 3, 100), ReaderBudget(0, 5, 5, 500)]
IMAGE_FORMS = {EvidenceForm.CAPTION, EvidenceForm.RAW_IMAGE, EvidenceForm.GROUNDED_CROP}


def _models(perception: bool) -> Models:
    return Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer(),
                  perception=FakeExtractor() if perception else None)


def _open(path, models, method="c3m", **options) -> Memory:
    return Memory(path, "u", models=models, config=MemoryConfig(method=method, method_options=options))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two stores holding the image history: one written with the fake perception backend, one without."""
    out = {}
    for seen in (True, False):
        path = tmp_path_factory.mktemp("perceived" if seen else "blind")
        with _open(path, _models(seen)) as mem:
            for s in image_history():
                mem.add_session(s)
        out[seen] = path
    return out


def _contexts(path, models, method="c3m", questions=QUESTIONS, budgets=BUDGETS, **options) -> dict:
    with _open(path, models, method, **options) as mem:
        return {(q, b): mem.retrieve(q, b) for q in questions for b in budgets}  # raises on any violation


def _forms(ctxs: dict) -> set[EvidenceForm]:
    return {i.form for c in ctxs.values() for i in c.items}


def test_perception_records_are_written_with_the_sessions(stores):
    with _open(stores[True], _models(True)) as mem:
        nodes = mem.nodes()
        with_images = [n for n in nodes if n.images]
        assert len(with_images) == 4
        recs = mem.store.perceptions([n.node_id for n in nodes])
        assert set(recs) == {n.node_id for n in with_images}
        for n in with_images:
            (r,) = recs[n.node_id]
            assert (r.backend, r.version, r.image) == ("fake", "fake.1", n.images[0])
            assert r.caption.startswith("a mug and a book") and r.anchors
            assert r.crop is not None  # the text names a mug or a book, or the largest non-background object
            blob = mem.store.derived_blob(r.crop.sha256)
            # identical crops of identical objects share one blob: every (node, source image) is listed
            assert n.node_id in blob["node_ids"]
            links = [tuple(x) for x in blob.get("links", [(blob["node_id"], blob["source_sha256"])])]
            assert (n.node_id, n.images[0].sha256) in links or "links" not in blob
        by_text = {n.text: recs[n.node_id][0] for n in with_images}
        assert by_text["Here is my red mug from the Leeds market."].crop_phrase == "red mug"
        assert by_text["The novel on my desk is about Leeds history."].crop_phrase == "book"  # fallback: largest
        assert mem.store.namespace_stats("u")["derived_records"] == 4
        assert mem.verify().ok
    with _open(stores[False], _models(False)) as mem:
        assert mem.store.perceptions([n.node_id for n in mem.nodes()]) == {}


@pytest.mark.parametrize("method, options", [("c3m", {}), ("c3m-paper", {}), ("hivemem", {}),
                                             ("c3m", {"reader": "c3m"}), ("c3m", {"entries_k": 1}),
                                             ("c3m", {"lam_tokens": 1.0, "threshold": 0.2})])
@pytest.mark.parametrize("seen", [True, False])
def test_retrieve_stays_within_every_budget(stores, method, options, seen):
    ctxs = _contexts(stores[seen], _models(seen), method, **options)
    for (q, b), ctx in ctxs.items():
        assert ctx.use.fits(b), (q, b, ctx.use)
        keys = [(i.provenance.time, i.provenance.session_id, i.provenance.turn_index) for i in ctx.items]
        assert keys == sorted(keys), "items in time order"
        if b.pages == 0 and method != "hivemem":
            assert ctx.items == ()
        if not seen:
            assert not ({i.form for i in ctx.items} & {EvidenceForm.CAPTION, EvidenceForm.GROUNDED_CROP})
    assert any(c.items for c in ctxs.values())


@pytest.mark.parametrize("method, options", [("c3m", {"reader": "c3m"}), ("c3m-paper", {})])
def test_c3m_only_reader_emits_raw_text_items(stores, method, options):
    ctxs = _contexts(stores[True], _models(True), method, **options)
    assert _forms(ctxs) == {EvidenceForm.RAW_TEXT}
    # the original images ride on their turn's raw-text item
    assert any(i.images for c in ctxs.values() for i in c.items)


def test_unified_reader_uses_derived_forms(stores):
    ctxs = _contexts(stores[True], _models(True))
    assert {EvidenceForm.RAW_TEXT} | IMAGE_FORMS <= _forms(ctxs)
    assert EvidenceForm.SUMMARY not in _forms(ctxs)  # c3m's memories are single nodes, without a summary
    hive = _contexts(stores[True], _models(True), "hivemem")
    assert EvidenceForm.RAW_TEXT in _forms(hive)


def test_c3m_paper_is_the_paper_preset(stores):
    with _open(stores[True], _models(True), "c3m-paper") as mem:
        assert mem.method.cfg == PAPER and mem.method.selector is None
    with _open(stores[True], _models(True), "c3m-paper", k_exp=7) as mem:
        assert mem.method.cfg.k_exp == 7 and mem.method.cfg.reader == "c3m"


@pytest.fixture(scope="module")
def narrow(stores):
    """Contexts of the unified reader routed to 1-2 entries (so expansion has entries left to add)."""
    return {k: _contexts(stores[True], _models(True), entries_k=k) for k in (1, 2)}


@pytest.mark.parametrize("options", [{"expansion": False}, {"visual_anchors": False}, {"k_exp": 1}])
@pytest.mark.parametrize("entries_k", [1, 2])
def test_graph_ablations_change_some_context(stores, narrow, options, entries_k):
    base = narrow[entries_k]
    assert any("expanded entries" in c.trace.notes[0] and " 0 expanded" not in c.trace.notes[0]
               for c in base.values()), "expansion must add entries in the base run"
    ablated = _contexts(stores[True], _models(True), entries_k=entries_k, **options)
    assert any(base[k] != ablated[k] for k in base)
    if options == {"expansion": False}:
        assert all(" 0 expanded" in c.trace.notes[0] for c in ablated.values() if c.items)


@pytest.mark.parametrize("drop", ["caption", "raw_image", "grounded_crop", "raw_text"])
def test_dropping_a_form_changes_contexts_and_removes_it(stores, drop):
    base = _contexts(stores[True], _models(True))
    assert EvidenceForm(drop) in _forms(base)
    ablated = _contexts(stores[True], _models(True), forms=tuple(f for f in FORM_NAMES if f != drop))
    assert EvidenceForm(drop) not in _forms(ablated)
    assert any(base[k] != ablated[k] for k in base)


def test_summary_only_forms_are_refused_for_c3m(stores):
    """c3m's memories are single Raw Nodes without a summary: summary-only would silently return nothing."""
    with pytest.raises(InvalidInput) as err:
        _contexts(stores[True], _models(True), forms="summary")
    assert err.value.field == "method_options.forms"


@pytest.mark.parametrize("options", [{"forms": "raw_text+summary+raw_image+grounded_crop"},
                                     {"forms": "raw_text+summary+caption+raw_image"},
                                     {"forms": "raw_text+summary+raw_image"},
                                     {"visual_anchors": False}])
def test_ablations_that_cannot_apply_without_perception_change_nothing(stores, options):
    """Without a perception backend there are no captions, crops or visual anchors to take away."""
    base = _contexts(stores[False], _models(False), entries_k=2)
    assert _forms(base) == {EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE}
    assert _contexts(stores[False], _models(False), entries_k=2, **options) == base


def test_expansion_cannot_apply_when_routing_takes_every_entry(stores):
    with _open(stores[True], _models(True)) as mem:
        assert len(mem.method.index.entries) <= mem.method.cfg.entries_k
    base = _contexts(stores[True], _models(True))
    for options in ({"expansion": False}, {"idf": False}, {"visual_anchors": False}, {"k_edge": 1}):
        assert _contexts(stores[True], _models(True), **options) == base, options


def test_idf_ablation_changes_which_neighbour_is_expanded(tmp_path):
    """One routed entry (about a mug at the Leeds market), k_exp=1: under IDF the neighbour sharing the rare
    'market' wins, without IDF one sharing the common 'mug' (the question's cosine to 'mug' is higher)."""
    texts = ["I saw a mug at the Leeds market.", "My mug is chipped.", "A mug of tea keeps me warm.",
             "The mug fell off the desk.", "I washed the mug twice.", "The Leeds market opens at noon.",
             "My cat sleeps all day."]
    models = _models(False)
    with _open(tmp_path, models, delta=1.0) as mem:  # delta 1: nothing merges, one entry per session
        for i, t in enumerate(texts):
            mem.add_session(_s(i, ("user", t, ()), ("assistant", "Okay.", ())))
        assert len(mem.method.index.entries) == len(texts)
    q = "Which mug, the mug I saw at the Leeds market?"
    got = {}
    for idf in (True, False):  # the index alone (cold=false): the Cold-Store search would find s5 either way
        with _open(tmp_path, models, delta=1.0, entries_k=1, k_exp=1, idf=idf, cold=False) as mem:
            ctx = mem.retrieve(q, ReaderBudget())
            got[idf] = {i.provenance.session_id for i in ctx.items}
    assert "s0" in got[True] and "s0" in got[False]  # the routed entry
    assert "s5" in got[True] and "s5" not in got[False]
    assert got[True] != got[False]


def test_image_only_turn_embedding_text(stores):
    for seen in (True, False):
        with _open(stores[seen], _models(seen)) as mem:
            (node,) = [n for n in mem.nodes() if n.images and not n.text.strip()]
            (text,) = mem.method.embedding_texts([node])
            if seen:
                cap = mem.store.perceptions([node.node_id])[node.node_id][0].caption
                assert text == f"[image: {cap}]"
            else:
                assert text == "[image] Look at my new kettle on the kitchen shelf."
            # a turn with text and an image: its text, plus the caption when there is one
            pic = next(n for n in mem.nodes() if n.images and n.text.startswith("Here is my red mug"))
            (t2,) = mem.method.embedding_texts([pic])
            assert t2.startswith(pic.text) and (("[image: a mug and a book" in t2) == seen)


def test_snapshot_written_under_other_write_options_is_not_reused(stores, tmp_path):
    models = _models(True)
    opts = {"unit_tokens": 10**9, "entity_candidates": False}
    with _open(stores[True], models, **opts) as reused:
        state = reused.method.state()
    with _open(tmp_path, models, **opts) as fresh:
        for s in image_history():
            fresh.add_session(s)
        assert fresh.method.state() == state


def test_identical_crops_of_different_images_verify_for_every_node(stores):
    """The drawn book sits at the same place in every scene, so the 'book' crops of images that differ (their
    mugs' colours) are byte-identical: one blob with several (node, source image) links. A crop item of each of
    those nodes is a derived blob of that node's own image."""
    from c3m.types import BudgetUse, Context, ContextItem, RouteTrace

    with _open(stores[True], _models(True)) as mem:
        nodes = {n.node_id: n for n in mem.nodes() if n.images}
        recs = mem.store.perceptions(list(nodes))
        by_crop: dict[str, list[str]] = {}
        for nid, (r,) in recs.items():
            by_crop.setdefault(r.crop.sha256, []).append(nid)
        shared = [ids for ids in by_crop.values() if len(ids) > 1]
        assert shared and len({nodes[i].images[0].sha256 for i in shared[0]}) > 1
        for nid, (r,) in recs.items():
            n = nodes[nid]
            item = ContextItem(nid, n.provenance, n.role, EvidenceForm.GROUNDED_CROP, f"[crop: {r.crop_phrase}]",
                               (r.crop,), 1.0, 0)
            page = next(p for p, ids in mem.snapshot_view().pages.items() if nid in ids)  # the page that reaches it
            trace = RouteTrace("test", pages=((page, 1.0),))
            m = mem.measure(Context("q", (item,), BudgetUse(), ReaderBudget(), trace))
            assert not m.problems, (nid, m.problems)
            assert m.use.images == 1 and m.use.raw_nodes == 0


@pytest.mark.parametrize("method", ["c3m", "hivemem"])
def test_forgotten_session_never_reaches_a_context(tmp_path, method):
    models = _models(True)
    with _open(tmp_path, models, method) as mem:
        for s in image_history()[:6]:
            mem.add_session(s)
        gone = {n.node_id for n in mem.nodes() if n.session_id == "s0"}
        before = mem.retrieve("What colour is my red mug from the Leeds market?", ReaderBudget())
        assert gone & {i.node_id for i in before.items}
        mem.forget(session_id="s0", reason="test")
        for q in QUESTIONS[:3] + ["What colour is my red mug from the Leeds market?"]:
            for b in BUDGETS:
                ctx = mem.retrieve(q, b)
                assert not gone & {i.node_id for i in ctx.items}
                assert all("Leeds market" not in i.text or i.provenance.session_id != "s0" for i in ctx.items)


def test_expansion_pages_reserve_page_budget_for_expanded_entries(stores):
    """With pages kept back for expansion, routing reads fewer pages, expansion may open others (charged in the
    trace), and no context ever goes over the page budget (Memory.retrieve raises if one did)."""
    base = _contexts(stores[True], _models(True), entries_k=2)
    kept = _contexts(stores[True], _models(True), entries_k=2, expansion_pages=1)
    for key, ctx in kept.items():
        _, budget = key
        assert len({p for p, _ in ctx.trace.pages}) <= budget.pages
    off = _contexts(stores[True], _models(True), entries_k=2, expansion_pages=1, expansion=False)
    assert off == _contexts(stores[True], _models(True), entries_k=2, expansion=False)  # no expansion: no reserve
    assert kept.keys() == base.keys()


def test_forget_drops_the_cached_vector_of_text_plus_captions(stores, tmp_path):
    """What a method embedded for an image turn (its text with its captions) is derived from the forgotten
    turn: forget removes that cached vector too, not only the vector of the bare text."""
    import shutil

    path = tmp_path / "copy"
    shutil.copytree(stores[True], path)
    with _open(path, _models(True)) as mem:
        node = next(n for n in mem.nodes() if n.images and n.text.strip())
        (text,) = mem.method.embedding_texts([node])
        assert text != node.text and "[image:" in text
        model = mem.models.text_embedder.name
        assert mem.store.get_vectors(model, [text_sha(text)])
        mem.forget(node_ids=[node.node_id], reason="test")
        assert not mem.store.get_vectors(model, [text_sha(text)])
