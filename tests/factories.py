"""Small sessions with real PNG images, for the store and API tests (imported as ``factories``:
a module named ``conftest`` would clash with ``tests/kernels/conftest.py``)."""
from __future__ import annotations

import importlib.util
import io
import sys
import threading
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from c3m.types import Session, Turn


def load_script(path: Path, name: str):
    """Import a benchmark or training script by path (they are scripts, not a package), registered in
    ``sys.modules`` so dataclasses and spawned workers can find it."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


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


# -- a drawn scene for perception tests: a red mug and a blue book on a table ---------------------------------
W, H = 200, 100
MUG, BOOK, TABLE = (20, 20, 60, 60), (100, 10, 190, 90), (0, 0, W, H)


def scene_png(mug=(200, 30, 30), book=(30, 30, 200)) -> bytes:
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (W, H), (240, 240, 240))
    draw = ImageDraw.Draw(im)
    draw.rectangle((MUG[0], MUG[1], MUG[2] - 1, MUG[3] - 1), fill=mug)
    draw.rectangle((BOOK[0], BOOK[1], BOOK[2] - 1, BOOK[3] - 1), fill=book)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _integrity_errors() -> tuple[type[BaseException], ...]:
    import sqlite3

    try:
        import psycopg
    except ImportError:
        return (sqlite3.IntegrityError,)
    return (sqlite3.IntegrityError, psycopg.IntegrityError)


#: what a refused write raises from either store engine (append-only triggers, constraints)
DB_INTEGRITY_ERRORS = _integrity_errors()


@contextmanager
def serving(server):
    """``server`` (a socketserver on loopback) answering on a daemon thread until the block ends."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
