"""``MemoEmbedder``: an in-process LRU memo in front of any text embedder.

Histories repeat text (greetings, acknowledgements, the synthetic benchmark's filler), and one worker
process replays many histories, each into its own store whose vector cache starts empty. The memo keeps
each distinct text's vector once per process. It keeps the inner embedder's ``name`` because the vectors
are the same.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from .base import TextEmbedder


class MemoEmbedder:
    def __init__(self, inner: TextEmbedder, max_items: int = 50_000):
        self.inner, self.max_items = inner, max_items
        self.name, self.dim = inner.name, inner.dim
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self._memo))
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        if todo:
            for text, vec in zip(todo, self.inner.embed(todo)):
                self._memo[text] = vec
        out = np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
        for t in texts:
            self._memo.move_to_end(t)
        while len(self._memo) > self.max_items:
            self._memo.popitem(last=False)
        return out
