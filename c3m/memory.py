"""``Memory``: the public API. The CLI and the evaluation harness are thin layers on it.

One ``Memory`` = one store folder + one namespace + one method. Safe to open from several processes:
every write takes the store's write lock, first catches the method's index up with sessions that
other processes committed (from their snapshots, or by replaying the immutable Raw Nodes), then
commits the new session's Raw Nodes *and* the new index snapshot in one transaction.

Many users (namespaces) in one process: ``mem.tenant(namespace)`` opens another namespace on the same store
connection, models and configuration, and ``mem.retrieve_many([(namespace, question), ...])`` reads a batch
over any of them through the method's batched read path (one embedding call, one ragged top-k launch, one
budget solve; ``MemoryMethod.retrieve_many``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Iterable, Sequence

from .budget import Measured, check_context, measure_context
from .config import MemoryConfig
from .methods import MemoryMethod, method_class
from .models import Models
from .store import ColdStore, ForgetReport, Snapshot, VerifyReport, check_namespace, verify_store
from .types import Answer, Context, History, ImageRef, RawNode, ReaderBudget, Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AddResult:
    """What ``add_session`` did: ``created`` is False when the identical session was already stored."""

    session_id: str
    seq: int
    created: bool
    raw_nodes: int
    images: int
    actions: tuple[dict, ...] = ()


class Memory:
    """Open (or create) a store at ``path`` and work in ``namespace`` with one memory method."""

    def __init__(self, path: str | Path, namespace: str = "default", *, config: MemoryConfig | None = None,
                 models: Models | None = None, method: str | None = None, _parent: "Memory | None" = None):
        self.config = config or MemoryConfig()
        if method is not None:
            self.config = self.config.with_(method=method)
        self.namespace = check_namespace(namespace)
        method_class(self.config.method)  # an unknown name fails before the store is opened
        self._parent = _parent
        self.store = _parent.store if _parent is not None else ColdStore(path)
        self.models = models or Models.from_config(self.config, store=self.store)
        self.method: MemoryMethod = self._new_method()
        self._view: tuple | None = None  # ((snapshot key, version, forgets), SnapshotView): snapshot_view cache
        self._tenants: dict[str, Memory] = {self.namespace: self}
        self._arena = None  # the key arena this Memory's tenants share (created with the second tenant)
        if _parent is not None:
            self.method.attach_arena(_parent._shared_arena())
        self._version: int | None = None  # seq of the last session folded into self.method
        self._forgets: int | None = None  # forget-log length when self.method was loaded (store.generation)
        self.sync()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the store (a tenant opened by ``tenant`` shares its parent's, which the parent closes)."""
        if self._parent is None:
            self.store.close()

    def tenant(self, namespace: str) -> "Memory":
        """This store's ``namespace`` as a ``Memory`` with the same models, configuration and store connection
        (kept open: a service reads many users; ``retrieve_many`` batches over them)."""
        root = self._parent or self
        namespace = check_namespace(namespace)
        if namespace not in root._tenants:
            root._tenants[namespace] = Memory(root.store.path, namespace, config=root.config, models=root.models,
                                              _parent=root)
        return root._tenants[namespace]

    def release(self, namespace: str) -> None:
        """Drop a tenant's in-memory index (the store keeps everything; ``tenant`` reloads it from its snapshot)."""
        root = self._parent or self
        t = root._tenants.pop(namespace, None) if namespace != root.namespace else None
        if t is not None and root._arena is not None:
            root._arena.drop(namespace)

    def _new_method(self) -> MemoryMethod:
        """A new, empty instance of the configured method on this store, namespace and models."""
        method = method_class(self.config.method)(self.store, self.namespace, self.models,
                                                  write_budget=self.config.write_budget,
                                                  options=self.config.method_options)
        method.device = self.config.device
        return method

    def fresh_method(self) -> MemoryMethod:
        """A new instance of the method loaded from the snapshot of this Memory's version only (nothing the live
        instance kept in memory): the evaluation harness serves the read phase from it, so reads can use only
        what the measured snapshot holds plus the Cold Store (docs/evaluation.md, threat model)."""
        self.sync()
        method = self._new_method()
        snap = self.snapshot(self._version) if self._version else None
        if snap is None:
            method.reset()
        else:
            method.load_state(snap.state)
        return method

    def snapshot_view(self):
        """The ``SnapshotView`` (``c3m.index.reach``) of the snapshot this Memory's index is at: what a read may
        reach and which summaries it may show. Cached per version."""
        from .index.reach import EMPTY, snapshot_view

        key = (self.method.snapshot_key, self._version, self._forgets)
        if self._view is None or self._view[0] != key:
            snap = self.snapshot(self._version) if self._version else None
            view = EMPTY if snap is None else snapshot_view(snap.state, snap.pointers, self.namespace)
            self._view = (key, view)
        return self._view[1]

    def _shared_arena(self):
        root = self._parent or self
        if root._arena is None:
            from .read.arena import KeyArena

            root._arena = KeyArena(root.models.text_embedder.dim)
            root.method.attach_arena(root._arena)
        return root._arena

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def method_name(self) -> str:
        """The key the method's snapshots and log are stored under (``MemoryMethod.snapshot_key``)."""
        return self.method.snapshot_key

    @property
    def version(self) -> int:
        """Seq of the last session in this Memory's view (0 = empty)."""
        return self._version or 0

    def sync(self) -> int:
        """Bring the in-memory index up to the store's latest session; returns the version."""
        head, forgets = self.store.generation(self.namespace)
        if forgets != self._forgets:  # another connection forgot nodes: our index may hold their content
            self._version, self._forgets = None, forgets
        if self._version == head:
            return head
        snap_version = self.store.latest_snapshot_version(self.namespace, self.method.snapshot_key)
        if snap_version >= head and snap_version > 0:  # > head: a writer committed since generation() was read
            self._load(snap_version)
            return snap_version
        with self.store.transaction(self.namespace):  # replay what has no snapshot (other method, after forget)
            self._catch_up_locked()
        return self._version or 0

    def _load(self, version: int) -> None:
        snap = self.store.snapshot(self.namespace, self.method.snapshot_key, version)
        self.method.load_state(snap.state)
        self._version = version

    def _catch_up_locked(self, upto: int | None = None) -> None:
        """Inside the write lock: fold in every committed session after our version (up to ``upto``)."""
        snap_version = self.store.latest_snapshot_version(self.namespace, self.method.snapshot_key)
        if snap_version and snap_version != self._version and (upto is None or snap_version <= upto):
            self._load(snap_version)
        elif not snap_version and self._version is None:
            self.method.reset()
            self._version = 0
        pending = [s for s in self.store.sessions(self.namespace)
                   if s.seq > (self._version or 0) and (upto is None or s.seq <= upto)]
        for rec in pending:
            nodes = self.store.nodes_for_session(self.namespace, rec.session_id)
            actions = self.method.observe(rec.session_id, nodes)
            self._commit_snapshot(rec.seq, rec.session_id, actions, replay=True)

    def _commit_snapshot(self, seq: int, session_id: str, actions: Sequence[dict], *, replay: bool = False) -> None:
        m = self.method
        self.store.put_snapshot(self.namespace, m.snapshot_key, seq, session_id, m.state(), m.pointers(),
                                complete_provenance=m.complete_provenance)
        for a in actions:
            self.store.log_maintenance(self.namespace, m.snapshot_key, seq, session_id, a.get("action", "?"),
                                       dict(a, replay=replay))
        self._version = seq

    # -- write path ----------------------------------------------------------------------------
    def add_session(self, session: Session) -> AddResult:
        """Store a session's Raw Nodes and images and fold it into the index — atomically."""
        prepared = self.store.prepare_session(self.namespace, session, max_image_bytes=self.config.max_image_bytes,
                                              max_text_chars=self.config.max_turn_chars)
        images = sum(len(n.images) for n in prepared.nodes)
        stored = self.store.session_record(self.namespace, prepared.session_id)
        if stored is not None and stored.content_sha256 == prepared.content_sha256:  # re-ingest: no model work
            return AddResult(stored.session_id, stored.seq, False, len(prepared.nodes), images)
        percepts = self._perceive(prepared.nodes)  # slow work (perception, embedding) outside the write lock
        self.method.begin_session(prepared.nodes, _by_node(percepts))
        self.method.prepare(prepared.nodes)
        try:
            with self.store.transaction(self.namespace):
                rec, created = self.store.insert_session(prepared)
                if not created:
                    return AddResult(rec.session_id, rec.seq, False, len(prepared.nodes), images)
                if percepts:
                    self.store.put_perceptions(self.namespace, percepts)  # derived records commit with the session
                self._catch_up_locked(upto=rec.seq - 1)
                actions = self.method.observe(rec.session_id, prepared.nodes)
                self._commit_snapshot(rec.seq, rec.session_id, actions)
        except BaseException:
            self._version = None  # in-memory index may hold uncommitted changes: reload on next use
            raise
        return AddResult(rec.session_id, rec.seq, True, len(prepared.nodes), images, tuple(actions))

    def _perceive(self, nodes: Sequence[RawNode]):
        """The perception backend's derived records for the new nodes' images (none without a backend)."""
        if self.models.perception is None or not any(n.images for n in nodes):
            return []
        from .write.perception import perceive

        return perceive(nodes, self.models.perception, self._image_bytes)

    def _image_bytes(self, ref) -> bytes:
        return self.store.image_bytes(ref)

    def add_sessions(self, sessions: Sequence[Session], *, lookahead: int = 4, on_added=None) -> list[AddResult]:
        """``add_session`` for each session in order, with the next ``lookahead`` sessions' model work (shared
        embeddings, text anchors) running on background threads meanwhile (``write.prefetch``): the same stored
        bytes as one call at a time, in less wall time on two or more cores. ``lookahead=0`` adds them one by one.
        ``on_added(result)`` is called after each commit (progress bars)."""
        from .write.prefetch import Prefetcher

        ahead = (Prefetcher(self.method, self.store, embed=self.models.perception is None)
                 if lookahead > 0 and len(sessions) > 1 else None)
        out, queued = [], 0
        try:
            for i, session in enumerate(sessions):
                while ahead is not None and queued < min(len(sessions), i + 1 + lookahead):
                    ahead.queue(sessions[queued])
                    queued += 1
                out.append(self.add_session(session))
                if on_added is not None:
                    on_added(out[-1])
        finally:
            if ahead is not None:
                ahead.close()
        return out

    def add_history(self, history: History, *, progress: bool = False) -> list[AddResult]:
        """Add a history's sessions in order (its questions are never shown to the write path), pipelined as
        ``add_sessions``."""
        bar = _bar(len(history.sessions), progress, f"ingest {history.id}")
        try:
            return self.add_sessions(history.sessions, on_added=(lambda _: bar.update(1)) if bar else None)
        finally:
            if bar:
                bar.close()

    def forget(self, *, node_ids: Iterable[str] = (), session_id: str | None = None, reason: str) -> ForgetReport:
        """Redact Raw Nodes for privacy (logged); the index is rebuilt from the redacted store on its next use."""
        node_ids = list(node_ids)
        targets = list(self.store.get_nodes(node_ids).values()) + (
            self.store.nodes_for_session(self.namespace, session_id) if session_id is not None else [])
        mine = [n for n in targets if n.provenance.namespace == self.namespace and not n.redacted]
        texts = self.method.embedding_texts(mine) if mine else []  # what was embedded for them (text + captions)
        report = self.store.forget(self.namespace, node_ids=node_ids, session_id=session_id, reason=reason,
                                   derived_texts=texts)
        self._version = None  # rebuilt from the redacted store on next use (sync), not here: redaction needs no model
        return report

    # -- read path -----------------------------------------------------------------------------
    def retrieve(self, question: str, budget: ReaderBudget | None = None, *, check: bool = True) -> Context:
        """A budgeted, provenance-linked context for ``question``.

        Its use is measured from its items (``c3m.budget.measure_context``: store lookups, tokens recounted),
        and a context over budget raises ``BudgetExceeded``. ``check=False`` hands back the method's context
        unmeasured, for a caller (the evaluation harness) that measures and records violations itself."""
        if not isinstance(question, str) or not question.strip():
            from .errors import InvalidInput

            raise InvalidInput("question", "must be a non-empty string", fix="ask a question")
        self.sync()
        budget = budget or self.config.reader_budget
        ctx = self.method.retrieve(question, budget)
        return self._checked(ctx, budget) if check else ctx  # the method's own report is not trusted

    def retrieve_many(self, requests: Sequence[tuple[str, str]], budget: ReaderBudget | None = None, *,
                      check: bool = True) -> list[Context]:
        """Contexts for many ``(namespace, question)`` requests, read as one batch (module docstring): each is
        the context ``tenant(namespace).retrieve(question, budget)`` returns, measured and checked the same way."""
        from .errors import InvalidInput

        budget = budget or self.config.reader_budget
        tenants = []
        for i, req in enumerate(requests):
            if not (isinstance(req, (tuple, list)) and len(req) == 2):
                raise InvalidInput(f"requests[{i}]", f"must be a (namespace, question) pair, got {req!r}",
                                   fix="pass [(namespace, question), ...]")
            namespace, question = req
            if not isinstance(question, str) or not question.strip():
                raise InvalidInput(f"requests[{i}].question", "must be a non-empty string", fix="ask a question")
            try:
                tenants.append(self.tenant(namespace))
            except InvalidInput as exc:
                raise InvalidInput(f"requests[{i}].namespace", exc.message, fix=exc.fix) from None
        for t in dict.fromkeys(tenants):
            t.sync()
        by_class: dict[type, list[int]] = {}
        for i, t in enumerate(tenants):
            by_class.setdefault(type(t.method), []).append(i)
        out: list[Context | None] = [None] * len(requests)
        for cls, idx in by_class.items():
            got = cls.retrieve_many([(tenants[i].method, requests[i][1], budget) for i in idx])
            for i, ctx in zip(idx, got):
                out[i] = tenants[i]._checked(ctx, budget) if check else ctx
        return out  # type: ignore[return-value]

    def _checked(self, ctx: Context, budget: ReaderBudget) -> Context:
        measured = self.measure(ctx, budget)
        check_context(measured, self.method.name)
        return replace(ctx, use=measured.use) if measured.use != ctx.use else ctx

    def measure(self, ctx: Context, budget: ReaderBudget | None = None) -> Measured:
        """What ``ctx`` really uses of ``budget``, every item resolved against the store, its perception records
        and the index snapshot the read was served from (``c3m.budget``)."""
        p = self.models.perception  # the records a method may show: the configured backend's (any without one)
        records = partial(self.store.perceptions, backend=getattr(p, "name", None),
                          version=getattr(p, "version", None))
        return measure_context(ctx, budget or self.config.reader_budget, self.store.get_nodes, self.namespace,
                               self.models.token_counter.count, derived_blob=self.store.derived_blob,
                               perceptions=records, view=self.snapshot_view(),
                               searches_cold_store=bool(self.method.searches_cold_store),
                               image_token_model=self.config.image_token_model)

    def ask(self, question: str, budget: ReaderBudget | None = None) -> Answer:
        """Retrieve, then answer from the context only: the measured context plus its update chains
        (current/superseded marks) and, for a text-only answerer, the images' captions
        (``c3m.read.answer_view``)."""
        from .read.answer_view import answer_view

        answerer = self.models.answerer
        context = answer_view(self.retrieve(question, budget), self.method, answerer)
        return answerer.answer(question, context, image_loader=self.store.image_bytes)

    def image_bytes(self, image: ImageRef | str) -> bytes:
        """The original bytes of an image a context item carries (``item.images``, or its SHA-256), checked
        against the hash; ``StoreError`` names the blob when it is missing (forgotten) or damaged."""
        from .errors import StoreError

        sha = image.sha256 if isinstance(image, ImageRef) else str(image)
        try:
            data = self.store.image_bytes(sha)  # BlobStore.get checks the hash: BlobDamaged names the file
        except FileNotFoundError as exc:  # BlobMissing: forgotten, or never stored here
            raise StoreError(f"image {sha[:12]}… is not in the store (forgotten, or never stored here): "
                             f"{getattr(exc, 'message', exc)}",
                             fix="take the ImageRef from a context of this store; `c3m verify` checks every blob") from None
        return data

    # -- inspection ----------------------------------------------------------------------------
    def sessions(self):
        return self.store.sessions(self.namespace)

    def nodes(self) -> list[RawNode]:
        return list(self.store.iter_nodes(self.namespace))

    def snapshot(self, version: int | None = None) -> Snapshot | None:
        """The index snapshot after session ``version`` (latest when None)."""
        return self.store.snapshot(self.namespace, self.method.snapshot_key, version)

    def stats(self) -> dict:
        self.sync()
        return {"namespace": self.namespace, "version": self.version, **self.store.namespace_stats(self.namespace),
                **self.method.describe()}

    def verify(self) -> VerifyReport:
        return verify_store(self.store)


def _by_node(percepts) -> dict:
    out: dict = {}
    for rec, _ in percepts:
        out.setdefault(rec.node_id, []).append(rec)
    return out


def _bar(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="session", leave=False)
