"""Fuzz campaigns for issue #17: untrusted input must give a clear ``c3m.errors`` error, never a crash, a hang
or a partial write.

Campaigns (>= 10,000 inputs each by default; ``--quick`` runs a few hundred for a smoke test):

* ``dataset``        (hypothesis) random dataset folders: episodes.jsonl lines (random bytes, random JSON,
                     history-shaped objects with wrong types) and the image files they name ->
                     ``validate_dataset`` / ``load_dataset`` / ``history_from_dict``
* ``dataset_write``  (hypothesis) random ``History`` objects -> ``write_dataset`` into a folder holding a
                     dataset; a refused write must leave the folder byte-for-byte as before
* ``session_json``   (hypothesis) random JSON bodies -> ``c3m.server.limits.session_from_json``
* ``session_bytes``  (atheris)   raw request bytes -> ``json.loads`` -> ``session_from_json``
* ``store_write``    (hypothesis) random ``Session``/``Turn`` objects -> ``ColdStore.prepare_session`` +
                     ``insert_session``; a refused session must leave the store as before (verify ok, same
                     sessions, same blob files)
* ``image``          (hypothesis) mutated / truncated PNG, JPEG, GIF, BMP, WebP, TIFF bytes, decompression
                     bombs, huge dimensions, many-frame GIFs -> ``check_image`` (server), the dataset
                     validator's image check and ``c3m.store.cold.read_image``
* ``image_bytes``    (atheris)   libFuzzer byte mutation of the same seeds -> the same three decoders
* ``config``         (hypothesis) random TOML / YAML config files, random ``from_dict`` tables and random API
                     key files -> ``MemoryConfig.load`` / ``from_dict`` / ``c3m.server.auth.KeyRing``

A failure is anything but a ``C3MError`` escaping, a hang (10 s per input), or a property violation (an
accepted input that breaks a documented invariant, a refused write that changed what was on disk). Failures
are grouped by signature (exception type + the innermost c3m frame), so one bug found 500 times counts once.

    .venv/bin/python benchmarks/reliability/fuzz_campaign.py            # full: >= 10k inputs each
    .venv/bin/python benchmarks/reliability/fuzz_campaign.py --quick    # smoke run
    .venv/bin/python benchmarks/reliability/fuzz_campaign.py --only image,config -n 2000

The two atheris campaigns need ``pip install -e ".[fuzz]"``; without it they are refused with that fix.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from c3m.errors import C3MError  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
HANG_S = 10.0


# ---------------------------------------------------------------------------------------------
# Recording failures
# ---------------------------------------------------------------------------------------------
class PropertyViolation(AssertionError):
    """An input was handled without an exception but broke an invariant (the message is its signature)."""


class Hang(BaseException):
    pass


def _on_alarm(signum, frame):
    raise Hang(f"input took over {HANG_S:.0f} s")


def _signature(exc: BaseException) -> str:
    if isinstance(exc, PropertyViolation):
        return f"property: {exc.args[0]}"
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if "/c3m/" in f.filename.replace(os.sep, "/")]
    f = (mine or frames or [None])[-1]
    where = f"{Path(f.filename).relative_to(ROOT) if f.filename.startswith(str(ROOT)) else Path(f.filename).name}" \
            f":{f.lineno} ({f.name})" if f is not None else "?"
    return f"{type(exc).__name__} at {where}"


class Recorder:
    """Runs one input of a campaign, counts it, and files what went wrong under a signature."""

    def __init__(self, name: str):
        self.name, self.inputs, self.failures = name, 0, {}

    def run(self, prop: Callable[[Any], None], x: Any) -> None:
        self.inputs += 1
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prop(x)
        except (Exception, Hang, RecursionError, MemoryError) as exc:
            sig = _signature(exc)
            shown = _show(x)
            rec = self.failures.setdefault(sig, {"count": 0, "input": shown, "error": f"{type(exc).__name__}: {exc}"[:400],
                                                 "traceback": "".join(traceback.format_exception(exc))[-3000:]})
            rec["count"] += 1
            if len(shown) < len(rec["input"]):  # keep the smallest example seen
                rec["input"] = shown
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _show(x: Any) -> str:
    s = repr(x)
    return s if len(s) <= 600 else s[:600] + f"... ({len(s)} chars)"


def expect_clear(fn: Callable, *args, **kwargs):
    """Call ``fn``: a ``C3MError`` is a clear refusal (returns ``(None, err)``); anything else propagates."""
    try:
        return fn(*args, **kwargs), None
    except C3MError as exc:
        if not str(exc).strip():
            raise PropertyViolation(f"{fn.__name__} raised an empty {type(exc).__name__}") from exc
        return None, exc


# ---------------------------------------------------------------------------------------------
# Image seeds: valid files of each format plus hand-made hostile ones
# ---------------------------------------------------------------------------------------------
def _png_chunk(typ: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + typ + data + struct.pack(">I", zlib.crc32(typ + data) & 0xFFFFFFFF)


def png_header(w: int, h: int, *, idat: bytes = b"", depth: int = 8, color: int = 2) -> bytes:
    """A PNG claiming ``w`` x ``h`` pixels (decompression-bomb shape: a header that costs nothing to send)."""
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(idat)) + \
        _png_chunk(b"IEND", b"")


def _encoded(fmt: str, size=(16, 12), mode="RGB", **kw) -> bytes:
    from PIL import Image

    im = Image.new(mode, size, (200, 30, 90) if mode == "RGB" else 7)
    for x in range(size[0]):
        im.putpixel((x, x % size[1]), (x * 13 % 256, 50, 200) if mode == "RGB" else x % 256)
    out = io.BytesIO()
    im.save(out, fmt, **kw)
    return out.getvalue()


def _gif_frames(n: int, size=(8, 8)) -> bytes:
    from PIL import Image

    frames = [Image.new("P", size, i % 256) for i in range(n)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=10, loop=0)
    return out.getvalue()


def _with_dims(data: bytes, fmt: str, w: int, h: int) -> bytes:
    """A valid small file whose header is patched to claim ``w`` x ``h``."""
    b = bytearray(data)
    if fmt == "JPEG":
        i = 2
        while i < len(b) - 9:
            if b[i] == 0xFF and b[i + 1] in (0xC0, 0xC1, 0xC2):
                struct.pack_into(">HH", b, i + 5, h & 0xFFFF, w & 0xFFFF)
                break
            i += 2 + struct.unpack(">H", b[i + 2:i + 4])[0] if b[i] == 0xFF else 1
    elif fmt == "GIF":
        struct.pack_into("<HH", b, 6, w & 0xFFFF, h & 0xFFFF)
    elif fmt == "BMP":
        struct.pack_into("<ii", b, 18, w, h)
    return bytes(b)


_SEEDS: dict[str, bytes] | None = None


def image_seeds() -> dict[str, bytes]:
    global _SEEDS
    if _SEEDS is None:
        from PIL import features

        s = {"png": _encoded("PNG"), "png_gray": _encoded("PNG", mode="L"), "jpeg": _encoded("JPEG", quality=80),
             "jpeg_progressive": _encoded("JPEG", progressive=True), "gif": _encoded("GIF"), "bmp": _encoded("BMP"),
             "tiff": _encoded("TIFF"), "gif_3": _gif_frames(3), "gif_many_frames": _gif_frames(3000, (2, 2))}
        if features.check("webp"):
            s["webp"] = _encoded("WEBP")
        s.update({
            "png_30000x30000": png_header(30000, 30000), "png_10000x10000": png_header(10000, 10000),
            "png_7000x7000": png_header(7000, 7000), "png_65535x1": png_header(65535, 1),
            "png_1x2147483647": png_header(1, 2**31 - 1), "png_0x0": png_header(0, 0),
            "png_zlib_bomb": png_header(8000, 8000, idat=b"\0" * (8000 * 8001), depth=1, color=0),
            "jpeg_65500x65500": _with_dims(s["jpeg"], "JPEG", 65500, 65500),
            "jpeg_0x0": _with_dims(s["jpeg"], "JPEG", 0, 0),
            "gif_65535x65535": _with_dims(s["gif"], "GIF", 65535, 65535),
            "bmp_huge": _with_dims(s["bmp"], "BMP", 2**30, 2**30), "bmp_negative": _with_dims(s["bmp"], "BMP", -5, -7),
        })
        _SEEDS = s
    return _SEEDS


def mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, value) mutations: flip a byte, truncate, insert, delete a run, set 0xFF/0x00."""
    b = bytearray(data)
    for kind, pos, val in ops:
        if not b:
            break
        p = pos % len(b)
        if kind == 0:
            b[p] ^= (val % 255) + 1
        elif kind == 1:
            del b[p:]
        elif kind == 2:
            b[p:p] = bytes([val % 256]) * (1 + val % 7)
        elif kind == 3:
            del b[p:p + 1 + val % 64]
        elif kind == 4:
            b[p] = 0xFF if val % 2 else 0
        elif kind == 5:  # a 4-byte big-endian number (lengths, dimensions) set large
            b[p:p + 4] = struct.pack(">I", (val * 2654435761) & 0xFFFFFFFF)
    return bytes(b)


# ---------------------------------------------------------------------------------------------
# Properties (also used by tests/test_fuzz.py)
# ---------------------------------------------------------------------------------------------
def _limits():
    from c3m.server.limits import RequestLimits

    return RequestLimits()


def _pixels_ok(w: int, h: int, max_pixels: int) -> bool:
    return w > 0 and h > 0 and w * h <= max_pixels


_IMG_DIR: Path | None = None


def prop_image(data: bytes) -> None:
    """The three decoders of untrusted image bytes refuse clearly, and what they accept is a real, bounded image."""
    global _IMG_DIR
    from c3m.dataset.format import ImageLimits, _check_file
    from c3m.server.limits import check_image
    from c3m.store.cold import read_image

    lim = _limits()
    expect_clear(check_image, data, "img", lim)
    if _IMG_DIR is None:
        _IMG_DIR = Path(tempfile.mkdtemp(prefix="c3m-fuzz-img-", dir=SCRATCH)).resolve()
    f = _IMG_DIR / "x.img"
    f.write_bytes(data)
    path, message, fix = _check_file("x.img", _IMG_DIR, f, ImageLimits())
    if path is None and not (message and fix):
        raise PropertyViolation("dataset _check_file refused without a message and fix")
    got, _ = expect_clear(read_image, data, "img")
    if got is not None:
        ref = got[1]
        if not _pixels_ok(ref.width, ref.height, ImageLimits().max_pixels):
            raise PropertyViolation("read_image accepted an image of 0 or over ImageLimits.max_pixels pixels")


def prop_session_json(obj: Any) -> None:
    from c3m.server.limits import session_from_json
    from c3m.types import ROLES, Session, Turn

    files = None
    if isinstance(obj, tuple):  # (body, multipart files)
        obj, files = obj
    s, _ = expect_clear(session_from_json, obj, _limits(), files)
    if s is None:
        return
    if not isinstance(s, Session) or not isinstance(s.id, str) or not s.id.strip() or len(s.id) > 200:
        raise PropertyViolation("accepted session has a bad id")
    if not isinstance(s.time, datetime) or s.time.tzinfo is not None:
        raise PropertyViolation("accepted session time is not a naive datetime")
    s.id.encode("utf-8")  # the store keeps UTF-8: a lone surrogate must be refused here, not at INSERT
    for t in s.turns:
        if not isinstance(t, Turn) or t.role not in ROLES or not isinstance(t.text, str):
            raise PropertyViolation("accepted turn has a bad role or text")
        t.text.encode("utf-8")
        if not all(isinstance(im, bytes) and im for im in t.images):
            raise PropertyViolation("accepted turn image is not bytes")


def prop_session_bytes(raw: bytes) -> None:
    """The server's multipart path: ``json.loads`` of a form field, then ``session_from_json``."""
    try:
        obj = json.loads(raw.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return  # the HTTP layer answers 400 to a body that is not JSON
    prop_session_json(obj)


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for name in filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def prop_dataset(spec: tuple[list, dict[str, bytes]]) -> None:
    """A random dataset folder: validate never raises; load raises InvalidInput exactly when validate finds
    problems; a loaded dataset's images are readable files inside the folder."""
    from c3m.dataset import load_dataset, validate_dataset
    from c3m.errors import InvalidInput

    lines, images = spec
    with tempfile.TemporaryDirectory(prefix="c3m-fuzz-ds-", dir=SCRATCH) as tmp:
        root = Path(tmp).resolve()
        for rel, data in images.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        body = b"".join((ln if isinstance(ln, bytes) else json.dumps(ln).encode("utf-8", "surrogatepass")) + b"\n"
                        for ln in lines)
        (root / "episodes.jsonl").write_bytes(body)
        problems = validate_dataset(root)
        if not all(isinstance(p, InvalidInput) for p in problems):
            raise PropertyViolation("validate_dataset returned something other than InvalidInput")
        loaded, err = expect_clear(load_dataset, root)
        if (err is None) != (not problems):
            raise PropertyViolation("load_dataset and validate_dataset disagree")
        for h in loaded or []:
            for s in h.sessions:
                for t in s.turns:
                    for im in t.images:
                        if not (isinstance(im, Path) and im.is_file() and im.resolve().is_relative_to(root)):
                            raise PropertyViolation("loaded image path is not a file inside the dataset")


def prop_dataset_write(histories: list) -> None:
    """write_dataset over an existing dataset: refused -> folder unchanged; written -> it loads."""
    from c3m.dataset import load_dataset, write_dataset
    from c3m.types import History, Session, Turn

    histories, err = expect_clear(build, histories)
    if err is not None:
        return
    with tempfile.TemporaryDirectory(prefix="c3m-fuzz-dw-", dir=SCRATCH) as tmp:
        root = Path(tmp) / "ds"
        seed = History("h0", (Session("s1", datetime(2026, 3, 1, 10), (Turn("user", "hello",
                                                                             (image_seeds()["png"],)),)),))
        write_dataset([seed], root)
        before = _tree(root)
        out, err = expect_clear(write_dataset, histories, root)
        if err is not None:
            if _tree(root) != before:
                raise PropertyViolation("a refused write_dataset changed the folder (partial write)")
            return
        loaded, err = expect_clear(load_dataset, root)
        if err is not None:
            raise PropertyViolation("write_dataset wrote a dataset that does not load")


class _StoreBox:
    """One scratch ColdStore reused for a few hundred inputs (opening one per input would dominate)."""

    def __init__(self):
        self.store, self.dir, self.uses = None, None, 0

    def get(self):
        from c3m.store import ColdStore

        if self.store is None or self.uses >= 300:
            self.close()
            self.dir = tempfile.TemporaryDirectory(prefix="c3m-fuzz-store-", dir=SCRATCH)
            self.store = ColdStore(Path(self.dir.name) / "store")
            self.uses = 0
        self.uses += 1
        return self.store

    def close(self):
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.close()
            self.dir.cleanup()
        self.store = None


STORE = _StoreBox()


def _store_state(store) -> tuple:
    from c3m.store import verify_store

    n = store.conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    m = store.conn.execute("SELECT COUNT(*) FROM raw_nodes").fetchone()[0]
    blobs = sorted(str(p.relative_to(store.blobs.root)) for p in store.blobs.root.rglob("*") if p.is_file())
    return n, m, blobs, verify_store(store, check_blob_hashes=False).ok


def build(spec: Any) -> Any:
    """``("Session", id, time, turns)`` / ``("Turn", role, text, images)`` -> the object (nested specs too)."""
    from c3m.types import History, Session, Turn

    if isinstance(spec, list):
        return [build(x) for x in spec]
    if isinstance(spec, tuple) and spec and spec[0] == "Turn":
        return Turn(*spec[1:])
    if isinstance(spec, tuple) and spec and spec[0] == "History":
        return History(spec[1], tuple(build(x) for x in spec[2]))
    if isinstance(spec, tuple) and spec and spec[0] == "Session":
        turns = spec[3]
        turns = [build(t) for t in turns] if isinstance(turns, list) else build(turns)
        return Session(spec[1], spec[2], turns)
    return spec


def prop_store_write(session: Any) -> None:
    """A session into the Cold Store (the Memory.add_session path): stored, or refused with nothing written.
    ``session`` may be a constructor spec (see ``build``): building it must also refuse clearly."""
    session, err = expect_clear(build, session)
    if err is not None:
        return
    store = STORE.get()
    before = _store_state(store)
    try:
        prepared = store.prepare_session("fuzz", session)
        with store.transaction("fuzz"):
            store.insert_session(prepared)
    except C3MError:
        after = _store_state(store)
        if after != before:
            what = [k for k, a, b in zip(("sessions", "raw nodes", "blob files", "verify ok"), before, after) if a != b]
            raise PropertyViolation(f"a refused session changed the store ({', '.join(what)}): partial write")
        return
    if not _store_state(store)[3]:
        raise PropertyViolation("verify_store fails after an accepted session")


def _write_file(path: Path, data: str | bytes) -> None:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))


def prop_config(spec: tuple[str, Any]) -> None:
    """Config files and tables: InvalidInput, or a config whose every field has its declared type."""
    from c3m.config import MemoryConfig
    from c3m.server.auth import KeyRing

    kind, payload = spec
    with tempfile.TemporaryDirectory(prefix="c3m-fuzz-cfg-", dir=SCRATCH) as tmp:
        if kind == "keys":
            p = Path(tmp) / "api_keys.json"
            _write_file(p, payload)
            ring, _ = expect_clear(KeyRing, p)
            for r in (ring.records if ring is not None else []):
                if not (isinstance(r.key_id, str) and isinstance(r.sha256, str) and isinstance(r.label, str)
                        and isinstance(r.created_at, str) and isinstance(r.namespaces, tuple) and r.namespaces
                        and all(isinstance(n, str) for n in r.namespaces)):
                    raise PropertyViolation("KeyRing loaded a key record with wrongly typed fields")
            if ring is not None:
                ring.lookup("c3m_x")
            return
        if kind == "dict":
            cfg, _ = expect_clear(MemoryConfig.from_dict, payload)
        else:
            p = Path(tmp) / f"c3m.{kind}"
            _write_file(p, payload)
            cfg, _ = expect_clear(MemoryConfig.load, p)
    if cfg is not None:
        _check_config_types(cfg)


def _check_config_types(cfg) -> None:
    from c3m.types import ReaderBudget, WriteBudget

    for name in ("method", "text_embedder", "token_counter", "answerer", "perception", "image_embedder",
                 "image_token_model", "device"):
        if not isinstance(getattr(cfg, name), str):
            raise PropertyViolation(f"MemoryConfig accepted a non-string {name}")
    for name in ("max_image_bytes", "max_turn_chars"):
        v = getattr(cfg, name)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise PropertyViolation(f"MemoryConfig accepted a non-positive-integer {name}")
    if not isinstance(cfg.method_options, dict) or not isinstance(cfg.write_budget, WriteBudget) \
            or not isinstance(cfg.reader_budget, ReaderBudget):
        raise PropertyViolation("MemoryConfig accepted a wrongly typed table")


# ---------------------------------------------------------------------------------------------
# Hypothesis strategies
# ---------------------------------------------------------------------------------------------
def strategies():
    from hypothesis import strategies as st

    S = image_seeds()
    names = sorted(S)
    ops = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1 << 20), st.integers(0, 1 << 16)), max_size=6)
    image = st.one_of(
        st.sampled_from(names).map(S.__getitem__),
        st.tuples(st.sampled_from(names), ops).map(lambda t: mutate(S[t[0]], t[1])),
        st.tuples(st.sampled_from(names), st.integers(0, 4096)).map(lambda t: S[t[0]][:t[1]]),
        st.binary(max_size=64),
    )
    text = st.text(max_size=30) | st.sampled_from(["", " ", "\ud800", "a\x00b", "x" * 100_001, "\u202e", "..", "/"])
    scalar = st.none() | st.booleans() | st.integers() | st.floats() | text
    js = st.recursive(scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(text, c, max_size=4), max_leaves=12)
    times = st.sampled_from(["2026-03-02T10:00:00", "2026-03-02T10:00:00Z", "2026-03-02T10:00:00+14:00",
                             "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00", "2026-13-01", "", "now",
                             "2026-03-02", "2026-03-02 10:00:00.123456+05:30"]) | text
    role = st.sampled_from(["user", "assistant", "system", "User", "", "tool"]) | js

    def maybe(key, strat):
        return st.one_of(st.just({}), strat.map(lambda v: {key: v}))

    def merge(parts):
        out = {}
        for p in parts:
            out.update(p)
        return out

    b64 = image.map(lambda b: base64.b64encode(b).decode())
    img_json = st.one_of(b64.map(lambda s: {"data": s}), b64.map(lambda s: {"data": "data:image/png;base64," + s}),
                         st.fixed_dictionaries({"file": js}), st.fixed_dictionaries({"data": js}), js)
    turn_json = st.one_of(st.tuples(maybe("role", role), maybe("text", text | js),
                                    maybe("images", st.lists(img_json, max_size=3) | js),
                                    maybe("extra", js)).map(merge), js)
    session_json = st.one_of(
        st.tuples(maybe("id", text | js), maybe("time", times | js),
                  maybe("turns", st.lists(turn_json, max_size=4) | js), maybe("x", js)).map(merge), js)
    files = st.dictionaries(text, image, max_size=2)
    session_any = st.one_of(session_json, st.tuples(session_json, files))

    # datasets: history-shaped lines with wrong bits, random JSON, random bytes; image files named by them
    rels = st.sampled_from(["images/a.png", "images/b.jpg", "c.gif", "d/e.img", "missing.png", "/etc/passwd",
                            "../x.png", "images", "C:\\x.png", "a\x00b.png", "x" * 300 + ".png", ""]) | text
    ds_turn = st.one_of(st.tuples(maybe("role", role), maybe("text", text | js),
                                  maybe("images", st.lists(rels | js, max_size=3) | js)).map(merge), js)
    ds_session = st.one_of(st.tuples(maybe("id", text | js), maybe("time", times | js),
                                     maybe("turns", st.lists(ds_turn, max_size=3) | js)).map(merge), js)
    ds_question = st.one_of(st.tuples(
        maybe("id", text | js), maybe("question", text | js), maybe("answer", text | js),
        maybe("category", st.sampled_from(["IE", "MSR", "TR", "KU", "AR", "XX"]) | js), maybe("time", times | js),
        maybe("evidence", st.lists(st.tuples(maybe("session", text | js), maybe("turn", st.integers(-2, 5) | js))
                                   .map(merge), max_size=2) | js)).map(merge), js)
    history = st.tuples(maybe("id", text | js), maybe("sessions", st.lists(ds_session, max_size=3) | js),
                        maybe("questions", st.lists(ds_question, max_size=2) | js)).map(merge)
    line = st.one_of(history, history, js, st.binary(max_size=40), st.just(b"[" * 50_000),
                     st.just(b"\xef\xbb\xbf{}"), st.just(b"   "))
    files_ds = st.dictionaries(st.sampled_from(["images/a.png", "images/b.jpg", "c.gif", "d/e.img"]), image, max_size=4)
    dataset = st.tuples(st.lists(line, min_size=0, max_size=4), files_ds)

    # Python objects for the store and write_dataset (as specs: see ``build``)
    # (Turn/Session constructor arguments, built inside the property: construction itself is under test)
    py_img = image | st.sampled_from(["/nonexistent.png", Path("/dev/null"), "", 5, None])
    py_images = st.lists(py_img, max_size=2) | py_img | js
    py_turn = st.tuples(st.just("Turn"), role, text | st.none() | st.integers(), py_images) | js
    py_time = st.datetimes() | st.datetimes(timezones=st.timezones()) | st.none() | text
    py_session = st.tuples(st.just("Session"), text | st.none() | st.integers(), py_time,
                           st.lists(py_turn, max_size=3) | py_turn | js)
    store_session = st.one_of(py_session, py_session,
                              session_json.map(_session_or_none).filter(lambda s: s is not None))
    ok_time = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1))
    dw_turn = st.tuples(st.just("Turn"), role.filter(lambda r: isinstance(r, str)), text, st.lists(image, max_size=2))
    dw_session = st.tuples(st.just("Session"), text, ok_time, st.lists(dw_turn, min_size=0, max_size=2))
    dw_history = st.tuples(st.just("History"), text, st.lists(dw_session, max_size=2))
    histories = st.lists(dw_history, max_size=2)

    # configs
    keys = ["method", "text_embedder", "token_counter", "answerer", "perception", "image_embedder",
            "image_token_model", "max_image_bytes", "max_turn_chars", "method_options", "device", "write_budget",
            "reader_budget", "nope"]
    sub = st.dictionaries(st.sampled_from(["entries", "pages", "index_tokens", "index_bytes", "raw_nodes", "images",
                                           "text_tokens", "x"]), st.integers(-3, 1 << 40) | js, max_size=3)
    cfg_dict = st.dictionaries(st.sampled_from(keys) | text, st.one_of(js, sub, st.integers(-5, 1 << 70)), max_size=5)
    toml_text = st.one_of(cfg_dict.map(_to_toml), st.tuples(cfg_dict.map(_to_toml), ops).map(
        lambda t: mutate(t[0].encode(), t[1]).decode("utf-8", "replace")), text, st.binary(max_size=60),
        st.just("a = " + "[" * 5000), st.just("x = [" * 3000 + "]" * 3000))
    yaml_text = st.one_of(cfg_dict.map(lambda d: json.dumps(d, ensure_ascii=False)), text, st.binary(max_size=60),
                          st.sampled_from(["[" * 1000 + "]" * 1000, "1: 2\nmethod: x\n", "&a [*a]", "a: &x\n  - *x",
                                           "!!python/object:os.system ls", "method: !!binary AAAA"]))
    key_rec = st.tuples(maybe("key_id", text | js), maybe("sha256", text | js),
                        maybe("namespaces", st.lists(text, max_size=2) | js), maybe("label", js),
                        maybe("created_at", js)).map(merge)
    key_file = st.one_of(st.fixed_dictionaries({"keys": st.lists(key_rec | js, max_size=3)}).map(json.dumps),
                         js.map(json.dumps), st.binary(max_size=60), st.just("[" * 100_000))
    config = st.one_of(st.tuples(st.just("toml"), toml_text), st.tuples(st.just("yaml"), yaml_text),
                       st.tuples(st.just("dict"), cfg_dict), st.tuples(st.just("keys"), key_file))
    return {"dataset": dataset, "dataset_write": histories, "session_json": session_any,
            "store_write": store_session, "image": image, "config": config}


def _session_or_none(obj):
    from c3m.server.limits import session_from_json

    try:
        return session_from_json(obj, _limits())
    except Exception:
        return None


def _to_toml(d: dict) -> str:
    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return json.dumps(v) if v == v and abs(v) != float("inf") else "nan"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v if x is not None) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {val(x)}" for k, x in v.items() if x is not None) + "}"
        return '""'
    return "".join(f"{json.dumps(k)} = {val(v)}\n" for k, v in d.items() if v is not None)


PROPS = {"dataset": prop_dataset, "dataset_write": prop_dataset_write, "session_json": prop_session_json,
         "store_write": prop_store_write, "image": prop_image, "config": prop_config}


# Inputs per hypothesis run. One run keeps every example it generated (its data tree and example cache), which
# grew by ~3.5 MB an input with the store campaign's image-bearing sessions: 10,000 inputs in one run ran the
# machine out of memory (24 GB at input 6,493). Runs of a few hundred, each seeded apart, stay bounded.
ROUND_INPUTS = 500


def run_hypothesis(name: str, n: int, progress=None) -> Recorder:
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from hypothesis.errors import HypothesisWarning

    warnings.simplefilter("ignore", HypothesisWarning)  # reprs of the big sample strings
    rec = Recorder(name)
    strat = strategies()[name]
    prop = PROPS[name]
    round_ = 0
    while rec.inputs < n:
        @seed(round_)
        @settings(max_examples=min(ROUND_INPUTS, n - rec.inputs), deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate], report_multiple_bugs=False)
        @given(strat)
        def campaign(x):
            before = rec.inputs
            rec.run(prop, x)
            if progress is not None:
                progress(rec.inputs - before)

        start = rec.inputs
        campaign()
        if rec.inputs == start:
            break
        round_ += 1
    if name == "store_write":
        STORE.close()
    return rec


# ---------------------------------------------------------------------------------------------
# atheris (byte-level), in a subprocess: atheris.Fuzz ends the process when -runs is reached
# ---------------------------------------------------------------------------------------------
ATHERIS = {"image_bytes": prop_image, "session_bytes": prop_session_bytes}


def _atheris_seeds(name: str) -> list[bytes]:
    S = image_seeds()
    if name == "image_bytes":
        return [v for k, v in S.items() if k != "gif_many_frames"]
    b64 = base64.b64encode(S["png"]).decode()
    return [json.dumps(x).encode() for x in (
        {"turns": [{"role": "user", "text": "hello"}]},
        {"id": "s1", "time": "2026-03-02T10:00:00Z", "turns": [{"role": "user", "text": "a", "images": [{"data": b64}]},
                                                              {"role": "assistant", "text": "b"}]},
        {"turns": [{"role": "system", "text": "", "images": [{"data": "data:image/png;base64," + b64}]}]})]


def atheris_worker(name: str, runs: int, out: Path) -> None:
    import atheris

    import importlib

    with atheris.instrument_imports():  # coverage feedback from Pillow's Python plugins and the c3m checks
        for mod in ("PIL.GifImagePlugin", "PIL.JpegImagePlugin", "PIL.PngImagePlugin", "c3m.dataset.format",
                    "c3m.server.limits"):
            importlib.import_module(mod)
    rec = Recorder(name)
    prop = ATHERIS[name]

    def dump():
        out.write_text(json.dumps({"inputs": rec.inputs, "failures": rec.failures}))

    def one(data: bytes) -> None:
        rec.run(prop, data)
        if rec.inputs % 200 == 0 or rec.inputs >= runs or len(rec.failures) != one.known:
            one.known = len(rec.failures)
            dump()
    one.known = 0
    corpus = Path(tempfile.mkdtemp(prefix=f"c3m-fuzz-{name}-", dir=SCRATCH))
    for i, s in enumerate(_atheris_seeds(name)):
        (corpus / f"seed{i}").write_bytes(s)
    atheris.Setup([sys.argv[0], f"-runs={runs}", "-seed=17", "-max_len=65536", "-rss_limit_mb=4096",
                   f"-timeout={int(HANG_S) + 5}", "-print_final_stats=0", str(corpus)], one)
    atheris.Fuzz()


def run_atheris(name: str, n: int) -> Recorder:
    if importlib.util.find_spec("atheris") is None:  # else the worker's ImportError would read as a fuzz failure
        raise SystemExit(f"campaign {name!r} needs atheris: pip install -e '.[fuzz]' "
                         f"(or leave it out: --only {','.join(c for c in ORDER if c not in TOOLS)})")
    rec = Recorder(name)
    with tempfile.TemporaryDirectory(prefix="c3m-fuzz-ath-", dir=SCRATCH) as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.run([sys.executable, __file__, "--atheris-worker", name, "-n", str(n), "--out", str(out)],
                              capture_output=True, text=True, cwd=ROOT)
        if out.exists():
            data = json.loads(out.read_text())
            rec.inputs, rec.failures = data["inputs"], data["failures"]
        if proc.returncode != 0 and rec.inputs < n:  # the worker itself died: a crash libFuzzer caught
            rec.failures[f"worker exit {proc.returncode}"] = {"count": 1, "input": "(see libFuzzer output)",
                                                              "error": proc.stderr[-1500:], "traceback": ""}
    return rec


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
TOOLS = {"image_bytes": "atheris", "session_bytes": "atheris"}
TARGETS = {
    "dataset": "c3m.dataset: validate_dataset, load_dataset (random folders, episodes.jsonl, images)",
    "dataset_write": "c3m.dataset.write_dataset over an existing dataset (no partial write)",
    "session_json": "c3m.server.limits.session_from_json (random JSON bodies, base64 images, multipart files)",
    "session_bytes": "json.loads + session_from_json (raw request bytes)",
    "store_write": "ColdStore.prepare_session + insert_session (random Session/Turn; no partial write)",
    "image": "check_image, dataset image check, store read_image (mutated PNG/JPEG/GIF/BMP/TIFF/WebP, bombs)",
    "image_bytes": "the same three image decoders, libFuzzer byte mutation",
    "config": "MemoryConfig.load (TOML, YAML), MemoryConfig.from_dict, KeyRing (API key file)",
}
ORDER = ["dataset", "dataset_write", "session_json", "session_bytes", "store_write", "image", "image_bytes", "config"]

#: failures these campaigns found during development and that were fixed (the regression test in
#: tests/test_fuzz.py replays each concrete input); a rerun of the campaigns finds none of them again
FIXED: dict[str, list[str]] = {
    "dataset": [
        "`OverflowError at c3m/dataset/format.py (_time)`: a session time such as `9999-12-31T23:59:59-05:00` or "
        "`0001-01-01T00:00:00+01:00` escaped validate_dataset; now a problem naming `sessions[i].time`",
        "property: a lone surrogate (`\\ud800` in the JSON) in any string field loaded, then failed at ingest "
        "(UnicodeEncodeError in the store); now a problem naming the field",
    ],
    "dataset_write": [
        "property: a refused write_dataset left the images it had written (and overwrote an existing dataset's image "
        "of the same ids); now undone: files removed or restored, folders it made removed",
        "`UnicodeEncodeError at c3m/dataset/format.py (_safe_name)` and `(write_dataset)`: a surrogate in an id "
        "crashed the write; now InvalidInput (and nothing written)",
    ],
    "session_json": [
        "`OverflowError at c3m/server/limits.py (parse_time)`: time `9999-12-31T23:59:59-05:00`; now InvalidInput 'time'",
        "property: a lone surrogate in `text` or `id` was accepted, then UnicodeEncodeError at INSERT; now InvalidInput",
        "`TypeError at c3m/server/limits.py (session_from_json)`: `{\"file\": [1]}` (unhashable name); now InvalidInput",
        "property: `\"images\": 0` / `\"\"` / `false` were accepted as no images; now 'must be a list'",
    ],
    "store_write": [
        "`AttributeError at c3m/store/cold.py (prepare_session)`: `Session(..., turns=[False])` reached the store; "
        "fixed in c3m/types.py: Session refuses a non-Turn turn, Turn refuses a bare path/bytes or non-list images "
        "(a path string was split into characters), both refuse a lone surrogate in text/id (was "
        "UnicodeEncodeError at INSERT)",
        "property: a refused session changed the store (blob files): prepare_session wrote turn 0's image blob "
        "before refusing turn 1; fixed in c3m/store/cold.py: every turn's images are decoded and checked first",
        "property: a session id already stored with other content was refused only at insert_session, after its "
        "image blob was written (an orphan file); fixed in c3m/store/cold.py: the conflict is refused first",
    ],
    "image": [
        "property: read_image accepted an image of 0 or over ImageLimits.max_pixels pixels (a 100 M-pixel PNG "
        "header in a few bytes); fixed in c3m/store/cold.py: refused from the header, before decoding",
    ],
    "config": [
        "`RecursionError at c3m/config.py (load)`: deeply nested TOML (`a = [[[[...`); now InvalidInput '(file)'",
        "`RecursionError at c3m/config.py (load)`: deeply nested YAML; now InvalidInput '(file)'",
        "`TypeError at c3m/config.py (from_dict)`: a YAML config with a non-string key (`1: 2`); now 'unknown key'",
        "property: wrongly typed settings (`method = None`, `max_image_bytes = {}`, `method_options = 3`) were "
        "accepted and failed later; now InvalidInput naming the setting",
        "`RecursionError at c3m/server/auth.py (_load)`: a deeply nested API key file; now InvalidInput 'keys'",
        "`TypeError at c3m/server/auth.py (<dictcomp>)`: a key record with `sha256: {}`; now InvalidInput 'keys'",
        "property: key records with non-string fields or `namespaces: \"abc\"` (read as a, b, c) were loaded; now "
        "InvalidInput 'keys'",
    ],
}

#: failures in c3m/store/ are counted apart: a store bug can lose or corrupt stored data
STORE_SIDE = ("c3m/store/",)


def _is_store_side(sig: str, rec: dict) -> bool:
    return any(s in sig for s in STORE_SIDE) or "read_image" in sig or "refused session changed the store" in sig


def write_results(recs: dict[str, Recorder], argv: list[str], elapsed: float, quick: bool,
                  commit: str | None = None) -> None:
    suffix = "-quick" if quick else ""
    commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                      text=True).stdout.strip()
    rows, out = [], {"command": " ".join(argv), "commit": commit, "seconds": round(elapsed, 1), "campaigns": {}}
    for name in ORDER:
        if name not in recs:
            continue
        r = recs[name]
        fixed = FIXED.get(name, [])
        open_store = {k: v for k, v in r.failures.items() if _is_store_side(k, v)}
        open_other = {k: v for k, v in r.failures.items() if k not in open_store}
        cmd = f".venv/bin/python benchmarks/reliability/fuzz_campaign.py --only {name}" + (" --quick" if quick else "")
        out["campaigns"][name] = {"tool": TOOLS.get(name, "hypothesis"), "target": TARGETS[name], "inputs": r.inputs,
                                  "fixed_before_this_run": fixed, "found_this_run": r.failures,
                                  "open_store_side": sorted(open_store), "open": sorted(open_other), "command": cmd}
        rows.append(f"| {name} | {TOOLS.get(name, 'hypothesis')} | {TARGETS[name]} | {r.inputs:,} | "
                    f"{len(fixed) + len(r.failures)} | {len(fixed)} | {len(open_store)} | {len(open_other)} | `{cmd}` |")
    md = [f"# Fuzz campaigns (issue #17){' — quick smoke run' if quick else ''}", "",
          f"`{' '.join(argv)}`: {elapsed:.0f} s at commit {commit} on {os.cpu_count()} CPU cores (shared), "
          f"{datetime.now().strftime('%Y-%m-%d')}. A failure is anything but a `c3m.errors` error escaping, a hang "
          f"(> {HANG_S:.0f} s), or a broken invariant (a refused write that changed the store or dataset folder, an "
          "accepted input that breaks a documented limit). Distinct = grouped by exception type and innermost c3m "
          "frame. *Found* counts the failures fixed during this work (each replayed by a regression test in "
          "`tests/test_fuzz.py`) plus any this run still finds; *open (store)* are in `c3m/store/`, counted apart "
          "because a store bug can lose or corrupt stored data.", "",
          "| campaign | tool | target | inputs | distinct failures found | fixed | open (store side) | open (other) "
          "| command |", "|---|---|---|---:|---:|---:|---:|---:|---|", *rows, ""]
    md += ["## Fixed", ""]
    for name in ORDER:
        for f in FIXED.get(name, []):
            md.append(f"- **{name}**: {f}")
    md += ["", "## Still found by this run", ""]
    any_open = False
    for name in ORDER:
        for sig, v in (recs[name].failures.items() if name in recs else []):
            any_open = True
            md += [f"- **{name}** — `{sig}` ({v['count']} inputs): {v['error'][:300]}", f"  - smallest input: "
                   f"`{v['input'][:300]}`"]
    if not any_open:
        md.append("- none")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"reliability-fuzz{suffix}.md").write_text("\n".join(md) + "\n")
    (RESULTS / f"reliability-fuzz{suffix}.json").write_text(json.dumps(out, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few hundred inputs per campaign (smoke run)")
    ap.add_argument("-n", type=int, default=None, help="inputs per campaign (default 10000, 300 with --quick)")
    ap.add_argument("--only", default="", help="comma-separated campaigns: " + ",".join(ORDER))
    ap.add_argument("--no-write", action="store_true", help="do not write benchmarks/results files")
    ap.add_argument("--atheris-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.n or (300 if args.quick else 10_000)
    if args.atheris_worker:
        atheris_worker(args.atheris_worker, n, Path(args.out))
        return 0
    names = [x for x in args.only.split(",") if x] or ORDER
    bad = sorted(set(names) - set(ORDER))
    if bad:
        ap.error(f"unknown campaign {bad[0]!r}; choose from {ORDER}")
    from tqdm import tqdm

    recs, t0 = {}, time.time()
    for name in names:
        t = time.time()
        if name in ATHERIS:
            print(f"[{name}] atheris, {n} runs ...", flush=True)
            recs[name] = run_atheris(name, n)
        else:
            with tqdm(total=n, desc=name, unit="in", mininterval=2, file=sys.stdout) as bar:
                recs[name] = run_hypothesis(name, n, bar.update)
        r = recs[name]
        print(f"[{name}] {r.inputs} inputs, {len(r.failures)} distinct failures, {time.time() - t:.0f} s", flush=True)
        for sig, v in r.failures.items():
            print(f"    {sig} x{v['count']}: {v['error'][:160]}\n      input: {v['input'][:160]}", flush=True)
    if not args.no_write:
        write_results(recs, ["benchmarks/reliability/fuzz_campaign.py"] + (argv if argv is not None else sys.argv[1:]),
                      time.time() - t0, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
