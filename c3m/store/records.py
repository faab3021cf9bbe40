"""The Cold Store's records and checks, below its parts (``c3m.store.cold`` and the modules it is made of):
namespaces, times and content hashes, the session / snapshot / forget records, image checks."""
from __future__ import annotations

import hashlib
import io
import json
import re
import sqlite3
import zlib
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import InvalidInput, SessionConflict, StoreBusy
from ..types import ImageInput, ImageRef, RawNode, VisualAnchor

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
#: pixels per image (the dataset validator's ImageLimits.max_pixels): checked on the header, before any decoding, so a
#: small file claiming 10,000 x 10,000 pixels (a decompression bomb) is refused without allocating its frame
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000
#: a turn's text limit: a 2 MB turn used to be stored whole, peak ingest near 900 MB RSS, and then dropped from every
#: context by the reader's token budget without a word. Longer documents belong in several turns (or elsewhere).
DEFAULT_MAX_TEXT_CHARS = 100_000
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp",
         "TIFF": "image/tiff"}


def utc_naive(t: datetime) -> datetime:
    """All stored times are naive UTC (aware inputs are converted) so that every pair compares."""
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo is not None else t


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds")


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE_RE.match(namespace):
        raise InvalidInput("namespace", f"{namespace!r} is not a valid namespace",
                           fix="use 1-128 characters from letters, digits and . _ : / @ -, starting with a letter "
                               "or digit (e.g. 'user-42' or 'agent/alice')")
    return namespace


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pack(obj: Any) -> bytes:
    return zlib.compress(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8"), 6)


def _unpack(blob: bytes) -> Any:
    return json.loads(zlib.decompress(blob).decode("utf-8"))


@dataclass(frozen=True)
class SessionRecord:
    namespace: str
    session_id: str
    seq: int
    time: datetime
    n_turns: int
    content_sha256: str
    ingested_at: str


@dataclass(frozen=True)
class PreparedSession:
    """A session turned into Raw Nodes, its images already in the blob store, ready to commit."""

    namespace: str
    session_id: str
    time: datetime
    nodes: tuple[RawNode, ...]
    node_hashes: tuple[str, ...]
    content_sha256: str


@dataclass(frozen=True)
class Snapshot:
    namespace: str
    method: str
    version: int
    session_id: str
    created_at: str
    state: dict
    pointers: tuple[str, ...]
    complete_provenance: bool


@dataclass(frozen=True)
class ForgetReport:
    namespace: str
    node_ids: tuple[str, ...]
    blobs_deleted: int                 # original image blobs deleted
    snapshots_dropped: int
    derived_redacted: int = 0          # derived perception records (captions, anchors) redacted
    crops_deleted: int = 0             # grounded-crop blobs deleted


def node_content_sha256(role: str, text: str, images: Sequence[ImageRef]) -> str:
    payload = json.dumps([role, text, [im.sha256 for im in images]], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def session_content_sha256(time: datetime, node_hashes: Iterable[str]) -> str:
    payload = json.dumps([time.isoformat(), list(node_hashes)], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def read_image(image: ImageInput, field: str, *, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
               max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[bytes, ImageRef]:
    """Load and check one image given as a path or bytes; the bytes are kept exactly as given."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, (str, Path)):
        path = Path(image)
        if not path.is_file():
            raise InvalidInput(field, f"image file {str(path)!r} does not exist", fix="give an existing image path")
        data = path.read_bytes()
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
    else:
        raise InvalidInput(field, f"expected an image path or encoded image bytes, got {type(image).__name__}",
                           fix="pass a file path (str/Path) or the PNG/JPEG bytes")
    if len(data) > max_bytes:
        raise InvalidInput(field, f"image is {len(data)} bytes, over the {max_bytes}-byte limit",
                           fix="downscale or recompress the image")
    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt, (w, h) = im.format, im.size
            if w <= 0 or h <= 0 or w * h > max_pixels:
                raise InvalidInput(field, f"image is {w}x{h} pixels: " + ("empty" if w * h <= 0 else
                                   f"over the {max_pixels}-pixel limit"), fix="give a non-empty image of at most "
                                   f"{max_pixels} pixels (downscale it)")
            im.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidInput(field, f"not a readable image ({exc.__class__.__name__}: {exc})",
                           fix="give a PNG, JPEG, GIF, WEBP, BMP or TIFF file") from None
    ref = ImageRef(sha256=hashlib.sha256(data).hexdigest(), mime=_MIME.get(fmt or "", "application/octet-stream"),
                   width=int(w), height=int(h), nbytes=len(data))
    return data, ref



def _conflict(prepared: PreparedSession) -> SessionConflict:
    return SessionConflict(
        f"session {prepared.session_id!r} is already stored in namespace {prepared.namespace!r} "
        "with different content; stored sessions are immutable",
        fix="give the new session a new id (or use forget() first if the old one must be redacted)")


def _anchor_dict(a: VisualAnchor) -> dict:
    d = asdict(a)
    d["bbox"] = [int(v) for v in a.bbox] if a.bbox is not None else None
    d["score"] = float(a.score)
    return d


def _anchor_from(d: dict) -> VisualAnchor:
    return VisualAnchor(d["label"], d.get("attribute"), d.get("value"), float(d.get("score", 1.0)),
                        tuple(d["bbox"]) if d.get("bbox") is not None else None)


def _retry_locked(fn, timeout_s: float) -> None:
    """Run ``fn``, retrying with jittered backoff while another process holds the database lock."""
    import random
    import time

    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            return fn()
        except (sqlite3.OperationalError, StoreBusy) as exc:
            if not isinstance(exc, StoreBusy) and "locked" not in str(exc) and "busy" not in str(exc) \
                    or time.monotonic() > deadline:
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.5)


def _session_record(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord(row["namespace"], row["session_id"], row["seq"], datetime.fromisoformat(row["time"]),
                         row["n_turns"], row["content_sha256"], row["ingested_at"])


def _split_sql(script: str) -> list[str]:
    """Split the schema into statements (``executescript`` would commit our open transaction)."""
    statements, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            statements.append(buf.strip())
            buf = ""
    return statements
