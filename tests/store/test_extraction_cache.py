"""``CachedExtractor``: exact round trips through the store's extraction cache, hits, restarts, versions."""
from __future__ import annotations

import pytest

from c3m.eval.synth import generate_dataset, load_hidden
from c3m.models.base import Extractor, VisualAnchor
from c3m.models.cache import CachedExtractor
from c3m.models.oracle import OracleExtractor
from c3m.store.cold import ColdStore

PHRASES = ("the wall", "a purple giraffe")  # the second grounds to nothing: None must round-trip too
TEXT = ("I moved into the new flat on Maple Street last week. Thanks! The kitchen has a green kettle and a "
        "cast-iron skillet. My sister Ana painted the hallway yellow on Saturday. Ok.")


class Counting:
    """A real extractor plus call counts, to see which calls reach it."""

    def __init__(self, inner, version: str | None = None):
        self.inner, self.calls = inner, 0
        self.name, self.version = inner.name, version or inner.version

    def _count(self, fn, *args):
        self.calls += 1
        return fn(*args)

    def caption(self, image):
        return self._count(self.inner.caption, image)

    def visual_anchors(self, image):
        return self._count(self.inner.visual_anchors, image)

    def ground(self, image, phrase):
        return self._count(self.inner.ground, image, phrase)

    def summarize(self, text, max_tokens=64):
        return self._count(self.inner.summarize, text, max_tokens)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("cache") / "ds", length=3000, episodes=1, seed=0, progress=False)


@pytest.fixture(scope="module")
def oracle(dataset):
    return OracleExtractor(dataset)


@pytest.fixture(scope="module")
def images(dataset):
    return [(dataset / s["image"]).read_bytes() for s in load_hidden(dataset)["scenes"][:6]]


def run_all(ex, images):
    out = []
    for im in images:
        out += [ex.caption(im), ex.visual_anchors(im)] + [ex.ground(im, p) for p in PHRASES]
    return out + [ex.summarize(TEXT, 25), ex.summarize(TEXT, 64)]


def test_results_round_trip_exactly_and_hit_on_second_call(tmp_path, oracle, images):
    inner = Counting(oracle)
    with ColdStore(tmp_path / "store") as store:
        cached = CachedExtractor(inner, store)
        assert isinstance(cached, Extractor) and (cached.name, cached.version) == (oracle.name, oracle.version)
        expected = run_all(oracle, images)
        first = run_all(cached, images)
        n = len(expected)
        assert first == expected and (cached.misses, cached.hits, inner.calls) == (n, 0, n)
        second = run_all(cached, images)
        assert second == expected and (cached.misses, cached.hits, inner.calls) == (n, n, n)
    for got, want in zip(second, expected):
        assert type(got) is type(want)
        if isinstance(want, list):
            assert all(type(a) is VisualAnchor and type(a.bbox) is tuple for a in got)
    assert any(x is None for x in second)


def test_cache_survives_reopening_the_store(tmp_path, oracle, images):
    expected = run_all(oracle, images)
    with ColdStore(tmp_path / "store") as store:
        run_all(CachedExtractor(oracle, store), images)
    inner = Counting(oracle)
    with ColdStore(tmp_path / "store", create=False) as store:
        cached = CachedExtractor(inner, store)
        assert run_all(cached, images) == expected
        assert inner.calls == 0 and cached.misses == 0 and cached.hits == len(expected)


def test_versions_and_arguments_are_separate_entries(tmp_path, oracle, images):
    with ColdStore(tmp_path / "store") as store:
        run_all(CachedExtractor(Counting(oracle), store), images)
        newer = Counting(oracle, version=oracle.version + "-next")
        cached = CachedExtractor(newer, store)
        run_all(cached, images)
        assert cached.hits == 0 and newer.calls == cached.misses > 0
        again = CachedExtractor(Counting(oracle), store)
        again.ground(images[0], "the table")  # a new phrase on a known image
        again.summarize(TEXT, 30)  # a new budget on a known text
        assert (again.misses, again.hits) == (2, 0)


def test_batch_helpers_match_single_calls(tmp_path, oracle, images):
    with ColdStore(tmp_path / "store") as store:
        cached = CachedExtractor(oracle, store)
        batch = images + images[:2]  # repeats are answered from the cache
        assert cached.caption_many(batch, progress=True) == [oracle.caption(im) for im in batch]
        assert (cached.misses, cached.hits) == (len(images), 2)
        assert cached.visual_anchors_many(batch) == [oracle.visual_anchors(im) for im in batch]
        pairs = [(im, p) for im in images for p in PHRASES]
        assert cached.ground_many(pairs) == [oracle.ground(im, p) for im, p in pairs]
        assert cached.summarize_many([TEXT, "Short."], 20) == [oracle.summarize(TEXT, 20), "Short."]
