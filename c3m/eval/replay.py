"""Chronological replay of one history (C3M §3.1), with query-blindness enforced and budgets measured.

**Query-blindness.** The write phase hands the method one ``Session`` at a time (through
``Memory.add_session``), its images already read into bytes by the harness. The history's questions are
not in the process during the write phase when the harness runs it (``run_eval`` hands over a question-free
history and a guarded question file that is read only after the last session). While a session is written,
an audit hook refuses any attempt to open a guarded path — the whole dataset folder (questions, answers,
later sessions, hidden sidecars, images) and the question files — so a method that tries fails the run with
``QueryBlindnessViolation``. Then every question is asked once, through ``retrieve`` only.

**Budgets.** After every committed session the active index is measured from its snapshot
(``c3m.budget.measure_index``); a bounded method over its write budget is a recorded write violation, and
the peak per history is reported. Every context is measured from its items (``measure_context``), each item
resolved against the store, its derived records and the served snapshot: over the reader budget, or an item
that is not what it claims, is a recorded violation that scores 0. Perception captions shown to a text-only
answerer are separate CAPTION items and are charged as text tokens.

**Reads from the snapshot alone.** Before the read phase the method is reloaded from its last committed
snapshot into a fresh instance (``Memory.fresh_method``), and every question is read — and scored — from that
instance, so a read can use only what the measured snapshot holds plus the Cold Store. The live instance that
did the writes is then asked the same questions (up to ``RELOAD_CHECK`` of them, evenly spread); a method
whose contexts differ is reported (``HistoryResult.reload_changed``): it kept state the snapshot does not
hold.
"""
from __future__ import annotations

import json
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Sequence

from ..budget import measure_index
from ..config import MemoryConfig
from ..errors import C3MError
from ..models import Models
from ..read.answer_view import answer_view
from ..store.cold import NAMESPACE_RE
from ..types import EvidenceForm, EvidenceRef, History, Question, ReaderBudget, Session
from .metrics import QuestionResult, score_context

#: questions per history also asked of the live (never reloaded) instance, to report a method whose reads
#: change after the reload (None: every question)
RELOAD_CHECK: int | None = None


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
    bounded: bool = False
    index_peak: list[int] = field(default_factory=list)       # max over snapshots of (entries, pages, tokens, bytes)
    write_violations: list[dict] = field(default_factory=list)  # {"session", "over", "use"} of a bounded method
    searches_cold_store: bool = False  # the serving instance's declaration (MemoryMethod.searches_cold_store)
    cold_search_bytes: int = 0  # what a Cold-Store search reads beside the index: FTS text + float32 node vectors
    shared_embed_seconds: float = 0.0  # the history's turns embedded once for every method (harness), not in writes
    reload_checked: int = 0   # questions also asked of the live instance that did the writes
    reload_changed: int = 0   # ... whose context differed from the reloaded instance's (state outside the snapshot)
    reload_example: str | None = None  # the first such question and what differed
    store_problems: list[str] = field(default_factory=list)  # store written outside Memory (every question voided)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "HistoryResult":
        data = dict(data)
        data["questions"] = [QuestionResult(**q) for q in data["questions"]]
        return cls(**data)


def namespace_for(history_id: str) -> str:
    """The store namespace a history is replayed into (its id when that is a valid namespace)."""
    return history_id if NAMESPACE_RE.match(history_id) else "h-" + re.sub(r"[^A-Za-z0-9._-]", "_", history_id)[:100]


def materialise_images(session: Session) -> Session:
    """The session with every image path read into bytes, so the guarded write phase opens no dataset file."""
    if not any(isinstance(im, (str, Path)) for t in session.turns for im in t.images):
        return session
    turns = tuple(replace(t, images=tuple(Path(im).read_bytes() if isinstance(im, (str, Path)) else im
                                          for im in t.images)) for t in session.turns)
    return replace(session, turns=turns)


def save_questions(questions, path: str | Path) -> None:
    """Write a history's questions to the harness's own (guarded) question file, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": q.id, "question": q.question, "answer": q.answer, "category": q.category,
             "time": q.time.isoformat() if q.time else None,
             "evidence": [[e.session, e.turn] for e in q.evidence]} for q in questions]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rows), encoding="utf-8")
    tmp.replace(path)


def load_questions(path: str | Path) -> tuple[Question, ...]:
    rows = json.loads(Path(path).read_text(encoding="utf-8"))
    return tuple(Question(r["id"], r["question"], r["answer"], r["category"],
                          datetime.fromisoformat(r["time"]) if r["time"] else None,
                          tuple(EvidenceRef(s, t) for s, t in r["evidence"])) for r in rows)


def replay_history(history: History, store: str | Path, *, config: MemoryConfig, models: Models | None = None,
                   budget: ReaderBudget | None = None, length: str = "?", guard_paths=(),
                   judge=None, questions_file: str | Path | None = None,
                   variants: Sequence[tuple[str, dict]] = (), gold=None) -> HistoryResult | list[HistoryResult]:
    """Write every session (questions hidden), then ask every question; returns the measurements.

    The questions are ``history.questions``, or (as the harness runs it, so that they are not in memory during
    the write phase) read from ``questions_file`` after the last session was written.

    ``variants``: (spec, options) pairs of *read-only* options of the same method (``MemoryMethod.read_options``);
    each is asked every question on the same committed index — one write replay for a whole ablation table —
    and gets its own HistoryResult (then a list is returned, the main result first).

    ``gold``: a callable returning the dataset's ``HiddenGold`` (or None), called only after the last session
    was written (the support items hold the questions' details); with it every context also gets the evidence
    check (``evidence_acc``)."""
    from ..memory import Memory

    sessions, questions = history.sessions, history.questions  # split before the write phase starts
    result = HistoryResult(history.id, config.method, length)
    namespace = namespace_for(history.id)
    with Memory(store, namespace, config=config, models=models) as mem:
        count = mem.models.token_counter.count
        result.bounded = bool(type(mem.method).bounded)
        peak = [0, 0, 0, 0]
        for session in sessions:
            session = materialise_images(session)  # the harness reads the images; the guard then covers them
            with _WriteGuard(guard_paths):
                t0 = time.perf_counter()
                added = mem.add_session(session)
                result.write_seconds.append(time.perf_counter() - t0)
            snap = mem.snapshot(added.seq)
            use = measure_index(snap.state, count, pointers=len(snap.pointers)) if snap is not None else None
            if use is not None:
                peak = [max(a, b) for a, b in zip(peak, use.as_tuple())]
                over = use.over(mem.config.write_budget) if result.bounded else ()
                if over:
                    result.write_violations.append({"session": session.id, "over": list(over),
                                                    "use": list(use.as_tuple())})
        result.index_peak = peak
        stats = mem.stats()
        result.raw_nodes, result.pointers = stats["raw_nodes"], stats["pointers"]
        result.overflow_repairs = sum(1 for m in mem.store.maintenance_log(mem.namespace, mem.method_name)
                                      if m["action"] == "overflow_repair" and not m["detail"].get("replay"))
        if questions_file is not None:
            questions = load_questions(questions_file)
        budget = budget or mem.config.reader_budget
        check = _evidence_checker(gold() if gold is not None else None, history.id, mem)
        result.store_problems = _write_phase_problems(mem, sessions)
        written = _store_state(mem)
        live, mem.method = mem.method, mem.fresh_method()  # reads see the snapshot and the Cold Store only
        result.searches_cold_store = bool(mem.method.searches_cold_store)
        cold_bytes = _cold_search_bytes(mem)
        result.cold_search_bytes = cold_bytes if result.searches_cold_store else 0
        served: list = []
        result.questions = _ask(mem, namespace, questions, budget, judge, check, keep=served)
        result.reload_checked, result.reload_changed, result.reload_example = _reload_check(
            live, questions, served, budget)
        if _store_state(mem) != written:
            result.store_problems.append("the store changed during the read phase (sessions, Raw Nodes, derived "
                                         "records or the served snapshot)")
        if result.store_problems:
            result.questions = [_void(q, result.store_problems[0]) for q in result.questions]
        extra = []
        state = mem.snapshot(mem.version).state if mem.version else None
        for spec, options in variants:  # read-only variants: the same committed snapshot, another reader
            variant = type(mem.method)(mem.store, mem.namespace, mem.models, write_budget=mem.config.write_budget,
                                       options={**config.method_options, **options})
            variant.device = mem.method.device
            if state is not None:
                variant.load_state(state)
            main, mem.method = mem.method, variant
            extra.append(replace(result, method=spec, searches_cold_store=bool(variant.searches_cold_store),
                                 cold_search_bytes=cold_bytes if variant.searches_cold_store else 0,
                                 questions=_ask(mem, namespace, questions, budget, judge, check),
                                 reload_checked=0, reload_changed=0, reload_example=None,
                                 store_problems=list(result.store_problems)))
            mem.method = main
    return [result, *extra] if variants else result


def _cold_search_bytes(mem) -> int:
    """The size of what a Cold-Store search reads, measured on the store: the full-text index's text
    (``ColdStore.search_stats``) plus one float32 vector per Raw Node (the dense channel's keys). Not bounded by the
    write budget: reported beside the active index's size."""
    stats = mem.store.search_stats(mem.namespace)
    return int(stats["search_bytes"]) + stats["search_rows"] * 4 * mem.models.text_embedder.dim


def _write_phase_problems(mem, sessions) -> list[str]:
    """What the store holds that ``Memory.add_session`` did not write: other sessions or Raw Nodes than the
    history's, or perception records of a backend other than the harness's (a method holds the store object;
    a caption record it wrote itself would otherwise verify)."""
    out = []
    stats = mem.store.namespace_stats(mem.namespace)
    want = (len({s.id for s in sessions}), sum(len(s.turns) for s in sessions))
    if (stats["sessions"], stats["raw_nodes"]) != want:
        out.append(f"the store holds {stats['sessions']} sessions and {stats['raw_nodes']} Raw Nodes; the harness "
                   f"wrote {want[0]} and {want[1]}")
    if stats["derived_records"]:
        p = mem.models.perception
        ids = [n.node_id for n in mem.store.iter_nodes(mem.namespace) if n.images]
        foreign = [r for recs in mem.store.perceptions(ids).values() for r in recs
                   if p is None or (r.backend, r.version) != (p.name, p.version)]
        if foreign:
            out.append(f"{len(foreign)} perception records of backend {foreign[0].backend!r} that the harness's "
                       f"perception ({p.name if p is not None else 'none'}) did not write")
    return out


def _store_state(mem) -> tuple:
    """What the read phase must leave as the write phase left it: the namespace's counts and its latest snapshot."""
    snap = mem.snapshot(mem.version) if mem.version else None
    return (mem.store.namespace_stats(mem.namespace), mem.store.latest_snapshot_version(mem.namespace, mem.method_name),
            None if snap is None else (snap.state, snap.pointers))


def _void(q: QuestionResult, why: str) -> QuestionResult:
    """The question scored 0 on every quality metric, with ``why`` as its violation."""
    zero = lambda v: None if v is None else 0.0  # noqa: E731
    return replace(q, violation=why, route_hit=zero(q.route_hit), support_recall=zero(q.support_recall),
                   raw_support_recall=zero(q.raw_support_recall), oracle_reader_acc=0.0,
                   evidence_acc=zero(q.evidence_acc), judged_acc=zero(q.judged_acc))


def _reading(ctx) -> tuple:
    """What a context shows and what it charges, for comparing two reads of one question."""
    return (tuple((i.node_id, i.form.value, i.text, tuple(im.sha256 for im in i.images), i.covers)
                  for i in ctx.items), tuple(p for p, _ in ctx.trace.pages), frozenset(ctx.trace.pool))


def _reload_check(live, questions, served, budget: ReaderBudget) -> tuple[int, int, str | None]:
    """(asked, changed, first change): the live instance (the one that did the writes, never reloaded) asked the
    questions the reloaded one was scored on (up to ``RELOAD_CHECK``, evenly spread)."""
    n = len(questions)
    picks = list(range(n)) if RELOAD_CHECK is None or n <= RELOAD_CHECK else sorted(
        {round(k * (n - 1) / max(1, RELOAD_CHECK - 1)) for k in range(RELOAD_CHECK)})
    if not picks:
        return 0, 0, None
    again = type(live).retrieve_many([(live, questions[i].question, budget) for i in picks])
    changed = [i for i, ctx in zip(picks, again) if _reading(ctx) != _reading(served[i])]
    example = None
    if changed:
        i = changed[0]
        a, b = _reading(served[i]), _reading(again[picks.index(i)])
        what = [k for k, x, y in zip(("items", "pages", "pool"), a, b) if x != y]
        example = (f"question {questions[i].id}: {', '.join(what)} differ ({len(b[0])} items live, "
                   f"{len(a[0])} after the reload)")
    return len(picks), len(changed), example


def _evidence_checker(gold, history_id: str, mem):
    """``check(question, context) -> evidence_acc | None`` for one history, or None without hidden gold. A
    context is checked as the method composed it (a raw image is read as a VLM sees it); grounded crops are
    resolved to their source image and box through the store's perception records."""
    if gold is None:
        return None
    from .evidence import check_context

    def check(q, ctx) -> float | None:
        items = gold.items(history_id, q.id)
        if not items:
            return None
        crops = {}
        croppers = [i.node_id for i in ctx.items if i.form is EvidenceForm.GROUNDED_CROP]
        for records in (mem.store.perceptions(croppers).values() if croppers else ()):
            for r in records:
                if r.crop is not None and r.crop_box is not None:
                    crops[r.crop.sha256] = (r.image.sha256, r.crop_box)
        return check_context(ctx, items, gold, crops, summary_scope="session").all

    return check


def _ask(mem, namespace: str, questions, budget: ReaderBudget, judge, check=None,
         keep: list | None = None) -> list[QuestionResult]:
    """Every question once, through ``retrieve`` only — all of a history's questions in one batched read
    (``Memory.retrieve_many``: the same contexts as one by one); each context measured by the harness, never
    trusted. A question's read time and Cold-Store reads are its share of the batch (the batch's total divided
    by its questions). ``keep``, when given, receives the contexts as the method returned them."""
    out = []
    reads = mem.store.nodes_read
    t0 = time.perf_counter()
    contexts = mem.retrieve_many([(mem.namespace, q.question) for q in questions], budget, check=False)
    elapsed = (time.perf_counter() - t0) / max(1, len(questions))
    reads = round((mem.store.nodes_read - reads) / max(1, len(questions)))
    if keep is not None:
        keep.extend(contexts)
    for q, ctx in zip(questions, contexts):
        read = answer_view(ctx, mem.method, mem.models.answerer) if judge is not None else ctx
        scored = score_context(namespace, q, ctx, elapsed, mem.measure(read, budget), reads)
        if check is not None:
            scored = replace(scored, evidence_acc=0.0 if scored.violation else check(q, ctx))
        if judge is not None:
            correct, answer_text = 0.0, None
            if scored.violation is None:
                answer = mem.models.answerer.answer(q.question, read, image_loader=mem.store.image_bytes)
                answer_text = answer.text
                correct = float(judge.judge(q.question, q.answer, answer.text, q.category).correct)
            scored = replace(scored, judged_acc=correct, prediction=answer_text)
        out.append(scored)
    return out
