"""``hashing`` text embedder: signed feature hashing of word uni- and bigrams.

A named, dependency-free fallback so the core runs without torch. It captures lexical overlap only (no
synonyms); the packaged MiniLM embedder is the default whenever it is installed. Deterministic across
processes and platforms (BLAKE2b, not Python's salted ``hash``).
"""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


class HashingEmbedder:
    #: each text's vector depends on that text alone, so a batched read may embed many questions at once
    batch_invariant = True

    def __init__(self, dim: int = 384):
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        return words + [f"{a} {b}" for a, b in zip(words, words[1:])]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            counts: dict[int, float] = {}
            for feat in self._features(text):
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                idx, sign = h % self.dim, 1.0 if (h >> 63) & 1 else -1.0
                counts[idx] = counts.get(idx, 0.0) + sign
            for idx, value in counts.items():
                out[row, idx] = np.sign(value) * np.log1p(abs(value))
            norm = np.linalg.norm(out[row])
            if norm > 0:
                out[row] /= norm
        return out
