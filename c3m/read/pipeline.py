"""The read path as named stages: channels → fuse (+ round partners) → features → rerank → compose → solve.

The driver is ``c3m.read.reader.read_batch``; this module holds the middle stages and the types between them.

1. **Channels** (``c3m.read.channels``: one object each, chosen by ``PipelineConfig.channels``) find candidate
   turns, each with its own signals: the bounded index's route (*index*: ``IndexHits``, computed by the reader),
   the Cold Store's dense top-k (*cold_dense*), its full-text search (*cold_text*) and the periods the question
   names (*window*). The Cold-Store channels run only when ``cold`` is on; the strictly bounded reader
   (``cold=False``) never calls them, and everything it shows is reachable through the pages it routed to.
2. **Fuse** (``gather``): the union of the channels' turns in channel order, plus each turn's *round partner* (the
   reply to a user turn, the question before a reply) as a candidate of its own, so the solver can keep a
   question–answer round together when both halves are worth a Raw-Node slot.
3. **Features** (``c3m.read.features``: ``FEATURES``, then any channel's own signals and any registered feature
   named in ``PipelineConfig.features``) and **rerank** (``c3m.read.rerank``): one model call for every candidate
   of every question in the batch; ``ranked`` keeps the best ``pool`` for composition.
4. **Compose** (``c3m.read.compose``) and **solve** (``c3m.read.select``): the evidence-form selector and
   solve under the joint reader budget.

Every stage hands the next a dataclass (``Request``, ``IndexHits``, ``Gathered``) and runs once for the whole batch
(one embedding call, one ragged launch per kernel, one model call, one solve), so a service answering many
tenants pays per batch, not per question; each question's result is what it gets alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Sequence

import numpy as np

from ..types import node_id_for
from .channels import DEFAULT_CHANNELS, Channel, make_channels, search_words  # noqa: F401  (search_words: API)
from .features import FEATURES, QueryInfo, Signals, extra_columns, feature_matrix
from .scorers import NodeKeys
from ..language.when import question_windows


@dataclass(frozen=True)
class PipelineConfig:
    """The reranked reader's options (``c3m``'s options of the same names: ``C3MConfig`` inherits them)."""

    cold: bool = True        # the Cold-Store channels (False: the strictly bounded reader)
    cold_k: int = field(default=32, metadata={"minimum": 0})      # turns each Cold-Store channel proposes
    window_k: int = field(default=16, metadata={"minimum": 0})    # turns the window channel proposes
    rounds: bool = True      # round partners join the candidates
    pool: int = field(default=48, metadata={"minimum": 0})        # reranked candidates handed to composition
    #: standardised score − price · log(1 + characters / 4) (``ranked``)
    length_price: float = field(default=0.2, metadata={"minimum": 0})
    channels: tuple[str, ...] = DEFAULT_CHANNELS  # the channels, in fusion order (``c3m.read.channels``)
    features: tuple[str, ...] = ()  # registered extra feature columns (``c3m.read.features.register_feature``)

    def channel_objects(self) -> tuple[Channel, ...]:
        return make_channels(self.channels)

    def columns(self) -> tuple[str, ...]:
        """The feature columns this configuration's rows have: ``FEATURES``, then the channels' own signals, then
        the extra features."""
        return FEATURES + extra_columns(self.channel_objects(), self.features)


@dataclass
class IndexHits:
    """The index channel's output for one question (``C3M._route``, ``read.expand.expand_many``, ``C3M._members`` + ``bmer.expand_pools``)."""

    pages: list                    # [(page, score)] routed (and expansion-opened) pages: what the read is charged
    members: list                  # [bmer.Member]: routed and expanded entries
    n_routed: int
    n_expanded: int
    expanded: list[str]            # every node id the members point at
    pool: list                     # [bmer.PoolNode]: the index's best nodes by BMER relevance
    reach: frozenset[str] = frozenset()  # node ids reachable through the read pages (the bounded reader's limit)


@dataclass
class Gathered:
    """One question's fused candidates and their feature rows."""

    query: QueryInfo
    cands: list[Signals]
    X: np.ndarray = field(default=None, repr=False)
    cold: bool = True
    columns: tuple[str, ...] = FEATURES  # X's column names


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
    windows: tuple = field(init=False)  # the periods the question names (``c3m.language.when``)

    def __post_init__(self):
        self.windows = tuple(question_windows(self.question, self.now))


def gather(reqs: Sequence[Request], *, device: str = "cpu") -> list[Gathered]:
    """Channels and fusion for a batch (module docstring, stages 1–2), then the feature rows (stage 3). Requests
    that name the same channels run them together (one call per channel for the batch)."""
    found: list[list | None] = [None] * len(reqs)  # per request: [(channel, [Hit])]
    by_channels: dict[tuple[str, ...], list[int]] = {}
    for i, r in enumerate(reqs):
        by_channels.setdefault(r.cfg.channels, []).append(i)
    for names, idx in by_channels.items():
        group = [reqs[i] for i in idx]
        per = [(ch, ch.find([r for r in group], device) if not ch.cold or any(r.keys_of is not None for r in group)
                else [[] for _ in group]) for ch in make_channels(names)]
        for b, i in enumerate(idx):
            found[i] = [(ch, hits[b]) for ch, hits in per]
    staged = []
    want: dict[int, tuple[object, set[str]]] = {}
    for r, channels in zip(reqs, found):
        sig: dict[str, dict] = {}
        for ch, hits in channels:
            if ch.cold and r.keys_of is None:
                continue
            for h in hits:
                s = sig.setdefault(h.node_id, {"channels": 0})
                s["channels"] += 1
                s.update(h.signals)
        if r.cfg.rounds:
            for nid in list(sig):
                partner = _partner(r, nid, sig[nid].get("node"))
                if partner is not None and partner not in sig and (r.keys_of is not None or partner in r.hits.reach):
                    sig[partner] = {"channels": 0, "via_round": True}
        missing = [nid for nid, s in sig.items() if "node" not in s]
        if missing:
            want.setdefault(id(r.store), (r.store, set()))[1].update(missing)
        staged.append((r, sig))
    fetched = {key: store.get_nodes(sorted(ids)) for key, (store, ids) in want.items()}
    out = []
    for r, sig in staged:
        got = fetched.get(id(r.store), {})
        for nid, s in sig.items():
            if "node" not in s:
                s["node"] = got.get(nid)
        live = [(nid, s) for nid, s in sig.items()
                if s["node"] is not None and not s["node"].redacted and s["node"].provenance.namespace == r.namespace]
        nodes = [s["node"] for _, s in live]
        cos = r.vectors(nodes) @ r.vec if nodes else np.zeros(0)
        cands = [Signals.of(float(c), s) for (_, s), c in zip(live, cos)]
        query = QueryInfo(r.question, r.vec, r.now, r.keys, r.windows)
        columns = r.cfg.columns()
        X = feature_matrix(query, cands, first=r.first, tokens=r.tokens, cold=r.keys_of is not None, columns=columns)
        out.append(Gathered(query, cands, X, r.keys_of is not None, columns))
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
    """Every question's candidate scores from one reranker call over the stacked rows (one per set of columns). A
    reranker that names its feature columns (``feature_names``) gets those columns, by name."""
    out: list = [None] * len(gathered)
    by_columns: dict[tuple[str, ...], list[int]] = {}
    for i, g in enumerate(gathered):
        by_columns.setdefault(g.columns, []).append(i)
    for columns, idx in by_columns.items():
        X = np.concatenate([gathered[i].X for i in idx])
        groups = np.concatenate([np.full(len(gathered[i].cands), k) for k, i in enumerate(idx)]).astype(int)
        names = getattr(reranker, "feature_names", None)
        if names is not None and tuple(names) != columns:
            missing = [n for n in names if n not in columns]
            if missing:
                from ..errors import InvalidInput

                raise InvalidInput("method_options.reranker", f"the reranker reads features the reader does not "
                                   f"compute: {missing}", fix="add their channels / features, or retrain the model")
            X = X[:, [columns.index(n) for n in names]]
        s = reranker.scores(X, groups) if len(X) else np.zeros(0)
        start = 0
        for i in idx:
            out[i] = s[start:start + len(gathered[i].cands)]
            start += len(gathered[i].cands)
    return out


def ranked(g: Gathered, scores: np.ndarray, pool: int, length_price: float = 0.0) -> list[tuple[Signals, float]]:
    """The best ``pool`` candidates with a relevance for composition: 1 for the first, falling linearly by rank
    (ties by the earlier turn). Composition mixes this rank relevance half and half with the node's own cosine
    (``ComposeConfig.node_weight``), so the solver's values lean on this order without following it exactly.

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
