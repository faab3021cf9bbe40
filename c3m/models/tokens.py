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
