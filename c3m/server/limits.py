"""Request limits and untrusted JSON → ``Session``: every problem is an ``InvalidInput`` naming the field and
the fix, raised before anything is stored.

The image rules are the dataset validator's (``c3m.dataset.format.ImageLimits``: bytes and pixels per image);
the server adds what a file-based dataset does not need: request body size, turns per session, images per
turn and text per turn, so one request cannot exhaust the server's memory.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..dataset.format import ImageLimits
from ..errors import InvalidInput
from ..types import ROLES, Session, Turn

_MIB = 1024 * 1024


@dataclass(frozen=True)
class RequestLimits:
    """What one request may carry (``c3m serve --max-body-mib`` etc. override them)."""

    max_body_bytes: int = 64 * _MIB
    max_turns: int = 1000
    max_images_per_turn: int = 16
    max_text_chars: int = 100_000
    max_question_chars: int = 4_000
    images: ImageLimits = field(default_factory=ImageLimits)


def check_image(data: bytes, path: str, limits: RequestLimits) -> bytes:
    """The validator's rules on decoded image bytes: size, pixels (before decoding), a readable image."""
    from PIL import Image

    il = limits.images
    if len(data) > il.max_bytes:
        raise InvalidInput(path, f"image is {len(data)} bytes, over the limit of {il.max_bytes} bytes",
                           fix="recompress or downscale the image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                w, h = im.size
                if w * h > il.max_pixels:
                    raise InvalidInput(path, f"image has {w}x{h} = {w * h} pixels, over the limit of "
                                             f"{il.max_pixels}", fix="downscale the image")
                im.verify()
    except InvalidInput:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise InvalidInput(path, f"image has too many pixels ({exc})", fix="downscale the image") from None
    except Exception as exc:  # Pillow raises many types on bad bytes
        raise InvalidInput(path, f"not a readable image ({exc.__class__.__name__}: {exc})",
                           fix="send a PNG, JPEG, GIF, WebP, BMP or TIFF file, base64-encoded") from None
    return data


def decode_base64(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidInput(path, f"must be a base64 string, got {type(value).__name__}",
                           fix='send the image bytes base64-encoded, e.g. {"data": "iVBORw0..."}')
    if value.startswith("data:") and "," in value:  # a data URL from a browser
        value = value.split(",", 1)[1]
    try:
        data = base64.b64decode("".join(value.split()), validate=True)  # line-wrapped base64 is common
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(path, f"is not valid base64 ({exc})",
                           fix="encode the image bytes with standard base64 (with = padding)") from None
    if not data:
        raise InvalidInput(path, "decodes to no bytes", fix="base64-encode the image file's bytes")
    return data


def parse_time(value: Any, path: str) -> datetime:
    if value is None:
        return datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            t = None
        if t is not None:
            try:
                return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t
            except OverflowError:  # e.g. 9999-12-31T23:59:59-05:00 is after the last representable UTC time
                raise InvalidInput(path, f"{value!r} is out of range once converted to UTC",
                                   fix="use a time between years 1 and 9999 in UTC") from None
    raise InvalidInput(path, f"{value!r} is not an ISO 8601 time",
                       fix='write e.g. "2026-03-02T10:00:00" (an offset such as "+02:00" or "Z" is allowed)')


def _check_utf8(value: str, path: str) -> None:
    """JSON may carry lone surrogates ("\\ud800"), which no UTF-8 store can hold: refuse them here."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(path, f"holds an unpaired surrogate (\\u{ord(value[exc.start]):04x}) at character {exc.start}",
                           fix="send valid Unicode text (a surrogate pair, or the character itself)") from None


def session_from_json(obj: Any, limits: RequestLimits, files: dict[str, bytes] | None = None) -> Session:
    """A ``Session`` from request JSON: ``{"id"?, "time"?, "turns": [{"role", "text", "images"?: [...]}]}``.

    An image is ``{"data": base64}`` (JSON body) or ``{"file": name}`` naming a part of a multipart upload
    (``files``). Without ``id``, the session id is the hash of its content, so a retried request is idempotent."""
    if not isinstance(obj, dict):
        raise InvalidInput("session", f"must be a JSON object, got {type(obj).__name__}",
                           fix='send {"turns": [{"role": "user", "text": "..."}]}')
    unknown = sorted(set(obj) - {"id", "time", "turns"})
    if unknown:
        raise InvalidInput(unknown[0], "is not a session field", fix="a session has id, time and turns")
    turns_in = obj.get("turns")
    if not isinstance(turns_in, list) or not turns_in:
        raise InvalidInput("turns", "must be a non-empty list of turns",
                           fix='send "turns": [{"role": "user", "text": "..."}]')
    if len(turns_in) > limits.max_turns:
        raise InvalidInput("turns", f"has {len(turns_in)} turns, over the limit of {limits.max_turns}",
                           fix="split the conversation into several sessions")
    turns = []
    digest = hashlib.sha256()
    for i, t in enumerate(turns_in):
        p = f"turns[{i}]"
        if not isinstance(t, dict):
            raise InvalidInput(p, f"must be an object, got {type(t).__name__}",
                               fix='write each turn as {"role": "user", "text": "..."}')
        extra = sorted(set(t) - {"role", "text", "images"})
        if extra:
            raise InvalidInput(f"{p}.{extra[0]}", "is not a turn field", fix="a turn has role, text and images")
        role, text = t.get("role"), t.get("text", "")
        if role not in ROLES:
            raise InvalidInput(f"{p}.role", f"unknown role {role!r}", fix=f"use one of {', '.join(ROLES)}")
        if not isinstance(text, str):
            raise InvalidInput(f"{p}.text", f"must be a string, got {type(text).__name__}", fix='"text": "..."')
        _check_utf8(text, f"{p}.text")
        if len(text) > limits.max_text_chars:
            raise InvalidInput(f"{p}.text", f"has {len(text)} characters, over the limit of "
                                             f"{limits.max_text_chars}",
                               fix="split the text over several turns, or store the document as a file elsewhere "
                                   "and remember a summary with a link")
        imgs_in = t.get("images")
        imgs_in = [] if imgs_in is None else imgs_in
        if not isinstance(imgs_in, list):
            raise InvalidInput(f"{p}.images", "must be a list", fix='"images": [{"data": "<base64>"}]')
        if len(imgs_in) > limits.max_images_per_turn:
            raise InvalidInput(f"{p}.images", f"has {len(imgs_in)} images, over the limit of "
                                               f"{limits.max_images_per_turn}", fix="spread them over several turns")
        images = []
        for k, im in enumerate(imgs_in):
            ip = f"{p}.images[{k}]"
            if isinstance(im, dict) and "data" in im:
                data = decode_base64(im["data"], f"{ip}.data")
            elif isinstance(im, dict) and "file" in im and files is not None:
                name = im["file"]
                if not isinstance(name, str) or name not in files:
                    raise InvalidInput(f"{ip}.file", f"names no uploaded file ({name!r})",
                                       fix=f"upload a part named {name!r}, or use one of {sorted(files)[:5]}")
                data = files[name]
            else:
                raise InvalidInput(ip, "must be {\"data\": \"<base64>\"}" + (" or {\"file\": name}" if files is not None
                                                                           else ""),
                                   fix='e.g. {"data": "iVBORw0KGgo..."}')
            images.append(check_image(data, ip, limits))
            digest.update(hashlib.sha256(data).digest())
        if not text.strip() and not images:
            raise InvalidInput(p, "has neither text nor images", fix="drop the empty turn")
        turns.append(Turn(role, text, tuple(images)))
        digest.update(json.dumps([role, text]).encode())
    time = parse_time(obj.get("time"), "time")
    sid = obj.get("id")
    if sid is None:
        digest.update(time.isoformat().encode())
        sid = "s-" + digest.hexdigest()[:16]
    if not isinstance(sid, str) or not sid.strip() or len(sid) > 200:
        raise InvalidInput("id", f"{sid!r} is not a session id", fix="use a non-empty string of at most 200 characters")
    _check_utf8(sid, "id")
    return Session(sid, time, tuple(turns))


def check_question(question: Any, limits: RequestLimits, path: str = "question") -> str:
    if not isinstance(question, str) or not question.strip():
        raise InvalidInput(path, "must be a non-empty string", fix="ask a question")
    if len(question) > limits.max_question_chars:
        raise InvalidInput(path, f"has {len(question)} characters, over the limit of {limits.max_question_chars}",
                           fix="ask a shorter question")
    return question
