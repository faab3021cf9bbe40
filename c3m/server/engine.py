"""``Engine``: one store served to many concurrent requests, through the one ``Memory`` API.

Why two threads and queues instead of a ``Memory`` per request: a ``ColdStore`` connection belongs to the
thread that opened it (SQLite), a tenant's index lives in memory, and the batched read path
(``Memory.retrieve_many``) is cheapest when it sees many questions at once. So the engine owns

* a **reader** thread with its own root ``Memory``: retrieve requests that arrive while a batch runs are
  taken together into the next ``retrieve_many`` call (no added wait: batching comes from load); other reads
  (index, nodes, images, ask) run on it in arrival order;
* a **writer** thread with its own root ``Memory``: sessions and forgets, one at a time in arrival order
  (SQLite has one writer anyway; ordering per namespace is the arrival order);
* a **lookup** thread for reads that need only the store (images, Raw Nodes, session lists, verify), so a
  6 ms image fetch does not queue behind a batch of retrieves (it waited 0.75 s at 32 clients).

The reader sees the writer's commits at its next ``sync`` (``store.generation``: a new session *or* a forget),
so a request that follows a write reads it. Several server processes may share one store: the store's own
locking serialises them, exactly as it does for several ``Memory`` objects.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config import MemoryConfig
from ..types import Context, ReaderBudget

log = logging.getLogger(__name__)

#: tenants (namespaces) a thread keeps loaded before the least recently used one is released
MAX_TENANTS = 256


@dataclass
class _Job:
    future: Future
    fn: Callable[[Any], Any] | None = None        # generic job: fn(root Memory)
    retrieve: tuple[str, str, ReaderBudget] | None = None  # (namespace, question, budget): batched
    tenants: list = field(default_factory=list)


class _Worker(threading.Thread):
    """A thread that owns one root ``Memory`` and runs jobs from its queue."""

    def __init__(self, name: str, engine: "Engine", batch: bool):
        super().__init__(name=name, daemon=True)
        self.engine, self.batch = engine, batch
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.memory = None
        self.batches: list[int] = []  # sizes of the retrieve batches run (for the load test and tests)

    def run(self) -> None:
        from ..memory import Memory

        try:
            self.memory = Memory(self.engine.store_path, self.engine.root_namespace, config=self.engine.config)
        except BaseException as exc:  # the opener reports it
            self.failed = exc
            self.ready.set()
            return
        if self.batch and self.engine.warm:
            self._warm()
        self.ready.set()
        try:
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                jobs = [job]
                if self.batch and job.retrieve is not None:  # take every retrieve already waiting
                    while True:
                        try:
                            nxt = self.jobs.get_nowait()
                        except queue.Empty:
                            break
                        if nxt is None:
                            self.jobs.put(None)
                            break
                        jobs.append(nxt)
                self._run(jobs)
        finally:
            self.memory.close()

    def _warm(self) -> None:
        """Load the models a first request would (embedder, anchor extractor, answerer) before the server says
        it is ready: the first ``ask`` took 5-7 s otherwise. Read-only: an empty namespace, nothing stored."""
        import time

        t0 = time.perf_counter()
        try:
            self.memory.ask("warm up: what did I say?")
        except Exception as exc:  # a model that fails here fails on the first request too, with its own error
            log.warning("warm-up failed (%s); models load on the first request", exc)
        log.info("warm-up took %.1f s", time.perf_counter() - t0)

    def _run(self, jobs: list[_Job]) -> None:
        retrieves = [j for j in jobs if j.retrieve is not None]
        if retrieves:
            self._retrieve(retrieves)
        for j in jobs:
            if j.retrieve is None and j.future.set_running_or_notify_cancel():
                try:
                    j.future.set_result(j.fn(self.memory))
                except BaseException as exc:
                    j.future.set_exception(exc)
        self._evict()

    def _retrieve(self, jobs: list[_Job]) -> None:
        jobs = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        by_budget: dict[ReaderBudget, list[_Job]] = {}
        for j in jobs:
            by_budget.setdefault(j.retrieve[2], []).append(j)
        for budget, group in by_budget.items():
            self.batches.append(len(group))
            try:
                got = self.memory.retrieve_many([(ns, q) for ns, q, _ in (j.retrieve for j in group)], budget)
            except BaseException:  # one bad request must not fail the others: read them one by one
                for j in group:
                    ns, q, _ = j.retrieve
                    try:
                        j.future.set_result(self.memory.tenant(ns).retrieve(q, budget))
                    except BaseException as exc:
                        j.future.set_exception(exc)
                continue
            for j, ctx in zip(group, got):
                j.future.set_result(ctx)

    def _evict(self) -> None:
        """Release the least recently opened tenants beyond ``MAX_TENANTS`` (the store keeps everything)."""
        tenants = self.memory._tenants
        while len(tenants) > MAX_TENANTS:
            victim = next(ns for ns in tenants if ns != self.memory.namespace)
            self.memory.release(victim)


class Engine:
    """Serve one store: ``retrieve`` (batched), ``read(fn)`` and ``write(fn)`` return futures.

    ``fn`` gets the thread's root ``Memory`` (open a namespace with ``mem.tenant(ns)``); it must not keep the
    ``Memory`` or its store past the call: they belong to that thread."""

    def __init__(self, store_path: str | Path, config: MemoryConfig | None = None, *,
                 root_namespace: str = "default", start_timeout_s: float = 120.0, warm: bool = True):
        self.store_path = Path(store_path)
        self.warm = warm
        self.config = config or MemoryConfig()
        self.root_namespace = root_namespace
        self.reader = _Worker("c3m-reader", self, batch=True)
        self.writer = _Worker("c3m-writer", self, batch=False)
        self.lookups = _Worker("c3m-lookup", self, batch=False)
        self.workers = (self.writer, self.reader, self.lookups)
        self._closed = False
        for w in self.workers:  # the writer first: it creates the store's schema
            w.start()
            if not w.ready.wait(start_timeout_s):
                raise TimeoutError(f"{w.name} did not open the store at {self.store_path} in {start_timeout_s} s")
            if w.failed is not None:
                self.close()
                raise w.failed

    @property
    def method_name(self) -> str:
        return self.config.method

    def retrieve(self, namespace: str, question: str, budget: ReaderBudget | None = None) -> "Future[Context]":
        """A measured, checked context (``Memory.retrieve``), read in a batch with whatever else is waiting."""
        return self._submit(self.reader, _Job(Future(), retrieve=(namespace, question,
                                                                   budget or self.config.reader_budget)))

    def read(self, fn: Callable[[Any], Any]) -> Future:
        return self._submit(self.reader, _Job(Future(), fn=fn))

    def write(self, fn: Callable[[Any], Any]) -> Future:
        return self._submit(self.writer, _Job(Future(), fn=fn))

    def lookup(self, fn: Callable[[Any], Any]) -> Future:
        """A read that needs only ``mem.store`` / ``mem.image_bytes`` (no index): its own thread and connection."""
        return self._submit(self.lookups, _Job(Future(), fn=fn))

    def stats(self) -> dict:
        """Queue depths and retrieve batch sizes, for monitoring (``GET /v1/stats``) and the load test."""
        b = list(self.reader.batches)
        return {"queued": {w.name.removeprefix("c3m-"): w.jobs.qsize() for w in self.workers},
                "retrieve_batches": len(b), "retrieves": sum(b), "max_batch": max(b, default=0),
                "tenants_loaded": len(self.reader.memory._tenants) if self.reader.memory is not None else 0}

    def _submit(self, worker: _Worker, job: _Job) -> Future:
        if self._closed:
            raise RuntimeError("the engine is closed")
        worker.jobs.put(job)
        return job.future

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish queued jobs, then close both threads' stores."""
        if self._closed:
            return
        self._closed = True
        for w in self.workers:
            if w.is_alive():
                w.jobs.put(None)
        for w in self.workers:
            if w.is_alive():
                w.join(timeout_s)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
