"""Per-stage wall time of ``Memory.add_session``, measured by wrapping functions (nothing in ``c3m`` is edited).

Each stage is timed *exclusively*: a wrapped call nested inside another wrapped call is charged to its own
stage and subtracted from the outer one, so the stages add up to at most the session's wall time (the rest is
``other``). Works on any tree of the package with the same function names (the benchmark's ``--before-tree``).

Stages (what is wrapped):

* store — ``ColdStore`` session/perception/vector-cache reads and writes and the transaction's BEGIN/COMMIT
* embed — ``MemoryMethod.text_vectors`` (the shared text embedder over Raw-Node texts and summaries)
* anchors — ``DescriptionMemo.describe`` (spaCy entities and noun chunks)
* perception — ``Memory._perceive`` (write-time captions, visual anchors, grounded crops)
* ramu — the method's ``observe`` (for ``c3m``: units, RAMU's propose / decide / apply; for a baseline: its
  index update)
* capacity — ``c3m.write.capacity.enforce`` as ``c3m`` calls it (the repair loop and its accounting)
* snapshot — ``Memory._commit_snapshot`` (``state()``, the pointer set, the packed snapshot and its log rows)
"""
from __future__ import annotations

import functools
import sys
import time
from contextlib import contextmanager

STAGES = ("store", "embed", "anchors", "perception", "ramu", "capacity", "snapshot")


class StageClock:
    """Exclusive per-stage totals in wall and process-CPU seconds (CPU time is the steadier measure on a shared
    machine), and the wall time of every ``add_session`` call."""

    def __init__(self):
        self.totals = {s: 0.0 for s in STAGES}
        self.cpu = {s: 0.0 for s in STAGES}
        self.sessions: list[float] = []
        self._stack: list[list] = []  # [start wall, start cpu, wall of nested stages, cpu of nested stages]

    @contextmanager
    def stage(self, name: str):
        frame = [time.perf_counter(), time.process_time(), 0.0, 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            wall, cpu = time.perf_counter() - frame[0], time.process_time() - frame[1]
            self.totals[name] += wall - frame[2]
            self.cpu[name] += cpu - frame[3]
            if self._stack:
                self._stack[-1][2] += wall
                self._stack[-1][3] += cpu

    def wrap(self, owner, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*a, **k):
            with self.stage(name):
                return fn(*a, **k)

        setattr(owner, attr, timed)


def install(clock: StageClock, method_cls) -> None:
    """Wrap the stage functions of the imported ``c3m`` (whichever tree is on ``sys.path``)."""
    from c3m.memory import Memory
    from c3m.methods.base import MemoryMethod
    from c3m.store.cold import ColdStore
    from c3m.write.units import DescriptionMemo

    for attr in ("prepare_session", "session_record", "insert_session", "put_perceptions", "get_vectors",
                 "put_vectors", "nodes_for_session"):
        clock.wrap(ColdStore, attr, "store")
    clock.wrap(MemoryMethod, "text_vectors", "embed")
    clock.wrap(DescriptionMemo, "describe", "anchors")
    clock.wrap(Memory, "_perceive", "perception")
    clock.wrap(Memory, "_commit_snapshot", "snapshot")
    clock.wrap(method_cls, "observe", "ramu")
    c3m_mod = sys.modules.get("c3m.methods.c3m")
    if c3m_mod is not None and hasattr(c3m_mod, "enforce"):
        clock.wrap(c3m_mod, "enforce", "capacity")

    txn = ColdStore.transaction

    @contextmanager
    def transaction(self, namespace=None):  # BEGIN and COMMIT/ROLLBACK are store time; the body: its own stages
        cm = txn(self, namespace)
        with clock.stage("store"):
            cm.__enter__()
        try:
            yield self
        except BaseException:
            with clock.stage("store"):
                if not cm.__exit__(*sys.exc_info()):
                    raise
        else:
            with clock.stage("store"):
                cm.__exit__(None, None, None)

    ColdStore.transaction = transaction

    add = Memory.add_session

    @functools.wraps(add)
    def add_session(self, session):
        t = time.perf_counter()
        try:
            return add(self, session)
        finally:
            clock.sessions.append(time.perf_counter() - t)

    Memory.add_session = add_session
