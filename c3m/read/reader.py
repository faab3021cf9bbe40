"""The read path's driver: ``read_batch(requests)`` runs a batch of questions over any tenants, stage by stage.

    embed + describe ─► route + expand (the index) ─► index pool ─┬─► compose + solve                 (reranker="bmer")
                                                                  └─► channels ─► fuse ─► features ─► rerank ─► ranked
                                                                                   ─► compose + solve    (default)
    reader="c3m" (the C3M paper's reader): route ─► pool ─► solve in ``read.bmer.select``

Stages and their files: embed (``read.batch.query_vectors``), describe (the source's anchor describer), route
(``read.bmer.route``, scores from one ``read.batch.segments_scores`` launch), expand (``read.expand``), the index pool
(``read.bmer.expand_pools``), channels / fusion / features / rerank / ranked (``read.channels``, ``read.pipeline``,
``read.features``, ``read.rerank``), compose (``read.compose``) and the solve (``read.select``). Every stage runs once
for the whole batch; each question's context is exactly what it gets alone.

The memory method supplies the index channel through ``IndexSource`` (``c3m.methods.c3m.C3M`` implements it): its
bounded index, what it derives from it (routing keys, the anchor graph, the time span), its configuration and models.
Training reads through the same stages: ``rerank_inputs`` (the reranker's rows, ``training/train_reranker.py``) and
``retrieval_pool`` (the selector's candidates, ``training/train_selector_ppo.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol, Sequence

import numpy as np

from ..types import BudgetUse, Context, ReaderBudget, RouteTrace
from .batch import query_vectors, segments_scores
from .bmer import Member, Pool, PoolJob, entry_scorer, expand_pools, route, select
from .compose import Candidate, compose_finish, compose_plan, solve_instance
from .expand import expand_many, plan_expansion
from .pipeline import Gathered, IndexHits, PipelineConfig, Request, gather, ranked, rerank
from .select import solve_many


class IndexSource(Protocol):
    """What the read path needs of a memory method with a bounded index (``c3m``, ``c3m-paper``)."""

    name: str
    namespace: str
    store: Any                 # ColdStore
    models: Any                # text_embedder, token_counter
    device: str
    index: Any                 # ActiveIndex
    cfg: Any                   # reader, expansion, expansion_pages, k_exp, k_edge, idf, visual_anchors, lexical
    read_cfg: Any              # BmerConfig
    pipeline_cfg: PipelineConfig
    compose_cfg: Any           # ComposeConfig
    anchors: Any               # describer: describe(texts) -> [(entities, states, ...)]
    selector: Any
    reranker: Any
    reranked: bool             # the reranked reader (channels → rerank), not BMER order
    searches_cold_store: bool
    node_keys: Any             # NodeKeys (the Cold-Store channels' keys) or None

    def node_vectors(self, nodes) -> np.ndarray: ...
    def pointer_vectors(self, ids) -> np.ndarray | None: ...
    def text_vectors(self, texts) -> np.ndarray: ...
    def perception(self, nodes) -> dict: ...
    def route_keys(self) -> np.ndarray: ...
    def index_graph(self): ...
    def time_span(self) -> tuple: ...
    def page_reach(self, pages) -> frozenset[str]: ...
    def node_terms(self, node) -> list[str]: ...


@dataclass(frozen=True)
class ReadRequest:
    """One question for one tenant."""

    source: IndexSource
    question: str
    budget: ReaderBudget


class Routed(NamedTuple):
    """``route_one``'s answer: the routed pages and entries and the pages held back for expansion."""

    pages: list
    entries: list
    reserve: int


class Found(NamedTuple):
    """Routed + expanded members of one question (``members``)."""

    pages: list
    members: list  # [Member]
    n_routed: int
    n_expanded: int


@dataclass
class Staged:
    """The stages every reader shares, for a batch (``stage``)."""

    Q: np.ndarray                  # [n, d] question vectors
    keys: list[set[str]]           # each question's lexical keys
    out: list                      # contexts decided so far (C3M-only reader, nothing routed), else None
    found: dict[int, Found]        # request index -> its routed and expanded members
    pools: dict[int, Pool]         # request index -> its index pool
    device: str


@dataclass
class Plan:
    """One question's memories for composition and its trace so far."""

    i: int
    cands: list
    trace: RouteTrace


def read_batch(requests: Sequence[ReadRequest]) -> list[Context]:
    """The read path for a batch (module docstring): one embedding call, one anchor-extraction call, one ragged
    launch for routing scores, one for every question's node pool, one reranker call, one budget solve."""
    st = stage(requests)
    plans = [_index_plan(requests[i].source, st.found[i], st.pools[i], i)
             for i in st.found if not requests[i].source.reranked]
    plans += reranked_plans(requests, st, list(i for i in st.found if requests[i].source.reranked))
    plans.sort(key=lambda p: p.i)
    return compose_all(requests, st, plans)


def compose_all(requests: Sequence[ReadRequest], st: Staged, plans: Sequence[Plan]) -> list[Context]:
    """Compose every plan and solve them all in one ``solve_many`` (``read.select``)."""
    out, solving = list(st.out), []
    for p in plans:
        src, question, budget = requests[p.i].source, requests[p.i].question, requests[p.i].budget
        plan = compose_plan(question, st.Q[p.i], p.cands, budget, src.compose_cfg, selector=src.selector,
                            vectors=src.node_vectors, count=src.models.token_counter.count, trace=p.trace)
        if isinstance(plan, Context):
            out[p.i] = plan
        else:
            solving.append((p.i, plan, solve_instance(plan, src.compose_cfg)))
    solved = iter(solve_many([inst for _, _, inst in solving if inst is not None], device=st.device))
    for i, plan, inst in solving:
        out[i] = compose_finish(plan, next(solved) if inst is not None else np.zeros(0, bool))
    return out


def describe_many(sources: Sequence[IndexSource], questions: Sequence[str]) -> list[set[str]]:
    """Every question's lexical keys, one anchor-extraction call per distinct describer."""
    out: list[set[str] | None] = [None] * len(questions)
    groups: dict[int, list[int]] = {}
    for i, m in enumerate(sources):
        groups.setdefault(id(m.anchors), []).append(i)
    for idx in groups.values():
        described = sources[idx[0]].anchors.describe([questions[i] for i in idx])
        for i, d in zip(idx, described):
            out[i] = lexical_keys(d)
    return out  # type: ignore[return-value]


def lexical_keys(described) -> set[str]:
    """A description's lexical keys: its entities, states and the entities' words."""
    ents, states, *_ = described
    return set(ents) | set(states) | {w for k in ents for w in k.split()}


def stage(requests: Sequence[ReadRequest]) -> Staged:
    """The stages every reader shares: embed, describe, route (one ragged launch), expand every question and build
    its index pool; the C3M-only reader (``reader="c3m"``) finishes here."""
    ms = [r.source for r in requests]
    questions = [r.question for r in requests]
    for m in dict.fromkeys(ms):
        if m.node_keys is not None:
            m.node_keys.sync()
    Q = query_vectors([m.models.text_embedder for m in ms], questions)
    keys = describe_many(ms, questions)
    device = ms[0].device if ms else "cpu"
    cos = segments_scores(Q, [m.route_keys() for m in ms], device=device)
    out: list[Context | None] = [None] * len(requests)
    routes = []
    for i, r in enumerate(requests):
        m = r.source
        if m.cfg.reader == "c3m":
            out[i] = select(m.index, m.namespace, r.question, Q[i], keys[i], r.budget, m.read_cfg,
                            vectors=m.node_vectors, get_nodes=m.store.get_nodes,
                            count=m.models.token_counter.count, method=m.name, cos=cos[i], device=device)
            continue
        got = route_one(m, r.question, Q[i], keys[i], r.budget, cos[i])
        if isinstance(got, Context):
            out[i] = got
        else:
            routes.append((i, got))
    # every question's expansion in one anchor_scores call per tenant graph (read.expand.expand_many)
    expansions = expand_many([plan_index_expansion(requests[i].source, Q[i], routed) for i, routed in routes])
    found = {i: members(requests[i].source, Q[i], keys[i], routed, got) for (i, routed), got in zip(routes, expansions)}
    jobs = []
    for i, f in found.items():
        m = requests[i].source
        jobs.append(PoolJob(f.members, m.namespace, Q[i], m.read_cfg, m.store.get_nodes, m.node_vectors,
                            m.node_keys.id_vectors if m.node_keys is not None else m.pointer_vectors))
    pools = dict(zip(found, expand_pools(jobs, device=device)))
    return Staged(Q, keys, out, found, pools, device)


def route_one(m: IndexSource, question: str, q: np.ndarray, keys: set[str], budget: ReaderBudget, cos: np.ndarray):
    """Route with the expansion pages held back: ``Routed``, or an empty Context when nothing can be routed."""
    c = m.cfg
    reserve = min(c.expansion_pages, max(0, budget.pages - 1)) if c.expansion else 0
    pages, routed = route(m.index, q, keys, replace(budget, pages=budget.pages - reserve), m.read_cfg, cos)
    if not routed:
        note = "empty memory" if not m.index.entries else "no page routed (page budget 0)"
        return Context(question, (), BudgetUse(), budget, RouteTrace(m.name, notes=(note,)))
    return Routed(pages, routed, reserve)


def plan_index_expansion(m: IndexSource, q: np.ndarray, routed: Routed):
    """The routed entries' expansion (``read.expand.plan_expansion``), scored with the batch's others; None when
    expansion is off or has nothing to score."""
    c = m.cfg
    if not c.expansion:
        return None
    read_pages = {p for p, _ in routed.pages}
    return plan_expansion(m.index, [e for e, _ in routed.entries], q, m.text_vectors,
                          k_exp=c.k_exp if not routed.reserve else 4 * c.k_exp, k_edge=c.k_edge, use_idf=c.idf,
                          visual=c.visual_anchors, allowed=None if routed.reserve else (lambda e: e.page in read_pages),
                          graph=m.index_graph(), device=m.device)


def members(m: IndexSource, q: np.ndarray, keys: set[str], routed: Routed, found: list) -> Found:
    """Routed + expanded members from the expansion's ``found`` (entry, score) list. Expansion opens at most the
    reserved pages (charged to the page budget)."""
    c = m.cfg
    pages = routed.pages
    expanded: list = []
    if c.expansion:
        read_pages = {p for p, _ in pages}
        extra: dict[int, float] = {}  # pages opened by expansion: charged to the page budget (trace.pages)
        for e, s in found:
            if len(expanded) == c.k_exp:
                break
            if e.page in read_pages or e.page in extra or len(extra) < routed.reserve:
                if e.page not in read_pages:
                    extra.setdefault(e.page, s)
                expanded.append((e, s))
        pages = list(pages) + [(p, s) for p, s in extra.items()]
    score = entry_scorer(q, keys, m.index, m.read_cfg)  # s(q, e), as routing scores it
    out = [Member(e, s, "routed") for e, s in routed.entries] + [Member(e, score(e), "expanded") for e, _ in expanded]
    return Found(pages, out, len(routed.entries), len(expanded))


def _index_plan(m: IndexSource, f: Found, pool: Pool, i: int) -> Plan:
    """The index pool's nodes as composition candidates (``reranker="bmer"``), and the route trace so far."""
    seen = m.perception([p.node for p in pool.nodes])
    cands = [Candidate(p.node.node_id, (p.node,), p.rel, perceptions={p.node.node_id: seen.get(p.node.node_id, [])},
                       origin=p.tag, page=p.entry.page) for p in pool.nodes]
    trace = RouteTrace(m.name, pages=tuple((f"p{p}", round(s, 4)) for p, s in f.pages),
                       entries=tuple((e.entry_id, round(s, 4)) for e, s, _ in f.members),
                       expanded_nodes=tuple(pool.expanded), scored=len(pool.expanded),
                       notes=(f"{len(pool.expanded)} nodes from {f.n_routed} routed + {f.n_expanded} expanded entries "
                              f"on {len(f.pages)} pages",))
    return Plan(i, cands, trace)


def pipeline_requests(requests: Sequence[ReadRequest], st: Staged, idx: Sequence[int]) -> list[Request]:
    """The pipeline's requests (``read.pipeline.Request``) for the staged questions ``idx``."""
    reqs = []
    for i in idx:
        m, f, pool = requests[i].source, st.found[i], st.pools[i]
        first, now = m.time_span()
        hits = IndexHits(f.pages, f.members, f.n_routed, f.n_expanded, pool.expanded, pool.nodes,
                         m.page_reach(f.pages) if not m.searches_cold_store and m.pipeline_cfg.rounds else frozenset())
        reqs.append(Request(requests[i].question, st.Q[i], frozenset(st.keys[i]), hits, now, m.pipeline_cfg,
                            m.node_keys, m.store, m.namespace, m.node_vectors, m.node_terms, first))
    return reqs


def reranked_plans(requests: Sequence[ReadRequest], st: Staged, idx: Sequence[int]) -> list[Plan]:
    """The reranked read (``read.pipeline``) for the staged questions ``idx``: channels, fusion, features, one
    reranker call per reranker, the best ``pool`` for composition."""
    if not idx:
        return []
    reqs = pipeline_requests(requests, st, idx)
    gathered = gather(reqs, device=st.device)
    by_reranker: dict[int, list[int]] = {}
    for k, i in enumerate(idx):
        by_reranker.setdefault(id(requests[i].source.reranker), []).append(k)
    scores: list = [None] * len(idx)
    for ks in by_reranker.values():
        for k, sc in zip(ks, rerank([gathered[k] for k in ks], requests[idx[ks[0]]].source.reranker)):
            scores[k] = sc
    return [_reranked_plan(requests[i].source, i, st.found[i], st.pools[i], g, sc, r)
            for i, g, sc, r in zip(idx, gathered, scores, reqs)]


def _reranked_plan(m: IndexSource, i: int, f: Found, pool: Pool, g: Gathered, sc: np.ndarray, r: Request) -> Plan:
    c = m.pipeline_cfg
    top = ranked(g, sc, c.pool, c.length_price)
    nodes = [s.node for s, _ in top]
    seen = m.perception(nodes) if any(n.images for n in nodes) else {}
    owner = {p.node.node_id: p.entry for p in r.hits.pool}
    cands = [Candidate(s.node.node_id, (s.node,), rel, perceptions={s.node.node_id: seen.get(s.node.node_id, [])},
                       origin=origin(s), page=owner[s.node.node_id].page if s.node.node_id in owner else None)
             for s, rel in top]
    found = {o: sum(origin(s) == o for s in g.cands) for o in ("routed", "expanded", "cold", "round")}
    scored = len(m.node_keys) if m.node_keys is not None else len(pool.expanded)
    trace = RouteTrace(m.name, pages=tuple((f"p{p}", round(s, 4)) for p, s in f.pages),
                       entries=tuple((e.entry_id, round(s, 4)) for e, s, _ in f.members),
                       expanded_nodes=tuple(dict.fromkeys([*pool.expanded, *(s.node.node_id for s in g.cands)])),
                       scored=max(scored, len(g.cands)),
                       notes=(f"{len(g.cands)} candidates ({', '.join(f'{v} {k}' for k, v in found.items())}) "
                              f"from {f.n_routed} routed + {f.n_expanded} expanded entries on {len(f.pages)} pages"
                              + (" and the Cold-Store search" if g.cold else " (bounded: index only)"),
                              f"reranker {m.reranker.name}: best {len(top)} to composition"))
    return Plan(i, cands, trace)


def origin(s) -> str:
    """Which channel found a candidate first: the index (routed / expanded), the Cold Store, or a round."""
    if s.via_round:
        return "round"
    if s.expanded == s.expanded:  # not NaN: the index channel found it
        return "expanded" if s.expanded else "routed"
    return "cold"


def rerank_inputs(source: IndexSource, questions: Sequence[str], budget: ReaderBudget) -> list[Gathered | None]:
    """The reranker's input for each question on this index (its ``Gathered``: candidates and their feature rows),
    or None when nothing was routed: exactly what ``read_batch`` ranks (``training/train_reranker.py``)."""
    requests = [ReadRequest(source, q, budget) for q in questions]
    st = stage(requests)
    idx = list(st.found)
    got = gather(pipeline_requests(requests, st, idx), device=st.device)
    out: list[Gathered | None] = [None] * len(questions)
    for i, g in zip(idx, got):
        out[i] = g
    return out


def retrieval_pool(source: IndexSource, question: str, budget: ReaderBudget) -> tuple[np.ndarray, list[Candidate]]:
    """The memories ``read_batch`` hands composition for one question: (query vector, candidates) — the reranked
    pool, or the index pool with ``reranker="bmer"`` (``training/train_selector_ppo.py``)."""
    requests = [ReadRequest(source, question, budget)]
    st = stage(requests)
    if 0 not in st.found:
        return st.Q[0], []
    if source.reranked:
        return st.Q[0], reranked_plans(requests, st, [0])[0].cands
    return st.Q[0], _index_plan(source, st.found[0], st.pools[0], 0).cands
