"""The read path as named stages: channels → fuse (+ round partners) → features → rerank → compose → solve.

1. **Channels** find candidate turns, each with its own signal:
   - *index* (``IndexHits``): the bounded active index's BMER route — pages, entries, anchor-graph expansion — and
     the Raw Nodes those entries point at (with their update chains). The method supplies it.
   - *cold dense*: the question's top ``cold_k`` turns by cosine over every Raw Node's stored vector
     (``NodeKeys``; one ragged ``candidate_topk`` launch for the whole batch).
   - *cold lexical*: the Cold Store's own full-text search (``ColdStore.search_text``: SQLite FTS5 BM25,
     PostgreSQL ``ts_rank``) over the question's content words.
   - *window*: when the question names a period (``c3m.language.when``), the turns of that period's sessions, best by
     cosine (a question about "last May" should see May even when May's wording is far from the question's).
   The Cold-Store channels run only when ``cold`` is on; the strictly bounded reader (``cold=False``) never calls
   them, and everything it shows is reachable through the pages it routed to.
2. **Fuse**: the union of the channels' turns, plus each turn's *round partner* (the reply to a user turn, the
   question before a reply) as a candidate of its own, so the solver can keep a question–answer round together
   when both halves are worth a Raw-Node slot.
3. **Features** (``c3m.read.features``) and **rerank** (``c3m.read.rerank``): one model call for every candidate
   of every question in the batch.
4. **Compose** (``c3m.read.compose``): the best ``pool`` candidates, in reranked order, go to the evidence-form
   selector and ``budget_solve`` under the joint reader budget, exactly as before this stage existed.

Every stage hands the next a dataclass (``Query``, ``IndexHits``, ``Gathered``) and runs once for the whole batch
(one embedding call, one ragged launch per kernel, one model call, one solve), so a service answering many
tenants pays per batch, not per question; each question's result is what it gets alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Sequence

import numpy as np

from ..types import node_id_for
from .features import STOP_WORDS, QueryInfo, Signals, feature_matrix
from .scorers import NodeKeys, query_terms
from ..language.when import question_windows


@dataclass(frozen=True)
class PipelineConfig:
    cold: bool = True        # the Cold-Store channels (False: the strictly bounded reader)
    cold_k: int = 32         # turns each Cold-Store channel proposes
    window_k: int = 16       # turns the window channel proposes
    rounds: bool = True      # round partners join the candidates
    pool: int = 48           # reranked candidates handed to composition
    length_price: float = 0.2  # standardised score − price · log(1 + characters / 4) (``ranked``)


@dataclass
class IndexHits:
    """The index channel's output for one question (``C3M._route``, ``read.expand.expand_many``, ``C3M._members`` + ``bmer.expand_pools``)."""

    pages: list                    # [(page, score)] routed (and expansion-opened) pages: what the read is charged
    members: list                  # [(entry, score, "routed" | "expanded")]
    n_routed: int
    n_expanded: int
    expanded: list[str]            # every node id the members point at
    pool: list                     # [(node, Rel, owner entry, tag)]: the index's best nodes by BMER relevance
    reach: frozenset[str] = frozenset()  # node ids reachable through the read pages (the bounded reader's limit)


@dataclass
class Gathered:
    """One question's fused candidates and their feature rows."""

    query: QueryInfo
    cands: list[Signals]
    X: np.ndarray = field(default=None, repr=False)
    cold: bool = True


@dataclass
class Request:
    """One question for one tenant, as the pipeline needs it."""

    question: str
    vec: np.ndarray
    keys: frozenset[str]
    hits: IndexHits
    now: datetime
    cfg: PipelineConfig
    keys_of: NodeKeys | None       # the tenant's Cold-Store keys (None: bounded)
    store: object                  # ColdStore
    namespace: str
    vectors: Callable               # nodes -> [n, d] shared embeddings
    tokens: Callable                # node -> terms (memoised)
    first: datetime                 # the history's first session time (recency)


def search_words(question: str) -> list[str]:
    """The question's words for full-text search: lower-cased, stop words dropped (they match most turns and only
    slow FTS5 down; BM25 weighs them near 0 anyway); all words when that leaves none."""
    words = query_terms(question)
    content = [w for w in words if w not in STOP_WORDS]
    return content or words


def _dense_cold(reqs: Sequence[Request], device: str) -> list[list[tuple[int, float]]]:
    """Each cold request's top ``cold_k`` NodeKeys rows by cosine, one ragged launch per shared arena (on ``device``:
    numpy keys on "cpu", the arena's cached device mirror on CUDA; ``c3m_kernels.dispatch.placement``)."""
    from c3m_kernels.dispatch import placement

    from .batch import ragged_topk

    out: list[list[tuple[int, float]]] = [[] for _ in reqs]
    by_arena: dict[int, list[int]] = {}
    for i, r in enumerate(reqs):
        if r.keys_of is not None and len(r.keys_of):
            by_arena.setdefault(id(r.keys_of.arena), []).append(i)
    for idx in by_arena.values():
        arena = reqs[idx[0]].keys_of.arena
        spans = [reqs[i].keys_of.span() for i in idx]
        k = max(min(reqs[i].cfg.cold_k, e - s) for i, (s, e) in zip(idx, spans))
        at = placement(device, "candidate_topk")
        keys = arena.device_keys(at.device) if at.tensors else arena.data
        scores, rows = ragged_topk(np.stack([reqs[i].vec for i in idx]), keys, spans, k, device=device)
        for b, i in enumerate(idx):
            n = min(reqs[i].cfg.cold_k, spans[b][1] - spans[b][0])
            out[i] = [(int(r) - spans[b][0], float(s)) for r, s in zip(rows[b, :n], scores[b, :n]) if r >= 0]
    return out


def _window_rows(r: Request, windows) -> list[int]:
    """The best ``window_k`` rows by cosine among the turns whose session lies in a window the question names."""
    keys = r.keys_of
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


def gather(reqs: Sequence[Request], *, device: str = "cpu") -> list[Gathered]:
    """Channels and fusion for a batch (module docstring, stages 1–2), then the feature rows (stage 3)."""
    dense = _dense_cold(reqs, device)
    staged = []
    want: dict[int, tuple[object, set[str]]] = {}
    for i, r in enumerate(reqs):
        windows = question_windows(r.question, r.now)
        sig: dict[str, dict] = {}

        def hit(nid: str, **kv) -> None:
            s = sig.setdefault(nid, {"channels": 0})
            s["channels"] += 1
            s.update(kv)

        rank_of_page = {p: k for k, (p, _) in enumerate(r.hits.pages)}
        entry_score = {id(e): s for e, s, _ in reversed(r.hits.members)}  # an entry's first (routed) score
        for rank, (node, rel, e, tag) in enumerate(sorted(r.hits.pool, key=lambda x: -x[1])):
            current = node.turn_index in e.pointers.get(node.session_id, ())
            hit(node.node_id, node=node, idx_rel=rel, idx_rank=rank, page_rank=rank_of_page.get(e.page, math.nan),
                entry_score=entry_score.get(id(e), math.nan),
                expanded=float(tag == "expanded"), superseded=float(not current), chain_len=len(e.versions))
        if r.keys_of is not None:
            for row, _ in dense[i]:
                hit(r.keys_of.ids[row])
            for rank, (nid, score) in enumerate(r.store.search_text(r.namespace, search_words(r.question),
                                                                     r.cfg.cold_k)):
                hit(nid, fts=score, fts_rank=rank)
            for row in _window_rows(r, windows):
                hit(r.keys_of.ids[row])
        if r.cfg.rounds:
            for nid in list(sig):
                partner = _partner(r, nid, sig[nid].get("node"))
                if partner is not None and partner not in sig and (r.keys_of is not None or partner in r.hits.reach):
                    sig[partner] = {"channels": 0, "via_round": True}
        missing = [nid for nid, s in sig.items() if "node" not in s]
        if missing:
            want.setdefault(id(r.store), (r.store, set()))[1].update(missing)
        staged.append((r, windows, sig))
    fetched = {key: store.get_nodes(sorted(ids)) for key, (store, ids) in want.items()}
    out = []
    for r, windows, sig in staged:
        got = fetched.get(id(r.store), {})
        for nid, s in sig.items():
            if "node" not in s:
                s["node"] = got.get(nid)
        live = [(nid, s) for nid, s in sig.items()
                if s["node"] is not None and not s["node"].redacted and s["node"].provenance.namespace == r.namespace]
        nodes = [s["node"] for _, s in live]
        cos = r.vectors(nodes) @ r.vec if nodes else np.zeros(0)
        cands = [Signals(cos=float(c), **s) for (_, s), c in zip(live, cos)]
        query = QueryInfo(r.question, r.vec, r.now, r.keys, windows)
        X = feature_matrix(query, cands, first=r.first, tokens=r.tokens, cold=r.keys_of is not None)
        out.append(Gathered(query, cands, X, r.keys_of is not None))
    return out


def _partner(r: Request, nid: str, node) -> str | None:
    """The node id of a turn's round partner: the turn after a user turn, the turn before any other; None when the
    turn is not known here or the partner would fall before the session's first turn."""
    if node is not None:
        session, turn, role = node.session_id, node.turn_index, node.role
    elif r.keys_of is not None and nid in r.keys_of.row:
        row = r.keys_of.row[nid]
        session, turn, role = r.keys_of.sessions[row], r.keys_of.turns[row], r.keys_of.roles[row]
    else:
        return None
    other = turn + 1 if role == "user" else turn - 1
    if other < 0:
        return None
    return node_id_for(r.namespace, session, other)


def rerank(gathered: Sequence[Gathered], reranker) -> list[np.ndarray]:
    """Every question's candidate scores from one reranker call over the stacked rows."""
    if not gathered:
        return []
    X = np.concatenate([g.X for g in gathered])
    groups = np.concatenate([np.full(len(g.cands), i) for i, g in enumerate(gathered)]).astype(int)
    s = reranker.scores(X, groups) if len(X) else np.zeros(0)
    out, start = [], 0
    for g in gathered:
        out.append(s[start:start + len(g.cands)])
        start += len(g.cands)
    return out


def ranked(g: Gathered, scores: np.ndarray, pool: int, length_price: float = 0.0) -> list[tuple[Signals, float]]:
    """The best ``pool`` candidates with a relevance for composition: 1 for the first, falling linearly by rank
    (the solver's values then follow this order; ties by the earlier turn).

    The order is the reranker's score, standardised over the question's candidates (so the price means the same for
    any model), minus ``length_price`` · log(1 + characters / 4) (≈ tokens): of two turns the model scores alike,
    the shorter goes first. A named heuristic for the text-token budget, measured out of fold on the development
    data (``training/train_reranker.py``, ordering ``lgbm-len``): price 0.2 cut tokens per question 629 → 551
    (−12 %) for −0.8 Support Recall@12 on Mem-Gallery dev, and 239 → 233 for −0.2 on the synthetic train split."""
    s = np.asarray(scores, float)
    z = (s - s.mean()) / (s.std() + 1e-9) if len(s) else s
    adj = z - length_price * np.log1p(np.array([len(c.node.text) / 4 for c in g.cands]))
    order = sorted(range(len(g.cands)), key=lambda i: (-adj[i], g.cands[i].node.time, g.cands[i].node.turn_index))
    top = order[:pool]
    n = max(1, len(top))
    return [(g.cands[i], 1.0 - k / n) for k, i in enumerate(top)]
