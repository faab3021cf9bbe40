"""``MemoEmbedder``: an in-process LRU memo in front of any text embedder.

Histories repeat text (greetings, acknowledgements, the synthetic benchmark's filler), and one worker
process replays many histories, each into its own store whose vector cache starts empty. The memo keeps
each distinct text's vector once per process. It keeps the inner embedder's ``name`` because the vectors
are the same.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Sequence

import numpy as np

from .base import TextEmbedder, embed_exact


class MemoEmbedder:
    def __init__(self, inner: TextEmbedder, max_items: int = 50_000):
        self.inner, self.max_items = inner, max_items
        self.name, self.dim = inner.name, inner.dim
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self.inner.embed)

    def embed_exact(self, texts: Sequence[str]) -> np.ndarray:
        """Batch-invariant embedding (``c3m.models.base.embed_exact``) through the same memo."""
        return self._embed(texts, lambda todo: embed_exact(self.inner, todo))

    def _embed(self, texts: Sequence[str], compute) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self._memo))
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        if todo:
            for text, vec in zip(todo, compute(todo)):
                self._memo[text] = vec
        out = np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
        for t in texts:
            self._memo.move_to_end(t)
        while len(self._memo) > self.max_items:
            self._memo.popitem(last=False)
        return out


class MemoExtractor:
    """An in-process LRU memo in front of any perception ``Extractor``: the harness replays one history into
    one store per method, and each store's extraction cache starts empty, so without it every method pays
    for the same captions, anchors and boxes (pure functions of backend, version and input). Keeps the inner
    backend's ``name`` and ``version``: the records are the same."""

    def __init__(self, inner, max_items: int = 50_000):
        self.inner, self.max_items = inner, max_items
        self.name, self.version = inner.name, inner.version
        self._memo: OrderedDict[tuple, object] = OrderedDict()
        self.hits = self.misses = 0

    def _get(self, key: tuple, compute):
        if key in self._memo:
            self.hits += 1
            self._memo.move_to_end(key)
            return self._memo[key]
        self.misses += 1
        value = compute()
        self._memo[key] = value
        while len(self._memo) > self.max_items:
            self._memo.popitem(last=False)
        return value

    @staticmethod
    def _sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def caption(self, image: bytes) -> str:
        return self._get(("caption", self._sha(image)), lambda: self.inner.caption(image))

    def visual_anchors(self, image: bytes):
        return list(self._get(("anchors", self._sha(image)), lambda: tuple(self.inner.visual_anchors(image))))

    def ground(self, image: bytes, phrase: str):
        return self._get(("ground", self._sha(image), phrase), lambda: self.inner.ground(image, phrase))

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        return self._get(("summary", text, max_tokens), lambda: self.inner.summarize(text, max_tokens))

    def __getattr__(self, attr):  # anything else (batch helpers, backend-specific calls) goes to the backend
        return getattr(self.inner, attr)
