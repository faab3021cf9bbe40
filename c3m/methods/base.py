"""The one interface every memory method implements, and the registry of method names.

The write path is ``observe(session_id, nodes)``: it sees the new session's Raw Nodes and nothing
else (no question, answer or future session — query-blindness, DESIGN.md invariant 4). The read path
is ``retrieve(question, budget)``. The index state is plain JSON (``state``/``load_state``) so the
Cold Store can snapshot it after every session, and ``pointers`` lists the Raw Nodes it reaches.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

import numpy as np

from ..models import Models
from ..store import ColdStore, text_sha256
from ..types import Context, RawNode, ReaderBudget, WriteBudget

#: Every method name the project uses (CLI ``--method``); ``available_methods()`` says which exist today.
METHOD_NAMES = ("c3m", "c3m-paper", "hivemem", "dense-topk", "bm25", "hybrid", "full-context", "summary-only", "resum",
                "moviechat", "memrefine", "cdrs")
_REGISTRY: dict[str, type["MemoryMethod"]] = {}
#: in-process vector memo size at which it is cleared (the store's vector cache stays the source of truth)
VECTOR_MEMO_ITEMS = 200_000


def node_text(node: RawNode) -> str:
    """What is embedded for a node: its text, or a marker for image-only turns."""
    return node.text if node.text.strip() else ("[image]" if node.images else "[empty]")


class MemoryMethod(ABC):
    name: ClassVar[str]
    #: True when the index promises to reach every ingested Raw Node (``verify`` then checks it).
    complete_provenance: ClassVar[bool] = True
    #: True when the method promises to keep its active index within ``write_budget`` after every commit. The
    #: harness measures every snapshot (``c3m.budget.measure_index``) and records a violation when a bounded
    #: method exceeds it; unbounded methods are labelled *unbounded* in every table, with their index size.
    bounded: ClassVar[bool] = False

    def __init__(self, store: ColdStore, namespace: str, models: Models, *,
                 write_budget: WriteBudget = WriteBudget(), options: dict[str, Any] | None = None):
        self.store, self.namespace, self.models = store, namespace, models
        self.write_budget = write_budget
        self.options = dict(options or {})
        self._vector_memo: dict[str, np.ndarray] = {}

    def node_vectors(self, nodes: Sequence[RawNode]) -> np.ndarray:
        """The Raw Nodes' shared text embeddings [n, dim]: every method reads the same vectors, cached in the
        store by (embedder, content hash) and memoised in this process; only texts never seen are embedded."""
        emb = self.models.text_embedder
        hashes = [text_sha256(node_text(n)) for n in nodes]
        missing = [h for h in dict.fromkeys(hashes) if h not in self._vector_memo]
        if missing:
            got = self.store.get_vectors(emb.name, missing)
            todo = {h: node_text(n) for h, n in zip(hashes, nodes) if h in missing and h not in got}
            if todo:
                fresh = dict(zip(todo, emb.embed(list(todo.values()))))
                self.store.put_vectors(emb.name, fresh)
                got.update(fresh)
            if len(self._vector_memo) > VECTOR_MEMO_ITEMS:
                self._vector_memo.clear()
            self._vector_memo.update(got)
        return (np.stack([self._vector_memo[h] for h in hashes]).astype(np.float32) if hashes
                else np.zeros((0, emb.dim), np.float32))

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        """Optional slow work before the write lock is taken (e.g. embed and cache the new texts)."""

    @abstractmethod
    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        """Fold one new session into the index; return maintenance actions for the log."""

    @abstractmethod
    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        """Build a context that never exceeds ``budget`` on any dimension."""

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
