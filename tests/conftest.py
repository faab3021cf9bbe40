"""Shared fixtures: small sessions with real PNG images, and a cheap model bundle.

Store and API tests use the dependency-free ``hashing`` embedder so they stay fast; the MiniLM path
is exercised in test_models.py and by the demo test.
"""
from __future__ import annotations

import io
from datetime import datetime, timedelta

import pytest

from c3m.models import ApproxTokenCounter, ExtractiveAnswerer, HashingEmbedder, Models
from c3m.types import Session, Turn


def png_bytes(colour=(200, 30, 30), size=(24, 16)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


def make_session(i: int, *, with_image: bool = True, text: str | None = None) -> Session:
    base = datetime(2026, 3, 1, 9, 0)
    turns = [Turn("user", text or f"Session {i}: my mug number {i} is on shelf {i % 3}.",
                  (png_bytes((10 * i % 255, 40, 90)),) if with_image else ()),
             Turn("assistant", f"Noted mug {i}.")]
    return Session(f"s{i}", base + timedelta(days=i), tuple(turns))


@pytest.fixture
def models() -> Models:
    return Models(HashingEmbedder(64), ApproxTokenCounter(), ExtractiveAnswerer())


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store"
