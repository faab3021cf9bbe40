"""Chronological replay of one history (C3M §3.1), with query-blindness enforced.

The write phase hands the method ``Session`` objects only (through ``Memory.add_session``); the
history's questions are split off *before* it starts. While it runs, an audit hook refuses any attempt
to open the dataset's files (where the questions live), so a method cannot peek at questions, answers
or later sessions; such a method fails the run with ``QueryBlindnessViolation``. Then every question is
asked once, through ``retrieve`` only.
"""
from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..config import MemoryConfig
from ..errors import C3MError
from ..models import Models
from ..store.cold import NAMESPACE_RE
from ..types import History, ReaderBudget
from .metrics import QuestionResult, score_context


class QueryBlindnessViolation(C3MError):
    """A memory method tried to read the dataset (questions, answers, future sessions) at write time."""


class _WriteGuard:
    """Process-wide audit hook, armed per thread only during a write phase (hooks cannot be removed)."""

    _installed = False
    _local = threading.local()

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            sys.addaudithook(cls._hook)
            cls._installed = True

    @classmethod
    def _hook(cls, event: str, args: tuple) -> None:
        guarded = getattr(cls._local, "guarded", None)
        if not guarded or event != "open" or not args or not isinstance(args[0], (str, bytes, Path)):
            return
        try:
            target = Path(args[0] if not isinstance(args[0], bytes) else args[0].decode()).resolve()
        except (OSError, ValueError):
            return
        if any(target == g or g in target.parents for g in guarded):
            raise QueryBlindnessViolation(
                f"the write path opened {target} during replay; methods may only see the sessions they are handed",
                fix="build the index from observe()'s Raw Nodes only (no dataset, question or answer access)")

    def __init__(self, paths):
        self.paths = [Path(p).resolve() for p in paths if p is not None]

    def __enter__(self):
        self.install()
        self._local.guarded = self.paths
        return self

    def __exit__(self, *exc):
        self._local.guarded = None


@dataclass
class HistoryResult:
    """Everything measured for one history under one method."""

    history: str
    method: str
    length: str
    questions: list[QuestionResult] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    raw_nodes: int = 0
    pointers: int = 0
    overflow_repairs: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HistoryResult":
        data = dict(data)
        data["questions"] = [QuestionResult(**q) for q in data["questions"]]
        return cls(**data)


def with_captions(ctx, extractor, load_image):
    """The context as a text-only answerer reads it with a perception backend: each original image is
    followed by its caption (``[image: ...]``). Captions are not charged to the reader budget here."""
    items = tuple(replace(i, text=i.text + "".join(f" [image: {extractor.caption(load_image(im))}]"
                                                   for im in i.images)) if i.images else i
                  for i in ctx.items)
    return replace(ctx, items=items)


def replay_history(history: History, store: str | Path, *, config: MemoryConfig, models: Models | None = None,
                   budget: ReaderBudget | None = None, length: str = "?", guard_paths=(),
                   judge=None, perception=None) -> HistoryResult:
    """Write every session (questions hidden), then ask every question; returns the measurements."""
    from ..memory import Memory

    sessions, questions = history.sessions, history.questions  # split before the write phase starts
    result = HistoryResult(history.id, config.method, length)
    namespace = history.id if NAMESPACE_RE.match(history.id) else "h-" + re.sub(r"[^A-Za-z0-9._-]", "_", history.id)[:100]
    with Memory(store, namespace, config=config, models=models) as mem:
        with _WriteGuard(guard_paths):
            for session in sessions:
                t0 = time.perf_counter()
                mem.add_session(session)
                result.write_seconds.append(time.perf_counter() - t0)
        stats = mem.stats()
        result.raw_nodes, result.pointers = stats["raw_nodes"], stats["pointers"]
        result.overflow_repairs = sum(1 for m in mem.store.maintenance_log(mem.namespace, mem.method_name)
                                      if m["action"] == "overflow_repair" and not m["detail"].get("replay"))
        for q in questions:
            t0 = time.perf_counter()
            ctx = mem.retrieve(q.question, budget)
            scored = score_context(namespace, q, ctx, time.perf_counter() - t0)
            if judge is not None:
                read = with_captions(ctx, perception, mem.store.image_bytes) if perception is not None else ctx
                answer = mem.models.answerer.answer(q.question, read, image_loader=mem.store.image_bytes)
                verdict = judge.judge(q.question, q.answer, answer.text, q.category)
                scored = replace(scored, judged_acc=float(verdict.correct), prediction=answer.text)
            result.questions.append(scored)
    return result
