"""Token counters for the reader budget.

``approx`` is a named heuristic (≈ one token per 4 characters of each word, one per punctuation mark),
used only when no tokenizer ships; ``tests/test_models.py`` measures it against the MiniLM WordPiece
tokenizer. The ``hf`` counter reads a ``tokenizer.json`` that ships offline (MiniLM's by default) with
the small ``tokenizers`` package; configure it to match your answerer's tokenizer.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

_PIECE = re.compile(r"\w+|[^\w\s]")
MEMO_ITEMS = 200_000  # texts whose token counts HFTokenCounter keeps


class ApproxTokenCounter:
    name = "approx"

    def count(self, text: str) -> int:
        return sum(max(1, math.ceil(len(p) / 4)) if p[0].isalnum() or p[0] == "_" else 1
                   for p in _PIECE.findall(text))


class HFTokenCounter:
    """Counts with a ``tokenizers`` tokenizer file (no special tokens), e.g. MiniLM's or SmolLM2's."""

    def __init__(self, tokenizer_json: str | Path, name: str | None = None):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(tokenizer_json))
        self._tok.no_padding()  # shipped tokenizer.json files often pad/truncate for the encoder
        self._tok.no_truncation()
        self.name = name or f"hf:{Path(tokenizer_json).parent.name}"
        self._memo: dict[str, int] = {}

    def count(self, text: str) -> int:
        """Memoised: the same routing texts and turns are recounted many times (every capacity repair step
        re-measures the index, the harness re-measures every context), and encoding is the slow part."""
        if not text:
            return 0
        n = self._memo.get(text)
        if n is None:
            if len(self._memo) >= MEMO_ITEMS:
                self._memo.clear()
            n = self._memo[text] = len(self._tok.encode(text, add_special_tokens=False).ids)
        return n


# -- image tokens ---------------------------------------------------------------------------------------
#: image-token cost models: ``qwen2-vl`` (Qwen2/2.5-VL's smart_resize over 28x28 patches, the default: the
#: HiVe-Mem paper's base model family), ``fixed:N`` (every image costs N, e.g. LLaVA-1.5's 576), ``none``.
IMAGE_TOKEN_MODELS = ("qwen2-vl", "fixed:N", "none")
QWEN_FACTOR, QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 28, 56 * 56, 28 * 28 * 1280


def image_tokens(width: int, height: int, model: str = "qwen2-vl") -> int:
    """Tokens an answerer spends on one image of ``width`` x ``height`` pixels.

    ``qwen2-vl``: both sides are rounded to multiples of 28 (scaled down when the area exceeds 1280 patches,
    up when under 56x56), one token per 28x28 patch, plus the two vision start/end markers — so a grounded
    crop of an object costs a fraction of the full image it was cut from."""
    if model == "none":
        return 0
    if model.startswith("fixed:"):
        return int(model.split(":", 1)[1])
    if model != "qwen2-vl":
        raise ValueError(f"unknown image-token model {model!r}; choose one of {IMAGE_TOKEN_MODELS}")
    f = QWEN_FACTOR
    h = max(f, round(height / f) * f)
    w = max(f, round(width / f) * f)
    if h * w > QWEN_MAX_PIXELS:
        beta = math.sqrt(height * width / QWEN_MAX_PIXELS)
        h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
    elif h * w < QWEN_MIN_PIXELS:
        beta = math.sqrt(QWEN_MIN_PIXELS / (height * width))
        h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return (h // f) * (w // f) + 2
