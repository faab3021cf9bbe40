"""Chronological replay of one history (C3M §3.1), with query-blindness enforced and budgets measured.

**Two processes.** The method runs in a process of its own (``c3m.eval.sandbox``), spawned for this history:
it is handed one ``Session`` at a time (images already read into bytes by the harness), then the questions'
*texts*, and it sends back the contexts it served (and its answerer's answers). This process — the harness —
holds the questions' answers, gold evidence and hidden gold, and scores what came back. So the gold is never
in the method's process, nor is a later session while it writes, nor another method's models or memo. In the
method process a tripwire (``c3m.eval.guard``) refuses, for its whole life and on every thread, any way out to
the dataset folder, the output folder (its own store excepted), other processes, programs, sockets and libc;
a method that tries fails the run with ``QueryBlindnessViolation``.

**Budgets, measured here.** After the writes, every committed snapshot is read from the store by the harness
and the active index measured from it (``c3m.budget.measure_index``, charged by what the snapshot *reaches*,
``c3m.index.reach``); a bounded method over its write budget is a recorded write violation, and the peak per
history is reported. Every context is measured from its items (``measure_context``), each item resolved against
the store, its derived records and the served snapshot: over the reader budget, or an item that is not what it
claims, is a recorded violation that scores 0. Perception captions shown to a text-only answerer are separate
CAPTION items and are charged as text tokens.

**Declarations are fixed when the method is built.** ``bounded`` and ``searches_cold_store`` are read from the
instance the moment it is constructed (before any write), and read again from the reloaded instance and after
the reads: a method whose declaration changed has every question voided, and the reads are measured under the
built-time declaration (a method that does not declare a Cold-Store search may show only what its snapshot
reaches).

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
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Sequence

from ..budget import measure_context, measure_index
from ..config import MemoryConfig
from ..index.reach import EMPTY, snapshot_view
from ..models import Models
from ..store.cold import NAMESPACE_RE, ColdStore
from ..types import EvidenceForm, History, ReaderBudget, Session
from .guard import QueryBlindnessViolation  # noqa: F401 (c3m.eval re-exports it from here)
from .metrics import ROUTE_POOL, QuestionResult, WorldTurns, chain_mark_errors, mark_errors, score_answer, score_context
from .runtime import load_models
from .sandbox import Job, MethodProcess, MethodProcessError, method_module

#: questions per history also asked of the live (never reloaded) instance, to report a method whose reads
#: change after the reload (None: every question)
RELOAD_CHECK: int | None = None


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


def replay_history(history: History, store: str | Path, *, config: MemoryConfig, models: Models | None = None,
                   budget: ReaderBudget | None = None, length: str = "?", guard_paths=(),
                   judge=None, variants: Sequence[tuple[str, dict]] = (), gold=None, answer: bool = True,
                   threads: int = 1, route_pool: int = ROUTE_POOL,
                   write: bool = True) -> HistoryResult | list[HistoryResult]:
    """Write every session in the method's own process, then ask every question there; score here (module
    docstring). Returns the measurements.

    ``models``: the harness's own models (token counter, perception backend's name) for measuring; loaded from
    ``config`` when None. ``guard_paths``: folders the method process may not reach (the dataset's and the output
    folder; its own ``store`` stays allowed). ``answer``: the configured answerer answers every question (token F1,
    exact match, selective accuracy, refusals); ``judge`` also scores the answers (``judged_acc``).

    ``variants``: (spec, options) pairs of *read-only* options of the same method (``MemoryMethod.read_options``);
    each is asked every question on the same committed index — one write replay for a whole ablation table —
    and gets its own HistoryResult (then a list is returned, the main result first).

    ``gold``: a callable returning the dataset's ``HiddenGold`` (or None), called only after the last session
    was written; with it every context also gets the evidence check (``evidence_acc``).

    Chain mark errors (``metrics.chain_mark_errors``) are judged when a guarded folder is a synthetic dataset whose
    hidden world holds this history (``_hidden/world.jsonl``; the harness guards the dataset it replays): read
    here after the last write, like ``gold``, and never sent to the method's process.

    ``write=False`` asks the questions of a store an earlier replay committed (``benchmarks/judged_pass.py``: a
    second answerer without a second write replay); write times are then not measured."""
    sessions, questions = history.sessions, history.questions
    result = HistoryResult(history.id, config.method, length)
    namespace = namespace_for(history.id)
    models = models or load_models(config)
    budget = budget or config.reader_budget
    job = Job(str(Path(store).resolve()), namespace, config, method_module(config.method),
              tuple(str(p) for p in guard_paths if p is not None), threads, tuple(variants), answer, RELOAD_CHECK)
    with MethodProcess(job) as proc:
        declared = proc.declared
        result.bounded = declared["bounded"]
        for session in sessions if write else ():
            wrote = proc.call("session", materialise_images(session))
            result.write_seconds.append(wrote["seconds"])
            result.shared_embed_seconds += wrote["embed_seconds"]
        cold = ColdStore(job.store, create=False)
        try:
            key = declared["snapshot_key"]
            view = _measure_writes(result, cold, namespace, key, models, config)
            result.store_problems = _write_phase_problems(cold, namespace, models, sessions)
            written = _store_state(cold, namespace, key)
            reply = proc.call("ask", [(q.id, q.question) for q in questions], budget)
            result.reload_checked, result.reload_changed, result.reload_example = reply["reload"]
            fixed = {k: declared[k] for k in ("bounded", "searches_cold_store")}
            for when in ("declared_fresh", "declared_after"):
                if reply[when] != fixed:
                    result.store_problems.append(
                        f"the method's declaration changed after it was built ({fixed} -> {reply[when]}): labels "
                        "are fixed when a method is constructed")
            if _store_state(cold, namespace, key) != written:
                result.store_problems.append("the store changed during the read phase (sessions, Raw Nodes, derived "
                                             "records or the served snapshot)")
            result.searches_cold_store = fixed["searches_cold_store"]
            cold_bytes = _cold_search_bytes(cold, namespace, models)
            result.cold_search_bytes = cold_bytes if result.searches_cold_store else 0
            score = partial(_score, cold=cold, namespace=namespace, questions=questions, budget=budget, view=view,
                            models=models, config=config, judge=judge, route_pool=route_pool,
                            check=_evidence_checker(gold() if gold is not None else None, history.id, cold),
                            chains=_chain_checker(job.guarded, history.id, namespace))
            result.questions = _judged(reply["main"], score, view, result.searches_cold_store, result.store_problems)
            extra = []
            for v in reply["variants"]:
                problems = list(result.store_problems)
                if v["searches_cold_store_after"] != v["searches_cold_store"]:
                    problems.append("the variant's declaration changed after it was built")
                qs = _judged(v, score, view, v["searches_cold_store"], problems)
                extra.append(replace(result, method=v["spec"], searches_cold_store=v["searches_cold_store"],
                                     cold_search_bytes=cold_bytes if v["searches_cold_store"] else 0, questions=qs,
                                     reload_checked=0, reload_changed=0, reload_example=None,
                                     store_problems=problems))
        finally:
            cold.close()
    return [result, *extra] if variants else result


def _measure_writes(result: HistoryResult, cold: ColdStore, namespace: str, key: str, models: Models,
                    config: MemoryConfig):
    """Every committed snapshot measured from the store (write violations, the peak), Raw Nodes and the pointers
    the last snapshot reaches, overflow repairs from the maintenance log; returns the served snapshot's view."""
    count = models.token_counter.count
    peak, view = [0, 0, 0, 0], EMPTY
    for version in cold.snapshot_versions(namespace, key):
        snap = cold.snapshot(namespace, key, version)
        if snap is None:
            continue
        view = snapshot_view(snap.state, snap.pointers, namespace)
        reach = len(view.reachable) if isinstance(snap.state, dict) else 0
        use = measure_index(snap.state if isinstance(snap.state, dict) else {}, count, pointers=len(snap.pointers),
                            reach=reach)
        peak = [max(a, b) for a, b in zip(peak, use.as_tuple())]
        over = use.over(config.write_budget) if result.bounded else ()
        if over:
            result.write_violations.append({"session": snap.session_id, "over": list(over),
                                            "use": list(use.as_tuple())})
    result.index_peak = peak
    result.raw_nodes = cold.namespace_stats(namespace)["raw_nodes"]
    result.pointers = len(view.reachable)
    result.overflow_repairs = sum(1 for m in cold.maintenance_log(namespace, key)
                                  if m["action"] == "overflow_repair" and not m["detail"].get("replay"))
    return view


def _score(read: dict, *, searches_cold_store: bool, cold: ColdStore, namespace: str, questions, budget, view,
           models: Models, config: MemoryConfig, judge, route_pool: int, check, chains=None) -> list[QuestionResult]:
    """Score one read phase's records against the gold, every context measured here, never trusted."""
    p = models.perception  # the records a method may show: the configured backend's (any without one)
    records = partial(cold.perceptions, backend=getattr(p, "name", None), version=getattr(p, "version", None))
    out = []
    for q, rec in zip(questions, read["records"]):
        ctx = _untrusted_context(rec.context)
        shown = _untrusted_context(rec.read)
        measured = measure_context(shown, budget, cold.get_nodes, namespace, models.token_counter.count,
                                   derived_blob=cold.derived_blob, perceptions=records, view=view,
                                   searches_cold_store=searches_cold_store,
                                   image_token_model=config.image_token_model)
        scored = score_context(namespace, q, ctx, read["seconds"], measured, read["nodes_read"],
                               route_pool=route_pool)
        if check is not None:
            scored = replace(scored, evidence_acc=0.0 if scored.violation else check(q, ctx))
        if rec.answer is not None:
            scored = replace(score_answer(scored, q, rec.answer, judge, read=shown),
                             mark_error=None if scored.violation else mark_errors(namespace, q, shown))
            if chains is not None and not scored.violation:
                named, wrong = chains(q, shown)
                scored = replace(scored, chain_turns=named, chain_errors=wrong)
        out.append(scored)
    return out


def _judged(read: dict, score, view, searches_cold_store: bool, problems: list[str]) -> list[QuestionResult]:
    """One read phase scored, then voided: every question for a store or declaration problem, and for a read that
    touched what its snapshot does not reach every question not already flagged for what it shows."""
    questions = score(read, searches_cold_store=searches_cold_store)
    if problems:
        questions = [_void(q, problems[0]) for q in questions]
    touched = _touch_problems(read, view, searches_cold_store)
    if touched:
        questions = [q if q.violation else _void(q, touched[0]) for q in questions]
    return questions


def _touch_problems(read: dict, view, searches_cold_store: bool) -> list[str]:
    """A read that fetched Raw Nodes (or full-text hits) its served snapshot does not reach, by a method that did
    not declare a Cold-Store search when it was built: it ranked what its index does not hold."""
    if searches_cold_store:
        return []
    outside = set(read.get("touched", ())) - set(view.reachable)
    if not outside:
        return []
    return [f"the read fetched {len(outside)} Raw Nodes the served snapshot does not reach, without declaring a "
            "Cold-Store search (searches_cold_store) when it was built"]


@lru_cache(maxsize=2)
def _hidden_world(root: str) -> tuple[dict, dict]:
    """({history: world record}, {(history, question id): support entity ids}) of a synthetic dataset's hidden
    sidecar, or two empty dicts when ``root`` has none. Read in the harness's process only."""
    hidden = Path(root) / "_hidden"
    world, support = {}, {}
    if not (hidden / "world.jsonl").is_file():
        return world, support
    for line in (hidden / "world.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            world[rec["history"]] = rec
    if (hidden / "questions.jsonl").is_file():
        for line in (hidden / "questions.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                support[(q["history"], q["id"])] = frozenset(s["entity"] for s in q.get("support", ())
                                                             if s.get("entity"))
    return world, support


def _chain_checker(guarded, history_id: str, namespace: str):
    """``check(question, read context) -> (chain turns, chain mark errors)`` from the hidden world of the first
    guarded folder that holds this history, or None (no synthetic dataset: nothing to judge)."""
    for root in guarded:
        world, support = _hidden_world(str(root))
        if history_id in world:
            turns = WorldTurns(namespace, world[history_id])
            return lambda q, read: chain_mark_errors(read, turns, support.get((history_id, q.id), ()))
    return None


def _untrusted_context(ctx):
    """A context from the method process, checked for shape before anything reads it."""
    from ..types import Context

    if not isinstance(ctx, Context):
        raise MethodProcessError(f"the method process sent a {type(ctx).__name__}, not a Context",
                                      fix="retrieve() must return a c3m.types.Context")
    return ctx


def _cold_search_bytes(cold: ColdStore, namespace: str, models: Models) -> int:
    """The size of what a Cold-Store search reads, measured on the store: the full-text index's text
    (``ColdStore.search_stats``) plus one float32 vector per Raw Node (the dense channel's keys). Not bounded by the
    write budget: reported beside the active index's size."""
    stats = cold.search_stats(namespace)
    return int(stats["search_bytes"]) + stats["search_rows"] * 4 * models.text_embedder.dim


def _write_phase_problems(cold: ColdStore, namespace: str, models: Models, sessions) -> list[str]:
    """What the store holds that the harness's sessions did not put there: other sessions or Raw Nodes than the
    history's, or perception records of a backend other than the harness's (a method holds the store object;
    a caption record it wrote itself would otherwise verify)."""
    out = []
    stats = cold.namespace_stats(namespace)
    want = (len({s.id for s in sessions}), sum(len(s.turns) for s in sessions))
    if (stats["sessions"], stats["raw_nodes"]) != want:
        out.append(f"the store holds {stats['sessions']} sessions and {stats['raw_nodes']} Raw Nodes; the harness "
                   f"wrote {want[0]} and {want[1]}")
    if stats["derived_records"]:
        p = models.perception
        ids = [n.node_id for n in cold.iter_nodes(namespace) if n.images]
        foreign = [r for recs in cold.perceptions(ids).values() for r in recs
                   if p is None or (r.backend, r.version) != (p.name, p.version)]
        if foreign:
            out.append(f"{len(foreign)} perception records of backend {foreign[0].backend!r} that the harness's "
                       f"perception ({p.name if p is not None else 'none'}) did not write")
    return out


def _store_state(cold: ColdStore, namespace: str, key: str) -> tuple:
    """What the read phase must leave as the write phase left it: the namespace's counts and its latest snapshot."""
    version = cold.latest_snapshot_version(namespace, key)
    snap = cold.snapshot(namespace, key, version) if version else None
    return (cold.namespace_stats(namespace), version, None if snap is None else (snap.state, snap.pointers))


def _void(q: QuestionResult, why: str) -> QuestionResult:
    """The question scored 0 on every quality metric, with ``why`` as its violation."""
    zero = lambda v: None if v is None else 0.0  # noqa: E731
    return replace(q, violation=why, route_hit=zero(q.route_hit), support_recall=zero(q.support_recall),
                   raw_support_recall=zero(q.raw_support_recall), oracle_reader_acc=0.0,
                   evidence_acc=zero(q.evidence_acc), judged_acc=zero(q.judged_acc),
                   answer_f1=zero(q.answer_f1), answer_em=zero(q.answer_em), answer_correct=zero(q.answer_correct))


def _evidence_checker(gold, history_id: str, cold: ColdStore):
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
        for records in (cold.perceptions(croppers).values() if croppers else ()):
            for r in records:
                if r.crop is not None and r.crop_box is not None:
                    crops[r.crop.sha256] = (r.image.sha256, r.crop_box)
        return check_context(ctx, items, gold, crops, summary_scope="session").all

    return check
