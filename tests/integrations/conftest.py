"""Fixtures for the framework adapters' tests: a quick Memory (hashing embedder) on a store folder, a PNG, and
no network (sockets to anything but loopback refused, so a framework that tried to reach a model would fail)."""
from __future__ import annotations

import base64
import io
import socket

import pytest


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost") and self.family != socket.AF_UNIX:
            raise OSError(f"network blocked in tests: {address}")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture
def png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (24, 16), (200, 30, 30)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def png_url(png) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


@pytest.fixture
def mem(tmp_path, models):
    from c3m import Memory

    with Memory(tmp_path / "store", "default", models=models) as m:
        yield m
