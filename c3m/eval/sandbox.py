"""One memory method, one history, one process that never holds the gold.

The harness (``c3m.eval.replay``) drives a method through a pipe to a process of its own:

    parent (holds questions, answers, evidence, hidden gold)        method process (spawned, tripwire armed)
      open(store, config, method)             ───────────────►       load models, arm the tripwire, build
                                              ◄───────────────       {bounded, searches_cold_store, snapshot_key}
      session 1 (images already bytes)        ───────────────►       embed its texts (untimed), add_session (timed)
      ...  one session at a time  ...
      ask([(id, question text), ...])         ───────────────►       reload from the snapshot, retrieve_many,
                                              ◄───────────────       answer; contexts, answers, reload check
      close                                   ───────────────►       exit

so that, by construction:

- **gold is never in the method's process**: it receives question *texts* only, after its last write, and the
  parent scores the contexts it sends back (answers, evidence and hidden gold are loaded there);
- **future sessions are never in it**: a session arrives when it is written, and the embeddings that keep write
  time comparable (the turn texts embedded before the timer starts) cover that session only;
- **methods cannot touch each other**: each (method, history) has its own process, models and memo, so a method
  that patches a shared object harms itself only;
- **the way out is watched** for the process's whole life (``c3m.eval.guard``): the dataset folder, the output
  folder outside its own store, other processes, programs, sockets and libc through ctypes.

``spawn`` (not ``fork``): a fresh interpreter that inherits no parent memory (a forked child would hold the
gold) and no OpenMP threads. A method class registered in a test module reaches the child by its module name.
"""
from __future__ import annotations

import importlib
import multiprocessing
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ..errors import C3MError
from .guard import Tripwire, api_peers, arm


class MethodProcessError(C3MError):
    """The method's process failed (an exception in the method, or the process died)."""


@dataclass(frozen=True)
class Job:
    """What a method process is started with: nothing of the questions, nothing of later sessions."""

    store: str
    namespace: str
    config: Any                      # MemoryConfig (the method, its options, the model names)
    method_module: str               # where the method class is registered (a test module included)
    guarded: tuple[str, ...]         # the dataset folders and the harness's output folder
    threads: int = 1
    variants: tuple = ()             # (spec, options) read-only variants asked on the same snapshot
    answer: bool = True              # also answer every question with the configured answerer
    reload_check: int | None = None  # questions also asked of the live instance (None: all)


@dataclass(frozen=True)
class AnswerRecord:
    """What the answerer said, without the context it was read from (the parent has that)."""

    text: str
    declined: bool
    refused: bool
    confidence: float | None
    span: str | None
    cited: tuple[str, ...]


@dataclass(frozen=True)
class ReadRecord:
    """One question's read as the method served it: the context, what the answerer read, and its answer."""

    context: Any          # Context as returned by retrieve (unmeasured)
    read: Any             # Context as the answerer read it (annotated, captions added): the harness measures it
    answer: AnswerRecord | None


# -- the method's side ---------------------------------------------------------------------------------------------
def warm_up(config, models) -> None:
    """One made-up two-turn session written to a scratch store before the first timed write, so write times
    leave out the process's one-time loads (a parser, compiled kernels), as the one-process harness's did after
    its first history. Made-up text only: nothing of the history, nothing memoised that a real turn could hit."""
    import tempfile
    from datetime import datetime

    from ..memory import Memory
    from ..types import Session, Turn

    with tempfile.TemporaryDirectory(prefix="c3m-warm-up-") as tmp, \
            Memory(tmp, "warm-up", config=config, models=models) as scratch:
        scratch.add_session(Session("warm-up", datetime(2000, 1, 1, 12), (
            Turn("user", "Yesterday I painted the old garden bench dark green."),
            Turn("assistant", "A green bench will look lovely by the roses."))))


def timed_write(mem, models, session, perception: str | None) -> dict:
    """Write one session as the harness times it: its turns' texts embedded first, untimed (every method pays the
    same; skipped with a perception backend, whose captions join the texts), then ``add_session`` timed."""
    from ..methods.base import session_embedding_texts

    prime = 0.0
    if perception in (None, "none"):
        t0 = time.perf_counter()
        models.text_embedder.embed(list(dict.fromkeys(session_embedding_texts(session))))
        prime = time.perf_counter() - t0
    t0 = time.perf_counter()
    added = mem.add_session(session)
    return {"seconds": time.perf_counter() - t0, "embed_seconds": prime, "seq": added.seq}


def _serve(conn, job: Job) -> None:
    """The method process: models first (harness code; the oracle reads its scene table here), then the tripwire,
    then the method's own code (its module, its constructor, its writes and reads)."""
    try:
        from .runtime import _init_worker, load_models

        _init_worker(job.threads)
        config = job.config
        models = load_models(config)
        wire = arm(Tripwire(job.guarded, allowed=(job.store,), peers=api_peers()))
        importlib.import_module(job.method_module)
        state = _State(job, config, models)
        reply = state.declared
        while True:
            if wire.tripped:  # caught by the method or not, a refusal ends the run
                raise wire.tripped[0]
            conn.send(("ok", reply))
            kind, *args = conn.recv()
            if kind == "close":
                state.mem.close()
                conn.send(("ok", None))
                return
            reply = getattr(state, kind)(*args)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        from .guard import _ACTIVE

        if _ACTIVE and _ACTIVE[0].tripped:  # a refusal the method caught outranks whatever failed after it
            exc = _ACTIVE[0].tripped[0]
        try:
            attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, type(None)))}
            conn.send(("error", (type(exc).__module__, type(exc).__qualname__, str(exc), attrs,
                                 traceback.format_exc())))
        except (OSError, ValueError):
            pass


class _State:
    """The method's Memory and the harness's steps inside the method process."""

    def __init__(self, job: Job, config, models):
        from ..memory import Memory

        self.job, self.models = job, models
        self.mem = Memory(job.store, job.namespace, config=config, models=models)
        m = self.mem.method
        self.declared = {"bounded": bool(m.bounded), "searches_cold_store": bool(m.searches_cold_store),
                         "snapshot_key": m.snapshot_key}
        self.warmed = False

    def session(self, session) -> dict:
        """Write one session (``timed_write``), the scratch warm-up first if this is the process's first write."""
        if not self.warmed:
            warm_up(self.job.config, self.models)
            self.warmed = True
        return timed_write(self.mem, self.models, session, self.job.config.perception)

    def ask(self, questions: list[tuple[str, str]], budget) -> dict:
        """Every question once through ``retrieve_many`` on an instance reloaded from the last snapshot; the live
        instance asked again for the reload check; read-only variants on the same snapshot."""
        from ..read.answer_view import answer_view
        from .guard import _ACTIVE

        for wire in _ACTIVE:
            wire.phase = "read"
        mem = self.mem
        live, mem.method = mem.method, mem.fresh_method()  # fresh_method syncs to the store's last session
        fresh = {"bounded": bool(mem.method.bounded), "searches_cold_store": bool(mem.method.searches_cold_store)}
        main = self._read(mem, questions, budget, answer_view)
        out = {"declared_fresh": fresh, "main": main, "variants": []}
        out["reload"] = self._reload(live, questions, main["records"], budget)
        out["declared_after"] = {"bounded": bool(mem.method.bounded),
                                 "searches_cold_store": bool(mem.method.searches_cold_store)}
        state = mem.snapshot(mem.version).state if mem.version else None
        for spec, options in self.job.variants:
            variant = type(mem.method)(mem.store, mem.namespace, mem.models, write_budget=mem.config.write_budget,
                                       options={**self.job.config.method_options, **options})
            variant.device = mem.method.device
            if state is not None:
                variant.load_state(state)
            declared = bool(variant.searches_cold_store)
            saved, mem.method = mem.method, variant
            read = self._read(mem, questions, budget, answer_view)
            mem.method = saved
            out["variants"].append({"spec": spec, "searches_cold_store": declared,
                                    "searches_cold_store_after": bool(variant.searches_cold_store), **read})
        return out

    def _read(self, mem, questions, budget, answer_view) -> dict:
        reads = mem.store.nodes_read
        mem.store.touched = touched = set()
        t0 = time.perf_counter()
        try:
            contexts = mem.retrieve_many([(mem.namespace, q) for _, q in questions], budget, check=False)
        finally:
            mem.store.touched = None
        elapsed = (time.perf_counter() - t0) / max(1, len(questions))
        nodes_read = round((mem.store.nodes_read - reads) / max(1, len(questions)))
        answerer = mem.models.answerer
        records = []
        for (_, text), ctx in zip(questions, contexts):
            read, ans = ctx, None
            if self.job.answer:
                read = answer_view(ctx, mem.method, answerer)
                a = answerer.answer(text, read, image_loader=mem.store.image_bytes)
                ans = AnswerRecord(a.text, bool(getattr(a, "declined", False)), bool(getattr(a, "refused", False)),
                                   getattr(a, "confidence", None), getattr(a, "span", None), tuple(a.cited))
            records.append(ReadRecord(ctx, read, ans))
        return {"records": records, "seconds": elapsed, "nodes_read": nodes_read, "touched": sorted(touched)}

    def _reload(self, live, questions, records, budget) -> tuple[int, int, str | None]:
        n, cap = len(questions), self.job.reload_check
        picks = list(range(n)) if cap is None or n <= cap else sorted(
            {round(k * (n - 1) / max(1, cap - 1)) for k in range(cap)})
        if not picks:
            return 0, 0, None
        again = type(live).retrieve_many([(live, questions[i][1], budget) for i in picks])
        changed = [i for i, ctx in zip(picks, again) if reading(ctx) != reading(records[i].context)]
        example = None
        if changed:
            i = changed[0]
            a, b = reading(records[i].context), reading(again[picks.index(i)])
            what = [k for k, x, y in zip(("items", "pages", "pool"), a, b) if x != y]
            example = (f"question {questions[i][0]}: {', '.join(what)} differ ({len(b[0])} items live, "
                       f"{len(a[0])} after the reload)")
        return len(picks), len(changed), example


def reading(ctx) -> tuple:
    """What a context shows and what it charges, for comparing two reads of one question."""
    return (tuple((i.node_id, i.form.value, i.text, tuple(im.sha256 for im in i.images), i.covers)
                  for i in ctx.items), tuple(p for p, _ in ctx.trace.pages), frozenset(ctx.trace.pool))



# -- the harness's side --------------------------------------------------------------------------------------------
class MethodProcess:
    """The parent's handle on one method process (module docstring). Use as a context manager."""

    def __init__(self, job: Job, *, start_timeout_s: float = 600.0):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, job), daemon=True, name=f"c3m-method-{job.namespace}")
        self.proc.start()
        child.close()
        self.declared: dict = self._receive()

    def call(self, kind: str, *args):
        self.conn.send((kind, *args))
        return self._receive()

    def _receive(self):
        try:
            status, payload = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(10)
            raise MethodProcessError(f"the method process exited (code {self.proc.exitcode}) before answering",
                                     fix="run the method outside the harness (c3m ingest / c3m ask) to see why")
        if status == "error":
            self.close()
            raise _rebuilt(*payload)
        return payload

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("close",))
                self.conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                pass
            self.proc.join(30)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _rebuilt(module: str, qualname: str, text: str, attrs: dict, tb: str) -> BaseException:
    """The method process's exception as the parent raises it: the same class (``QueryBlindnessViolation``,
    ``InvalidInput``, ... keep their type and fields) when it is a c3m error, else ``MethodProcessError`` with the
    method's traceback."""
    if module.startswith("c3m."):
        try:
            cls = getattr(importlib.import_module(module), qualname)
            exc = cls.__new__(cls)
            Exception.__init__(exc, text)
            vars(exc).update(attrs)
            return exc
        except (ImportError, AttributeError, TypeError):
            pass
    return MethodProcessError(f"{qualname} in the method process: {text}\n{tb}",
                              fix="the traceback above is the method's; fix the method or its input")


def method_module(name: str) -> str:
    """The module a registered method class lives in (imported by the method process before it is built)."""
    from ..methods import method_class

    return method_class(name).__module__


__all__ = ["Job", "MethodProcess", "MethodProcessError", "ReadRecord", "AnswerRecord", "method_module"]
