"""Shared fixtures: a cheap model bundle and a store folder (session factories live in factories.py).

Store and API tests use the dependency-free ``hashing`` embedder so they stay fast; the MiniLM path
is exercised in test_models.py and by the demo test.
"""
from __future__ import annotations

import pytest

from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models


@pytest.fixture
def models() -> Models:
    return Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer())


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store"


@pytest.fixture(scope="session")
def demo_dataset(tmp_path_factory):
    """The demo history written twice (two users) as a dataset folder, for harness tests."""
    from c3m.dataset import write_dataset
    from c3m.demo import demo_history

    root = tmp_path_factory.mktemp("ds") / "demo"
    h = demo_history()
    write_dataset([h, type(h)("demo-user-2", h.sessions, h.questions)], root)
    return root
