"""Read, validate and write c3m datasets (format: docs/architecture.md, Formats).

A dataset is a folder holding ``episodes.jsonl`` (one user's ``History`` per line) and the image files
that its turns name by paths relative to the folder. Validation is strict so that a bad dataset fails at
load with a message naming the line, the field and the fix, not deep inside ingest or evaluation.

Conventions the rest of c3m relies on:

* Times are ISO 8601 strings parsed by ``datetime.fromisoformat``. Timezone-aware times are converted to
  UTC and made naive, so every time in a loaded dataset is naive and all of them compare with each other.
  Naive times are taken as they are (no zone is assumed or attached).
* Loaded ``Turn.images`` are absolute, resolved ``Path`` objects of files checked to be readable images
  inside the dataset folder (within ``ImageLimits``).
* Sessions must be in chronological order (equal times are allowed); ids are non-empty strings, unique
  per dataset (histories), per history (sessions, questions).
* Unknown keys are ignored, so converters may add their own metadata.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator

from PIL import Image

from ..errors import InvalidInput
from ..types import CATEGORIES, ROLES, EvidenceRef, History, Question, Session, Turn

EPISODES = "episodes.jsonl"
_MIB = 1024 * 1024
_TIME_EXAMPLE = '"2026-03-02T10:00:00"'
_TIME_FIX = ('write an ISO 8601 timestamp such as "2026-03-02T10:00:00" (an offset like "+02:00" or "Z" '
             'is allowed; such times are converted to UTC)')
_IMAGE_FIX = ("put the image inside the dataset folder and give its path relative to that folder, "
              "e.g. \"images/ep-0001/s1-0.png\"")


@dataclass(frozen=True)
class ImageLimits:
    """Caps on each referenced image, so a broken or hostile dataset cannot exhaust memory at ingest."""

    max_bytes: int = 20 * _MIB
    max_pixels: int = 40_000_000

    def __post_init__(self):
        for name in ("max_bytes", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidInput(f"ImageLimits.{name}", f"must be a positive integer, got {value!r}",
                                   fix=f"pass an int > 0 for {name}")


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
class _Problems:
    """The problems found on one line; collected rather than raised so validation reports them all."""

    def __init__(self, line: int | None, source: str):
        self.line, self.source, self.items = line, source, []

    def add(self, field: str, message: str, fix: str) -> None:
        self.items.append(InvalidInput(field, message, fix=fix, line=self.line, source=self.source))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


_KIND = {str: "a string", list: "a list", dict: "an object", int: "an integer"}


def _field(p: _Problems, obj: dict, key: str, path: str, kind: type, example: str, *,
           required: bool = True, nonempty: bool = False) -> Any:
    """``obj[key]`` if present and of type ``kind``; otherwise record why not and return None."""
    if key not in obj:
        if required:
            p.add(path, "is missing", f'add "{key}": {example}')
        return None
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        shown = json.dumps(value)[:60] if value is not None else "null"
        p.add(path, f"must be {_KIND[kind]}, got {_json_type(value)} ({shown})", f'write "{key}": {example}')
        return None
    if nonempty and not value:
        p.add(path, "is empty", f'write "{key}": {example}')
        return None
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's "\ud800" escape: no UTF-8 file or store can hold it
            p.add(path, f"holds an unpaired surrogate (\\u{ord(value[exc.start]):04x}) at character {exc.start}",
                  "write valid Unicode (a surrogate pair, or the character itself)")
            return None
    return value


def _time(p: _Problems, obj: dict, key: str, path: str, *, required: bool) -> datetime | None:
    """Parse an ISO 8601 time; aware times become naive UTC so all dataset times compare."""
    text = _field(p, obj, key, path, str, _TIME_EXAMPLE, required=required)
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        p.add(path, f"is not an ISO 8601 timestamp: {text!r}", _TIME_FIX)
        return None
    if value.tzinfo is not None:
        try:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError:  # e.g. "9999-12-31T23:59:59-05:00" is after the last representable UTC time
            p.add(path, f"is out of range once converted to UTC: {text!r}", _TIME_FIX)
            return None
    return value


def _check_image(rel: str, root: Path, limits: ImageLimits) -> tuple[Path | None, str, str]:
    """Resolve an image path inside ``root`` and check it is a readable image within the limits.

    Returns ``(path, "", "")`` or ``(None, message, fix)``.
    """
    if not rel:
        return None, "is an empty path", _IMAGE_FIX
    pure = PurePosixPath(rel)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:[\\/]", rel):
        return None, f"is an absolute path ({rel}); images must be inside the dataset folder", _IMAGE_FIX
    if ".." in pure.parts:
        return None, f"contains '..' ({rel}) and could point outside the dataset folder", _IMAGE_FIX
    try:
        return _check_file(rel, root, root / pure, limits)
    except (OSError, ValueError) as exc:  # unreadable, name too long, embedded NUL...
        return None, f"cannot be read ({rel}: {exc})", _IMAGE_FIX


def _check_file(rel: str, root: Path, candidate: Path, limits: ImageLimits) -> tuple[Path | None, str, str]:
    """The file-system half of ``_check_image``: symlinks, existence, size, Pillow."""
    resolved = candidate.resolve()
    if not resolved.is_relative_to(root):
        return None, (f"resolves outside the dataset folder ({rel} -> {resolved}) through a symlink"), \
            "replace the symlink with a copy of the image inside the dataset folder"
    if not resolved.exists():
        return None, f"does not exist ({candidate})", \
            f"add the image at {candidate} or correct the path (it is relative to {root})"
    if not resolved.is_file():
        return None, f"is not a file ({candidate})", "point the path at an image file"
    nbytes = resolved.stat().st_size
    if nbytes > limits.max_bytes:
        return None, f"is {nbytes} bytes, over the limit of {limits.max_bytes} bytes", \
            "recompress or downscale the image, or raise ImageLimits.max_bytes"
    too_big = "downscale the image, or raise ImageLimits.max_pixels"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(resolved) as im:
                width, height = im.size
                if width * height > limits.max_pixels:
                    return None, (f"has {width}x{height} = {width * height} pixels, over the limit of "
                                  f"{limits.max_pixels}"), too_big
                im.verify()
    except Image.DecompressionBombError as exc:
        return None, f"has too many pixels ({exc})", too_big
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, struct.error...) on bad files
        return None, f"is not a readable image ({candidate}: {exc})", \
            "replace it with a valid image file (PNG, JPEG, WebP, ...) or remove it from \"images\""
    return resolved, "", ""


class _Context:
    """State shared across the lines of one dataset: the root, limits, seen ids, and checked images."""

    def __init__(self, root: Path, limits: ImageLimits):
        self.root, self.limits = root, limits
        self.history_lines: dict[str, int | None] = {}
        self.images: dict[str, tuple[Path | None, str, str]] = {}

    def image(self, rel: str) -> tuple[Path | None, str, str]:
        if rel not in self.images:
            self.images[rel] = _check_image(rel, self.root, self.limits)
        return self.images[rel]


def _turn(p: _Problems, obj: Any, path: str, ctx: _Context) -> Turn | None:
    if not isinstance(obj, dict):
        p.add(path, f"must be an object, got {_json_type(obj)}",
              'write each turn as {"role": "user", "text": "...", "images": [...]}')
        return None
    before = len(p.items)
    role = _field(p, obj, "role", f"{path}.role", str, '"user"')
    if role is not None and role not in ROLES:
        p.add(f"{path}.role", f"unknown role {role!r}", f"use one of {', '.join(ROLES)}")
    text = _field(p, obj, "text", f"{path}.text", str, '"what was said"')
    rels = _field(p, obj, "images", f"{path}.images", list, '["images/ep-0001/s1-0.png"]', required=False)
    images = []
    for k, rel in enumerate(rels or []):
        if not isinstance(rel, str):
            p.add(f"{path}.images[{k}]", f"must be a string path, got {_json_type(rel)}",
                  'write "images" as a list of paths, e.g. ["images/ep-0001/s1-0.png"]')
            continue
        image, message, fix = ctx.image(rel)
        if image is None:
            p.add(f"{path}.images[{k}]", message, fix)
        images.append(image)
    return Turn(role, text, tuple(images)) if len(p.items) == before else None


def _question(p: _Problems, obj: Any, path: str, turn_counts: dict[str, int] | None) -> Question | None:
    """Parse a question; evidence is checked against ``turn_counts`` (None when sessions were invalid)."""
    if not isinstance(obj, dict):
        p.add(path, f"must be an object, got {_json_type(obj)}",
              'write each question as {"id": "q1", "question": "...", "answer": "...", "category": "IE"}')
        return None
    before = len(p.items)
    qid = _field(p, obj, "id", f"{path}.id", str, '"q1"', nonempty=True)
    text = _field(p, obj, "question", f"{path}.question", str, '"What ...?"', nonempty=True)
    answer = _field(p, obj, "answer", f"{path}.answer", str, '"the gold answer"')
    category = _field(p, obj, "category", f"{path}.category", str, '"IE"')
    if category is not None and category not in CATEGORIES:
        p.add(f"{path}.category", f"unknown category {category!r}", f"use one of {', '.join(CATEGORIES)}")
    when = _time(p, obj, "time", f"{path}.time", required=False)
    refs = _field(p, obj, "evidence", f"{path}.evidence", list, '[{"session": "s1", "turn": 0}]',
                  required=False)
    evidence = []
    for k, ref in enumerate(refs or []):
        rpath = f"{path}.evidence[{k}]"
        if not isinstance(ref, dict):
            p.add(rpath, f"must be an object, got {_json_type(ref)}", 'write {"session": "s1", "turn": 0}')
            continue
        sid = _field(p, ref, "session", f"{rpath}.session", str, '"s1"', nonempty=True)
        index = _field(p, ref, "turn", f"{rpath}.turn", int, "0")
        if sid is None or index is None or turn_counts is None:
            continue
        if sid not in turn_counts:
            p.add(f"{rpath}.session", f"names session {sid!r}, which is not in this history",
                  f"use one of the history's session ids: {', '.join(map(repr, turn_counts))}")
        elif not 0 <= index < turn_counts[sid]:
            n = turn_counts[sid]
            p.add(f"{rpath}.turn", f"turn {index} is out of range: session {sid!r} has {n} turn{'' if n == 1 else 's'}",
                  f"use a 0-based turn index from 0 to {turn_counts[sid] - 1}")
        else:
            evidence.append(EvidenceRef(sid, index))
    if len(p.items) > before:
        return None
    return Question(qid, text, answer, category, when, tuple(evidence))


def _history(p: _Problems, obj: Any, ctx: _Context) -> History | None:
    """Parse and check one line's object; problems go to ``p``; None if there were any."""
    if not isinstance(obj, dict):
        p.add("(line)", f"must be a JSON object, got {_json_type(obj)}",
              'write one history per line: {"id": "ep-0001", "sessions": [...], "questions": [...]}')
        return None
    hid = _field(p, obj, "id", "id", str, '"ep-0001"', nonempty=True)
    if hid is not None:
        if hid in ctx.history_lines:
            first = ctx.history_lines[hid]
            p.add("id", f"duplicate history id {hid!r} (first used on line {first})",
                  "give every history (line) a unique id")
        else:
            ctx.history_lines[hid] = p.line
    raw_sessions = _field(p, obj, "sessions", "sessions", list,
                          '[{"id": "s1", "time": "2026-03-02T10:00:00", "turns": [...]}]', nonempty=True)
    sessions: list[Session | None] = []
    session_index: dict[str, int] = {}
    # session id -> number of turns, for checking evidence; None once the sessions are too broken to tell
    turn_counts: dict[str, int] | None = {} if raw_sessions else None
    previous: tuple[int, datetime] | None = None
    for i, s in enumerate(raw_sessions or []):
        path = f"sessions[{i}]"
        if not isinstance(s, dict):
            p.add(path, f"must be an object, got {_json_type(s)}",
                  'write each session as {"id": "s1", "time": "2026-03-02T10:00:00", "turns": [...]}')
            turn_counts = None
            continue
        before = len(p.items)
        sid = _field(p, s, "id", f"{path}.id", str, '"s1"', nonempty=True)
        if sid is not None and sid in session_index:
            p.add(f"{path}.id", f"duplicate session id {sid!r} (also sessions[{session_index[sid]}])",
                  "give each session of a history a unique id")
            turn_counts = None
        elif sid is not None:
            session_index[sid] = i
        when = _time(p, s, "time", f"{path}.time", required=True)
        if when is not None:
            if previous is not None and when < previous[1]:
                p.add(f"{path}.time", (f"{when.isoformat()} is earlier than sessions[{previous[0]}].time "
                                       f"({previous[1].isoformat()}); sessions must be in chronological order"),
                      "order the sessions oldest first, or correct the timestamp")
            previous = (i, when)
        raw_turns = _field(p, s, "turns", f"{path}.turns", list,
                           '[{"role": "user", "text": "..."}]', nonempty=True)
        turns = [_turn(p, t, f"{path}.turns[{j}]", ctx) for j, t in enumerate(raw_turns or [])]
        if sid is None or raw_turns is None:
            turn_counts = None
        elif turn_counts is not None:
            turn_counts[sid] = len(raw_turns)
        sessions.append(Session(sid, when, turns) if len(p.items) == before else None)
    raw_questions = _field(p, obj, "questions", "questions", list, "[]", required=False)
    questions = [_question(p, q, f"questions[{i}]", turn_counts) for i, q in enumerate(raw_questions or [])]
    seen_q: dict[str, int] = {}
    for i, q in enumerate(raw_questions or []):
        qid = q.get("id") if isinstance(q, dict) else None
        if isinstance(qid, str) and qid:
            if qid in seen_q:
                p.add(f"questions[{i}].id", f"duplicate question id {qid!r} (also questions[{seen_q[qid]}])",
                      "give each question of a history a unique id")
            else:
                seen_q[qid] = i
    if p.items:
        return None
    return History(hid, tuple(sessions), tuple(questions))


def history_from_dict(obj: Any, *, root: str | Path, line: int | None = None, source: str = EPISODES,
                      limits: ImageLimits = ImageLimits()) -> History:
    """Build a ``History`` from one parsed line, raising the first problem as ``InvalidInput``.

    ``root`` is the dataset folder that image paths are relative to.
    """
    p = _Problems(line, source)
    history = _history(p, obj, _Context(Path(root).resolve(), limits))
    if p.items:
        raise p.items[0]
    return history


def _locate(path: str | Path) -> tuple[Path, Path]:
    """(dataset folder, episodes file) for a folder or for the episodes file itself."""
    given = Path(path)
    if given.is_dir():
        return given.resolve(), given.resolve() / EPISODES
    return given.absolute().parent.resolve(), given.absolute()


def _scan(path: str | Path, limits: ImageLimits) -> Iterator[tuple[History | None, list[InvalidInput]]]:
    """Yield ``(history, problems)`` per non-blank line, plus file-level problems; streams the file."""
    root, file = _locate(path)
    source = file.name
    if not file.is_file():
        yield None, [InvalidInput("(file)", f"{file} does not exist or is not a file",
                                  fix=f"pass a dataset folder containing {EPISODES}, or the {EPISODES} file itself",
                                  source=source)]
        return
    ctx = _Context(root, limits)
    nonblank = 0
    with open(file, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            p = _Problems(number, source)
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                nonblank += 1
                p.add("(line)", f"is not valid UTF-8 ({exc.reason} at byte {exc.start})", "save the file as UTF-8")
                yield None, p.items
                continue
            if not text.strip():
                continue  # blank lines are allowed (e.g. a trailing newline)
            nonblank += 1
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                where = f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                p.add("(line)", f"is not valid JSON: {where}",
                      "write exactly one JSON object per line (double-quoted strings and keys, no trailing "
                      "commas, no line breaks inside an object)")
                yield None, p.items
                continue
            yield _history(p, obj, ctx), p.items
    if nonblank == 0:
        yield None, [InvalidInput("(file)", f"{file} holds no histories",
                                  fix='add one JSON object per line: {"id": ..., "sessions": [...], "questions": [...]}',
                                  source=source)]


def iter_histories(path: str | Path, *, limits: ImageLimits = ImageLimits()) -> Iterator[History]:
    """Stream the histories of a dataset line by line; raises the first problem as ``InvalidInput``."""
    for history, problems in _scan(path, limits):
        if problems:
            raise problems[0]
        yield history


def load_dataset(path: str | Path, *, limits: ImageLimits = ImageLimits()) -> list[History]:
    """All histories of a dataset (folder or ``episodes.jsonl``), fully validated."""
    return list(iter_histories(path, limits=limits))


def validate_dataset(path: str | Path, *, limits: ImageLimits = ImageLimits()) -> list[InvalidInput]:
    """Every problem in a dataset, in file order (empty list = valid); never raises for bad data."""
    return [problem for _, problems in _scan(path, limits) for problem in problems]


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------
def _iso(value: Any, field: str) -> str:
    if not isinstance(value, datetime):
        raise InvalidInput(field, f"must be a datetime, got {type(value).__name__}", fix="pass a datetime")
    return value.isoformat()


def _relative(image: Any, root: Path, field: str) -> str:
    """The dataset-relative path of an image that is already inside ``root``."""
    if isinstance(image, bytes):
        raise InvalidInput(field, "is image bytes, which episodes.jsonl cannot hold",
                           fix="use write_dataset, which writes the bytes into the dataset folder")
    path = Path(image)
    resolved = (path if path.is_absolute() else root / path).resolve()
    if not resolved.is_relative_to(root):
        raise InvalidInput(field, f"{resolved} is outside the dataset folder {root}",
                           fix="use write_dataset, which copies the image into the dataset folder")
    return resolved.relative_to(root).as_posix()


def history_to_dict(history: History, root: str | Path) -> dict:
    """The JSON object of one ``episodes.jsonl`` line; images must already be inside ``root``.

    Relative image paths are taken relative to ``root`` (as in the file format), not the working directory.
    """
    root = Path(root).resolve()
    sessions = []
    for i, s in enumerate(history.sessions):
        turns = []
        for j, t in enumerate(s.turns):
            turn: dict[str, Any] = {"role": t.role, "text": t.text}
            if t.images:
                turn["images"] = [_relative(im, root, f"sessions[{i}].turns[{j}].images[{k}]")
                                  for k, im in enumerate(t.images)]
            turns.append(turn)
        sessions.append({"id": s.id, "time": _iso(s.time, f"sessions[{i}].time"), "turns": turns})
    questions = []
    for i, q in enumerate(history.questions):
        question: dict[str, Any] = {"id": q.id, "question": q.question, "answer": q.answer, "category": q.category}
        if q.time is not None:
            question["time"] = _iso(q.time, f"questions[{i}].time")
        question["evidence"] = [{"session": e.session, "turn": e.turn} for e in q.evidence]
        questions.append(question)
    return {"id": history.id, "sessions": sessions, "questions": questions}


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via temp file + fsync + rename, so readers never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable; not possible on every platform
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def _safe_name(name: str) -> str:
    """A file-name-safe form of an id; ids that needed changing get a hash suffix to stay distinct."""
    if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", name):  # lower case: safe on case-insensitive disks
        return name
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:60]
    return f"{cleaned}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _image_ext(data: bytes, field: str) -> str:
    try:
        with Image.open(BytesIO(data)) as im:
            fmt = im.format
    except Exception as exc:
        raise InvalidInput(field, f"bytes are not an image Pillow can read ({exc})",
                           fix="pass encoded image bytes (PNG, JPEG, WebP, ...) or a path to an image file") from None
    return {"JPEG": "jpg", "TIFF": "tif"}.get(fmt, (fmt or "bin").lower())


def _write_undoable(path: Path, data: bytes, undo: list) -> None:
    """``_atomic_write`` that first notes how to undo it: the file's old bytes (or None) and the folders it made."""
    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]  # deepest first
    undo.append((path, path.read_bytes() if path.is_file() else None, made))
    _atomic_write(path, data)


def _undo(undo: list) -> None:
    for path, old, made in reversed(undo):
        if old is None:
            path.unlink(missing_ok=True)
        else:
            _atomic_write(path, old)
        for d in made:
            try:
                d.rmdir()
            except OSError:
                pass


def _materialise(history: History, root: Path, undo: list) -> History:
    """Put every image of ``history`` inside ``root``: write bytes, copy outside files, keep inside ones."""
    sessions = []
    for i, s in enumerate(history.sessions):
        turns = []
        for j, t in enumerate(s.turns):
            images = []
            for k, image in enumerate(t.images):
                field = f"sessions[{i}].turns[{j}].images[{k}]"
                stem = root / "images" / _safe_name(history.id) / f"{_safe_name(s.id)}-{j}-{k}"
                if isinstance(image, bytes):
                    dest = stem.with_name(f"{stem.name}.{_image_ext(image, field)}")
                    _write_undoable(dest, image, undo)
                    images.append(dest)
                    continue
                path = Path(image)
                path = path if path.is_absolute() else root / path
                if path.resolve().is_relative_to(root):
                    images.append(path)
                    continue
                if not path.is_file():
                    raise InvalidInput(field, f"{path} does not exist", fix="pass an existing image file")
                data = path.read_bytes()
                dest = stem.with_name(f"{stem.name}.{_image_ext(data, field)}")
                _write_undoable(dest, data, undo)
                images.append(dest)
            turns.append(Turn(t.role, t.text, tuple(images)))
        sessions.append(Session(s.id, s.time, tuple(turns)))
    return History(history.id, tuple(sessions), history.questions)


def write_dataset(histories: Iterable[History], folder: str | Path, *,
                  limits: ImageLimits = ImageLimits()) -> Path:
    """Write histories as a dataset folder and return it.

    Images given as bytes are written to ``images/<history id>/<session id>-<turn>-<k>.<ext>``; paths
    inside the folder are referenced relatively; paths outside are copied in. Every line is validated
    exactly as ``load_dataset`` would before ``episodes.jsonl`` is replaced (atomically), so a written
    dataset always loads. A refused write leaves the folder as it was: image files it wrote are removed (or
    their old bytes put back) and folders it made are removed.
    """
    folder = Path(folder)
    made = [d for d in (folder, *folder.absolute().parents) if not d.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    root = folder.resolve()
    ctx = _Context(root, limits)
    lines: list[str] = []
    undo: list = [(root / EPISODES, None, made)] if made else []
    try:
        for number, history in enumerate(histories, 1):
            obj = history_to_dict(_materialise(history, root, undo), root)
            p = _Problems(number, EPISODES)
            _history(p, obj, ctx)
            if p.items:
                raise p.items[0]
            lines.append(json.dumps(obj, ensure_ascii=False) + "\n")
        if not lines:
            raise InvalidInput("(file)", "no histories to write", fix="pass at least one History", source=EPISODES)
    except BaseException:
        _undo(undo)
        raise
    _atomic_write(root / EPISODES, "".join(lines).encode("utf-8"))
    return folder
