"""Per-stage wall time of ``Memory.add_session``, measured by wrapping functions (nothing in ``c3m`` is edited).

Each stage is timed *exclusively*: a wrapped call nested inside another wrapped call is charged to its own
stage and subtracted from the outer one, so the stages add up to at most the session's wall time (the rest is
``other``). Works on any tree of the package with the same function names (the benchmark's ``--before-tree``);
a name a tree does not have is skipped.

Stages (what is wrapped):

* store — ``ColdStore`` session/perception/vector-cache/maintenance-log reads and writes and the transaction's
  BEGIN/COMMIT
* embed — ``MemoryMethod.text_vectors`` (the shared text embedder over Raw-Node texts and summaries)
* anchors — ``DescriptionMemo.describe`` (spaCy entities and noun chunks)
* perception — ``Memory._perceive`` (write-time captions, visual anchors, grounded crops)
* units — ``C3M._units`` (cutting a session into units, their vectors and descriptors; the embedder and spaCy
  calls inside are charged to embed / anchors)
* candidates — RAMU's candidate search (``propose`` / ``propose_all``)
* decide — RAMU's relation features, relation head and Eq. 3 (``decide`` / ``decide_all``)
* apply — RAMU's Merge / Update / Add / Keep (``apply``)
* ramu — the rest of the method's ``observe`` (for a baseline: its whole index update)
* capacity — ``c3m.write.capacity.enforce`` as ``c3m`` calls it (the repair loop and its accounting)
* snapshot — ``Memory._commit_snapshot`` (``state()``, the pointer set, the packed snapshot)

With ``profile=True`` every stage also gets its own ``cProfile.Profile``, switched on and off with the stage
(exclusive like the times): ``profile_summary`` then says where each stage's time goes.
"""
from __future__ import annotations

import cProfile
import functools
import io
import pstats
import sys
import time
from contextlib import contextmanager

STAGES = ("store", "embed", "anchors", "perception", "units", "candidates", "decide", "apply", "ramu", "capacity",
          "snapshot")


class StageClock:
    """Exclusive per-stage totals in wall and process-CPU seconds (CPU time is the steadier measure on a shared
    machine), and the wall time of every ``add_session`` call. ``label`` (e.g. the method being replayed) keys a
    second set of totals, ``by_label``, so one process running several methods can tell them apart."""

    def __init__(self, profile: bool = False):
        self.totals = {s: 0.0 for s in STAGES}
        self.cpu = {s: 0.0 for s in STAGES}
        self.sessions: list[float] = []
        self.label = ""
        self.by_label: dict[str, dict[str, float]] = {}
        self.profiles: dict[tuple[str, str], cProfile.Profile] | None = {} if profile else None
        self._stack: list[list] = []  # [stage, start wall, start cpu, wall of nested stages, cpu of nested stages]
        #: stages count only while this is True (inside ``add_session``; ``None``: always, as before)
        self.active: bool | None = None

    def _profiler(self, stage: str) -> cProfile.Profile:
        return self.profiles.setdefault((self.label, stage), cProfile.Profile())

    def _switch(self, old: str | None, new: str | None) -> None:
        if self.profiles is None:
            return
        if old is not None:
            self._profiler(old).disable()
        if new is not None:
            self._profiler(new).enable()

    @contextmanager
    def stage(self, name: str):
        if self.active is False:  # e.g. the read phase of a harness replay
            yield
            return
        self._switch(self._stack[-1][0] if self._stack else "other", name)
        frame = [name, time.perf_counter(), time.process_time(), 0.0, 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            self._switch(name, self._stack[-1][0] if self._stack else "other")
            wall, cpu = time.perf_counter() - frame[1], time.process_time() - frame[2]
            self.totals[name] += wall - frame[3]
            self.cpu[name] += cpu - frame[4]
            mine = self.by_label.setdefault(self.label, {s: 0.0 for s in STAGES})
            mine[name] += wall - frame[3]
            if self._stack:
                self._stack[-1][3] += wall
                self._stack[-1][4] += cpu

    @contextmanager
    def session(self):
        """One ``add_session``: stages count inside it only (``active``), and what no stage covers is profiled as
        ``other``."""
        was, self.active = self.active, True
        self._switch(None, "other")
        try:
            yield
        finally:
            self._switch("other", None)
            self.active = was

    def wrap(self, owner, attr: str, name: str) -> None:
        fn = getattr(owner, attr, None)
        if fn is None:
            return

        @functools.wraps(fn)
        def timed(*a, **k):
            with self.stage(name):
                return fn(*a, **k)

        setattr(owner, attr, timed)

    def profile_summary(self, label: str, stage: str, top: int = 25) -> str:
        """The top ``top`` functions by self time within one stage (exclusive), or '' when it never ran."""
        prof = (self.profiles or {}).get((label, stage))
        if prof is None:
            return ""
        buf = io.StringIO()
        try:
            stats = pstats.Stats(prof, stream=buf)
        except TypeError:  # no data
            return ""
        stats.strip_dirs().sort_stats("tottime").print_stats(top)
        return buf.getvalue()


def install(clock: StageClock, method_cls, *more_classes) -> None:
    """Wrap the stage functions of the imported ``c3m`` (whichever tree is on ``sys.path``)."""
    from c3m.memory import Memory
    from c3m.methods.base import MemoryMethod
    from c3m.store.cold import ColdStore
    from c3m.write.units import DescriptionMemo

    for attr in ("prepare_session", "session_record", "insert_session", "put_perceptions", "get_vectors",
                 "put_vectors", "nodes_for_session", "log_maintenance", "log_maintenance_many"):
        clock.wrap(ColdStore, attr, "store")
    clock.wrap(MemoryMethod, "text_vectors", "embed")
    clock.wrap(DescriptionMemo, "describe", "anchors")
    clock.wrap(Memory, "_perceive", "perception")
    clock.wrap(Memory, "_commit_snapshot", "snapshot")
    for cls in dict.fromkeys((method_cls, *more_classes)):
        if "observe" in vars(cls):
            clock.wrap(cls, "observe", "ramu")
    c3m_mod = sys.modules.get("c3m.methods.c3m")
    if c3m_mod is not None:
        clock.wrap(c3m_mod, "enforce", "capacity")
        for attr, stage in (("propose", "candidates"), ("propose_all", "candidates"), ("decide", "decide"),
                            ("decide_all", "decide"), ("apply", "apply")):
            clock.wrap(c3m_mod, attr, stage)
        clock.wrap(c3m_mod.C3M, "_units", "units")

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
            with clock.session():
                return add(self, session)
        finally:
            clock.sessions.append(time.perf_counter() - t)

    Memory.add_session = add_session
