"""``oracle``: perception read from the synthetic generator's hidden scene graphs — NOT a vision model.

This backend READS HIDDEN GROUND TRUTH (``_hidden/scenes.jsonl`` of a dataset written by
``c3m.eval.synth``). It exists only to measure memory organisation apart from perception quality: with
it, captions, visual anchors and grounding boxes are exactly what was drawn, so any remaining error is the
memory method's. Every report, table or plot that uses it must name it ("oracle perception"), and its
numbers must never be presented as what a real perception model achieves.

It knows only the images of the dataset it was given, matched by the SHA-256 of their file bytes (the
same key the store's content-addressed blobs use); any other image is refused with a ``C3MError``.
Summaries are not perception: ``summarize`` delegates to the extractive ``LeadSummarizer``.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ..errors import C3MError, InvalidInput
from ..synthvocab import HIDDEN, NUMBER_WORDS
from .base import VisualAnchor
from .summary import LeadSummarizer

LOCAL_VERSION = "oracle.1"  # bump when captions, anchors or grounding change for the same scenes
BACKDROP = frozenset({"wall", "floor", "street"})  # scene types that are setting, not subjects
_NUMBERS = NUMBER_WORDS
_REL = {"left_of": "left of", "right_of": "right of", "above": "above", "below": "below"}
_WORD = re.compile(r"[a-z0-9]+")
_SAID = frozenset({"count", "colour", "shape", "material", "side", "neighbour", "position", "brand", "plate",
                   "collar", "text", "sign_colour", "room", "name"})  # attributes _phrase words itself


def _number(n: Any) -> str:
    return _NUMBERS[n] if isinstance(n, int) and 0 <= n < len(_NUMBERS) else str(n)


def _article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def _stem(word: str) -> str:
    """Crude plural folding so "books" matches "book" and "boxes" matches "box"."""
    if len(word) > 4 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(str(text).lower())}


def _noun(obj: dict) -> str:
    """The common noun for an object: its name, unless the name is proper (a pet's or a shop's)."""
    name = obj["name"]
    return name if name == name.lower() else obj["type"]


def _phrase(obj: dict) -> str:
    """One object's noun phrase, e.g. 'a black tall wood vase with the brand Quill'."""
    a, name, noun = obj["attributes"], obj["name"], _noun(obj)
    adjectives = [str(a[k]) for k in ("colour", "shape", "material") if k in a]
    head = " ".join(adjectives + [noun])
    head = f"{_number(a['count'])} {head}" if "count" in a else _article(head)
    extras, withs = [], []
    if name != noun and a.get("text") != name:
        extras.append(f"named {name}")
    if "brand" in a:
        withs.append(f"the brand {a['brand']}")
    if "plate" in a:
        withs.append(f"the plate {a['plate']}")
    if "collar" in a:
        withs.append(f"{_article(str(a['collar']))} collar")
    if "sign_colour" in a and a["sign_colour"] != a.get("colour"):
        withs.append(f"{_article(str(a['sign_colour']))} sign")
    # neighbour/position repeat what the scene's relations say; anything unforeseen is still spelled out.
    withs += [f"{k} {v}" for k, v in sorted(a.items()) if k not in _SAID]
    if withs:
        extras.append("with " + " and ".join(withs))
    if "text" in a and a["text"] not in (a.get("brand"), a.get("plate")):
        extras.append(f'reading "{a["text"]}"')
    if "room" in a:
        extras.append(f"of the {a['room']}")
    if "side" in a:
        extras.append(f"on its {a['side']}")
    return " ".join([head] + extras)


def _mention(obj: dict) -> str:
    """How a relation sentence refers to an object: 'the vase', 'Biscuit', 'the Gearloft sign'."""
    noun = _noun(obj)
    if obj["name"] == noun:
        return f"the {noun}"
    return f"the {obj['name']} {noun}" if obj["type"] == "sign" else obj["name"]


def caption_scene(scene: dict) -> str:
    """A deterministic description of a scene graph: subjects, then setting, then relative positions."""
    objects = scene["objects"]
    subjects = [o for o in objects if o["type"] not in BACKDROP]
    setting = [o for o in objects if o["type"] in BACKDROP]
    parts = []
    if subjects:
        text = "; ".join(_phrase(o) for o in subjects)
        parts.append(text[0].upper() + text[1:] + ".")
    if setting:
        parts.append("Setting: " + ", ".join(_phrase(o) for o in setting) + ".")
    by_name = {o["name"]: o for o in objects}
    seen = set()
    for r in scene.get("relations", []):
        pair = frozenset((r["subject"], r["object"]))
        if pair in seen or r["subject"] not in by_name or r["object"] not in by_name:
            continue
        seen.add(pair)
        sentence = f"{_mention(by_name[r['subject']])} is {_REL.get(r['relation'], r['relation'])} " \
                   f"{_mention(by_name[r['object']])}."
        parts.append(sentence[0].upper() + sentence[1:])
    return " ".join(parts)


def scene_anchors(scene: dict) -> list[VisualAnchor]:
    """One anchor per object (attribute None) followed by one per attribute, in scene order."""
    out = []
    for o in scene["objects"]:
        box = tuple(int(v) for v in o["bbox"])
        out.append(VisualAnchor(o["name"], None, None, 1.0, box))
        out += [VisualAnchor(o["name"], k, str(v), 1.0, box) for k, v in sorted(o["attributes"].items())]
    return out


def ground_scene(scene: dict, phrase: str) -> tuple[int, int, int, int] | None:
    """The box of the object whose name, type and attribute values share most words with ``phrase``.

    Ties prefer an object matched by name or type, then a subject over the backdrop, then the smaller box;
    None when no object shares a word with the phrase.
    """
    query = _words(phrase)
    best, best_key = None, (0,)
    for o in scene["objects"]:
        naming = _words(o["name"]) | _words(o["type"])
        values = set().union(*(_words(_number(v) if k == "count" else v) for k, v in o["attributes"].items()))
        score = len(query & (naming | values))
        x0, y0, x1, y1 = o["bbox"]
        key = (score, bool(query & naming), o["type"] not in BACKDROP, -(x1 - x0) * (y1 - y0))
        if score > 0 and key > best_key:
            best, best_key = o, key
    return tuple(int(v) for v in best["bbox"]) if best else None


class OracleExtractor:
    """Extractor over one synthetic dataset's hidden scene graphs (see the module docstring: ground truth)."""

    name = "oracle"

    def __init__(self, dataset_dir: str | Path):
        self.dataset_dir = Path(dataset_dir)
        scenes_path = self.dataset_dir / HIDDEN / "scenes.jsonl"
        manifest_path = self.dataset_dir / "manifest.json"
        if not scenes_path.is_file() or not manifest_path.is_file():
            raise InvalidInput("dataset_dir", f"{self.dataset_dir} has no {HIDDEN}/scenes.jsonl and manifest.json",
                               fix="pass a folder written by `c3m synth` (the oracle works on synthetic data only)")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        self.version = f"{manifest.get('version', '?')}+{LOCAL_VERSION}"
        self._scenes: dict[str, dict] = {}
        with open(scenes_path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    scene = json.loads(line)
                    digest = hashlib.sha256((self.dataset_dir / scene["image"]).read_bytes()).hexdigest()
                    self._scenes.setdefault(digest, scene)  # identical bytes are identical drawings
        self._summarizer = LeadSummarizer()

    @classmethod
    def from_scenes(cls, scenes: dict[str, dict], version: str, *, name: str = "oracle") -> "OracleExtractor":
        """An oracle over scene graphs given directly ({sha256 of the image bytes: scene}), for drawings whose
        content the caller knows (the demo's); ``version`` names them in the store's derived records."""
        self = cls.__new__(cls)
        self.dataset_dir, self.version, self.name = None, f"{version}+{LOCAL_VERSION}", name
        self._scenes = dict(scenes)
        self._summarizer = LeadSummarizer()
        return self

    def __len__(self) -> int:
        return len(self._scenes)

    def scene(self, image: bytes) -> dict:
        """The hidden scene record of an image of this dataset."""
        digest = hashlib.sha256(image).hexdigest()
        try:
            return self._scenes[digest]
        except KeyError:
            raise C3MError(
                f"the oracle perception backend only knows the images of the synthetic dataset it was given "
                f"({self.dataset_dir}); image sha256 {digest[:12]}… is not one of its {len(self._scenes)} images",
                fix="use the oracle only on images from that `c3m synth` dataset (pass the dataset folder the "
                    "history came from), or choose a real perception backend for other images") from None

    def caption(self, image: bytes) -> str:
        return caption_scene(self.scene(image))

    def visual_anchors(self, image: bytes) -> list[VisualAnchor]:
        return scene_anchors(self.scene(image))

    def ground(self, image: bytes, phrase: str) -> tuple[int, int, int, int] | None:
        return ground_scene(self.scene(image), phrase)

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        return self._summarizer.summarize(text, max_tokens)
