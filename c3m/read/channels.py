"""Channels: where the read path's candidate turns come from, one object per source, one interface.

A channel finds candidate turns for a whole batch of requests (``c3m.read.pipeline.Request``) at once and says, for
each turn it found, its signals: named values that become the reranker's feature columns (``features``). The fusion
stage (``pipeline.gather``) takes the union of the channels' turns in the order the channels are listed, counts how
many channels found each, and adds round partners; ``PipelineConfig.channels`` (the ``c3m`` option ``channels``)
names the channels a reader runs, in order.

Built in (``CHANNELS``; the default order is the read path's order since the reranker was trained):

- ``index``: the bounded active index's BMER route (pages → entries → anchor-graph expansion) and the Raw Nodes
  those entries point at, which the reader computed before (``Request.hits``, ``IndexHits``); signals ``idx_rel``,
  ``idx_rank``, ``page_rank``, ``entry_score``, ``expanded``, ``superseded``, ``chain_len``.
- ``cold_dense``: the question's top ``cold_k`` turns by cosine over every Raw Node's stored vector (``NodeKeys``;
  one ragged ``candidate_topk`` launch per shared key arena for the whole batch).
- ``cold_text``: the Cold Store's own full-text search (``ColdStore.search_text``: SQLite FTS5 BM25, PostgreSQL
  ``ts_rank``) over the question's content words; signals ``fts_score``, ``fts_rank``.
- ``window``: when the question names a period (``c3m.language.when``), the best ``window_k`` turns of that period's
  sessions by cosine (a question about "last May" should see May even when May's wording is far from it).

The Cold-Store channels (``cold = True``) run only for a request with Cold-Store keys (``Request.keys_of``); the
strictly bounded reader (``cold=False``) never calls them, so everything it shows is reachable through its pages.

A new channel is one class with ``name``, ``features``, ``cold`` and ``find``, registered with ``register_channel``
and named in the ``channels`` option (``tests/read/test_channels.py`` does exactly that). A signal that is not one of
``c3m.read.features.FEATURES`` becomes an extra feature column under its own name (NaN where the channel did not
find the turn); a reranker trained with it reads it by name, the shipped one ignores it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from .features import STOP_WORDS
from .scorers import query_terms


@dataclass(frozen=True)
class Hit:
    """One turn a channel found for one request: its node id and the signals it found it with (``node``: the Raw
    Node when the channel already holds it, so fusion need not fetch it)."""

    node_id: str
    signals: Mapping[str, Any] = field(default_factory=dict)


class Channel(Protocol):
    """The channel interface (module docstring)."""

    name: str
    #: the signals it reports, each a feature column (built-in ones are ``FEATURES`` columns)
    features: tuple[str, ...]
    #: a Cold-Store channel: runs only for requests with Cold-Store keys (``Request.keys_of``)
    cold: bool

    def find(self, reqs: Sequence[Any], device: str) -> list[list[Hit]]:
        """Per request, the turns found (best first where the channel has an order)."""
        ...


CHANNELS: dict[str, type] = {}


def register_channel(cls: type) -> type:
    """Class decorator: make a channel available to the ``channels`` option under ``cls.name``."""
    CHANNELS[cls.name] = cls
    return cls


def make_channels(names: Sequence[str]) -> tuple[Channel, ...]:
    """The named channels, in order (one instance per name per process: channels hold no per-tenant state)."""
    from ..errors import InvalidInput

    out = []
    for name in names:
        cls = CHANNELS.get(name)
        if cls is None:
            raise InvalidInput("method_options.channels", f"unknown channel {name!r}",
                               fix=f"choose from {sorted(CHANNELS)} (or register one: c3m.read.channels)")
        got = _INSTANCES.get(cls)
        if got is None:
            got = _INSTANCES[cls] = cls()
        out.append(got)
    return tuple(out)


_INSTANCES: dict[type, Channel] = {}


def search_words(question: str) -> list[str]:
    """The question's words for full-text search: lower-cased, stop words dropped (they match most turns and only
    slow FTS5 down; BM25 weighs them near 0 anyway); all words when that leaves none."""
    words = query_terms(question)
    content = [w for w in words if w not in STOP_WORDS]
    return content or words


@register_channel
class IndexChannel:
    """The bounded index's route, as the reader computed it (``Request.hits``): the index pool, best first."""

    name = "index"
    features = ("idx_rel", "idx_rank", "page_rank", "entry_score", "expanded", "superseded", "chain_len")
    cold = False

    def find(self, reqs, device):
        out = []
        for r in reqs:
            hits = r.hits
            rank_of_page = {p: k for k, (p, _) in enumerate(hits.pages)}
            entry_score = {id(e): s for e, s, _ in reversed(hits.members)}  # an entry's first (routed) score
            got = []
            for rank, p in enumerate(sorted(hits.pool, key=lambda x: -x.rel)):
                node, e = p.node, p.entry
                current = node.turn_index in e.pointers.get(node.session_id, ())
                got.append(Hit(node.node_id, {
                    "node": node, "idx_rel": p.rel, "idx_rank": rank, "page_rank": rank_of_page.get(e.page, math.nan),
                    "entry_score": entry_score.get(id(e), math.nan), "expanded": float(p.tag == "expanded"),
                    "superseded": float(not current), "chain_len": len(e.versions)}))
            out.append(got)
        return out


@register_channel
class ColdDenseChannel:
    """The question's top ``cold_k`` Raw Nodes by cosine over the tenant's ``NodeKeys`` (one ragged launch per shared
    arena, on ``device``: ``c3m.read.batch.ragged_topk``'s one device rule)."""

    name = "cold_dense"
    features = ()  # its cosine is every candidate's ``dense_cos``
    cold = True

    def find(self, reqs, device):
        from .batch import ragged_topk

        out: list[list[Hit]] = [[] for _ in reqs]
        by_arena: dict[int, list[int]] = {}
        for i, r in enumerate(reqs):
            if r.keys_of is not None and len(r.keys_of):
                by_arena.setdefault(id(r.keys_of.arena), []).append(i)
        for idx in by_arena.values():
            arena = reqs[idx[0]].keys_of.arena
            spans = [reqs[i].keys_of.span() for i in idx]
            k = max(min(reqs[i].cfg.cold_k, e - s) for i, (s, e) in zip(idx, spans))
            scores, rows = ragged_topk(np.stack([reqs[i].vec for i in idx]), arena, spans, k, device=device)
            for b, i in enumerate(idx):
                n = min(reqs[i].cfg.cold_k, spans[b][1] - spans[b][0])
                ids = reqs[i].keys_of.ids
                out[i] = [Hit(ids[int(r) - spans[b][0]]) for r in rows[b, :n] if r >= 0]
        return out


@register_channel
class ColdTextChannel:
    """The Cold Store's full-text search over the question's content words (``search_words``), ``cold_k`` turns."""

    name = "cold_text"
    features = ("fts_score", "fts_rank")
    cold = True

    def find(self, reqs, device):
        out = []
        for r in reqs:
            if r.keys_of is None:
                out.append([])
                continue
            found = r.store.search_text(r.namespace, search_words(r.question), r.cfg.cold_k)
            out.append([Hit(nid, {"fts": score, "fts_rank": rank}) for rank, (nid, score) in enumerate(found)])
        return out


@register_channel
class WindowChannel:
    """The best ``window_k`` turns by cosine among those whose session lies in a period the question names."""

    name = "window"
    features = ("in_window", "window_days")
    cold = True

    def find(self, reqs, device):
        return [[Hit(r.keys_of.ids[row]) for row in window_rows(r)] if r.keys_of is not None else [] for r in reqs]


def window_rows(r: Any) -> list[int]:
    """The best ``window_k`` NodeKeys rows by cosine among the turns whose session lies in a window ``r`` names."""
    keys, windows = r.keys_of, r.windows
    if not windows or keys is None or not len(keys):
        return []
    t = keys.time_array()
    mask = np.zeros(len(t), bool)
    for w in windows:
        m = np.ones(len(t), bool)
        if w.start is not None:
            m &= t >= np.datetime64(w.start, "s")
        if w.end is not None:
            m &= t < np.datetime64(w.end, "s")
        mask |= m
    rows = np.flatnonzero(mask)
    if not len(rows) or len(rows) == len(t):  # a window holding every session narrows nothing
        return []
    cos = keys.vectors[rows] @ r.vec
    return [int(x) for x in rows[np.argsort(-cos, kind="stable")[: r.cfg.window_k]]]


#: the read path's channels, in the order their turns are fused
DEFAULT_CHANNELS = ("index", "cold_dense", "cold_text", "window")
