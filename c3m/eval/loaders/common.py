"""Shared pieces of the benchmark converters: strict field access, date parsing, images, the summary.

Every converter fails with ``InvalidInput`` naming the field as a path into the source file (e.g.
``[0].conversation.session_2_date_time``) and the file name as ``source``, so a user can find the bad
value in a file of hundreds of megabytes.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from ...dataset import write_dataset
from ...errors import InvalidInput
from ...types import CATEGORIES, History, Turn

_KIND = {str: "a string", list: "a list", dict: "an object", int: "an integer"}
_URL = re.compile(r"^(https?|ftp)://", re.IGNORECASE)


@dataclass
class ConversionSummary:
    """What a conversion produced and what it had to leave out, so losses are never silent."""

    kind: str
    source: str
    out: str = ""
    histories: int = 0
    sessions: int = 0
    turns: int = 0
    questions: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    images_copied: int = 0
    images_kept_as_url: int = 0
    evidence_dropped: int = 0
    empty_sessions_skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        cats = ", ".join(f"{c} {n}" for c, n in self.questions.items())
        return (f"{self.kind}: {self.histories} histories, {self.sessions} sessions, {self.turns} turns, "
                f"questions ({cats}); images copied {self.images_copied}, kept as URL "
                f"{self.images_kept_as_url}; evidence dropped {self.evidence_dropped}; empty sessions "
                f"skipped {self.empty_sessions_skipped} -> {self.out}")


class Reader:
    """Strict access to one source file's values; every error names the field path and the file."""

    def __init__(self, src: Path, benchmark: str):
        self.src, self.benchmark, self.base = src, benchmark, src.absolute().parent

    def fail(self, path: str, message: str, fix: str) -> InvalidInput:
        return InvalidInput(path, message, fix=fix, source=self.src.name)

    def load(self) -> list:
        """The file's records: a JSON list (one object is taken as a list of one) or JSON Lines."""
        if not self.src.is_file():
            raise self.fail("(file)", f"{self.src} does not exist or is not a file",
                            f"pass the {self.benchmark} JSON file")
        if self.src.suffix.lower() == ".parquet":
            raise self.fail("(file)", "is a Parquet file", f"pass the JSON release of {self.benchmark}")
        text = self.src.read_text(encoding="utf-8-sig")
        jsonl = self.src.suffix.lower() == ".jsonl"
        chunks = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()] if jsonl else [(0, text)]
        try:
            parsed = [json.loads(chunk) for _, chunk in chunks]
        except json.JSONDecodeError as exc:
            number = next(n for n, chunk in chunks if not _parses(chunk)) if jsonl else exc.lineno
            raise self.fail("(file)", f"is not valid JSON: {exc.msg} at line {number}",
                            f"pass the {self.benchmark} JSON file unchanged") from None
        data = parsed if jsonl else parsed[0]
        data = [data] if isinstance(data, dict) else data
        if not isinstance(data, list) or not data:
            raise self.fail("(file)", "holds no records", f"pass a JSON list of {self.benchmark} records")
        return data

    def obj(self, value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, got {type(value).__name__}",
                            f"check the file is the {self.benchmark} release")
        return value

    def get(self, obj: dict, key: str, path: str, kind: type) -> Any:
        """A required field of the given JSON type."""
        where = f"{path}.{key}" if path else key
        if key not in obj or obj[key] is None:
            raise self.fail(where, "is missing", f"add {key!r} ({_KIND[kind]}) as in the {self.benchmark} format")
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise self.fail(where, f"must be {_KIND[kind]}, got {type(value).__name__}",
                            f"write {key!r} as {_KIND[kind]}")
        return value

    def text(self, obj: dict, key: str, path: str) -> str:
        """A required string; numbers are accepted and written as text (benchmarks store years as ints)."""
        value = obj.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return self.get(obj, key, path, str)

    def time(self, value: Any, path: str, formats: Iterable[str], example: str, *, iso: bool = False) -> datetime:
        """Parse a date with the benchmark's own formats (strict: no guessing beyond them)."""
        if not isinstance(value, str):
            raise self.fail(path, f"must be a date string, got {type(value).__name__}", f"write it like {example!r}")
        cleaned = re.sub(r"\s*\([A-Za-z]{3}\)\s*", " ", value).strip()  # "2023/05/20 (Sat) 02:21"
        for fmt in formats:
            try:
                return datetime.strptime(cleaned, fmt)
            except ValueError:
                pass
        if iso:
            try:
                parsed = datetime.fromisoformat(cleaned)
                return parsed.astimezone(timezone.utc).replace(tzinfo=None) if parsed.tzinfo else parsed
            except ValueError:
                pass
        raise self.fail(path, f"is not a {self.benchmark} date: {value!r}", f"write it like {example!r}")

    def image(self, ref: Any, path: str) -> Path | str:
        """A local image (absolute path, checked to exist) or a URL string, which is never downloaded."""
        if not isinstance(ref, str) or not ref.strip():
            raise self.fail(path, f"must be a non-empty path or URL, got {ref!r}", "give the image's path or URL")
        if _URL.match(ref):
            return ref
        local = Path(ref) if Path(ref).is_absolute() else self.base / ref
        if not local.is_file():
            raise self.fail(path, f"image file {local} does not exist",
                            f"put the image at that path (relative to {self.base}) or give its URL")
        return local


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


def url_marker(url: str, caption: str | None) -> str:
    """How an image we do not download stays visible to memory methods: its caption and address."""
    return f"[image: {caption or 'no caption'} {url}]"


def convert_records(src: str | Path, out: str | Path, kind: str, label: str, record_to_history) -> ConversionSummary:
    """The shared converter shape: read the whole source first (a bad file leaves no output), then turn
    each top-level record into a History with ``record_to_history(reader, obj, path, summary)``."""
    r = Reader(Path(src), label)
    summary = ConversionSummary(kind, str(src))
    records = r.load()
    histories = (record_to_history(r, r.obj(obj, f"[{i}]"), f"[{i}]", summary) for i, obj in enumerate(records))
    return write(histories, out, summary)


def write(histories: Iterable[History], out: str | Path, summary: ConversionSummary) -> ConversionSummary:
    """Sort sessions chronologically (stable), count, and write a dataset that ``load_dataset`` accepts.

    Histories are consumed lazily, so a large benchmark is not held twice in memory.
    """
    def ordered() -> Iterator[History]:
        for h in histories:
            h = History(h.id, tuple(sorted(h.sessions, key=lambda s: s.time)), h.questions)
            summary.histories += 1
            summary.sessions += len(h.sessions)
            summary.turns += sum(len(s.turns) for s in h.sessions)
            summary.images_copied += sum(len(t.images) for s in h.sessions for t in s.turns)
            for q in h.questions:
                summary.questions[q.category] += 1
            yield h

    summary.out = str(write_dataset(ordered(), out))
    return summary


def answer_turns(raw_turns: list, turns: tuple[Turn, ...]) -> list[int]:
    """Evidence inside an answer session: turns flagged ``has_answer``; if none is flagged, all user turns
    (the benchmarks state the fact in the user's words; a session-level label is all they give)."""
    flagged = [i for i, t in enumerate(raw_turns) if isinstance(t, dict) and t.get("has_answer") is True]
    return flagged or [i for i, t in enumerate(turns) if t.role == "user"]
