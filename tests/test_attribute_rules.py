"""The compiled attribute ruler gives spaCy's own ruler's output, token for token, on real dialog turns."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from c3m.models.anchors import SPACY_MODEL, spacy_available

DEV = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "memgallery-dev" / "episodes.jsonl"
# the ruler's word-level exceptions: contractions, multi-token runs, regex and NOT_IN patterns, spaces
EXCEPTIONS = ["I ain't gonna do it, y'all. C'mon, let's go! There's a cat and there are two dogs. Gotta run.",
              "Ya'll ain't ready, ya know; he gets it, she got it.", "  spaces   here \n\n ok", "", "Let's eat.",
              "We're gonna wanna see 'em, ain't we?", "It's his; it's hers. Who's there? Wasn't me."]


@pytest.fixture(scope="module")
def pipelines():
    spacy = pytest.importorskip("spacy")
    ok, reason = spacy_available()
    if not ok:
        pytest.skip(reason)
    ruled = spacy.load(SPACY_MODEL)
    ruled.disable_pipe("lemmatizer")  # lemmas the ruler sets must show; the lemmatizer would set the rest
    bare = spacy.load(SPACY_MODEL)
    for name in ("lemmatizer", "attribute_ruler"):
        bare.disable_pipe(name)
    return ruled, bare


def dialog_turns(limit: int) -> list[str]:
    texts = []
    for line in DEV.read_text().splitlines():
        for session in json.loads(line)["sessions"]:
            texts += [t["text"] for t in session["turns"]]
    return list(dict.fromkeys(texts))[:limit]


def annotations(doc):
    from spacy.attrs import DEP, IS_SPACE, LEMMA, MORPH, POS, TAG

    return doc.to_array([POS, MORPH, LEMMA, TAG, DEP, IS_SPACE]).tolist()


def test_compiled_ruler_matches_spacy_ruler(pipelines):
    from c3m.models.attribute_rules import compile_ruler

    ruled, bare = pipelines
    ruler = compile_ruler(bare.get_pipe("attribute_ruler"))
    assert ruler is not None, "the small English pipeline's ruler should compile"
    texts = EXCEPTIONS + dialog_turns(300)
    want = [annotations(d) for d in ruled.pipe(texts)]
    docs = list(bare.pipe(texts))
    before = [annotations(d) for d in docs]
    for start in range(0, len(docs), 37):  # ragged batches: runs must not join two docs
        ruler(docs[start:start + 37])
    got = [annotations(d) for d in docs]
    assert sum(b != w for b, w in zip(before, want)) > len(texts) // 2, "the ruler should change most docs"
    assert [i for i, (g, w) in enumerate(zip(got, want)) if g != w] == []
    tokens = {t.lower_: t for d in docs for t in d}
    assert tokens["gon"].lemma_ == "go" and tokens["na"].lemma_ == "to"  # a two-token rule, index 0 and 1


def test_unsupported_patterns_are_not_compiled(pipelines):
    from c3m.models.attribute_rules import compile_ruler

    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("attribute_ruler")
    ruler.add([[{"LOWER": "a", "OP": "+"}]], {"LEMMA": "x"})  # a quantifier: spaCy's ruler must run instead
    assert compile_ruler(ruler) is None
    ruler = nlp.add_pipe("attribute_ruler", name="by_shape")
    ruler.add([[{"SHAPE": "Xxx"}]], {"LEMMA": "x"})
    assert compile_ruler(ruler) is None


def test_extractor_uses_the_compiled_ruler_with_the_same_anchors(pipelines):
    from c3m.models.anchors import SpacyAnchorExtractor

    fast = SpacyAnchorExtractor()
    assert fast.ruler is not None and "attribute_ruler" not in fast.nlp.pipe_names
    slow = SpacyAnchorExtractor()
    slow.nlp.enable_pipe("attribute_ruler")
    slow.ruler = None
    texts = EXCEPTIONS + dialog_turns(120)
    assert fast.extract(texts) == slow.extract(texts)


def test_numpy_blas_gives_blis_anchors(pipelines, monkeypatch):
    """thinc's products through NumPy's BLAS (the default, faster here) find the anchors blis finds."""
    import c3m.models.anchors as anchors

    texts = EXCEPTIONS + dialog_turns(150)
    got = {}
    for blis in (True, False):
        monkeypatch.setattr(anchors, "BLIS", blis)
        extractor = anchors.SpacyAnchorExtractor()
        assert extractor.nlp.get_pipe("ner").model.ops.use_blis is blis
        got[blis] = extractor.extract(texts)
    assert got[True] == got[False]
