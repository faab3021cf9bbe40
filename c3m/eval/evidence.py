"""The perception-aware evidence check: is a question's answer derivable from the evidence *forms* chosen?

A named heuristic (``evidence-check-v1``), the offline quality signal of the PPO evidence selector
(``training/train_selector_ppo.py``) when no answerer + judge is used. It needs a synthetic dataset's hidden
gold (``_hidden/questions.jsonl`` support items and ``_hidden/scenes.jsonl`` scene graphs), so it is an
evaluation-side signal only; it never reads the gold *evidence ids alone*: a form counts only when the
detail is visible in it as the answerer would see it.

A support item (session, turn, entity, attribute, value) is **satisfied** by one shown form iff the form
shows *that turn* and:

- ``raw_text`` / ``caption`` / ``summary``: the value appears in the shown text (case-insensitive, on word
  boundaries; a number also as its word, ``2`` ~ ``two``; an accessory ``{item, count, ...}`` needs its item
  name). So a write-time caption that missed the detail (the scene encoder called the cooler a vase) does
  not count, while the same turn's raw text that names it does.
- ``raw_image``: the scene graph of one of the turn's images has an object of the support's entity that
  carries the value (an attribute value, its name or its type; an accessory: an object of the entity named
  as the item, with the same count and side). The answerer is assumed to *see* the image (a VLM); for a
  text-only answerer the harness adds captions, which are checked as ``caption``.
- ``grounded_crop``: the crop's box (source-image pixels) covers at least ``CROP_COVER`` of such an object's
  box, in the image the crop was cut from.

A summary item cites only its first node (``compose``), so it shows that one turn.

Quality = the share of the question's support items satisfied by some shown form; "all satisfied" is the
evidence-check accuracy. Questions without support items (AR about a never-mentioned subject) have no
evidence to check (quality ``None``; the harness's oracle reader scores them by its misleading-item rule).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..read.compose import FORM_NAMES
from ..types import node_id_for
from ..synthvocab import NUMBER_WORDS as _NUMBERS

NAME = "evidence-check-v1"
CROP_COVER = 0.5
_TEXT_FORMS = ("raw_text", "summary", "caption")


@dataclass(frozen=True)
class SupportItem:
    session: str
    turn: int
    entity: str | None
    attribute: str
    value: object
    modality: str = "text"
    image: str | None = None

    @classmethod
    def from_row(cls, row: Mapping) -> "SupportItem":
        value = row["value"]
        if isinstance(value, dict):  # hashable and comparable
            value = tuple(sorted(value.items()))
        return cls(row["session"], int(row["turn"]), row.get("entity"), row.get("attribute", ""), value,
                   row.get("modality", "text"), row.get("image"))


def _value_words(value) -> list[str]:
    """The strings any of which shows the value in text (all of them must appear for an accessory)."""
    if isinstance(value, tuple):  # accessory {count, glyph, item, side}: the item's name
        v = dict(value)
        return [str(v.get("item", ""))] if v.get("item") else []
    if isinstance(value, bool):
        return [str(value)]
    if isinstance(value, int):
        return [str(value)] + ([_NUMBERS[value]] if 0 <= value < len(_NUMBERS) else [])
    return [str(value)]


def text_shows(value, text: str) -> bool:
    """The value appears in ``text`` (case-insensitive, word boundaries)."""
    low = text.lower()
    return any(w and re.search(r"(?<![a-z0-9])" + re.escape(w.lower()) + r"(?![a-z0-9])", low)
               for w in _value_words(value))


def _norm(x) -> str:
    return str(x).strip().lower()


def object_carries(obj: Mapping, entity: str | None, value) -> bool:
    """A scene-graph object of ``entity`` that carries ``value``."""
    if entity is not None and obj.get("entity") != entity:
        return False
    if isinstance(value, tuple):  # accessory: the entity's object named as the item, same count/side
        v = dict(value)
        attrs = obj.get("attributes", {})
        return (_norm(obj.get("name", "")) == _norm(v.get("item", "")) and
                all(attrs.get(k) == v[k] for k in ("count", "side") if k in v and k in attrs))
    want = {_norm(w) for w in _value_words(value)}
    have = {_norm(obj.get("name", "")), _norm(obj.get("type", ""))}
    for a in obj.get("attributes", {}).values():
        have.add(_norm(a))
        if isinstance(a, int) and not isinstance(a, bool) and 0 <= a < len(_NUMBERS):
            have.add(_NUMBERS[a])
    return bool(want & have)


def box_cover(crop: Sequence[float], box: Sequence[float]) -> float:
    """Share of ``box``'s area inside ``crop`` (both x0, y0, x1, y1)."""
    ix = max(0.0, min(crop[2], box[2]) - max(crop[0], box[0]))
    iy = max(0.0, min(crop[3], box[3]) - max(crop[1], box[1]))
    area = max(1e-9, (box[2] - box[0]) * (box[3] - box[1]))
    return ix * iy / area


def satisfies(item: SupportItem, form: str, *, session: str, turn: int, text: str = "",
              scenes: Iterable[Mapping] = (), crop_box: Sequence[float] | None = None) -> bool:
    """Whether one shown form of the turn (session, turn) satisfies ``item`` (module docstring). ``scenes``:
    the scene graphs of the images this form shows (for a crop: the image it was cut from)."""
    if (session, int(turn)) != (item.session, item.turn):
        return False
    if form in _TEXT_FORMS:
        return text_shows(item.value, text)
    if form == "raw_image":
        return any(object_carries(o, item.entity, item.value) for s in scenes for o in s.get("objects", ()))
    if form == "grounded_crop":
        return crop_box is not None and any(
            object_carries(o, item.entity, item.value) and box_cover(crop_box, o["bbox"]) >= CROP_COVER
            for s in scenes for o in s.get("objects", ()))
    raise ValueError(f"unknown form {form!r}")


# -- dataset side -------------------------------------------------------------------------------------------
class HiddenGold:
    """A synthetic dataset's support items and scene graphs, scene graphs keyed by the image's SHA-256 (the
    Cold Store's ImageRef address), read once."""

    def __init__(self, dataset: str | Path):
        root = Path(dataset)
        self.support: dict[tuple[str, str], tuple[SupportItem, ...]] = {}
        for line in (root / "_hidden" / "questions.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                self.support[(r["history"], r["id"])] = tuple(SupportItem.from_row(s) for s in r.get("support", ()))
        self.scenes: dict[str, Mapping] = {}
        for line in (root / "_hidden" / "scenes.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                s = json.loads(line)
                path = root / s["image"]
                if path.is_file():
                    self.scenes[hashlib.sha256(path.read_bytes()).hexdigest()] = s

    def items(self, history: str, question_id: str) -> tuple[SupportItem, ...]:
        return self.support.get((history, question_id), ())

    def scenes_of(self, images) -> list[Mapping]:
        return [self.scenes[im.sha256] for im in images if im.sha256 in self.scenes]


def candidate_coverage(candidate, items: Sequence[SupportItem], gold: HiddenGold):
    """[5, K] bool: which of this memory's forms (``FORM_NAMES`` order) satisfy which support item, each form
    shown the way ``compose`` shows it (raw text per node, ``[image: ...]`` captions, the node's images, its
    crops with their boxes; a summary cites its first live node)."""
    import numpy as np

    cov = np.zeros((len(FORM_NAMES), len(items)), dtype=bool)
    live = [n for n in candidate.nodes if not n.redacted]
    for k, it in enumerate(items):
        if live and candidate.summary.strip():
            cov[1, k] = satisfies(it, "summary", session=live[0].session_id, turn=live[0].turn_index,
                                  text=candidate.summary)
        for n in live:
            where = dict(session=n.session_id, turn=n.turn_index)
            recs = list(candidate.perceptions.get(n.node_id, ()))
            cov[0, k] |= bool(n.text.strip()) and satisfies(it, "raw_text", text=n.text, **where)
            caption = " ".join(f"[image: {r.caption}]" for r in recs if r.caption)
            cov[2, k] |= bool(caption) and satisfies(it, "caption", text=caption, **where)
            cov[3, k] |= bool(n.images) and satisfies(it, "raw_image", scenes=gold.scenes_of(n.images), **where)
            for r in recs:
                if r.crop is not None:
                    cov[4, k] |= satisfies(it, "grounded_crop", scenes=gold.scenes_of([r.image]),
                                           crop_box=r.crop_box, **where)
    return cov


@dataclass(frozen=True)
class EvidenceResult:
    share: float | None      # support items satisfied / support items (None: nothing to check)
    all: float | None        # 1.0 iff every support item is satisfied
    satisfied: tuple[bool, ...] = ()


def check_context(ctx, items: Sequence[SupportItem], gold: HiddenGold,
                  crop_boxes: Mapping[str, tuple[str, Sequence[float]]] | None = None, *,
                  summary_scope: str = "turn") -> EvidenceResult:
    """The evidence check on a composed ``Context``. ``crop_boxes``: crop sha256 -> (source image sha256,
    box), from the candidates' perception records (a ContextItem carries the crop, not its box).

    A summary item that declares what it summarises (``ContextItem.covers``, verified by the harness) speaks for
    exactly those turns. Otherwise ``summary_scope="session"`` (the harness's reading) lets it speak for every
    turn of the session it cites, and ``"turn"`` (the selector's reading) keeps the strict one-turn rule."""
    if summary_scope not in ("turn", "session"):
        raise ValueError(f"summary_scope must be 'turn' or 'session', got {summary_scope!r}")
    if not items:
        return EvidenceResult(None, None)
    crop_boxes = crop_boxes or {}
    ok = [False] * len(items)
    for ci in ctx.items:
        form = ci.form.value
        where = dict(session=ci.provenance.session_id, turn=ci.provenance.turn_index)
        for k, it in enumerate(items):
            if ok[k]:
                continue
            covers = getattr(ci, "covers", ())
            if form == "summary" and covers:  # the item says which turns it states (checked by the harness)
                mine = node_id_for(ci.provenance.namespace, it.session, it.turn) in covers
                ok[k] = mine and satisfies(it, form, text=ci.text, session=it.session, turn=it.turn)
            elif form == "summary" and summary_scope == "session" and ci.provenance.session_id == it.session:
                ok[k] = satisfies(it, form, text=ci.text, session=it.session, turn=it.turn)
            elif form in _TEXT_FORMS:
                ok[k] = satisfies(it, form, text=ci.text, **where)
            if not ok[k] and form == "raw_text" and ci.images:  # raw text shown with its node's images attached
                ok[k] = satisfies(it, "raw_image", scenes=gold.scenes_of(ci.images), **where)
            elif form == "raw_image":
                ok[k] = satisfies(it, form, scenes=gold.scenes_of(ci.images), **where)
            elif form == "grounded_crop":
                for im in ci.images:
                    src = crop_boxes.get(im.sha256)
                    if src is not None and src[0] in gold.scenes:
                        ok[k] = ok[k] or satisfies(it, form, scenes=[gold.scenes[src[0]]], crop_box=src[1], **where)
    return EvidenceResult(sum(ok) / len(items), float(all(ok)), tuple(ok))
