"""``CachedExtractor``: any Extractor, memoised in the store's extraction cache.

Captions, anchors, boxes and summaries are costly (a VLM call, an API round trip) and pure functions of
(backend, version, input), so re-ingest and re-eval reuse them across processes and restarts. The key is
(``inner.name``, ``inner.version``, kind, input hash): a new backend version misses instead of serving
stale output. The input hash for images alone is the image's SHA-256 (the blob store's key); calls with
arguments hash the image hash or text together with those arguments. Outputs are stored wrapped as
``{"v": ...}`` so a cached ``None`` (nothing grounded) is told apart from a miss.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any, Callable, Sequence, TypeVar

from ..store.cold import ColdStore
from .base import Extractor, VisualAnchor

T = TypeVar("T")
PROGRESS_MIN = 64  # batches at least this long show a progress bar when ``progress`` is None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(*parts: Any) -> str:
    return _sha(json.dumps(parts, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _anchors_out(anchors: list[VisualAnchor]) -> list[dict]:
    return [asdict(a) for a in anchors]


def _anchors_in(rows: list[dict]) -> list[VisualAnchor]:
    return [VisualAnchor(**{**r, "bbox": tuple(r["bbox"]) if r["bbox"] is not None else None}) for r in rows]


def _box_in(box: list[int] | None) -> tuple[int, int, int, int] | None:
    return tuple(box) if box is not None else None


class CachedExtractor:
    """Wraps ``inner`` (keeping its name and version) and counts cache ``hits`` and ``misses``."""

    def __init__(self, inner: Extractor, store: ColdStore):
        self.inner, self.store = inner, store
        self.name, self.version = inner.name, inner.version
        self.hits = self.misses = 0

    def _cached(self, kind: str, key: str, compute: Callable[[], Any], dump: Callable[[Any], Any],
                load: Callable[[Any], T]) -> T:
        row = self.store.get_extraction(self.name, self.version, kind, key)
        if row is not None:
            self.hits += 1
            return load(row["v"])
        self.misses += 1
        value = compute()
        self.store.put_extraction(self.name, self.version, kind, key, {"v": dump(value)})
        return value

    # -- Extractor -------------------------------------------------------------------------------
    def caption(self, image: bytes) -> str:
        return self._cached("caption", _sha(image), lambda: self.inner.caption(image), str, str)

    def visual_anchors(self, image: bytes) -> list[VisualAnchor]:
        return self._cached("anchors", _sha(image), lambda: self.inner.visual_anchors(image), _anchors_out,
                            _anchors_in)

    def ground(self, image: bytes, phrase: str) -> tuple[int, int, int, int] | None:
        return self._cached("ground", _key(_sha(image), phrase), lambda: self.inner.ground(image, phrase),
                            lambda b: list(b) if b is not None else None, _box_in)

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        return self._cached("summary", _key(text, max_tokens), lambda: self.inner.summarize(text, max_tokens),
                            str, str)

    # -- batches ---------------------------------------------------------------------------------
    def caption_many(self, images: Sequence[bytes], *, progress: bool | None = None) -> list[str]:
        return self._many(self.caption, [(im,) for im in images], "caption", progress)

    def visual_anchors_many(self, images: Sequence[bytes], *,
                            progress: bool | None = None) -> list[list[VisualAnchor]]:
        return self._many(self.visual_anchors, [(im,) for im in images], "anchors", progress)

    def ground_many(self, pairs: Sequence[tuple[bytes, str]], *,
                    progress: bool | None = None) -> list[tuple[int, int, int, int] | None]:
        return self._many(self.ground, [tuple(p) for p in pairs], "ground", progress)

    def summarize_many(self, texts: Sequence[str], max_tokens: int = 64, *,
                       progress: bool | None = None) -> list[str]:
        return self._many(self.summarize, [(t, max_tokens) for t in texts], "summary", progress)

    def _many(self, fn: Callable[..., T], calls: list[tuple], desc: str, progress: bool | None) -> list[T]:
        from tqdm import tqdm

        show = len(calls) >= PROGRESS_MIN if progress is None else progress
        return [fn(*call) for call in tqdm(calls, desc=f"{self.name} {desc}", unit="item", disable=not show,
                                           leave=False)]
