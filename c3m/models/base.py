"""Small protocols the write and read paths program against; backends live beside this file."""
from __future__ import annotations

from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..types import Answer, Context, ImageRef, Relation, VisualAnchor


@runtime_checkable
class TextEmbedder(Protocol):
    """Maps texts to L2-normalised float32 vectors [n, dim]; ``name`` keys the vector cache."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def embed_exact(embedder: TextEmbedder, texts: Sequence[str]) -> np.ndarray:
    """Embed many texts so that each vector is exactly ``embedder.embed([text])[0]``: a batched read must give the
    per-question contexts bit for bit, and padding a batch changes a transformer's last bits. Uses the backend's
    own ``embed_exact`` (pad-free batches), one call when it declares ``batch_invariant``, else one text at a time."""
    texts = list(texts)
    if hasattr(embedder, "embed_exact"):
        return embedder.embed_exact(texts)
    if getattr(embedder, "batch_invariant", False) or len(texts) <= 1:
        return np.asarray(embedder.embed(texts), np.float32).reshape(len(texts), embedder.dim)
    return np.stack([np.asarray(embedder.embed([t])[0], np.float32) for t in texts])


@runtime_checkable
class TokenCounter(Protocol):
    """Counts text tokens the way the reader budget charges them."""

    name: str

    def count(self, text: str) -> int: ...


@runtime_checkable
class Answerer(Protocol):
    """Answers a question from a budgeted context (and nothing else).

    ``image_loader`` returns an image's original bytes (``ColdStore.image_bytes``); text-only answerers
    ignore it. An optional ``sees_images = False`` (text-only; the default when absent) makes ``Memory.ask``
    add each image's caption to its item.
    """

    name: str

    def answer(self, question: str, context: Context, *,
               image_loader: Callable[[ImageRef], bytes] | None = None) -> Answer: ...


@runtime_checkable
class ImageEmbedder(Protocol):
    """Maps encoded images to L2-normalised float32 vectors [n, dim].

    ``text_aligned`` is True when the vectors live in the text embedder named ``text_space`` (so image–text
    cosine is meaningful, e.g. for text–image agreement in RAMU's features).
    """

    name: str
    dim: int
    text_aligned: bool
    text_space: str | None

    def embed_images(self, images: Sequence[bytes]) -> np.ndarray: ...


@runtime_checkable
class Extractor(Protocol):
    """Write-time perception and compression: captions, visual anchors, grounding boxes, summaries.

    ``version`` changes whenever outputs would (prompt, weights): it keys the store's extraction cache.
    """

    name: str
    version: str

    def caption(self, image: bytes) -> str: ...

    def visual_anchors(self, image: bytes) -> list[VisualAnchor]: ...

    def ground(self, image: bytes, phrase: str) -> tuple[int, int, int, int] | None: ...

    def summarize(self, text: str, max_tokens: int = 64) -> str: ...


@runtime_checkable
class RelationHead(Protocol):
    """RAMU's g_r: relation features phi(m, e) -> (relation, confidence) for each candidate pair.

    Features are named floats (entity, state, time, action, scope and text–image agreement terms, C3M
    §2.1) so feature-based, trained and LLM-judged heads share one interface.
    """

    name: str
    # a head with ``reads_text = True`` is called with ``pairs`` = [(entry text, unit text)], one per feature row;
    # one without the attribute is called as ``predict(features)``

    def predict(self, features: Sequence[Mapping[str, float]],
                pairs: Sequence[tuple[str, str]] | None = None) -> list[tuple[Relation, float]]: ...
