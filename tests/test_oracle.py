"""The ``oracle`` perception backend (hidden scene graphs of synthetic data) and the ``lead`` summariser."""
from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image

import c3m.models.oracle as oracle_module
from c3m.errors import C3MError, InvalidInput
from c3m.eval.synth import VERSION, generate_dataset, load_hidden
from c3m.models.base import Extractor, VisualAnchor
from c3m.models.oracle import BACKDROP, OracleExtractor
from c3m.models.summary import LeadSummarizer, sentences
from c3m.models.tokens import ApproxTokenCounter

NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("oracle") / "ds", length=3000, episodes=1, seed=0, progress=False)


@pytest.fixture(scope="module")
def oracle(dataset):
    return OracleExtractor(dataset)


@pytest.fixture(scope="module")
def scenes(dataset):
    """(image bytes, scene record) for every picture of the dataset."""
    return [((dataset / s["image"]).read_bytes(), s) for s in load_hidden(dataset)["scenes"]]


def iou(a, b) -> float:
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def test_identity_protocol_and_docstring(oracle, scenes):
    assert isinstance(oracle, Extractor)
    assert oracle.name == "oracle" and oracle.version.startswith(VERSION + "+")
    assert len(oracle) == len({hashlib.sha256(im).hexdigest() for im, _ in scenes}) > 0
    doc = " ".join(oracle_module.__doc__.split()).lower()
    assert "hidden ground truth" in doc and "must name it" in doc and "memory organisation" in doc


def test_captions_mention_objects_and_attributes(oracle, scenes):
    for image, scene in scenes:
        caption = oracle.caption(image)
        assert caption == oracle.caption(image)  # deterministic
        for obj in scene["objects"]:
            assert obj["name"] in caption, (obj, caption)
            a = obj["attributes"]
            for key in ("colour", "shape", "material", "brand", "plate", "text", "collar", "room"):
                if key in a:
                    assert str(a[key]) in caption, (key, obj, caption)
            if "count" in a:
                assert f"{NUMBERS[a['count']]} {obj['name']}" in caption
            if "side" in a:
                assert f"on its {a['side']}" in caption
        for rel in scene["relations"]:
            pair = [o for o in scene["objects"] if o["name"] in (rel["subject"], rel["object"])]
            assert all(o["type"] not in BACKDROP for o in pair)
        assert caption[0].isupper() and caption.endswith(".")


def test_caption_reads_like_the_scene(oracle, scenes):
    """One concrete object scene: adjectives, brand, the accessory's count and side, the relation."""
    image, scene = next((im, s) for im, s in scenes if any(o["type"] == "accessory" for o in s["objects"]))
    main = next(o for o in scene["objects"] if o["entity"] == scene["entity"] and o["type"] != "accessory")
    acc = next(o for o in scene["objects"] if o["type"] == "accessory")
    a, n = main["attributes"], acc["attributes"]
    expected = (f"{a['colour']} {a['shape']} {a['material']} {main['name']} with the brand {a['brand']}; "
                f"{NUMBERS[n['count']]} {acc['name']} on its {n['side']}.")
    assert expected in oracle.caption(image)
    rel = {"left": "right of", "right": "left of"}[n["side"]]
    assert f"The {main['name']} is {rel} the {acc['name']}." in oracle.caption(image)


def test_anchors_match_the_sidecar_exactly(oracle, scenes):
    for image, scene in scenes:
        expected = []
        for obj in scene["objects"]:
            box = tuple(obj["bbox"])
            expected.append(VisualAnchor(obj["name"], None, None, 1.0, box))
            expected += [VisualAnchor(obj["name"], k, str(v), 1.0, box) for k, v in sorted(obj["attributes"].items())]
        got = oracle.visual_anchors(image)
        assert got == expected
        assert all(type(x.bbox) is tuple and all(type(v) is int for v in x.bbox) for x in got)


def test_grounding_by_attribute_returns_the_sidecar_box(oracle, scenes):
    checked = 0
    for image, scene in scenes:
        for obj in scene["objects"]:
            a = obj["attributes"]
            if "colour" not in a:
                continue
            noun = obj["name"] if obj["name"] == obj["name"].lower() else obj["type"]
            box = oracle.ground(image, f"the {a['colour']} {noun}")
            assert box == tuple(obj["bbox"]) and iou(box, obj["bbox"]) == 1.0, (obj, box)
            checked += 1
            for key in ("brand", "text"):
                if key in a and obj["type"] not in BACKDROP:
                    assert oracle.ground(image, f"the one saying {a[key]}") == tuple(obj["bbox"])
    assert checked >= 10
    image, scene = next((im, s) for im, s in scenes if any("count" in o["attributes"] for o in s["objects"]))
    acc = next(o for o in scene["objects"] if "count" in o["attributes"])
    assert oracle.ground(image, f"the {NUMBERS[acc['attributes']['count']]} {acc['name']}") == tuple(acc["bbox"])
    assert oracle.ground(image, "a purple giraffe") is None


def test_unknown_image_is_refused_with_the_fix(oracle, dataset):
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, "PNG")
    for call in (lambda im: oracle.caption(im), lambda im: oracle.visual_anchors(im),
                 lambda im: oracle.ground(im, "the vase")):
        with pytest.raises(C3MError) as err:
            call(buf.getvalue())
        assert "only knows the images of the synthetic dataset" in str(err.value)
        assert str(dataset) in str(err.value) and "c3m synth" in err.value.fix


def test_non_synthetic_folder_is_refused(tmp_path):
    with pytest.raises(InvalidInput) as err:
        OracleExtractor(tmp_path)
    assert "c3m synth" in err.value.fix


def test_summarize_delegates_to_lead(oracle):
    text = " ".join(PARAGRAPH)
    assert oracle.summarize(text, 20) == LeadSummarizer().summarize(text, 20)


# -- LeadSummarizer ------------------------------------------------------------------------------
PARAGRAPH = [
    "I moved into the new flat on Maple Street last week.",
    "Thanks!",
    "The kitchen has a green kettle, a cast-iron skillet and a tiny window over the sink.",
    "Oh well, you know how it is.",
    "My sister Ana painted the hallway yellow on Saturday.",
    "It was fine I guess.",
    "The landlord promised a new blue sofa by March 3.5 weeks from now.",
    "Ok.",
]


def test_summary_respects_budget_and_only_emits_input_sentences():
    s, count = LeadSummarizer(), ApproxTokenCounter()
    text = " ".join(PARAGRAPH)
    inputs = set(sentences(text))
    assert inputs == set(PARAGRAPH)
    for budget in range(1, count.count(text) + 5):
        out = s.summarize(text, budget)
        assert count.count(out) <= budget, (budget, out)
        assert out in text or all(x in inputs for x in sentences(out))
        if count.count(PARAGRAPH[0]) <= budget:
            kept = sentences(out)
            assert kept[0] == PARAGRAPH[0] and all(x in inputs for x in kept)
            assert kept == [x for x in PARAGRAPH if x in kept]  # original order
        else:
            assert PARAGRAPH[0].startswith(out)  # a word prefix of the first sentence, never invented


def test_summary_prefers_dense_sentences_and_is_deterministic():
    s = LeadSummarizer()
    text = " ".join(PARAGRAPH)
    out = s.summarize(text, 40)
    assert out == s.summarize(text, 40) == LeadSummarizer().summarize(text, 40)
    assert "Thanks!" not in out and "Ok." not in out
    assert out == f"{PARAGRAPH[0]} {PARAGRAPH[6]}"  # the lead, then the densest sentence (9 content / 14 words)
    wider = sentences(s.summarize(text, 60))
    assert {PARAGRAPH[i] for i in (0, 4, 6)} <= set(wider) and "Ok." not in wider and "Thanks!" not in wider
    assert s.summarize("Short and sweet.", 64) == "Short and sweet."
    assert s.summarize(text, 0) == "" and s.summarize("   ", 10) == ""
    assert (s.name, s.version) == ("lead", "1")


def test_make_extractor_wraps_the_oracle_in_the_store_cache(tmp_path):
    from c3m.errors import InvalidInput
    from c3m.eval.synth import generate_dataset
    from c3m.models import CachedExtractor, make_extractor
    from c3m.store import ColdStore

    ds = generate_dataset(tmp_path / "ds", length=2000, episodes=1, seed=3, progress=False)
    with pytest.raises(InvalidInput, match="dataset_dir"):
        make_extractor("oracle")
    with ColdStore(tmp_path / "store") as store:
        ext = make_extractor("oracle", dataset_dir=ds, store=store)
        assert isinstance(ext, CachedExtractor) and ext.name == "oracle"
