"""Small protocols the write and read paths program against; backends live beside this file."""
from __future__ import annotations

from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from ..types import Answer, Context, ImageRef


@runtime_checkable
class TextEmbedder(Protocol):
    """Maps texts to L2-normalised float32 vectors [n, dim]; ``name`` keys the vector cache."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class TokenCounter(Protocol):
    """Counts text tokens the way the reader budget charges them."""

    name: str

    def count(self, text: str) -> int: ...


@runtime_checkable
class Answerer(Protocol):
    """Answers a question from a budgeted context (and nothing else).

    ``image_loader`` returns an image's original bytes (``ColdStore.image_bytes``); text-only answerers
    ignore it.
    """

    name: str

    def answer(self, question: str, context: Context, *,
               image_loader: Callable[[ImageRef], bytes] | None = None) -> Answer: ...
