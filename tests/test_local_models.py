"""``local`` backends on tiny randomly initialised models built here from configs and saved to tmp_path.

Nothing is downloaded: BERT, CLIP, Llama and LLaVA folders (a few hundred kB each) are written with
``save_pretrained`` and loaded back through the classes under test with ``local_files_only=True``. The
weights are random, so tests check shapes, normalisation, determinism, batching, prompts, images
reaching the model and the JSON/box validation (with scripted replies) — not output quality.
Tests marked ``gpu`` repeat the load on CUDA (accelerate ``device_map="auto"``, bf16).
"""
from __future__ import annotations

import io
import logging
from datetime import datetime

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("PIL")

from PIL import Image  # noqa: E402

from c3m.errors import C3MError  # noqa: E402
from c3m.models.answer import REFUSAL  # noqa: E402
from c3m.models.api import ChatResult, Usage  # noqa: E402
from c3m.models.base import Answerer, Extractor, ImageEmbedder, TextEmbedder, VisualAnchor  # noqa: E402
from c3m.models.local import (EXTRACT_PROMPT_VERSION, LocalAnswerer, LocalExtractor,  # noqa: E402
                              LocalImageEmbedder, LocalTextEmbedder, find_json, resolve_device, resolve_dtype,
                              valid_box)
from c3m.types import (Answer, BudgetUse, Context, ContextItem, EvidenceForm, ImageRef, Provenance,  # noqa: E402
                       ReaderBudget, RouteTrace)

WORDS = ("a photo of red blue mug dog the kitchen garden what is where did i put my moved to this morning we "
         "adopted named him biscuit caption json label bbox memory excerpts question answer don't know user "
         "[ ] { } : , . ? \" # - 0 1 2 3 4 5 6 7 8 9 s1 s2").split()
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }} {% if m['content'] is string %}{{ m['content'] }}"
                 "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}"
                 "{% endif %} {% endfor %}{% endif %}<|im_end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")
SPECIALS = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>", "<image>", "[CLS]", "[SEP]", "[MASK]"]


def word_tokenizer(*, cls_sep: bool = False, chat: bool = False, specials: tuple[str, ...] = ()):
    """A word-level fast tokenizer over ``WORDS``; ``cls_sep`` wraps texts BERT-style ([CLS] ... [SEP])."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = SPECIALS + list(specials)
    vocab = {w: i for i, w in enumerate(dict.fromkeys(specials + WORDS))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    core.add_special_tokens(specials)  # atomic: "<image>" must stay one token for the processor to expand it
    if cls_sep:
        core.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="[SEP]" if cls_sep else "<|im_end|>", bos_token="<|im_start|>")
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok, vocab


def llama_config(vocab: dict, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                       bos_token_id=vocab["<|im_start|>"], eos_token_id=vocab["<|im_end|>"],
                       pad_token_id=vocab["<pad>"], **extra)


def clip_image_processor():
    from transformers import CLIPImageProcessor

    return CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("models") / "tiny-bert"
    tok, vocab = word_tokenizer(cls_sep=True)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64, pad_token_id=vocab["<pad>"])
              ).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    """Hub layout: config + weights, preprocessor_config.json and tokenizer files saved separately."""
    from transformers import CLIPConfig, CLIPModel

    folder = tmp_path_factory.mktemp("models") / "tiny-clip"
    tok, vocab = word_tokenizer(cls_sep=True)
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=32, bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"],
                pad_token_id=vocab["<pad>"])
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2)
    torch.manual_seed(0)
    CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)).save_pretrained(folder)
    clip_image_processor().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    tok, vocab = word_tokenizer(chat=True)
    torch.manual_seed(0)
    LlamaForCausalLM(llama_config(vocab)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory):
    """A LLaVA (CLIP vision tower + Llama) with 16 image tokens per image and a LlavaProcessor."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    folder = tmp_path_factory.mktemp("models") / "tiny-llava"
    tok, vocab = word_tokenizer(chat=True)
    vision = CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2)
    config = LlavaConfig(vision_config=vision, text_config=llama_config(vocab), image_token_index=vocab["<image>"],
                         vision_feature_select_strategy="default", vision_feature_layer=-1)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    LlavaProcessor(image_processor=clip_image_processor(), tokenizer=tok, patch_size=8,
                   vision_feature_select_strategy="default", num_additional_image_tokens=1,
                   chat_template=CHAT_TEMPLATE).save_pretrained(folder)
    return folder


def png(color=(200, 20, 20), size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


RED, BLUE = png(), png((20, 20, 200), (30, 50))
REF = ImageRef("ab" * 32, "image/png", 40, 30, len(RED))


def item(session: str, turn: int, text: str, score: float = 1.0, images=()) -> ContextItem:
    prov = Provenance("ns", session, turn, datetime(2026, 3, 1 + turn, 9, 0))
    return ContextItem(f"n-{session}-{turn}", prov, "user", EvidenceForm.RAW_TEXT, text, tuple(images), score,
                       len(text.split()))


def context(*items: ContextItem) -> Context:
    return Context("q", tuple(items), BudgetUse(), ReaderBudget(), RouteTrace("test"))


MUG = item("s1", 0, "I moved the red mug to the kitchen this morning.", images=(REF,))
DOG = item("s2", 1, "We adopted a dog; we named him Biscuit.", score=0.5)


# ---------------------------------------------------------------------------------------------
# Folders, devices, errors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [LocalTextEmbedder, LocalImageEmbedder, LocalAnswerer, LocalExtractor])
def test_missing_folder_is_a_clear_error_not_a_download(cls, tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(C3MError, match="does not exist") as err:
        cls(missing, device="cpu")
    assert str(missing) in str(err.value) and "never downloads" in err.value.fix
    with pytest.raises(C3MError, match="no config.json"):
        cls(tmp_path, device="cpu")  # exists, but is not a model folder
    with pytest.raises(C3MError, match="does not exist"):
        cls("sentence-transformers/all-MiniLM-L6-v2", device="cpu")  # a hub id is a (missing) path here


def test_device_and_dtype_defaults():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype(None, "cpu") is torch.float32 and resolve_dtype(None, "cuda") is torch.bfloat16
    assert resolve_dtype("float16", "cpu") is torch.float16
    with pytest.raises(C3MError, match="unknown dtype"):
        resolve_dtype("float7", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(C3MError, match="CUDA is not available"):
            resolve_device("cuda")


# ---------------------------------------------------------------------------------------------
# Text embedder
# ---------------------------------------------------------------------------------------------
TEXTS = ["where did i put the red mug?", "we adopted a dog", "", "the kitchen", "a photo of a blue mug in the garden"]


def test_text_embedder_shapes_norms_determinism_and_batching(bert_dir):
    emb = LocalTextEmbedder(bert_dir, device="cpu", batch_size=64)
    assert isinstance(emb, TextEmbedder) and emb.dim == 32
    assert emb.name.startswith("local:tiny-bert-") and emb.name.endswith("-mean")
    vecs = emb.embed(TEXTS)
    assert vecs.shape == (5, 32) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(vecs, emb.embed(TEXTS))
    one_by_one = LocalTextEmbedder(bert_dir, device="cpu", batch_size=1).embed(TEXTS)
    np.testing.assert_allclose(vecs, one_by_one, atol=1e-5)  # padding in a batch changes nothing
    assert emb.embed([]).shape == (0, 32)


def test_cls_pooling_differs_and_names_differ(bert_dir, tmp_path):
    mean, cls = LocalTextEmbedder(bert_dir, device="cpu"), LocalTextEmbedder(bert_dir, device="cpu", pooling="cls")
    assert mean.name != cls.name
    assert not np.allclose(mean.embed(TEXTS[:2]), cls.embed(TEXTS[:2]))
    np.testing.assert_allclose(np.linalg.norm(cls.embed(TEXTS), axis=1), 1.0, atol=1e-5)
    with pytest.raises(C3MError, match="pooling"):
        LocalTextEmbedder(bert_dir, device="cpu", pooling="max")
    # Same folder name, other weights: the fingerprint in the name tells them apart (cache keys stay safe).
    from transformers import BertConfig, BertModel

    other = tmp_path / "tiny-bert"
    torch.manual_seed(1)
    BertModel(BertConfig.from_pretrained(bert_dir, local_files_only=True)).save_pretrained(other)
    word_tokenizer(cls_sep=True)[0].save_pretrained(other)
    assert LocalTextEmbedder(other, device="cpu").name != mean.name


# ---------------------------------------------------------------------------------------------
# Image embedder (CLIP)
# ---------------------------------------------------------------------------------------------
def test_image_embedder_clip(clip_dir):
    emb = LocalImageEmbedder(clip_dir, device="cpu", batch_size=2)
    assert isinstance(emb, ImageEmbedder) and emb.text_aligned and emb.text_space == emb.name and emb.dim == 16
    images = [RED, BLUE, png((10, 200, 10), (64, 64))]
    vecs = emb.embed_images(images)
    assert vecs.shape == (3, 16) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vecs, np.vstack([emb.embed_images([b]) for b in images]), atol=1e-5)
    np.testing.assert_array_equal(vecs, emb.embed_images(images))
    assert not np.allclose(vecs[0], vecs[1])
    prompts = ["a photo of a red mug", "a photo of a blue mug", "a dog"]
    texts = emb.embed_texts(prompts)
    assert texts.shape == (3, 16)
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(texts, np.vstack([emb.embed_texts([p]) for p in prompts]), atol=1e-5)
    # The model's own forward pass agrees: our vectors are CLIP's normalised projections.
    enc = emb.image_processor(images=[Image.open(io.BytesIO(RED)).convert("RGB")], return_tensors="pt")
    with torch.inference_mode():
        ref = emb.model.get_image_features(pixel_values=enc["pixel_values"])
    ref = getattr(ref, "pooler_output", ref)
    np.testing.assert_allclose(vecs[0], torch.nn.functional.normalize(ref, dim=-1)[0].numpy(), atol=1e-5)


def test_image_embedder_rejects_a_text_only_model(bert_dir):
    with pytest.raises(C3MError, match="not an image-text dual encoder"):
        LocalImageEmbedder(bert_dir, device="cpu")


# ---------------------------------------------------------------------------------------------
# Answerer: causal LM and VLM
# ---------------------------------------------------------------------------------------------
def test_text_answerer_returns_answer_and_honours_max_new_tokens(llama_dir):
    answerer = LocalAnswerer(llama_dir, device="cpu", max_new_tokens=4, grounding_check=False)
    assert isinstance(answerer, Answerer) and not answerer.vision
    assert answerer.name.startswith("local:tiny-llama-")
    out = answerer.answer("Where is the red mug?", context(MUG, DOG), image_loader=lambda ref: RED)
    assert isinstance(out, Answer) and out.answerer == answerer.name
    assert 1 <= answerer.last_usage.completion_tokens <= 4
    first = answerer.last_raw
    answerer.answer("Where is the red mug?", context(MUG, DOG))
    assert answerer.last_raw == first  # greedy: reproducible
    system, user = answerer.messages("Where is the red mug?", context(MUG, DOG))  # SmolLM's prompt
    assert "[s1#0 2026-03-01 09:00 user]" in user["content"] and "(not shown)" in user["content"]
    long = answerer.chat([system, user], max_new_tokens=9)
    assert long.usage.completion_tokens <= 9


def test_text_answerer_reply_clean_up_and_grounding(llama_dir):
    answerer = LocalAnswerer(llama_dir, device="cpu")
    answerer.chat = lambda messages, **kw: ChatResult("The answer is: the kitchen [s1#0]", Usage(9, 3, 1, 0),
                                                      answerer.name, 1, 0.01, {})
    out = answerer.answer("Where is the red mug?", context(MUG, DOG))
    assert out.text == "the kitchen" and out.cited == ("n-s1-0",)
    answerer.chat = lambda messages, **kw: ChatResult("Paris", Usage(9, 1, 1, 0), answerer.name, 1, 0.01, {})
    assert answerer.answer("Where is the red mug?", context(MUG, DOG)).text == REFUSAL  # ungrounded


def test_no_chat_template_is_a_clear_error(tmp_path):
    from transformers import LlamaForCausalLM

    tok, vocab = word_tokenizer()
    LlamaForCausalLM(llama_config(vocab)).save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    with pytest.raises(C3MError, match="no chat template"):
        LocalAnswerer(tmp_path / "base", device="cpu")


def test_vlm_answerer_shows_context_images(llava_dir):
    answerer = LocalAnswerer(llava_dir, device="cpu", max_new_tokens=3)
    assert answerer.vision and isinstance(answerer, Answerer)
    answerer.answer("What colour is the mug?", context(MUG, DOG))
    text_only = answerer.last_usage.prompt_tokens
    calls = []
    out = answerer.answer("What colour is the mug?", context(MUG, DOG),
                          image_loader=lambda ref: calls.append(ref.sha256) or RED)
    assert isinstance(out, Answer) and calls == [REF.sha256]
    assert answerer.last_usage.prompt_tokens > text_only
    # What reaches the model: pixels, and the one "<image>" placeholder expanded to the image's 16 patch tokens.
    ctx = context(MUG, DOG)
    enc = answerer._encode(answerer._fit("What colour?", ctx, answerer._images(ctx, lambda ref: RED)))
    assert enc["pixel_values"].shape == (1, 3, 32, 32)
    assert int((enc["input_ids"] == answerer.model.config.image_token_id).sum()) == 16
    assert 1 <= answerer.last_usage.completion_tokens <= 3
    msgs = answerer._fit("q", context(MUG, MUG), {REF.sha256: Image.open(io.BytesIO(RED))})
    kinds = [p["type"] for p in msgs[1]["content"]]
    assert kinds.count("image") == 1 and "(shown above)" in str(msgs[1]["content"])


def test_vlm_answerer_survives_an_unreadable_image(llava_dir, caplog):
    answerer = LocalAnswerer(llava_dir, device="cpu", max_new_tokens=2)
    with caplog.at_level(logging.WARNING):
        out = answerer.answer("What colour is the mug?", context(MUG), image_loader=lambda ref: b"not an image")
    assert isinstance(out, Answer) and "not shown" in caplog.text


# ---------------------------------------------------------------------------------------------
# Extractor (VLM)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def extractor(llava_dir):
    return LocalExtractor(llava_dir, device="cpu", caption_tokens=5, json_tokens=8)


def script(extractor: LocalExtractor, *replies: str) -> list:
    """Replace generation with scripted replies; returns the list of message lists it was called with."""
    seen, queue = [], list(replies)

    def chat(messages, **kw):
        seen.append(messages)
        return ChatResult(queue.pop(0), Usage(1, 1, 1, 0), extractor.name, 1, 0.0, {})

    extractor.llm.chat = chat
    return seen


def test_extractor_runs_the_real_model(llava_dir):
    ex = LocalExtractor(llava_dir, device="cpu", caption_tokens=4, json_tokens=6)
    assert isinstance(ex, Extractor)
    assert ex.version.endswith(EXTRACT_PROMPT_VERSION) and ex.llm.fingerprint in ex.version
    cap = ex.caption(RED)
    assert isinstance(cap, str)  # real generation with the image
    assert ex.caption(RED) == cap
    assert isinstance(ex.summarize("I moved the red mug to the kitchen this morning.", max_tokens=5), str)
    assert ex.visual_anchors(RED) == []  # random weights give no valid JSON: two tries, then []
    assert ex.ground(RED, "the red mug") is None
    shared = LocalExtractor(answerer=ex.llm)
    assert shared.llm is ex.llm and shared.version == ex.version


def test_extractor_requires_a_vlm(llama_dir):
    with pytest.raises(C3MError, match="text-only model"):
        LocalExtractor(llama_dir, device="cpu")
    with pytest.raises(C3MError, match="not both or neither"):
        LocalExtractor()


def test_visual_anchors_parse_validate_and_retry(extractor, caplog):
    good = ('Here: [{"label": " Red  Mug", "attribute": "colour", "value": "red", "bbox": [2, 3, 20, 25]}, '
            '{"label": "table", "bbox": [0, 0, 400, 300]}, {"label": "cup", "attribute": null}]')
    seen = script(extractor, "not json at all", good)
    anchors = extractor.visual_anchors(RED)
    assert anchors == [VisualAnchor("red mug", "colour", "red", 1.0, (2, 3, 20, 25)),
                       VisualAnchor("table", None, None, 1.0, None),  # box outside the 40x30 image dropped
                       VisualAnchor("cup")]
    assert len(seen) == 2 and "invalid" in seen[1][-1]["content"] and "40x30" in seen[0][0]["content"]
    assert any(p.get("type") == "image" for p in seen[0][1]["content"])
    script(extractor, '[{"name": "mug"}]', "[{]")
    with caplog.at_level(logging.WARNING):
        assert extractor.visual_anchors(RED) == []
    assert "no valid JSON in 2 attempt(s)" in caplog.text


def test_ground_validates_the_box_within_the_image(extractor):
    seen = script(extractor, '{"bbox": [5, 5, 90, 90]}', '```json\n{"bbox": [5.4, 4.6, 39.9, 30]}\n```')
    assert extractor.ground(RED, "the red mug") == (5, 5, 40, 30)
    assert "not a box inside the 40x30 image" in seen[1][-1]["content"]
    script(extractor, '{"bbox": null}')
    assert extractor.ground(RED, "a dog") is None
    script(extractor, '{"bbox": [10, 10, 5, 5]}', '{"bbox": [1, 2]}')
    assert extractor.ground(RED, "the mug") is None


def test_caption_and_summary_prompts(extractor):
    seen = script(extractor, " A red square. ", "moved mug to kitchen")
    assert extractor.caption(RED) == "A red square."
    assert extractor.summarize("I moved the red mug to the kitchen.", max_tokens=20) == "moved mug to kitchen"
    assert "14 words" in seen[1][0]["content"] and seen[1][1]["content"][0]["text"].startswith("I moved")


def test_json_and_box_helpers():
    assert find_json('Sure! {"bbox": [1, 2, 3, 4]} done') == {"bbox": [1, 2, 3, 4]}
    assert find_json("```json\n[1, 2]\n```") == [1, 2]
    with pytest.raises(ValueError):
        find_json("no json")
    assert valid_box([0, 0, 10, 10], (10, 10)) == (0, 0, 10, 10)
    assert valid_box([-0.1, 0, 10.1, 10], (10, 10)) == (0, 0, 10, 10)  # rounding slack
    assert valid_box([0, 0, 0, 10], (10, 10)) is None and valid_box([0, 0, 500, 10], (10, 10)) is None
    assert valid_box([0, 0, float("nan"), 1], (10, 10)) is None and valid_box(None, (10, 10)) is None


# ---------------------------------------------------------------------------------------------
# Qwen2-VL (the family the issue names): its processor needs torchvision, so this runs where that is installed
# ---------------------------------------------------------------------------------------------
QWEN_SPECIALS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


@pytest.fixture(scope="module")
def qwen2_vl_dir(tmp_path_factory):
    pytest.importorskip("torchvision", reason="Qwen2-VL's processor (its video part) needs torchvision")
    from transformers import (Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor,
                              Qwen2VLProcessor, Qwen2VLVideoProcessor)

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen2-vl"
    template = CHAT_TEMPLATE.replace("<image>", "<|vision_start|><|image_pad|><|vision_end|>")
    tok, vocab = word_tokenizer(chat=True, specials=QWEN_SPECIALS)
    tok.chat_template = template
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=vocab["<|im_start|>"],
                eos_token_id=vocab["<|im_end|>"], pad_token_id=vocab["<pad>"],
                rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0})
    vision = dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2, in_channels=3)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=vocab["<|image_pad|>"],
                           video_token_id=vocab["<|video_pad|>"], vision_start_token_id=vocab["<|vision_start|>"],
                           vision_end_token_id=vocab["<|vision_end|>"])
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(config).save_pretrained(folder)
    size = {"shortest_edge": 56 * 56, "longest_edge": 56 * 56}
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(size=size, patch_size=14, merge_size=2),
                                 tokenizer=tok, video_processor=Qwen2VLVideoProcessor(), chat_template=template)
    processor.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_qwen2_vl_answerer_and_extractor(qwen2_vl_dir, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    answerer = LocalAnswerer(qwen2_vl_dir, device=device, max_new_tokens=3)
    assert answerer.vision and type(answerer.model).__name__ == "Qwen2VLForConditionalGeneration"
    ctx = context(MUG, DOG)
    enc = answerer._encode(answerer._fit("What colour?", ctx, answerer._images(ctx, lambda ref: RED)))
    merged = int(enc["image_grid_thw"].prod()) // 4  # 2x2 patches merge into one token
    assert int((enc["input_ids"] == answerer.model.config.image_token_id).sum()) == merged > 0
    out = answerer.answer("What colour is the mug?", ctx, image_loader=lambda ref: RED)
    assert isinstance(out, Answer) and 1 <= answerer.last_usage.completion_tokens <= 3
    ex = LocalExtractor(answerer=answerer, caption_tokens=4, json_tokens=6)
    assert isinstance(ex.caption(BLUE), str) and ex.visual_anchors(RED) == [] and ex.ground(RED, "mug") is None


# ---------------------------------------------------------------------------------------------
# CUDA: accelerate device_map="auto", bf16
# ---------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_placement_bf16_and_cpu_agreement(bert_dir, clip_dir, llava_dir):
    gpu = LocalTextEmbedder(bert_dir)  # device="auto" -> cuda, device_map="auto", bf16
    assert gpu.model.device.type == "cuda" and gpu.model.dtype == torch.bfloat16
    assert all(p.device.type == "cuda" for p in gpu.model.parameters())
    cpu = LocalTextEmbedder(bert_dir, device="cpu")
    a, b = gpu.embed(TEXTS), cpu.embed(TEXTS)
    assert a.dtype == np.float32 and (a * b).sum(1).min() > 0.98  # bf16 vs fp32: same directions
    img = LocalImageEmbedder(clip_dir, dtype="float32")
    np.testing.assert_allclose(img.embed_images([RED, BLUE]),
                               LocalImageEmbedder(clip_dir, device="cpu").embed_images([RED, BLUE]), atol=1e-4)
    answerer = LocalAnswerer(llava_dir, max_new_tokens=3)
    assert answerer.model.device.type == "cuda"
    out = answerer.answer("What colour is the mug?", context(MUG, DOG), image_loader=lambda ref: RED)
    assert isinstance(out, Answer) and answerer.last_usage.completion_tokens <= 3
    assert isinstance(LocalExtractor(answerer=answerer).caption(RED), str)
