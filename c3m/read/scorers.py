"""Scorers the read paths share, below every method: dense cosine over Raw-Node vectors, Okapi BM25 over their text,
and reciprocal-rank fusion. ``dense-topk``, ``bm25`` and ``hybrid`` are these scorers plus a ranked selection;
``c3m``'s Cold-Store channels (``c3m.read.pipeline``) use the same ones, so a number means the same thing everywhere.

``DenseScorer``: a method's Raw-Node vectors (the shared embeddings) as rows of a ``KeyArena``; one arena may hold
many tenants, so a batch over tenants is one ragged ``candidate_topk`` launch. ``NodeKeys`` adds what a Cold-Store
channel needs beside the vectors: node ids, session times and ``sync``, which catches it up with the store (every
session committed after the last one it holds), so a reader rebuilt from a snapshot finds the same rows.

``Bm25Index``: an incremental in-memory SQLite FTS5 index (the yardsticks'; the Cold Store's own FTS5 table is
``ColdStore.search_text``). Okapi BM25: Robertson & Zaragoza, Foundations and Trends in IR 3(4), 2009.
``rrf``: Cormack, Clarke & Büttcher, SIGIR 2009.
"""
from __future__ import annotations

import re
import sqlite3
from datetime import datetime
from typing import Any, Sequence

import numpy as np

from .arena import KeyArena

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def query_terms(question: str) -> list[str]:
    """The question's lower-cased alphanumeric tokens, de-duplicated in first-seen order (what full-text search
    matches, OR-ed: any term may match)."""
    return list(dict.fromkeys(_TOKEN.findall(question.lower())))


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: every term quoted (so no term is read as an operator), OR-ed together."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def rrf(rankings: Sequence[np.ndarray], n: int, *, k: float, depth: int) -> np.ndarray:
    """Reciprocal-rank fusion of score vectors over the same ``n`` items: the sum of 1 / (k + rank) over the rankings
    an item is in, rank from 1, only the top ``depth`` of each counted; ``-inf`` in a ranking = unranked, and an item
    in none scores ``-inf``."""
    out = np.zeros(n)
    hit = np.zeros(n, dtype=bool)
    for s in rankings:
        order = np.argsort(-s, kind="stable")[:depth]
        order = order[np.isfinite(s[order])]
        out[order] += 1.0 / (k + np.arange(1, len(order) + 1))
        hit[order] = True
    out[~hit] = -np.inf
    return out


class Bm25Index:
    """An incremental FTS5 BM25 index over nodes in insertion order (tokenizer ``porter unicode61``)."""

    def __init__(self):
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.clear()

    def clear(self) -> None:
        self.conn.execute("DROP TABLE IF EXISTS docs")
        self.conn.execute("CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='porter unicode61')")
        self.count = 0

    def add(self, nodes: Sequence) -> None:
        rows = [(self.count + i + 1, n.text) for i, n in enumerate(nodes)]  # rowid = position + 1
        with self.conn:
            self.conn.executemany("INSERT INTO docs(rowid, body) VALUES (?, ?)", rows)
        self.count += len(rows)

    def scores(self, question: str, limit: int | None = None) -> np.ndarray:
        """BM25 score per node (higher = better); ``-inf`` where no query term matches, and (with ``limit``)
        beyond the best ``limit`` matches — FTS5 still scores every match, but sorts them in C."""
        out = np.full(self.count, -np.inf)
        terms = query_terms(question)
        if not terms or not self.count:
            return out
        sql = "SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ?"
        args: tuple = (fts_query(terms),)
        if limit is not None:
            sql += " ORDER BY bm25(docs), rowid LIMIT ?"
            args += (int(limit),)
        for rowid, rank in self.conn.execute(sql, args):
            out[rowid - 1] = -rank  # FTS5's bm25() is negated: lower = better
        return out


class DenseScorer:
    """Cosine similarity of a question against a method's shared node vectors. ``owner`` is the memory method (its
    ``models.text_embedder``, ``namespace`` and ``node_vectors``). The vectors are its rows of a ``KeyArena`` (a
    private one unless ``attach`` hands it a shared one)."""

    def __init__(self, owner: Any):
        self.owner = owner
        self.arena = KeyArena(owner.models.text_embedder.dim)
        self.key = owner.namespace  # this tenant's slot in the arena
        self.clear()

    @property
    def vectors(self) -> np.ndarray:
        return self.arena.rows(self.key)

    def attach(self, arena: KeyArena, key: str | None = None) -> None:
        """Move this tenant's rows into ``arena`` under ``key`` (default: the namespace), shared with other
        tenants: one ragged launch serves all."""
        key = key or self.key
        if arena is self.arena and key == self.key:
            return
        rows = self.vectors.copy()
        self.arena.drop(self.key)
        self.arena, self.key = arena, key
        arena.clear(key)
        arena.extend(key, rows)

    def span(self) -> tuple[int, int]:
        return self.arena.span(self.key)

    def clear(self) -> None:
        self.arena.clear(self.key)

    def add(self, nodes: Sequence) -> None:
        if not nodes:
            return
        self.arena.extend(self.key, self.owner.node_vectors(nodes))

    def scores(self, question: str) -> np.ndarray:
        q = self.owner.models.text_embedder.embed([question])[0]
        return self.vectors @ q


class NodeKeys(DenseScorer):
    """A tenant's Raw Nodes for the Cold-Store channels (module docstring): vectors, ids, sessions, turns and times
    in commit order, caught up from the store by ``sync``. Derived data, rebuilt from the Cold Store at will."""

    def clear(self) -> None:
        super().clear()
        self.ids: list[str] = []
        self.row: dict[str, int] = {}
        self.sessions: list[str] = []
        self.turns: list[int] = []
        self.roles: list[str] = []
        self.times: list[datetime] = []
        self.upto_seq = 0
        self.forgets = 0
        self._times_np: np.ndarray | None = None

    def add(self, nodes: Sequence) -> None:
        """Append nodes (commit order) with their shared embeddings."""
        if not nodes:
            return
        super().add(nodes)
        for n in nodes:
            self.row[n.node_id] = len(self.ids)
            self.ids.append(n.node_id)
            self.sessions.append(n.session_id)
            self.turns.append(n.turn_index)
            self.roles.append(n.role)
            self.times.append(n.time)
        self._times_np = None

    def sync(self) -> None:
        """Catch up with the Cold Store: add the nodes of every session committed after ``upto_seq``; after a
        ``forget`` (the store's forget log grew) start again, so a redacted node's old vector is gone."""
        store, ns = self.owner.store, self.owner.namespace
        head, forgets = store.generation(ns)
        if forgets != self.forgets or head < self.upto_seq:
            self.clear()
            self.forgets = forgets
        if head <= self.upto_seq:
            return
        self.add(list(store.iter_nodes(ns, after_seq=self.upto_seq)))
        self.upto_seq = head

    def __len__(self) -> int:
        return len(self.ids)

    def time_array(self) -> np.ndarray:
        """Session times as datetime64[s] (for window filters), rebuilt after each change."""
        if self._times_np is None:
            self._times_np = np.array(self.times, dtype="datetime64[s]")
        return self._times_np

    def id_vectors(self, ids: Sequence[str]) -> np.ndarray | None:
        """The vectors of these node ids (their rows), or None when one is not held (not synced yet)."""
        rows = [self.row.get(i) for i in ids]
        if any(r is None for r in rows):
            return None
        return self.vectors[rows]
