"""Text anchors: spaCy entities / noun chunks, the regex fallback, and keys that match across turns."""
from __future__ import annotations

import importlib.util
import logging

import pytest

from c3m.models.anchors import (Anchor, HeuristicAnchorExtractor, TextAnchorExtractor, anchor_key, anchor_keys,
                                make_anchor_extractor, spacy_available)

TURN1 = "Alice moved the red mug to the kitchen in March."
TURN2 = "Where did Alice put the red mugs?"
TURN3 = "My mug is in the Kitchen now; Bob's car is at Heathrow Airport."


@pytest.fixture(scope="module")
def spacy_extractor():
    pytest.importorskip("spacy")
    ok, reason = spacy_available()
    if not ok:
        pytest.skip(reason)
    return make_anchor_extractor("spacy")


def by_key(anchors: list[Anchor]) -> dict[str, Anchor]:
    return {a.key: a for a in anchors}


def check_spans(text: str, anchors: list[Anchor]) -> None:
    for a in anchors:
        assert text[a.start:a.end] == a.text and a.kind in ("entity", "noun_chunk") and a.key


def test_anchor_key_strips_determiners_and_possessives():
    assert anchor_key(["The", "red", "mug"]) == "red mug"
    assert anchor_key(["my", "Kitchen", "."]) == "kitchen"
    assert anchor_key(["Bob", "'s", "car"]) == "bob car"


def test_spacy_finds_entities_and_noun_chunks(spacy_extractor):
    assert isinstance(spacy_extractor, TextAnchorExtractor) and spacy_extractor.name.startswith("spacy:")
    [anchors] = spacy_extractor.extract([TURN1])
    check_spans(TURN1, anchors)
    keys = by_key(anchors)
    assert {"alice", "red mug", "kitchen", "march"} <= set(keys)
    assert keys["alice"].kind == "entity" and keys["march"].label == "DATE"
    assert keys["red mug"].kind == "noun_chunk" and keys["red mug"].text == "the red mug"
    assert len(keys) == len(anchors)  # "Alice" is not listed again as a noun chunk
    assert anchors == sorted(anchors, key=lambda a: a.start)


def test_spacy_keys_match_across_turns(spacy_extractor):
    a1, a2, a3 = spacy_extractor.extract([TURN1, TURN2, TURN3])
    assert {"alice", "red mug"} <= anchor_keys(a1) & anchor_keys(a2)  # plural and determiner folded
    assert {"mug", "kitchen"} <= anchor_keys(a3) and "heathrow airport" in anchor_keys(a3)
    check_spans(TURN3, a3)


def test_spacy_batches_and_drops_pronouns(spacy_extractor):
    texts = ["", "I think it is fine.", TURN1] * 5
    out = spacy_extractor.extract(texts)
    assert len(out) == 15 and out[0] == [] and out[1] == []
    assert out[2] == out[5] == spacy_extractor.extract([TURN1])[0]


@pytest.mark.parametrize("backend", ["spacy-ner", "spacy-tagger"])
def test_lighter_spacy_backends_find_the_same_things_by_key(spacy_extractor, backend):
    """Without the parser (and the NER) the keys that tie turns together are the same on plain sentences: noun
    chunks come from part-of-speech patterns, entities from proper-noun runs when the NER is left out."""
    light = make_anchor_extractor(backend)
    assert light.name.startswith(backend + ":") and "parser" not in light.nlp.pipe_names
    assert ("ner" in light.nlp.pipe_names) == (backend == "spacy-ner")
    texts = [TURN1, TURN2, TURN3, "", "I think it is fine."]
    got = light.extract(texts)
    for text, anchors in zip(texts, got):
        check_spans(text, anchors)
        assert anchors == sorted(anchors, key=lambda a: (a.start, a.end))
    assert got[3] == [] and got[4] == []  # pronouns are dropped, as by the full pipeline
    assert {"alice", "red mug", "kitchen"} <= anchor_keys(got[0]) & anchor_keys(spacy_extractor.extract([TURN1])[0])
    assert {"alice", "red mug"} <= anchor_keys(got[1])
    assert {"mug", "kitchen", "heathrow airport"} <= anchor_keys(got[2])
    chunks = {a.key: a for a in got[0] if a.kind == "noun_chunk"}
    assert chunks["red mug"].text == "the red mug"
    assert by_key(got[0])["alice"].kind == "entity" and by_key(got[0])["march"].label == "DATE"


def test_pos_chunks_extend_over_modifiers_to_one_determiner(spacy_extractor):
    from c3m.models.anchors import pos_chunks, proper_noun_runs

    doc, = make_anchor_extractor("spacy-tagger").parse(["My old red car and two big dogs met Heathrow Airport staff."])
    chunks = [c.text for c in pos_chunks(doc)]
    assert "My old red car" in chunks and "two big dogs" in chunks
    assert [r.text for r in proper_noun_runs(doc)] == ["Heathrow Airport"]
    with pytest.raises(ValueError, match="unknown spaCy anchor backend"):
        from c3m.models.anchors import SpacyAnchorExtractor

        SpacyAnchorExtractor(backend="spacy-fast")


def test_heuristic_fallback_finds_names_dates_and_listed_nouns():
    ex = HeuristicAnchorExtractor()
    a1, a2, a3 = ex.extract([TURN1, TURN2, TURN3])
    for text, anchors in ((TURN1, a1), (TURN2, a2), (TURN3, a3)):
        check_spans(text, anchors)
    keys = by_key(a1)
    assert set(keys) == {"alice", "red mug", "kitchen", "march"}
    assert keys["alice"].kind == "entity" and keys["march"].label == "DATE" and keys["red mug"].kind == "noun_chunk"
    assert {"alice", "red mug"} <= anchor_keys(a1) & anchor_keys(a2)
    assert {"mug", "kitchen", "bob", "car", "heathrow airport"} <= anchor_keys(a3)
    assert by_key(a3)["bob"].text == "Bob"
    assert ex.extract(["", "I think it is fine."]) == [[], []]
    [a4] = ex.extract(["Did Bob's sister call? I'm sure she did. Don't worry, Thanks."])
    assert [(a.text, a.key) for a in a4] == [("Bob", "bob")]


def test_auto_falls_back_to_heuristic_without_spacy(monkeypatch, caplog):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("spacy") else real(name, *a))
    with caplog.at_level(logging.WARNING):
        ex = make_anchor_extractor("auto")
    assert ex.name == "heuristic" and "spacy" in caplog.text
    with pytest.raises(ImportError, match="pip install spacy"):
        make_anchor_extractor("spacy")
    with pytest.raises(ValueError):
        make_anchor_extractor("nope")


def test_spacy_imported_without_torch_gives_the_same_anchors():
    """The CLI's start-up shortcut (``IMPORT_SPACY_WITHOUT_TORCH``): same anchors, no torch, torch still importable."""
    import subprocess
    import sys

    from c3m.models.anchors import spacy_available

    if not spacy_available()[0]:
        pytest.skip("spaCy is not installed")
    code = ("import sys; from c3m.models import anchors; anchors.IMPORT_SPACY_WITHOUT_TORCH = {flag}; "
            "e = anchors.SpacyAnchorExtractor(); "
            "print(repr([[(a.text, a.key, a.kind) for a in x] for x in e.extract(["
            "'I painted my bike red at the Riverside Market.', 'Alice repainted the blue mug next to the lamp.'])])); "
            "print('torch' in sys.modules); import torch; print(torch.__name__)")
    runs = [subprocess.run([sys.executable, "-c", code.format(flag=flag)], capture_output=True, text=True, check=True,
                           timeout=300).stdout.splitlines() for flag in (False, True)]
    assert runs[0][0] == runs[1][0] and "bike" in runs[0][0]
    assert runs[1][1:] == ["False", "torch"]  # hidden while spaCy loaded, importable afterwards


def test_spacy_parses_a_long_turn_in_pieces_with_offsets_into_the_whole(spacy_extractor, monkeypatch):
    """A turn over SPACY_PIECE_CHARS is parsed piece by piece (bounded memory): every anchor's offsets still
    point into the whole text, and a short text's anchors are unchanged by the piece path."""
    from c3m.models import anchors as mod

    monkeypatch.setattr(mod, "SPACY_PIECE_CHARS", 120)
    sentence = "Alice put the red mug on the kitchen shelf in Paris. "
    text = sentence * 12
    (long,) = spacy_extractor.extract([text])
    assert long and all(text[a.start:a.end] == a.text for a in long)
    assert [a.start for a in long] == sorted(a.start for a in long)
    assert {a.key for a in long} >= {a.key for a in spacy_extractor.extract([sentence])[0]}
    assert any(a.start > 500 for a in long)  # later pieces are parsed too
