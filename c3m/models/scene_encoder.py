"""``scene-encoder``: a small image–text encoder of our own, for the SYNTHETIC domain only.

A ~0.6M-parameter CNN + 2-layer transformer over a 16x12 patch grid, trained contrastively
(``training/train_image_encoder.py``) on the synthetic generator's rendered scenes (train split) against
the frozen all-MiniLM-L6-v2 text space. There is no learned text projection: image and patch vectors are
mapped straight into MiniLM's 384-d space, so ``embed_images`` vectors can be compared by cosine with
``MiniLMEmbedder.embed`` outputs (``text_aligned=True``, ``text_space="minilm-l6-v2"``).

It provides:
- ``embed_images``: L2-normalised global image vectors in the text space (text–image agreement for φ);
- ``visual_anchors``: per-patch zero-shot over an attribute vocabulary (roles, kinds, colours, shapes,
  materials, accessory counts; rooms from the global vector), regions from connected patches -> boxes;
- ``ground``: patch–phrase cosine, upsampled and thresholded -> the box of the best connected region;
- ``caption``: the best-scoring of a few template descriptions filled from the anchors.

It has never seen a photograph: on anything but ``c3m synth`` drawings its outputs mean nothing. It cannot
read text (brands, plates, shop names). See ``c3m/models/weights/MODEL_CARD.md`` for data and metrics.
"""
from __future__ import annotations

import hashlib
import io
import math
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from .base import VisualAnchor

WEIGHTS = Path(__file__).with_name("weights") / "scene_encoder.pt"
#: images whose encoder output ``_encode`` keeps (one image's perception asks for it four times)
RECENT_IMAGES = 4
INPUT = (128, 96)       # model input width, height
GRID = (16, 12)         # patch grid columns, rows (stride 8)
SOURCE = (256, 192)     # generator canvas; boxes are returned in the input image's own pixels
TEXT_DIM = 384

# --- vocabulary and prompts (the same in training and inference) ---------------------------------------
ROLES = ("background", "wall", "table", "household object", "accessory items", "window", "door", "furniture",
         "pet animal", "collar", "vehicle", "road", "shop sign", "licence plate", "street")
FURNITURE = ("stove", "sofa", "bed", "desk", "coat rack", "shelf", "railing", "ladder")
TEMPLATES = {"role": "a {}", "kind": "a {}", "colour": "{} colour", "shape": "{} shape", "material": "made of {}",
             "count": "{} items", "room": "the {}"}
COUNTS = ("two", "three", "four")
#: which attribute types are read for a region of each role (the rest are not visible attributes there)
ROLE_ATTRS = {"wall": ("colour",), "household object": ("colour", "shape", "material"), "pet animal": ("colour",),
              "collar": ("colour",), "vehicle": ("colour",), "shop sign": ("colour",),
              "accessory items": ("count", "side")}


def role_of(obj: Mapping) -> str:
    """The coarse role of a scene-graph object (training targets; shared by every split)."""
    t = obj["type"]
    return {"wall": "wall", "floor": "table", "accessory": "accessory items", "window": "window", "door": "door",
            "furniture": "furniture", "collar": "collar", "sign": "shop sign", "plate": "licence plate",
            "street": "road" if obj["name"] == "road" else "street"}.get(t, None) or (
        "vehicle" if t in _vocab_shared()["vehicles"] else "pet animal" if t in _vocab_shared()["species"]
        else "household object")


def kind_of(obj: Mapping) -> str:
    """The common noun of a scene-graph object: its name unless proper (a pet's, a shop's), else its type."""
    name = obj["name"]
    return name if name == name.lower() else obj["type"]


@lru_cache(maxsize=None)
def _vocab_shared() -> dict:
    from .. import synthvocab as v
    return {"shapes": v.SHAPES, "rooms": v.ROOMS, "species": v.SPECIES, "vehicles": v.VEHICLES, "sides": v.SIDES}


def attribute_vocabulary(split: str | None = None) -> dict[str, tuple[str, ...]]:
    """Candidate values per attribute type: one split's pool plus the shared words, or (None) all splits'.

    ``kind`` lists role-specific kinds under ``kind:<role>`` keys too.
    """
    from .. import synthvocab as v
    splits = v.SPLITS if split is None else (split,)
    colours = tuple(dict.fromkeys(c for s in splits for c in v.POOLS[s].colours))
    materials = tuple(dict.fromkeys(m for s in splits for m in v.POOLS[s].materials))
    kinds = tuple(dict.fromkeys(k for s in splits for k in v.POOLS[s].kinds))
    items = tuple(dict.fromkeys(a for s in splits for a, _ in v.POOLS[s].accessories))
    return {"role": ROLES, "colour": colours, "shape": tuple(v.SHAPES), "material": materials, "count": COUNTS,
            "room": tuple(v.ROOMS), "kind:household object": kinds, "kind:accessory items": items,
            "kind:pet animal": tuple(v.SPECIES), "kind:vehicle": tuple(v.VEHICLES), "kind:furniture": FURNITURE}


@lru_cache(maxsize=None)
def _number_words() -> tuple[str, ...]:
    from ..synthvocab import NUMBER_WORDS
    return NUMBER_WORDS


def prompt(attr: str, value: str) -> str:
    return TEMPLATES["kind" if attr.startswith("kind") else attr].format(value)


# --- the network ----------------------------------------------------------------------------------------
class SceneNet(nn.Module):
    """Conv stem (stride 8) -> 16x12 tokens -> transformer -> patch and global heads into the text space."""

    def __init__(self, width: int = 128, layers: int = 2, heads: int = 4, text_dim: int = TEXT_DIM):
        super().__init__()
        self.config = {"width": width, "layers": layers, "heads": heads, "text_dim": text_dim}

        def block(i, o, stride):
            return [nn.Conv2d(i, o, 3, stride, 1), nn.GroupNorm(8, o), nn.GELU()]

        self.stem = nn.Sequential(*block(3, 32, 2), *block(32, 64, 2), *block(64, width, 2), *block(width, width, 1))
        self.pos = nn.Parameter(torch.zeros(1, GRID[0] * GRID[1], width))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.patch_head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, text_dim))
        self.global_head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, text_dim))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        self.patch_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 or float images [B, 3, 96, 128] -> (global [B, D], patches [B, 192, D]), both normalised."""
        x = x.float() / 255.0 - 0.5
        h = self.stem(x).flatten(2).transpose(1, 2) + self.pos
        h = self.blocks(h)
        g = nn.functional.normalize(self.global_head(h.mean(1)), dim=-1)
        p = nn.functional.normalize(self.patch_head(h), dim=-1)
        return g, p


def preprocess(image: bytes) -> np.ndarray:
    """Encoded image bytes -> uint8 [3, 96, 128] (RGB, bilinear resize), as in training."""
    from PIL import Image
    with Image.open(io.BytesIO(image)) as im:
        arr = np.asarray(im.convert("RGB").resize(INPUT, Image.BILINEAR), dtype=np.uint8)
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def image_size(image: bytes) -> tuple[int, int]:
    from PIL import Image
    with Image.open(io.BytesIO(image)) as im:
        return im.size


def save_weights(model: SceneNet, path: str | Path, meta: Mapping) -> None:
    state = {k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}
    plain = {str(k): v if isinstance(v, (int, float, bool)) else str(v) for k, v in meta.items()}
    torch.save({"config": dict(model.config), "state_dict": state, "meta": plain}, Path(path))


def load_weights(path: str | Path) -> tuple[SceneNet, dict]:
    blob = torch.load(Path(path), map_location="cpu", weights_only=True)
    model = SceneNet(**blob["config"])
    model.load_state_dict({k: v.float() for k, v in blob["state_dict"].items()})
    return model.eval(), dict(blob.get("meta", {}))


# --- region helpers -------------------------------------------------------------------------------------
def _components(mask: np.ndarray) -> list[np.ndarray]:
    """4-connected components of a boolean grid, as index arrays of (row, col)."""
    seen = np.zeros_like(mask, dtype=bool)
    out = []
    rows, cols = mask.shape
    for r0 in range(rows):
        for c0 in range(cols):
            if not mask[r0, c0] or seen[r0, c0]:
                continue
            stack, cells = [(r0, c0)], []
            seen[r0, c0] = True
            while stack:
                r, c = stack.pop()
                cells.append((r, c))
                for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                    if 0 <= rr < rows and 0 <= cc < cols and mask[rr, cc] and not seen[rr, cc]:
                        seen[rr, cc] = True
                        stack.append((rr, cc))
            out.append(np.array(cells))
    return out


def _box(cells: np.ndarray, grid: tuple[int, int], size: tuple[int, int]) -> tuple[int, int, int, int]:
    """Pixel box (x0, y0, x1, y1) of grid cells on an image of ``size``."""
    sx, sy = size[0] / grid[0], size[1] / grid[1]
    r0, c0 = cells.min(0)
    r1, c1 = cells.max(0)
    return (int(round(c0 * sx)), int(round(r0 * sy)), int(round((c1 + 1) * sx)), int(round((r1 + 1) * sy)))


class SceneEncoder:
    """ImageEmbedder (text-aligned with MiniLM) + the perception half of an Extractor, synthetic domain only.

    ``vocabulary``: None (every split's words: the default), a split name ("test"), or a mapping like
    ``attribute_vocabulary()``'s. ``text_embedder``: a MiniLM embedder to reuse (loaded lazily otherwise).
    """

    name = "scene-encoder"
    dim = TEXT_DIM
    text_aligned = True
    text_space = "minilm-l6-v2"

    def __init__(self, weights: str | Path | None = None, *, text_embedder=None,
                 vocabulary: str | Mapping[str, Sequence[str]] | None = None, batch_size: int = 64,
                 ground_threshold: float = 0.5, room_evidence: int = 2):
        self.weights = Path(weights) if weights else WEIGHTS
        if not self.weights.is_file():
            raise FileNotFoundError(f"scene encoder weights not found at {self.weights}; train them with "
                                    "python training/train_image_encoder.py --ship")
        self.model, self.meta = load_weights(self.weights)
        digest = hashlib.sha256(self.weights.read_bytes()).hexdigest()[:12]
        self.version = f"scene-encoder.1+{digest}"
        self.vocabulary = (attribute_vocabulary(vocabulary) if vocabulary is None or isinstance(vocabulary, str)
                           else {k: tuple(v) for k, v in vocabulary.items()})
        self._text = text_embedder
        self.batch_size, self.ground_threshold, self.room_evidence = batch_size, ground_threshold, room_evidence
        self._prompts: dict[str, np.ndarray] = {}
        self._summarizer = None
        self._recent: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}  # last images' _encode results

    # -- text side -------------------------------------------------------------------------------------
    def _embed_text(self, texts: Sequence[str]) -> np.ndarray:
        if self._text is None:
            from .minilm import MiniLMEmbedder
            self._text = MiniLMEmbedder()
        if getattr(self._text, "name", None) != self.text_space:
            raise ValueError(f"scene encoder needs the {self.text_space} text embedder, got {self._text.name}")
        return np.asarray(self._text.embed(list(texts)), dtype=np.float32)

    def _prompt_matrix(self, attr: str) -> np.ndarray:
        if attr not in self._prompts:
            self._prompts[attr] = self._embed_text([prompt(attr, v) for v in self.vocabulary[attr]])
        return self._prompts[attr]

    # -- image side ------------------------------------------------------------------------------------
    def _encode(self, images: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """(global [n, dim], patches [n, cells, dim]) vectors. One image's result is kept for the next few calls:
        perceiving an image asks for it four times (anchors, the caption's anchors and its image vector,
        grounding), and it is a pure function of the bytes (2.5 of 10 s of a 128K history's perception)."""
        if len(images) == 1:
            key = hashlib.sha256(images[0]).digest()
            hit = self._recent.get(key)
            if hit is None:
                hit = self._encode_batch(images)
                self._recent[key] = hit
                while len(self._recent) > RECENT_IMAGES:
                    self._recent.pop(next(iter(self._recent)))
            return hit[0].copy(), hit[1].copy()
        return self._encode_batch(images)

    def _encode_batch(self, images: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        g_out, p_out = [], []
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                x = torch.from_numpy(np.stack([preprocess(b) for b in images[start:start + self.batch_size]]))
                g, p = self.model(x)
                g_out.append(g.numpy())
                p_out.append(p.numpy())
        if not g_out:
            return np.zeros((0, self.dim), np.float32), np.zeros((0, GRID[0] * GRID[1], self.dim), np.float32)
        return np.concatenate(g_out), np.concatenate(p_out)

    def embed_images(self, images: Sequence[bytes]) -> np.ndarray:
        return self._encode(list(images))[0].astype(np.float32)

    def patch_embeddings(self, image: bytes) -> np.ndarray:
        """[rows, cols, dim] normalised patch vectors in the text space."""
        return self._encode([image])[1][0].reshape(GRID[1], GRID[0], self.dim)

    # -- extractor parts -------------------------------------------------------------------------------
    def visual_anchors(self, image: bytes) -> list[VisualAnchor]:
        g, p = self._encode([image])
        g, p = g[0], p[0]
        size = image_size(image)
        roles = self.vocabulary["role"]
        role_idx = (p @ self._prompt_matrix("role").T).argmax(1).reshape(GRID[1], GRID[0])
        anchors, regions = [], []
        for ri, role in enumerate(roles):
            if role == "background":
                continue
            comps = [c for c in _components(role_idx == ri) if len(c) >= (1 if role in ("collar",) else 2)]
            if role in ("wall", "table", "road", "street", "pet animal", "vehicle") and comps:
                comps = [max(comps, key=len)]  # one of each per scene in this domain
            for cells in comps:
                vec = p.reshape(GRID[1], GRID[0], -1)[cells[:, 0], cells[:, 1]].mean(0)
                vec /= np.linalg.norm(vec) + 1e-9
                regions.append((role, cells, vec))
        object_x = [c[:, 1].mean() for r, c, _ in regions if r == "household object"]
        for role, cells, vec in regions:
            box = _box(cells, GRID, size)
            kinds = self.vocabulary.get(f"kind:{role}")
            if kinds:
                sims = vec @ self._prompt_matrix(f"kind:{role}").T
                label, score = kinds[int(sims.argmax())], float(sims.max())
            else:
                label, score = role.split()[-1] if role in ("shop sign",) else role, 1.0
            anchors.append(VisualAnchor(label, None, None, score, box))
            for attr in ROLE_ATTRS.get(role, ()):
                if attr == "side":
                    if object_x:
                        side = "right" if cells[:, 1].mean() > object_x[0] else "left"
                        anchors.append(VisualAnchor(label, "side", side, 1.0, box))
                    continue
                sims = vec @ self._prompt_matrix(attr).T
                value = self.vocabulary[attr][int(sims.argmax())]
                if attr == "count" and value in _number_words():
                    value = str(_number_words().index(value))  # the oracle spells counts as digits
                anchors.append(VisualAnchor(label, attr, value, float(sims.max()), box))
        # attributes the oracle repeats on the owner: a pet's collar colour, a sign's colour
        collar = next((a.value for a in anchors if a.label == "collar" and a.attribute == "colour"), None)
        for a in list(anchors):
            if a.attribute == "colour" and a.label in self.vocabulary.get("kind:pet animal", ()) and collar:
                anchors.append(VisualAnchor(a.label, "collar", collar, a.score, a.bbox))
            if a.attribute == "colour" and a.label == "sign":
                anchors.append(VisualAnchor(a.label, "sign_colour", a.value, a.score, a.bbox))
        if sum(r in ("window", "door", "furniture") for r in {r for r, _, _ in regions}) >= self.room_evidence:
            sims = g @ self._prompt_matrix("room").T
            wall = next((a.bbox for a in anchors if a.label == "wall"), None)
            anchors.append(VisualAnchor("wall", "room", self.vocabulary["room"][int(sims.argmax())],
                                        float(sims.max()), wall))
        return anchors

    def ground(self, image: bytes, phrase: str) -> tuple[int, int, int, int] | None:
        if not phrase.strip():
            return None
        p = self.patch_embeddings(image)
        q = self._embed_text([phrase])[0]
        sims = torch.from_numpy(p @ q)[None, None]
        up = 4
        fine = nn.functional.interpolate(sims, scale_factor=up, mode="bilinear", align_corners=False)[0, 0].numpy()
        lo, hi = float(np.median(fine)), float(fine.max())
        if hi - lo < 1e-6:
            return None
        mask = fine >= lo + self.ground_threshold * (hi - lo)
        peak = np.unravel_index(int(fine.argmax()), fine.shape)
        for cells in _components(mask):
            if any((cells[:, 0] == peak[0]) & (cells[:, 1] == peak[1])):
                return _box(cells, (GRID[0] * up, GRID[1] * up), image_size(image))
        return None

    def caption(self, image: bytes) -> str:
        anchors = self.visual_anchors(image)
        by_label: dict[str, dict[str, str]] = {}
        for a in anchors:
            by_label.setdefault(a.label, {})
            if a.attribute:
                by_label[a.label][a.attribute] = a.value
        candidates = []
        subjects = [(lab, at) for lab, at in by_label.items() if lab not in ("wall", "table", "road", "street")]
        for mode in ("full", "colour", "plain"):
            parts = []
            for lab, at in subjects:
                words = [at[k] for k in (("colour", "shape", "material") if mode == "full" else
                                         ("colour",) if mode == "colour" else ()) if k in at]
                count = at.get("count", "")
                count = _number_words()[int(count)] if count.isdigit() and int(count) < len(_number_words()) else count
                noun = f"{count} {lab}" if count else " ".join(words + [lab])
                parts.append(noun if "count" in at else ("an " if noun[0] in "aeiou" else "a ") + noun)
            text = "; ".join(parts)
            wall = by_label.get("wall")
            if wall and "colour" in wall:
                room = f" of the {wall['room']}" if "room" in wall else ""
                text += (". " if text else "") + f"Setting: a {wall['colour']} wall{room}"
            elif "road" in by_label or "street" in by_label:
                text += (". " if text else "") + "Setting: a " + ("road" if "road" in by_label else "street")
            if text:
                candidates.append(text[0].upper() + text[1:] + ".")
        if not candidates:
            return "A picture."
        candidates = list(dict.fromkeys(candidates))
        g = self.embed_images([image])[0]
        return candidates[int((self._embed_text(candidates) @ g).argmax())]

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        if self._summarizer is None:
            from .summary import LeadSummarizer
            self._summarizer = LeadSummarizer()
        return self._summarizer.summarize(text, max_tokens)
