"""BMER (C3M §2.2): pages → entries → Raw Nodes and original images, under the joint reader budget.

1. **Entries are scored** s(q, e) = cos(q, z_e) + β · lex(q, e), where lex is the IDF-weighted share of the
   question's entities and attribute words that the entry's routing text holds (the index's own anchors). A
   *spill* entry also gets ρ · reach(q, e) (``spill_reach``): of the mentions of each question key that the spills
   hold, the share this spill holds (IDF-weighted over the question's keys). Why: a spill is the fold of a hundred
   or more entries, so its vector is the mean of many subjects and its cosine says little about any one, and
   every spill soon holds the common keys, so lex cannot tell them apart; but the capacity policy folds an entry
   into the spill that already holds its subject (``write.capacity``, subject homes), so the spill that holds most
   of a named subject's mentions is where that subject's folded evidence is. The bounded reader missed gold turns
   referenced only by a spill on a page it did not read (issue #43: 19 of 22 misses). Subject homes did most of
   the mending (lex then tells the home spill apart); reach matters where a subject is still split over spills,
   e.g. an index written before homes: on such indexes (48K ``hard`` dev, 4 histories,
   ``benchmarks/bounded_reach.py``) it lifted the bounded reader's raw SR 61.1 → 69.4, and on indexes written
   with homes it changed at most one gold turn. Read from the index state alone (the spills' entity counts), so
   the strictly bounded reader stays bounded.
2. **Pages** (Eq. 5): s(q, p) = ½ cos(q, z_p) + ½ max_{e∈p} s(q, e) — the page's topic and its best entry —
   plus, for a reader that sees only the index, μ · the page's share of the index's support (``page_mass``): on
   long histories one spill comes to hold most of the history (photo dev 48K: ~2,000 of ~2,300 turns), its mean
   vector matches no question and its entity counts are trimmed, so routing by relevance alone left the page that
   holds most turns unread (photo dev, bounded reader: IE 85.0 → 100.0, overall 91.5 → 94.8 with μ = 0.2;
   Mem-Gallery dev 69.7 → 69.5, hard dev unchanged; ``benchmarks/results/bounded-reach-cpu/index-pool.md``).
   Pages are taken greedily by s(q, p) + γ · CovGain(p), CovGain = the mean of the shares of the page's
   source sessions and of its relation labels that the pages already taken do not cover (the page itself
   is the cluster). Page beam = the budget's page limit.
3. **Entries** D_q: TopK(``entries_k``) by s(q, e) within the chosen pages.
4. **Expand** every routed entry into Src(e) — its pointers *and* its update chain's (so "before" states are
   reachable). Each node's relevance is Rel = cos(q, v_node) + η · s(q, e) (the entry's score flows to the
   evidence it points at, so a weakly worded turn about the routed thing still counts); the ``pool`` most
   relevant go on, or a tenth of the expansion when that is more (``pool_share``, at most ``pool_max``: a spill
   can point at most of a long history, and a fixed 48 of 2,000 lost gold turns the reranker ranks first —
   photo dev 48K, bounded reader 83.3 → 91.5 raw SR, c3m 90.0 → 96.1; Mem-Gallery dev unchanged, its
   expansions are ~360 nodes).
5. **Select** (Eq. 6–7) in the selection stage (``read.select``), coverage mode: Rel + λ · Cov over source
   sessions and entries, costs (page once per group, 1 node, its images, its text tokens) ≤ budget.
The kernels (the pool's top-k, the selection) run on the memory's device (``device``: numpy and the CPU kernels on
"cpu", torch tensors and Triton on CUDA; ``c3m_kernels.dispatch.placement``).
The route trace logs every stage, so update, routing and answerer failures can be told apart.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..types import BudgetUse, Context, ContextItem, EvidenceForm, ReaderBudget, RouteTrace, node_id_for
from ..index.active import ActiveIndex, IndexEntry, idf


@dataclass(frozen=True)
class BmerConfig:
    gamma: float = 0.1        # CovGain weight in page routing (Eq. 5)
    entries_k: int = 12       # entries routed within the chosen pages (tuned on dev: 6 -> 12, see results)
    lexical: float = 0.3      # β: weight of anchor overlap in s(q, e)
    entry_boost: float = 0.3  # η: share of the entry score a node inherits
    lam: float = 0.05         # λ: coverage weight in the selection (Eq. 6)
    pool: int = 48            # most relevant expanded nodes handed to the solver
    #: the index pool grows with the expansion: max(pool, ⌈pool_share · expanded nodes⌉), at most ``pool_max``
    #: (``pool_size``); 0 keeps it at ``pool``
    pool_share: float = 0.0
    pool_max: int = 192
    spill_reach: float = 0.0  # ρ: weight of a spill's share of the question keys' spilled mentions (0: off)
    page_mass: float = 0.0    # μ: weight of a page's share of the index's support in s(q, p) (0: off)


def lexical(q_keys: set[str], e: IndexEntry, index: ActiveIndex) -> float:
    return lexical_scorer(q_keys, index)(e)


def lexical_scorer(q_keys: set[str], index: ActiveIndex):
    """``lexical(q_keys, e, index)`` as a function of the entry, the question's IDF weights computed once."""
    if not q_keys:
        return lambda e: 0.0
    w = {k: idf(k, index.df, index.n_docs) for k in q_keys}
    total = sum(w.values())
    if not total > 0:
        return lambda e: 0.0

    def score(e: IndexEntry) -> float:
        held = set(e.entities) | set(e.states) | {word for k in e.entities for word in k.split()}
        return sum(w[k] for k in q_keys if k in held) / total
    return score


def spill_reach_scorer(q_keys: set[str], index: ActiveIndex):
    """reach(q, e) as a function of the entry (module docstring, step 1): for a spill, Σ_k idf(k) · count_e(k) /
    Σ_spills count(k) over the question's keys k that some spill holds, divided by Σ_k idf(k) over all the question's
    keys (lex's denominator); 0 for a regular entry and for a question no spill can answer."""
    spills = [e for e in index.entries.values() if e.kind == "spill"]
    if not q_keys or not spills:
        return lambda e: 0.0
    w = {k: idf(k, index.df, index.n_docs) for k in q_keys}
    total = sum(w.values())
    if not total > 0:
        return lambda e: 0.0
    held = {k: sum(s.entities.get(k, 0) for s in spills) for k in q_keys}
    held = {k: n for k, n in held.items() if n > 0}

    def score(e: IndexEntry) -> float:
        if e.kind != "spill" or not held:
            return 0.0
        return sum(w[k] * e.entities.get(k, 0) / n for k, n in held.items()) / total
    return score


def entry_scorer(q: np.ndarray, q_keys: set[str], index: ActiveIndex, cfg: BmerConfig):
    """s(q, e) as a function of the entry (module docstring, step 1): what ``route`` ranks by, and what the reader
    scores the entries expansion adds with."""
    lex = lexical_scorer(q_keys, index)
    reach = spill_reach_scorer(q_keys, index) if cfg.spill_reach else None
    if reach is None:
        return lambda e: float(e.z @ q) + cfg.lexical * lex(e)
    return lambda e: float(e.z @ q) + cfg.lexical * lex(e) + cfg.spill_reach * reach(e)


def routing_keys(index: ActiveIndex) -> np.ndarray:
    """[entries + pages, d]: the vectors routing scores a question against (entries in ``ordered()`` order, then
    pages), one tenant's segment of the batched read's ragged launch."""
    rows = [e.z for e in index.ordered()] + [p.z for p in index.pages]
    return np.stack(rows).astype(np.float32) if rows else np.zeros((0, index.dim), np.float32)


def route(index: ActiveIndex, q: np.ndarray, q_keys: set[str], budget: ReaderBudget, cfg: BmerConfig,
          cos: np.ndarray | None = None):
    """(pages [(page, score)], entries [(entry, score)]) for a question vector and its anchor keys. ``cos``: the
    question's cosines against ``routing_keys(index)`` when already computed (the batched read)."""
    entries = index.ordered()
    if not entries or budget.pages == 0:
        return [], []
    if cos is None:
        cos = routing_keys(index) @ q
    lex = lexical_scorer(q_keys, index)
    reach = spill_reach_scorer(q_keys, index) if cfg.spill_reach else (lambda e: 0.0)
    e_score = {e.entry_id: float(cos[i]) + cfg.lexical * lex(e) + cfg.spill_reach * reach(e)
               for i, e in enumerate(entries)}
    p_score = []
    for p, page in enumerate(index.pages):
        members = [e for e in entries if e.page == p]
        best = max((e_score[e.entry_id] for e in members), default=0.0)
        p_score.append(0.5 * float(cos[len(entries) + p]) + 0.5 * best)
    if cfg.page_mass:
        support = [sum(e.support for e in entries if e.page == p) for p in range(len(index.pages))]
        total = sum(support) or 1
        p_score = [s + cfg.page_mass * n / total for s, n in zip(p_score, support)]
    sessions = [set().union(*(set(e.sources()) for e in entries if e.page == p)) for p in range(len(index.pages))]
    labels = [set().union(*(set(e.labels) for e in entries if e.page == p)) for p in range(len(index.pages))]
    chosen: list[tuple[int, float]] = []
    cov_s, cov_l = set(), set()
    for _ in range(min(budget.pages, len(index.pages))):
        def gain(p):
            gs = len(sessions[p] - cov_s) / len(sessions[p]) if sessions[p] else 0.0
            gl = len(labels[p] - cov_l) / len(labels[p]) if labels[p] else 0.0
            return 0.5 * (gs + gl)
        rest = [p for p in range(len(index.pages)) if p not in {c for c, _ in chosen}]
        p = max(rest, key=lambda p: (p_score[p] + cfg.gamma * gain(p), -p))
        chosen.append((p, p_score[p] + cfg.gamma * gain(p)))
        cov_s |= sessions[p]
        cov_l |= labels[p]
    in_pages = {p for p, _ in chosen}
    routed = sorted((e for e in entries if e.page in in_pages), key=lambda e: (-e_score[e.entry_id], e.entry_id))
    return chosen, [(e, e_score[e.entry_id]) for e in routed[: cfg.entries_k]]


class Member(NamedTuple):
    """An entry the read opens: routed by ``route`` or added by expansion (``tag``), with its score s(q, e)."""

    entry: IndexEntry
    score: float
    tag: str | None = None


class PoolNode(NamedTuple):
    """A Raw Node of the index pool: Rel = cos(q, node) + η · s(q, owner), its best-scoring owner entry and that
    entry's tag."""

    node: object  # RawNode
    rel: float
    entry: IndexEntry
    tag: str | None


class Pool(NamedTuple):
    """``expand_pools``' answer for one job: every expanded node id (sorted) and the pool, best first."""

    expanded: list[str]
    nodes: list[PoolNode]


@dataclass(frozen=True)
class PoolJob:
    """One question's pool to build (``expand_pools``). ``id_vectors``: node ids -> their shared vectors without
    fetching the nodes (the Cold-Store channel's ``NodeKeys`` holds them), or None when unknown."""

    members: Sequence  # [Member] or (entry, score) pairs
    namespace: str
    q: np.ndarray
    cfg: BmerConfig
    get_nodes: Callable
    vectors: Callable
    id_vectors: Callable | None = None


#: nodes ranked beyond the pool when their vectors are known without fetching, so a few redacted ones do not force a
#: second pass
POOL_SLACK = 8


def pool_size(cfg: BmerConfig, expanded: int) -> int:
    """How many expanded nodes the index pool keeps: ``cfg.pool``, or a share of the expansion when that is more
    (``pool_share``, capped at ``pool_max``). Why: a spill entry points at hundreds to thousands of turns (on 48K
    photo histories one spill held ~2,000 of ~2,300), and a fixed top-48 by cosine then drops gold turns the reranker
    would have put first (#43: 18 of 28 bounded-reader misses on photo dev were routed but lost here); a small
    expansion (a few regular entries) keeps the pool the reranker was trained on."""
    if cfg.pool_share <= 0:
        return cfg.pool
    return max(cfg.pool, min(cfg.pool_max, math.ceil(cfg.pool_share * expanded)))


def _pool_owners(members, namespace: str) -> tuple[list[str], dict[str, tuple]]:
    """Expand (entry, score[, tag]) members into Src(e) Raw-Node ids: (sorted ids, {id: (best-scoring owner entry,
    its score, its tag)})."""
    owner: dict[str, tuple] = {}
    for e, s, *tag in members:
        for sid, turns in e.sources().items():
            for t in turns:
                nid = node_id_for(namespace, sid, t)
                if nid not in owner or s > owner[nid][1]:
                    owner[nid] = (e, s, tag[0] if tag else None)
    return sorted(owner), owner


def _pool_from_ranked(expanded: list[str], owner: dict, nodes: dict, V: np.ndarray, q: np.ndarray, idx,
                     cfg: BmerConfig) -> list[tuple]:
    """The pool from the expanded nodes ranked by cos(q, node) (``idx``: rows of ``V``, best first): redacted
    nodes dropped, Rel = cos + η · s(q, owner). Returns [(node, Rel, owner entry, owner's tag)]."""
    pool = []
    for i in (int(i) for i in idx if i >= 0):
        node = nodes[expanded[i]]
        if node.redacted:
            continue
        e, s, tag = owner[node.node_id]
        pool.append(PoolNode(node, float(V[i] @ q) + cfg.entry_boost * s, e, tag))
    return pool


def expand_pool(members, namespace: str, q: np.ndarray, cfg: BmerConfig, *, get_nodes, vectors) -> Pool:
    """Expand (entry, score[, tag]) members into Src(e) Raw Nodes and keep the ``cfg.pool`` most relevant.

    A node reached from several entries keeps its best-scoring owner; the pool is TopK by cos(q, node)
    (``candidate_topk``), each node's relevance Rel = cos + η · s(q, owner), redacted nodes dropped. Returns
    (every expanded node id, [PoolNode]). ``expand_pools`` with one job."""
    return expand_pools([PoolJob(members, namespace, q, cfg, get_nodes, vectors)])[0]


def expand_pools(jobs: Sequence[PoolJob], *, device: str = "cpu") -> list[Pool]:
    """``expand_pool`` for many jobs at once (the batched read): one ``get_nodes`` call per store for every job's
    expanded nodes, one ragged top-k launch for every job's ranking. Each job's result is what it gets alone.

    A job with ``id_vectors`` that knows all its nodes is ranked first and only its best nodes are fetched (a spill
    entry can point at hundreds), with the same scores and order."""
    from .batch import segments_topk

    owners, want, known = [], {}, []
    for job in jobs:
        expanded, owner = _pool_owners(job.members, job.namespace)
        owners.append((expanded, owner))
        V = job.id_vectors(expanded) if job.id_vectors is not None and expanded else None
        known.append(V)
        if V is None:
            want.setdefault(job.get_nodes, set()).update(expanded)  # bound store methods: equal for one store
    fetched = {get: get(sorted(ids)) for get, ids in want.items()}
    segs, ks = [], []
    for job, (expanded, _), V in zip(jobs, owners, known):
        if V is None:
            nodes = fetched[job.get_nodes]
            V = job.vectors([nodes[n] for n in expanded]) if expanded else np.zeros((0, len(job.q)), np.float32)
        segs.append(V)
        ks.append(min(pool_size(job.cfg, len(expanded)) + (POOL_SLACK if known[len(segs) - 1] is not None else 0),
                      len(expanded)))
    Q = np.stack([np.asarray(job.q, np.float32) for job in jobs]) if jobs else np.zeros((0, 0), np.float32)
    ranked = segments_topk(Q, segs, ks, device=device) if jobs else []
    late: dict = {}
    for job, (expanded, _), V, (_, idx) in zip(jobs, owners, known, ranked):
        if V is not None:
            late.setdefault(job.get_nodes, set()).update(expanded[int(i)] for i in idx if i >= 0)
    for get, ids in late.items():
        fetched.setdefault(get, {}).update(get(sorted(ids)))
    out = []
    for job, (expanded, owner), V, seg, (_, idx) in zip(jobs, owners, known, segs, ranked):
        pool = _pool_from_ranked(expanded, owner, fetched[job.get_nodes], seg, job.q, idx, job.cfg) if expanded else []
        size = pool_size(job.cfg, len(expanded))
        if V is not None and len(pool) < min(size, len(expanded)) and len(idx) < len(expanded):
            # redacted nodes ate the slack: this job again, every node fetched (rare: only after a forget)
            (_, pool), = expand_pools([PoolJob(job.members, job.namespace, job.q, job.cfg, job.get_nodes,
                                               job.vectors)], device=device)
        out.append(Pool(expanded, pool[:size]))
    return out


def select(index: ActiveIndex, namespace: str, question: str, q: np.ndarray, q_keys: set[str], budget: ReaderBudget,
           cfg: BmerConfig, *, vectors, get_nodes, count, method: str, cos: np.ndarray | None = None,
           device: str = "cpu") -> Context:
    """The whole read path for one question (module docstring). ``get_nodes(ids) -> {id: RawNode}`` reads the
    Cold Store (once, for every expanded node); ``vectors(nodes) -> [n, d]`` gives their shared embeddings.
    ``device``: the memory's device; the pool's top-k and the selection run there (``read.batch``)."""
    pages, routed = route(index, q, q_keys, budget, cfg, cos)
    if not routed:
        note = "empty memory" if not index.entries else "no page routed (page budget 0)"
        return Context(question, (), BudgetUse(), budget, RouteTrace(method, notes=(note,)))
    ((expanded, scored),) = expand_pools([PoolJob(routed, namespace, q, cfg, get_nodes, vectors)], device=device)
    pool = [(node, rel, e) for node, rel, e, _ in scored]
    tokens = {n.node_id: count(n.text) for n, _, _ in pool}
    chosen, dropped = _solve(pool, tokens, budget, cfg, device)
    picked = [pool[i] for i in chosen]
    picked.sort(key=lambda c: (c[0].time, c[0].session_id, c[0].turn_index))
    items = tuple(ContextItem(n.node_id, n.provenance, n.role, EvidenceForm.RAW_TEXT, n.text, n.images, round(r, 4),
                              tokens[n.node_id]) for n, r, _ in picked)
    use = BudgetUse(len({e.page for _, _, e in picked}), len(picked), sum(len(n.images) for n, _, _ in picked),
                    sum(tokens[n.node_id] for n, _, _ in picked))
    trace = RouteTrace(
        method,
        pages=tuple((f"p{p}", round(s, 4)) for p, s in pages),
        entries=tuple((e.entry_id, round(s, 4)) for e, s in routed),
        candidates=tuple((n.node_id, round(r, 4)) for n, r, _ in sorted(pool, key=lambda c: -c[1])),
        expanded_nodes=tuple(expanded),
        expanded_images=tuple(im.sha256 for n, _, _ in pool for im in n.images),
        selected_nodes=tuple(n.node_id for n, _, _ in picked),
        covered_sessions=tuple(dict.fromkeys(n.session_id for n, _, _ in picked)),
        dropped_for_budget=tuple(pool[i][0].node_id for i in dropped),
        notes=(f"{len(expanded)} nodes expanded from {len(routed)} entries on {len(pages)} pages",),
        pool=tuple(n.node_id for n, _, _ in pool),
        scored=len(expanded),
    )
    return Context(question, items, use, budget, trace)


def _solve(pool, tokens: dict[str, int], budget: ReaderBudget, cfg: BmerConfig,
           device: str = "cpu") -> tuple[list[int], list[int]]:
    """Indices chosen by the selection stage (``read.select.solve_many``, coverage mode: a page charged once when any
    of its nodes is taken) and the ones it left out; the solve runs on ``device``."""
    if not pool:
        return [], []
    from .select import PAGE_GROUP, SolveInstance, cost_row, solve_many

    M = len(pool)
    pages = sorted({e.page for _, _, e in pool})
    sessions = sorted({n.session_id for n, _, _ in pool})
    entry_ids = sorted({e.entry_id for _, _, e in pool})
    values = np.array([max(1e-3, r + 1.0) for _, r, _ in pool])  # cosine-based Rel shifted positive
    costs = np.array([cost_row(raw_node=True, images=len(n.images), tokens=tokens[n.node_id]) for n, _, _ in pool],
                     dtype=np.float64)
    groups = np.array([pages.index(e.page) for _, _, e in pool], dtype=np.int64)
    L = len(sessions) + len(entry_ids)
    cover = np.zeros((M, L), dtype=bool)
    for i, (n, _, e) in enumerate(pool):
        cover[i, sessions.index(n.session_id)] = True
        cover[i, len(sessions) + entry_ids.index(e.entry_id)] = True
    inst = SolveInstance(values, costs, groups, np.tile(np.array(PAGE_GROUP), (len(pages), 1)), cover,
                         np.array(budget.as_tuple(), dtype=np.float64), cfg.lam, mode="coverage")
    chosen = solve_many([inst], device=device)[0]
    picked = [i for i in range(M) if chosen[i]]
    return picked, [i for i in range(M) if not chosen[i]]
