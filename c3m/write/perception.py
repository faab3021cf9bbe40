"""Write-time perception: captions, visual anchors and one grounded crop for every stored image.

Why: HiVe-Mem's *grounded visual view*. Besides the original image and its caption, the reader gets a
crop of the object the conversation was about, so a question about "the mug" can be answered from a small
crop instead of the full picture; crops are cheaper than full images for the reader's budget. The crop is
produced once, at write time, and is **query-blind**: the object is chosen from the turn's own text (the
words the user said next to the picture), never from a question. The results are derived records and
derived blobs in the Cold Store (``ColdStore.put_perceptions``); a crop never replaces the original image.

Everything here is a pure function of (nodes, extractor outputs, image bytes): the same inputs give the
same records and byte-identical PNG crops. Only the ``Extractor`` protocol is used, never a concrete
backend.
"""
from __future__ import annotations

import hashlib
import io
import math
import re
from typing import Callable, Sequence

from PIL import Image

from ..models.base import Extractor
from ..types import ImagePerception, ImageRef, RawNode, VisualAnchor

#: anchors whose label names the setting rather than a subject: never the crop's fallback object
BACKGROUND = frozenset({"background", "wall", "table", "floor", "street", "road"})
#: a padded box covering more of the image than this is no cheaper view than the image itself
MAX_CROP_AREA = 0.8
#: each side of the padded box is grown by this fraction of the box's width/height
PAD = 0.10
#: smallest crop side in pixels (smaller crops show nothing a reader could use)
MIN_SIDE = 16

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"a", "an", "the", "of", "and", "or", "in", "on", "at", "to", "is", "it", "my", "this", "that",
                   "with", "for", "i", "me", "you", "s"})


def _stem(word: str) -> str:
    """Simple plural stripping so "books" matches "book" and "boxes" matches "box"."""
    if len(word) > 4 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text: str | None) -> set[str]:
    return {_stem(w) for w in _WORD.findall(str(text or "").lower()) if w not in _STOP}


def _is_background(anchor: VisualAnchor) -> bool:
    return bool(set(_WORD.findall(anchor.label.lower())) & BACKGROUND)


def _area(box: tuple[int, int, int, int] | None) -> float:
    if box is None:
        return 0.0
    return max(0.0, float(box[2]) - float(box[0])) * max(0.0, float(box[3]) - float(box[1]))


def choose_anchor(text: str, anchors: Sequence[VisualAnchor]) -> tuple[VisualAnchor, str] | None:
    """The anchor the turn's text is about and the phrase to ground, or None when nothing fits.

    Best word overlap of the anchor's label (then its "value label") with the text, ties by anchor score then
    order; with no overlap, the largest-box anchor that is not background (wall, table, floor, ...).
    """
    if not anchors:
        return None
    text_words = _words(text)
    best, best_key = None, None
    for i, a in enumerate(anchors):
        label_words = _words(a.label)
        label_hits = len(label_words & text_words)
        value_hits = len((_words(a.value) - label_words) & text_words) if a.value is not None else 0
        if label_hits + value_hits == 0:
            continue
        key = (label_hits, value_hits, not _is_background(a), float(a.score), -i)
        if best_key is None or key > best_key:
            best, best_key = a, key
    if best is not None:
        value_words = (_words(best.value) - _words(best.label)) if best.value is not None else set()
        return best, (f"{best.value} {best.label}" if value_words & text_words else best.label)  # not "Hut Hut"
    subjects = [(i, a) for i, a in enumerate(anchors) if not _is_background(a)]
    if not subjects:
        return None
    _, pick = max(subjects, key=lambda ia: (_area(ia[1].bbox), float(ia[1].score), -ia[0]))
    return pick, pick.label


def pad_box(box: Sequence[float], width: int, height: int) -> tuple[int, int, int, int] | None:
    """``box`` grown by 10% per side and clamped to the image; None when it is degenerate, under 16 px on a
    side, or covers more than 80% of the image (then the crop would be no cheaper view)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    x0, x1 = min(x0, x1), max(x0, x1)
    y0, y1 = min(y0, y1), max(y0, y1)
    w, h = x1 - x0, y1 - y0
    if w <= 0 or h <= 0 or width <= 0 or height <= 0:
        return None
    px0 = max(0, min(width, math.floor(x0 - PAD * w)))
    py0 = max(0, min(height, math.floor(y0 - PAD * h)))
    px1 = max(0, min(width, math.ceil(x1 + PAD * w)))
    py1 = max(0, min(height, math.ceil(y1 + PAD * h)))
    if px1 - px0 < MIN_SIDE or py1 - py0 < MIN_SIDE:
        return None
    if (px1 - px0) * (py1 - py0) > MAX_CROP_AREA * width * height:
        return None
    return int(px0), int(py0), int(px1), int(py1)


def crop_png(image: bytes, box: tuple[int, int, int, int]) -> tuple[bytes, ImageRef]:
    """The region ``box`` of an encoded image as PNG bytes (deterministic) and its ImageRef."""
    with Image.open(io.BytesIO(image)) as im:
        im.load()
        region = im.crop(box)
        has_alpha = "A" in region.getbands() or "transparency" in region.info
        region = region.convert("RGBA" if has_alpha else "RGB")
    buf = io.BytesIO()
    region.save(buf, "PNG", optimize=False, compress_level=6)
    data = buf.getvalue()
    return data, ImageRef(sha256=hashlib.sha256(data).hexdigest(), mime="image/png", width=region.width,
                          height=region.height, nbytes=len(data))


def _grounded_crop(node: RawNode, ref: ImageRef, data: bytes, anchors: Sequence[VisualAnchor],
                   extractor: Extractor) -> tuple[ImageRef, tuple[int, int, int, int], str, bytes] | None:
    choice = choose_anchor(node.text, anchors)
    if choice is None:
        return None
    anchor, phrase = choice
    box = extractor.ground(data, phrase) or anchor.bbox
    if box is None or len(box) != 4:
        return None
    padded = pad_box(box, ref.width, ref.height)
    if padded is None:
        return None
    crop_bytes, crop_ref = crop_png(data, padded)
    return crop_ref, padded, phrase, crop_bytes


def perceive(nodes: Sequence[RawNode], extractor: Extractor, image_bytes: Callable[[ImageRef], bytes], *,
             crops: bool = True) -> list[tuple[ImagePerception, bytes | None]]:
    """Perception of every image of every node: (record, crop PNG bytes or None), for ``put_perceptions``.

    Caption and visual anchors come from ``extractor``; with ``crops`` the grounded crop is cut around the
    object the node's own text names (query-blind; see the module docstring) and is None when no object
    fits or the padded box would cover more than 80% of the image. ``image_bytes`` loads a stored image
    (``ColdStore.image_bytes``). An image repeated within a node is perceived once.
    """
    out: list[tuple[ImagePerception, bytes | None]] = []
    for node in nodes:
        seen: set[str] = set()
        for ref in node.images:
            if ref.sha256 in seen:
                continue
            seen.add(ref.sha256)
            data = image_bytes(ref)
            caption = extractor.caption(data)
            anchors = tuple(extractor.visual_anchors(data))
            crop = _grounded_crop(node, ref, data, anchors, extractor) if crops else None
            crop_ref, box, phrase, crop_bytes = crop if crop is not None else (None, None, None, None)
            out.append((ImagePerception(node_id=node.node_id, image=ref, backend=extractor.name,
                                        version=extractor.version, caption=caption, anchors=anchors, crop=crop_ref,
                                        crop_box=box, crop_phrase=phrase), crop_bytes))
    return out


def perception_text(perceptions: Sequence[ImagePerception]) -> str:
    """Captions as text for embeddings: ``"[image: <caption>] [image: <caption>]"`` (blank captions skipped)."""
    return " ".join(f"[image: {p.caption}]" for p in perceptions if p.caption)
