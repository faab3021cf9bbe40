"""The one interface every memory method implements, and the registry of method names.

The write path is ``observe(session_id, nodes)``: it sees the new session's Raw Nodes and nothing
else (no question, answer or future session — query-blindness, docs/architecture.md). The read path
is ``retrieve(question, budget)``. The index state is plain JSON (``state``/``load_state``) so the
Cold Store can snapshot it after every session, and ``pointers`` lists the Raw Nodes it reaches.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

import numpy as np

from ..models import Models
from ..store import ColdStore, text_sha256
from ..types import Context, ImagePerception, RawNode, ReaderBudget, UpdateChain, WriteBudget, node_id_for

#: Every method name the project uses (CLI ``--method``); ``available_methods()`` says which exist today.
METHOD_NAMES = ("c3m", "c3m-paper", "hivemem", "dense-topk", "bm25", "hybrid", "full-context", "summary-only", "resum",
                "moviechat", "memrefine", "cdrs", "facts")
_REGISTRY: dict[str, type["MemoryMethod"]] = {}
#: in-process vector memo size at which it is cleared (the store's vector cache stays the source of truth)
VECTOR_MEMO_ITEMS = 200_000


def node_text(node: RawNode, captions: str = "", neighbour: str = "") -> str:
    """What is embedded for a node: its text and its images' captions (derived records); an image-only turn
    without captions gets the turn before it (``[image] <that text>``), an empty turn a marker."""
    text = " ".join(t for t in (node.text.strip(), captions.strip()) if t)
    if text:
        return text
    return f"[image] {neighbour.strip()}".strip() if node.images else "[empty]"


def session_embedding_texts(session) -> list[str]:
    """What each turn's Raw Node is embedded as without perception (``node_text``), from the turns alone: the
    harness's shared embeddings and ``write.prefetch`` both use it."""
    return [node_text(turn, "", session.turns[i - 1].text if i else "") for i, turn in enumerate(session.turns)]


class MemoryMethod(ABC):
    name: ClassVar[str]
    #: True when the index promises to reach every ingested Raw Node (``verify`` then checks it).
    complete_provenance: ClassVar[bool] = True
    #: True when the method promises to keep its active index within ``write_budget`` after every commit. The
    #: harness measures every snapshot (``c3m.budget.measure_index``) and records a violation when a bounded
    #: method exceeds it; unbounded methods are labelled *unbounded* in every table, with their index size.
    bounded: ClassVar[bool] = False
    #: True when the read path also searches the Cold Store itself (full-text + dense over every stored Raw Node),
    #: beside its index: its contexts may then hold nodes the index does not route to, and its reports show the
    #: Cold-Store search index's size beside the active index's. A strictly bounded reader keeps this False, so
    #: everything it shows must be reachable from the index snapshot it was served from (the harness checks it).
    searches_cold_store: bool = False
    #: options that change only the read path: the harness asks such variants on the base method's committed
    #: index instead of replaying the writes again (an ablation table costs one write replay per history)
    read_options: ClassVar[frozenset[str]] = frozenset()
    #: one line each for ``c3m methods`` and the comparison tables: what the method does, what its reader is
    #: shown (Raw Nodes, summaries, facts, ...), and the paper it reproduces ("" for the project's own yardsticks)
    summary: ClassVar[str] = ""
    reads: ClassVar[str] = "Raw Nodes"
    paper: ClassVar[str] = ""
    #: where the kernels run (RAMU's candidate scoring, routing, anchor expansion, the reader-budget solver):
    #: "cpu" (numpy + numba) or a torch device such as "cuda" (Triton), by ``c3m_kernels.dispatch.placement``;
    #: ``Memory`` sets it from ``MemoryConfig.device``
    device: str = "cpu"

    def __init__(self, store: ColdStore, namespace: str, models: Models, *,
                 write_budget: WriteBudget = WriteBudget(), options: dict[str, Any] | None = None):
        self.store, self.namespace, self.models = store, namespace, models
        self.write_budget = write_budget
        self.options = dict(options or {})
        self._vector_memo: dict[str, np.ndarray] = {}
        self._text_memo: dict[str, np.ndarray] = {}
        self._node_memo: dict[tuple[str, bool], np.ndarray] = {}
        self._memo_forgets: int | None = None  # the store's forget-log length when _node_memo was last checked
        self._perception_memo: dict[str, list[ImagePerception]] = {}
        self._pending: dict[str, RawNode] = {}  # the session being prepared (not in the store yet)
        #: embedding batches a ``write.prefetch.Prefetcher`` runs ahead of the writer: (text hashes) -> Future
        self.prefetched: dict[tuple, Any] = {}

    def text_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Shared text embeddings [n, dim] of any texts (summaries, anchors, node texts): cached in the store by
        (embedder, content hash) and memoised in this process; only texts never seen are embedded."""
        emb = self.models.text_embedder
        by_text = self._text_memo  # the same vectors by text, so a read's hundreds of anchor keys skip the hashing
        known = [by_text.get(t) for t in texts]
        if known and all(v is not None for v in known):
            return np.stack(known).astype(np.float32)
        hashes = [text_sha256(t) for t in texts]
        missing = [h for h in dict.fromkeys(hashes) if h not in self._vector_memo]
        if missing:
            got = self.store.get_vectors(emb.name, missing)
            todo = {h: t for h, t in zip(hashes, texts) if h in missing and h not in got}
            if todo:
                job = self.prefetched.pop(tuple(todo), None)  # write.prefetch: this very batch, embedded ahead
                fresh = dict(zip(todo, job.result() if job is not None else emb.embed(list(todo.values()))))
                self.store.put_vectors(emb.name, fresh)
                got.update(fresh)
            if len(self._vector_memo) > VECTOR_MEMO_ITEMS:
                self._vector_memo.clear()
            self._vector_memo.update(got)
        rows = [self._vector_memo[h] for h in hashes]
        if len(by_text) > VECTOR_MEMO_ITEMS:
            by_text.clear()
        by_text.update(zip(texts, rows))
        return np.stack(rows).astype(np.float32) if hashes else np.zeros((0, emb.dim), np.float32)

    def node_vectors(self, nodes: Sequence[RawNode]) -> np.ndarray:
        """The Raw Nodes' shared embeddings [n, dim]: every method reads the same vectors (``embedding_texts``).
        Memoised by (node, redacted): a committed node's embedded text never changes (its perception commits with
        it), and a read path asks for the same expanded nodes again and again."""
        memo = self._node_memo
        missing, keys = [], set()
        for n in nodes:
            key = (n.node_id, n.redacted)
            if key not in memo and key not in keys:
                keys.add(key)
                missing.append(n)
        if missing:
            if len(memo) > VECTOR_MEMO_ITEMS:
                memo.clear()
            memo.update(zip(((n.node_id, n.redacted) for n in missing),
                            self.text_vectors(self.embedding_texts(missing))))
        return (np.stack([memo[(n.node_id, n.redacted)] for n in nodes]).astype(np.float32, copy=False) if nodes
                else np.zeros((0, self.models.text_embedder.dim), np.float32))

    def pointer_vectors(self, ids: Sequence[str]) -> np.ndarray | None:
        """The shared embeddings [n, dim] of these Raw-Node ids, so a reader can rank the nodes an index points at
        before it fetches them (``read.bmer.expand_pools`` then fetches only the best few). Why: a spill entry points
        at hundreds to thousands of nodes, and materialising every one of them to rank them cost the strictly
        bounded reader ~25 ms of every read on 48K photo histories (#43). Vectors come from ``node_vectors``' memo;
        the ids it has not seen yet are fetched once (only ids the caller already reaches, so the read touches no
        node it would not have touched) and memoised. A forget anywhere in the namespace (the store's forget log
        grew) empties the memo first, so a forgotten node's old vector never ranks anything."""
        forgets = self.store.generation(self.namespace)[1]
        if forgets != self._memo_forgets:
            self._node_memo.clear()
            self._memo_forgets = forgets
        memo = self._node_memo
        missing = [i for i in dict.fromkeys(ids) if (i, False) not in memo and (i, True) not in memo]
        if missing:
            got = self.store.get_nodes(missing)
            self.node_vectors([got[i] for i in missing if i in got])
        dim = self.models.text_embedder.dim
        rows = [memo.get((i, False), memo.get((i, True))) for i in ids]
        if any(r is None for r in rows):  # an id the store does not hold: the caller ranks by fetching, as before
            return None
        return np.stack(rows).astype(np.float32, copy=False) if rows else np.zeros((0, dim), np.float32)

    # -- perception (derived records) ------------------------------------------------------------
    def remember_perception(self, records: dict[str, list[ImagePerception]]) -> None:
        """Perception of nodes not yet committed (``Memory.add_session`` computes it before the write lock)."""
        if len(self._perception_memo) > VECTOR_MEMO_ITEMS:
            self._perception_memo.clear()
        self._perception_memo.update(records)

    def perception(self, nodes: Sequence[RawNode]) -> dict[str, list[ImagePerception]]:
        """{node_id: derived perception records} for the nodes with images, from this process's memo or the Cold
        Store (backend = the configured perception backend, when there is one)."""
        want = [n.node_id for n in nodes if n.images and n.node_id not in self._perception_memo]
        if want:
            p = self.models.perception
            got = self.store.perceptions(want, backend=p.name if p is not None else None,
                                         version=p.version if p is not None else None)
            for nid in want:
                self._perception_memo[nid] = got.get(nid, [])
        return {n.node_id: self._perception_memo.get(n.node_id, []) for n in nodes if n.images}

    def embedding_texts(self, nodes: Sequence[RawNode]) -> list[str]:
        """What is embedded for each node (``node_text``): its text plus its images' captions; an image-only
        turn without perception is embedded with the text of the turn before it, so it stays findable."""
        seen = self.perception(nodes) if any(n.images for n in nodes) else {}
        out = []
        for n in nodes:
            caps = " ".join(f"[image: {r.caption}]" for r in seen.get(n.node_id, []) if r.caption)
            neighbour = self._neighbour_text(n) if n.images and not n.text.strip() and not caps else ""
            out.append(node_text(n, caps, neighbour))
        return out

    def _neighbour_text(self, node: RawNode) -> str:
        if node.turn_index == 0:
            return ""
        nid = node_id_for(node.provenance.namespace, node.session_id, node.turn_index - 1)
        prev = self._pending.get(nid) or self.store.get_nodes([nid]).get(nid)
        return prev.text if prev is not None else ""

    def prefetch_embedding_texts(self, session) -> list[str]:
        """What ``prepare`` embeds for ``session``'s Raw Nodes without perception, from the turns alone."""
        return session_embedding_texts(session)

    def prefetch_describe(self, session) -> list[str]:
        """The texts of ``session`` this method sends to its text-anchor extractor in ``prepare``, computed from
        the turns alone (``write.prefetch`` describes them ahead of the writer); none by default."""
        return []

    def begin_session(self, nodes: Sequence[RawNode], perception: dict[str, list[ImagePerception]] | None = None) -> None:
        """Called by ``Memory`` before ``prepare``: the new session's nodes and their perception records, which
        the store will hold only once the session commits."""
        self._pending = {n.node_id: n for n in nodes}
        if perception:
            self.remember_perception(perception)

    def write_options(self) -> dict[str, Any]:
        """The options that shape the index (not the read path) where they differ from the method's defaults."""
        return {}

    @property
    def snapshot_key(self) -> str:
        """What snapshots and the maintenance log are stored under: the name, plus a digest of non-default write
        options, so an index built one way is never loaded by a method configured another way."""
        opts = self.write_options()
        if not opts:
            return self.name
        import hashlib
        import json

        digest = hashlib.sha256(json.dumps(opts, sort_keys=True, default=str).encode()).hexdigest()[:10]
        return f"{self.name}@{digest}"

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        """Optional slow work before the write lock is taken (e.g. embed and cache the new texts)."""

    @abstractmethod
    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        """Fold one new session into the index; return maintenance actions for the log."""

    @abstractmethod
    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        """Build a context that never exceeds ``budget`` on any dimension."""

    @classmethod
    def retrieve_many(cls, requests: Sequence[tuple["MemoryMethod", str, ReaderBudget]]) -> list[Context]:
        """Contexts for many (method instance, question, budget) requests at once, instances of this class over
        any namespaces (tenants). A method whose read path batches (one embedding call, one ragged top-k launch,
        one budget solve for all requests) defines a static ``_read_batch(requests)`` and a ``retrieve`` that is
        its batch of one; each context must equal what ``retrieve`` gives for that request alone. Otherwise —
        and for a subclass that overrides ``retrieve`` (research code, a test double), so that its override is
        what runs — the requests are asked one by one."""
        owner = next((k for k in cls.__mro__ if "_read_batch" in vars(k)), None)
        if owner is not None and cls.retrieve is owner.retrieve:
            return owner._read_batch(requests)
        return [m.retrieve(q, b) for m, q, b in requests]

    def attach_arena(self, arena, key: str | None = None) -> None:
        """Keep this tenant's read keys in ``arena`` (a ``c3m.read.arena.KeyArena`` shared by the tenants one
        ``Memory`` opens) under ``key`` (default: the namespace), so batches over many tenants are one ragged
        launch. Methods without one ignore it."""

    def retrieve_batch(self, questions: Sequence[str], budgets: ReaderBudget | Sequence[ReaderBudget]) -> list[Context]:
        """``retrieve`` for many questions on this index (one budget for all, or one each), batched."""
        if isinstance(budgets, ReaderBudget):
            budgets = [budgets] * len(questions)
        if len(budgets) != len(questions):
            from ..errors import InvalidInput

            raise InvalidInput("budgets", f"{len(budgets)} budgets for {len(questions)} questions",
                               fix="pass one ReaderBudget for all questions, or one per question")
        return type(self).retrieve_many([(self, q, b) for q, b in zip(questions, budgets)])

    @abstractmethod
    def state(self) -> dict: ...

    @abstractmethod
    def load_state(self, state: dict) -> None: ...

    @abstractmethod
    def reset(self) -> None:
        """Empty index (before the first session)."""

    @abstractmethod
    def pointers(self) -> set[str]:
        """Raw-Node ids reachable from the index."""

    # -- answer path ---------------------------------------------------------------------------
    @property
    def timeline_anchors(self) -> str:
        """The anchor extractor read-time update chains describe texts with (``c3m.language.timeline``): the
        method's own ``anchors`` option when it has one (c3m, hivemem, facts), so chains use its keys."""
        return getattr(getattr(self, "cfg", None), "anchors", "auto")

    def update_chains(self, context: Context) -> list[UpdateChain]:
        """Update chains the write path recorded, over the context's items (none unless the index keeps
        versions: c3m's RAMU Update)."""
        return []

    def annotate(self, context: Context) -> Context:
        """The context with update chains and current/superseded marks (``c3m.language.timeline``): the write
        path's chains first, read-time chains over the rest. Selects and charges nothing."""
        from ..language.timeline import annotate
        from ..write.units import describer

        return annotate(context, index_chains=self.update_chains(context),
                        describe=describer(self.timeline_anchors).describe)

    def describe(self) -> dict[str, Any]:
        """A summary for ``c3m inspect``."""
        return {"method": self.name, "pointers": len(self.pointers())}


def register(cls: type[MemoryMethod]) -> type[MemoryMethod]:
    """Make a method available by name (the project's own are listed in METHOD_NAMES; research code may
    register more)."""
    if not getattr(cls, "name", None):
        raise ValueError(f"{cls.__name__} needs a class attribute 'name'")
    _REGISTRY[cls.name] = cls
    return cls


def available_methods() -> list[str]:
    """Registered method names (the package ``c3m.methods`` imports and so registers the project's own)."""
    return sorted(_REGISTRY)


def method_class(name: str) -> type[MemoryMethod]:
    available = available_methods()
    if name not in _REGISTRY:
        from ..errors import InvalidInput

        planned = " (planned, not implemented yet)" if name in METHOD_NAMES else ""
        raise InvalidInput("method", f"unknown method {name!r}{planned}", fix=f"choose one of {available}")
    return _REGISTRY[name]
