"""``c3m``: the flagship method — a bounded active index maintained by RAMU, read by BMER (C3M §2).

Write (per committed session, query-blind): cut the session into units (``write.units``), embed them
(the mean of their Raw Nodes' shared embeddings), extract entities and attribute values, then for each
unit run RAMU (``write.ramu``: candidates → relation head → Merge / Update / Add / Keep), and finally the
capacity policy (``write.capacity``) so the index fits the write budget after every commit. Every action is
returned for the maintenance log.
Read — the **unified reader** (``reader="unified"``, default): BMER routes pages → entries (``read.bmer``);
anchor-graph expansion adds the one-hop neighbour entries the routing missed (``read.expand``); the routed and
expanded entries' Raw Nodes become memories whose evidence forms (raw text, caption, raw image, grounded crop)
are chosen by the selector and ``budget_solve`` under the joint reader budget (``read.compose``).
``reader="c3m"`` is the C3M-only reader (raw text + original images, ``read.bmer.select``).

Options (``MemoryConfig.method_options``) are the fields of ``C3MConfig``, validated once; paper values where
the paper gives them (README, "How `c3m` works"). ``c3m-paper`` is the C3M paper as written: one incoming entry per session,
vector-only candidates, the C3M-only reader (raw text + original images).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidInput
from ..models.relation_head import RELATION_HEADS, is_relation_head_name, make_relation_head
from ..models.summary import LeadSummarizer
from ..read.batch import query_vectors, segments_scores, solve_many
from ..read.bmer import BmerConfig, expand_pools, lexical, route, routing_keys, select
from ..read.compose import (FORM_NAMES, SELECTORS, Candidate, ComposeConfig, compose_finish, compose_plan,
                            is_selector_name, make_selector, solve_instance)
from ..read.expand import anchor_graph, expand_many, plan_expansion
from ..read.features import terms
from ..read.pipeline import IndexHits, PipelineConfig, Request, gather, ranked, rerank
from ..read.rerank import RERANKERS, make_reranker
from ..read.scorers import NodeKeys
from ..types import BudgetUse, Context, RawNode, ReaderBudget, RouteTrace, node_id_for
from ..write.capacity import enforce
from ..index.active import MAX_VISUAL, ActiveIndex, normalize, top_counts
from ..write.ramu import apply, decide, propose, session_scores
from ..write.units import Unit, describer, segment, speakers
from .base import MemoryMethod, register
from .options import parse_options

READERS = ("unified", "c3m")
CAPACITY_POLICIES = ("planned", "stepwise")
_BACKGROUND = frozenset({"background", "wall", "table", "floor", "street", "road"})


@dataclass(frozen=True)
class C3MConfig:
    """Every option of ``c3m`` (write, BMER routing, expansion, composition); a preset or an ablation is a value."""

    # write (RAMU, C3M §2.1)
    delta: float = 0.6             # δ: confidence needed to Merge/Update
    candidates: int = 4            # K: RAMU candidates
    min_sim: float = 0.15
    page_open_sim: float = 0.35
    unit_tokens: int = 0           # 0: a unit per user turn (+ replies); huge: one unit per session
    entity_candidates: bool = True  # RAMU candidates also by shared rare entities (False: vector-only, the paper)
    anchors: str = "auto"
    relation_head: str = "feature"
    summary_tokens: int = 24
    capacity: str = "planned"      # "planned": one fallback step per commit; "stepwise": entry by entry (reference)
    capacity_room: float = 3.0     # a fallback frees room for this many commits of the current intake (write.capacity)
    # read: BMER (C3M §2.2)
    gamma: float = 0.1
    entries_k: int = 12
    lexical: float = 0.3
    entry_boost: float = 0.3
    lam: float = 0.05
    pool: int = 48
    # read: the Cold-Store channels and the reranker (c3m.read.pipeline)
    cold: bool = True              # also search the Cold Store (False: the strictly bounded reader)
    reranker: str = "auto"         # auto | lgbm | lgbm:PATH | rrf | bmer (the reader before reranking: BMER order)
    cold_k: int = 32
    window_k: int = 16
    rounds: bool = True            # round partners (the reply to a user turn, the question before a reply)
    length_price: float = 0.2      # reranked order: z(score) − price · log(1 + chars / 4) (read.pipeline.ranked)
    rerank_lam: float = 0.0        # session-coverage weight in composition after the reranker (lam: without it)
    # read: the unified reader
    reader: str = "unified"        # "unified" | "c3m" (C3M-only: raw text + original images)
    expansion: bool = True         # anchor-graph one-hop expansion of the routed entries
    k_exp: int = 2
    k_edge: int = 4
    expansion_pages: int = 0       # pages of the page budget kept back for expansion (0: expand within routed pages)
    visual_anchors: bool = True    # visual anchors in the graph
    idf: bool = True               # IDF-weighted edges and expansion scores
    forms: tuple[str, ...] = FORM_NAMES  # evidence forms offered (ablations: no raw text, no caption, ...)
    selector: str = "rule"
    threshold: float = 0.5
    lam_tokens: float = 0.0
    image_token_model: str = "qwen2-vl"

    @classmethod
    def from_options(cls, options: dict[str, Any], method: str = "c3m", base: "C3MConfig | None" = None) -> "C3MConfig":
        return parse_options(cls, options, method, base)

    def validate(self) -> None:
        if not is_relation_head_name(self.relation_head):
            raise InvalidInput("method_options.relation_head", f"unknown relation head {self.relation_head!r}",
                               fix=f"choose one of {RELATION_HEADS}")
        if not 0.0 <= self.delta <= 1.0:
            raise InvalidInput("method_options.delta", f"must be in [0, 1], got {self.delta!r}",
                               fix="δ is a confidence threshold, e.g. 0.6")
        if self.reader not in READERS:
            raise InvalidInput("method_options.reader", f"unknown reader {self.reader!r}", fix=f"choose one of {READERS}")
        if not is_selector_name(self.selector):
            raise InvalidInput("method_options.selector", f"unknown selector {self.selector!r}",
                               fix=f"use one of {SELECTORS} (weights from training/)")
        if self.reranker not in RERANKERS and not self.reranker.startswith(("lgbm:", "xfit:")):
            raise InvalidInput("method_options.reranker", f"unknown reranker {self.reranker!r}",
                               fix=f"choose one of {RERANKERS}, lgbm:PATH or xfit:DIR")
        if self.capacity not in CAPACITY_POLICIES:
            raise InvalidInput("method_options.capacity", f"unknown capacity policy {self.capacity!r}",
                               fix=f"choose one of {CAPACITY_POLICIES}")
        if self.image_token_model not in ("qwen2-vl", "none") and not self.image_token_model.startswith("fixed:"):
            raise InvalidInput("method_options.image_token_model", f"unknown image-token model {self.image_token_model!r}",
                               fix="use qwen2-vl, fixed:N or none")
        if self.reader == "unified" and self.forms == ("summary",):
            raise InvalidInput("method_options.forms", "c3m's memories are single Raw Nodes and have no summary form",
                               fix="keep at least one of raw_text, caption, raw_image, grounded_crop (summary-only is "
                                   "a hivemem ablation)")
        bad = [f for f in self.forms if f not in FORM_NAMES]
        if bad or not self.forms:
            raise InvalidInput("method_options.forms", f"unknown or empty evidence forms {list(self.forms)}",
                               fix=f"choose a non-empty subset of {list(FORM_NAMES)}")
        for k in ("candidates", "entries_k", "pool", "k_exp", "k_edge", "unit_tokens", "summary_tokens", "threshold",
                  "lam_tokens", "gamma", "lam", "capacity_room", "cold_k", "window_k", "length_price",
                  "rerank_lam"):
            if getattr(self, k) < 0:
                raise InvalidInput(f"method_options.{k}", f"must be >= 0, got {getattr(self, k)}", fix=f"{k} = 0 or more")

    def bmer(self) -> BmerConfig:
        return BmerConfig(**{f.name: getattr(self, f.name) for f in fields(BmerConfig)})

    @property
    def reranked(self) -> bool:
        """The unified reader with a reranker (the pipeline), not the reader before it (``reranker="bmer"``)."""
        return self.reader == "unified" and self.reranker != "bmer"

    def pipeline(self) -> PipelineConfig:
        return PipelineConfig(cold=self.cold, cold_k=self.cold_k, window_k=self.window_k, rounds=self.rounds,
                              pool=self.pool, length_price=self.length_price)

    def compose(self) -> ComposeConfig:
        """Composition's settings. After the reranker the session-coverage bonus is ``rerank_lam`` (default 0): the
        model already weighs a turn's session, and a bonus for new sessions would override its order (measured out
        of fold on Mem-Gallery dev: 0.05 → 0 moved raw SR 63.2 → 63.8 and halved the solver's time)."""
        return ComposeConfig(forms=self.forms, threshold=self.threshold, lam_tokens=self.lam_tokens,
                             lam_cov=self.rerank_lam if self.reranked else self.lam,
                             image_token_model=self.image_token_model)


#: the C3M paper as written (C3M §2–3): one incoming entry per session, vector-only RAMU candidates, BMER over
#: raw text and the original images, no anchor graph
PAPER = C3MConfig(unit_tokens=10**9, entity_candidates=False, lexical=0.0, reader="c3m", expansion=False, cold=False,
                  reranker="bmer")


def visual_keys(anchors) -> set[str]:
    """Normalised visual anchor keys ("mug", "red mug"), the same form as the text anchors' keys."""
    from ..models.anchors import anchor_key

    out = set()
    for a in anchors:
        label = anchor_key(a.label.lower().split())
        if not label or label in _BACKGROUND:
            continue
        out.add(label)
        if a.value:
            out.add(anchor_key(f"{a.value} {a.label}".lower().split()))
    return out


@register
class C3M(MemoryMethod):
    name = "c3m"
    bounded = True
    summary = "RAMU-maintained bounded index (Merge/Update/Add/Keep), BMER routing, anchor expansion, evidence forms"
    reads = "Raw Nodes, captions, images, crops"
    paper = "C3M + HiVe-Mem reader (this project)"

    preset: C3MConfig = C3MConfig()
    read_options = frozenset({"gamma", "entries_k", "lexical", "entry_boost", "lam", "pool", "reader", "expansion",
                              "expansion_pages",
                              "k_exp", "k_edge", "visual_anchors", "idf", "forms", "selector", "threshold",
                              "lam_tokens", "image_token_model", "cold", "reranker", "cold_k", "window_k", "rounds",
                              "length_price", "rerank_lam"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = C3MConfig.from_options(self.options, self.name, self.preset)
        self.read_cfg = self.cfg.bmer()
        self.compose_cfg = self.cfg.compose()
        self.selector = (make_selector(self.cfg.selector, dim=self.models.text_embedder.dim)
                         if self.cfg.reader == "unified" else None)
        try:
            self.head = make_relation_head(self.cfg.relation_head)
        except InvalidInput as exc:  # a missing weights file: name the method option, keep the fix
            raise InvalidInput("method_options.relation_head", exc.message, fix=exc.fix) from exc
        self.summarizer = LeadSummarizer()
        self.anchors = describer(self.cfg.anchors)
        c = self.cfg
        self.reranked = c.reranked
        try:
            self.reranker = make_reranker(c.reranker, self.namespace) if self.reranked else None
        except InvalidInput as exc:  # name the method option, keep the fix
            raise InvalidInput("method_options.reranker", exc.message, fix=exc.fix) from exc
        #: the read path searches the Cold Store (the harness then reports both index sizes)
        self.searches_cold_store = self.reranked and c.cold
        self.node_keys = NodeKeys(self) if self.searches_cold_store else None
        self._terms: dict[tuple[str, bool], list[str]] = {}
        self.reset()

    def write_options(self) -> dict[str, Any]:
        return {f.name: getattr(self.cfg, f.name) for f in fields(C3MConfig)
                if f.name not in self.read_options and getattr(self.cfg, f.name) != getattr(self.preset, f.name)}

    # -- state -------------------------------------------------------------------------------
    def _read_caches(self) -> None:
        """Forget what the read path derived from the index or the store (after a reset, a load or a forget)."""
        self._route_keys, self._graph, self._span = None, False, None
        if self.node_keys is not None:
            self.node_keys.clear()
        self._terms.clear()

    def attach_arena(self, arena, key: str | None = None) -> None:
        if self.node_keys is not None:
            self.node_keys.attach(arena, key)

    def reset(self) -> None:
        self._read_caches()
        self.index = ActiveIndex(self.models.text_embedder.dim,
                                 {"embedder": self.models.text_embedder.name, "head": self.head.name})

    def state(self) -> dict:
        return self.index.state()  # embedder and head names ride in the index's meta, so they are counted

    def load_state(self, state: dict) -> None:
        self.index = ActiveIndex.from_state(state)
        self._read_caches()

    def pointers(self) -> set[str]:
        return self.index.pointer_ids(self.namespace)

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        """The slow model work before the write lock: the nodes' shared embeddings, and the descriptors of the
        turns RAMU describes (each unit's user turns: ``write.units.speakers``), in one batch."""
        self.node_vectors(nodes)
        self.anchors.describe(self._speaker_texts(self._groups(nodes)))

    def prefetch_describe(self, session) -> list[str]:
        """``prepare``'s anchor texts from the turns alone (units cut by role and text, as ``_groups`` does)."""
        return self._speaker_texts(self._groups(session.turns))

    # -- write -------------------------------------------------------------------------------
    def _groups(self, nodes: Sequence[RawNode]) -> list[list[RawNode]]:
        return segment(nodes, self.cfg.unit_tokens, self.models.token_counter.count)

    @staticmethod
    def _speaker_texts(groups) -> list[str]:
        return [n.text for g in groups for n in speakers(g)]

    def _units(self, nodes: Sequence[RawNode]) -> list[Unit]:
        groups = self._groups(nodes)
        vecs = self.node_vectors(nodes)
        row = {n.node_id: i for i, n in enumerate(nodes)}
        texts = self._speaker_texts(groups)
        described = dict(zip(texts, self.anchors.describe(texts)))
        seen = self.perception(nodes) if any(n.images for n in nodes) else {}
        units = []
        for g in groups:
            ents, states, change, again, another = set(), set(), False, False, False
            for n in speakers(g):  # see write.units: descriptors from user turns
                e, s, c, a, o = described[n.text]
                ents |= e
                states |= s
                change, again, another = change or c, again or a, another or o
            z = normalize(vecs[[row[n.node_id] for n in g]].mean(axis=0))
            unit = Unit(g[0].session_id, [n.turn_index for n in g], [n.node_id for n in g], g[0].time,
                        "\n".join(n.text for n in g), z, ents, states, change, sum(len(n.images) for n in g),
                        again, another, image_z=self._image_vector(g))
            unit.visual = set().union(*(visual_keys(r.anchors) for n in g for r in seen.get(n.node_id, ())))
            units.append(unit)
        return units

    def _image_vector(self, group: Sequence[RawNode]):
        """Mean image embedding of a unit's images (RAMU's text–image agreement), when an image embedder is set."""
        emb = self.models.image_embedder
        refs = [im for n in group for im in n.images]
        if emb is None or not refs:
            return None
        return normalize(emb.embed_images([self.store.image_bytes(r) for r in refs]).mean(axis=0))

    def _summary(self, unit: Unit, nodes: Sequence[RawNode]) -> str:
        first = next((n for n in nodes if n.node_id in unit.node_ids and n.text.strip()), None)
        text = self.summarizer.summarize(first.text, self.cfg.summary_tokens) if first else ""
        return text + (f" [{unit.images} image{'s' if unit.images > 1 else ''}]" if unit.images else "")

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        """RAMU over the session's units (their similarities to the index scored in one call), the page labels once,
        then the capacity policy's one planned step (``write.capacity``)."""
        self._route_keys, self._graph, self._span = None, False, None  # the index changes below
        actions = []
        c = self.cfg
        units = self._units(nodes)
        scores = session_scores(self.index, units, k=c.candidates, device=self.device)
        for i, unit in enumerate(units):
            cands = propose(self.index, unit, c.candidates, c.min_sim, entities=c.entity_candidates,
                            scores=scores, row=i)
            decision = decide(unit, cands, self.head, self.index, c.delta)
            log = apply(self.index, unit, decision, self._summary(unit, nodes), self.write_budget, c.page_open_sim,
                        labels=False)
            actions.append(log)
            if unit.visual and log.get("entry") in self.index.entries:
                e = self.index.entries[log["entry"]]
                e.visual = top_counts(e.visual + Counter(unit.visual), MAX_VISUAL)
            self.index.observe_df(unit.entities | unit.states)  # IDF over the past: counted after the decision
        self.index.refresh_pages()  # the page labels, once for the session (apply kept the centroids current)
        intake = sum(a["action"] in ("add", "keep") for a in actions)
        actions += enforce(self.index, self.write_budget, self.head, self.models.token_counter.count, c.delta,
                           room=math.ceil(c.capacity_room * intake), planned=c.capacity == "planned")
        return actions

    # -- read --------------------------------------------------------------------------------
    @staticmethod
    def _keys(described) -> set[str]:
        ents, states, *_ = described
        return set(ents) | set(states) | {w for k in ents for w in k.split()}

    def _routing_keys(self) -> np.ndarray:
        """``bmer.routing_keys`` of the current index, kept until the index changes (observe / load / reset)."""
        if self._route_keys is None:
            self._route_keys = routing_keys(self.index)
        return self._route_keys

    def _anchor_graph(self):
        """``expand.anchor_graph`` of the current index, kept like the routing keys."""
        if self._graph is False:
            c = self.cfg
            self._graph = anchor_graph(self.index, k_edge=c.k_edge, use_idf=c.idf, visual=c.visual_anchors,
                                       device=self.device)
        return self._graph

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        return C3M._read_batch([(self, question, budget)])[0]

    @staticmethod
    def _read_batch(requests) -> list[Context]:
        """The read path for a batch of (method, question, budget) over any tenants, stage by stage: one embedding
        call, one anchor-extraction call, one ragged launch for routing scores, one for every question's node pool,
        one budget solve for every composition. Routing, expansion and composition run per question in between
        (a few dozen entries each). ``retrieve`` is the batch of one."""
        Q, keys, out, staged, pools, device = C3M._stage(requests)
        plans, solving = [], []
        reranked = [(i, found, got) for (i, found), got in zip(staged, pools) if requests[i][0].reranked]
        for (i, (pages, members, routed, expanded_n)), (ids, pool) in zip(staged, pools):
            m, question, budget = requests[i]
            if m.reranked:
                continue
            cands, trace = m._candidates(pages, members, routed, expanded_n, ids, pool)
            plans.append((i, m, cands, trace))
        if reranked:
            plans += C3M._rerank(requests, Q, keys, reranked, device)
        for i, m, cands, trace in plans:
            question, budget = requests[i][1], requests[i][2]
            plan = compose_plan(question, Q[i], cands, budget, m.compose_cfg, selector=m.selector,
                                vectors=m.node_vectors, count=m.models.token_counter.count, trace=trace)
            if isinstance(plan, Context):
                out[i] = plan
            else:
                solving.append((i, plan, solve_instance(plan, m.compose_cfg)))
        solved = iter(solve_many([inst for _, _, inst in solving if inst is not None], device=device))
        for i, plan, inst in solving:
            out[i] = compose_finish(plan, next(solved) if inst is not None else np.zeros(0, bool))
        return out  # type: ignore[return-value]

    @staticmethod
    def _stage(requests):
        """The stages every reader shares: embed, describe, route (one ragged launch) and expand every question; the
        C3M-only reader (``reader="c3m"``) finishes here. Returns (Q, keys, contexts so far, staged, index pools,
        device)."""
        ms = [m for m, _, _ in requests]
        questions = [q for _, q, _ in requests]
        for m in dict.fromkeys(ms):
            if m.node_keys is not None:
                m.node_keys.sync()
        Q = query_vectors([m.models.text_embedder for m in ms], questions)
        keys = _describe_many(ms, questions)
        device = ms[0].device if ms else "cpu"
        cos = segments_scores(Q, [m._routing_keys() for m in ms], device=device)
        out: list[Context | None] = [None] * len(requests)
        routes = []
        for i, (m, question, budget) in enumerate(requests):
            if m.cfg.reader == "c3m":
                out[i] = select(m.index, m.namespace, question, Q[i], keys[i], budget, m.read_cfg,
                                vectors=m.node_vectors, get_nodes=m.store.get_nodes,
                                count=m.models.token_counter.count, method=m.name, cos=cos[i], device=device)
                continue
            got = m._route(question, Q[i], keys[i], budget, cos[i])
            if isinstance(got, Context):
                out[i] = got
            else:
                routes.append((i, got))
        # every question's expansion in one anchor_scores call per tenant graph (read.expand.expand_many)
        expansions = expand_many([requests[i][0]._plan_expansion(Q[i], route) for i, route in routes])
        staged = [(i, requests[i][0]._members(Q[i], keys[i], route, found))
                  for (i, route), found in zip(routes, expansions)]
        lookups = [requests[i][0].node_keys.id_vectors if requests[i][0].node_keys is not None else None
                   for i, _ in staged]
        pools = expand_pools([requests[i][0]._pool_job(Q[i], found) for i, found in staged], device=device,
                             id_vectors=lookups)
        return Q, keys, out, staged, pools, device

    def rerank_inputs(self, questions: Sequence[str], budget: ReaderBudget) -> list:
        """The reranker's input for each question on this index: a ``pipeline.Gathered`` (candidates and their
        feature rows), or None when nothing was routed. What ``training/train_reranker.py`` learns from is exactly
        what the read path ranks."""
        if not self.reranked:
            raise InvalidInput("method_options.reranker", "the bmer reader has no reranker inputs",
                               fix="use reranker=auto, lgbm or rrf")
        requests = [(self, q, budget) for q in questions]
        Q, keys, _, staged, pools, device = C3M._stage(requests)
        got = C3M._gather(requests, Q, keys, [(i, f, p) for (i, f), p in zip(staged, pools)], device)[1]
        out: list = [None] * len(questions)
        for (i, _), g in zip(staged, got):
            out[i] = g
        return out

    @staticmethod
    def _gather(requests, Q, keys, staged, device: str):
        """Channels, fusion and feature rows for the staged requests (``pipeline.gather``): (pipeline requests,
        their ``Gathered``)."""
        reqs = []
        for i, (pages, members, n_routed, n_expanded), (ids, pool) in staged:
            m = requests[i][0]
            first, now = m._time_span()
            hits = IndexHits(pages, members, n_routed, n_expanded, ids, pool,
                             m._page_reach(pages) if not m.searches_cold_store and m.cfg.rounds else frozenset())
            reqs.append(Request(requests[i][1], Q[i], frozenset(keys[i]), hits, now, m.cfg.pipeline(), m.node_keys,
                                m.store, m.namespace, m.node_vectors, m._node_terms, first))
        return reqs, gather(reqs, device=device)

    @staticmethod
    def _rerank(requests, Q, keys, staged, device: str) -> list[tuple]:
        """The reranked read (``c3m.read.pipeline``) for the staged requests: the index channel's hits, the Cold-Store
        channels, round partners, one reranker call; returns (request, method, candidates, trace) for composition."""
        reqs, gathered = C3M._gather(requests, Q, keys, staged, device)
        by_reranker: dict[int, list[int]] = {}
        for k, (i, _, _) in enumerate(staged):
            by_reranker.setdefault(id(requests[i][0].reranker), []).append(k)
        scores: list = [None] * len(staged)
        for ks in by_reranker.values():
            for k, sc in zip(ks, rerank([gathered[k] for k in ks], requests[staged[ks[0]][0]][0].reranker)):
                scores[k] = sc
        out = []
        for (i, (pages, members, n_routed, n_expanded), (ids, _)), g, sc, r in zip(staged, gathered, scores, reqs):
            m = requests[i][0]
            top = ranked(g, sc, m.cfg.pool, m.cfg.length_price)
            nodes = [c.node for c, _ in top]
            seen = m.perception(nodes) if any(n.images for n in nodes) else {}
            owner = {n.node_id: e for n, _, e, _ in r.hits.pool}
            cands = [Candidate(c.node.node_id, (c.node,), rel, perceptions={c.node.node_id: seen.get(c.node.node_id, [])},
                               origin=_origin(c), page=owner[c.node.node_id].page if c.node.node_id in owner else None)
                     for c, rel in top]
            found = {o: sum(_origin(c) == o for c in g.cands) for o in ("routed", "expanded", "cold", "round")}
            scored = len(m.node_keys) if m.node_keys is not None else len(ids)
            trace = RouteTrace(m.name, pages=tuple((f"p{p}", round(s, 4)) for p, s in pages),
                               entries=tuple((e.entry_id, round(s, 4)) for e, s, _ in members),
                               expanded_nodes=tuple(dict.fromkeys([*ids, *(c.node.node_id for c in g.cands)])),
                               scored=max(scored, len(g.cands)),
                               notes=(f"{len(g.cands)} candidates ({', '.join(f'{v} {k}' for k, v in found.items())}) "
                                      f"from {n_routed} routed + {n_expanded} expanded entries on {len(pages)} pages"
                                      + (" and the Cold-Store search" if g.cold else " (bounded: index only)"),
                                      f"reranker {m.reranker.name}: best {len(top)} to composition"))
            out.append((i, m, cands, trace))
        return out

    def retrieval_pool(self, question: str, budget: ReaderBudget) -> tuple[np.ndarray, list[Candidate]]:
        """The unified reader's memories before composition: (query vector, candidates) — the reranked pool, or the
        index pool with ``reranker="bmer"``. The selector's training data (``training/train_selector_ppo.py``) is
        exactly what ``compose`` would be handed."""
        requests = [(self, question, budget)]
        Q, keys, out, staged, pools, device = C3M._stage(requests)
        if not staged:
            return Q[0], []
        (_, found), (ids, pool) = staged[0], pools[0]
        if self.reranked:
            ((_, _, cands, _),) = C3M._rerank(requests, Q, keys, [(0, found, (ids, pool))], device)
            return Q[0], cands
        return Q[0], self._candidates(*found, ids, pool)[0]

    def _pool_job(self, q: np.ndarray, found) -> tuple:
        """``bmer.expand_pools``'s job for routed + expanded members (``found`` from ``_members``)."""
        return (found[1], self.namespace, q, self.read_cfg, self.store.get_nodes, self.node_vectors)

    def _route(self, question: str, q: np.ndarray, keys: set[str], budget: ReaderBudget, cos: np.ndarray):
        """Route with the expansion pages held back: (pages, routed entries, pages reserved for expansion), or an
        empty Context when nothing can be routed."""
        c = self.cfg
        reserve = min(c.expansion_pages, max(0, budget.pages - 1)) if c.expansion else 0
        pages, routed = route(self.index, q, keys, replace(budget, pages=budget.pages - reserve), self.read_cfg, cos)
        if not routed:
            note = "empty memory" if not self.index.entries else "no page routed (page budget 0)"
            return Context(question, (), BudgetUse(), budget, RouteTrace(self.name, notes=(note,)))
        return pages, routed, reserve

    def _plan_expansion(self, q: np.ndarray, routed_pages):
        """The routed entries' expansion (``read.expand.plan_expansion``), scored with the batch's others; None when
        expansion is off or has nothing to score."""
        c = self.cfg
        pages, routed, reserve = routed_pages
        if not c.expansion:
            return None
        read_pages = {p for p, _ in pages}
        return plan_expansion(self.index, [e for e, _ in routed], q, self.text_vectors,
                              k_exp=c.k_exp if not reserve else 4 * c.k_exp, k_edge=c.k_edge, use_idf=c.idf,
                              visual=c.visual_anchors, allowed=None if reserve else (lambda e: e.page in read_pages),
                              graph=self._anchor_graph(), device=self.device)

    def _members(self, q: np.ndarray, keys: set[str], routed_pages, found: list):
        """Routed + expanded members from the expansion's ``found`` (entry, score) list: (pages, members, routed
        count, expanded count). Expansion opens at most the reserved pages (charged to the page budget)."""
        c = self.cfg
        pages, routed, reserve = routed_pages
        expanded: list = []
        if c.expansion:
            read_pages = {p for p, _ in pages}
            extra: dict[int, float] = {}  # pages opened by expansion: charged to the page budget (trace.pages)
            for e, s in found:
                if len(expanded) == c.k_exp:
                    break
                if e.page in read_pages or e.page in extra or len(extra) < reserve:
                    if e.page not in read_pages:
                        extra.setdefault(e.page, s)
                    expanded.append((e, s))
            pages = list(pages) + [(p, s) for p, s in extra.items()]
        score = lambda e: float(e.z @ q) + c.lexical * lexical(keys, e, self.index)  # noqa: E731  s(q, e)
        members = [(e, s, "routed") for e, s in routed] + [(e, score(e), "expanded") for e, _ in expanded]
        return pages, members, len(routed), len(expanded)

    def _candidates(self, pages, members, n_routed: int, n_expanded: int, ids: list[str], pool: list):
        """The pool's nodes as composition candidates, and the route trace so far."""
        seen = self.perception([n for n, _, _, _ in pool])
        cands = [Candidate(n.node_id, (n,), rel, perceptions={n.node_id: seen.get(n.node_id, [])}, origin=origin,
                           page=e.page) for n, rel, e, origin in pool]
        trace = RouteTrace(self.name, pages=tuple((f"p{p}", round(s, 4)) for p, s in pages),
                           entries=tuple((e.entry_id, round(s, 4)) for e, s, _ in members),
                           expanded_nodes=tuple(ids), scored=len(ids),
                           notes=(f"{len(ids)} nodes from {n_routed} routed + {n_expanded} expanded entries on "
                                  f"{len(pages)} pages",))
        return cands, trace

    def _node_terms(self, node: RawNode) -> list[str]:
        """``read.features.terms`` of a node's text, memoised per (node, redacted) like its vector."""
        key = (node.node_id, node.redacted)
        got = self._terms.get(key)
        if got is None:
            if len(self._terms) > 200_000:
                self._terms.clear()
            got = self._terms[key] = terms(node.text)
        return got

    def _time_span(self) -> tuple:
        """(first, latest) session time the index points at: recency runs between them, and a question is read as
        asked just after the latest session ("last May" is relative to it)."""
        if self._span is None:
            entries = self.index.ordered()
            if entries:
                times = [e.first_time for e in entries] + [v.time for e in entries for v in e.versions]
                self._span = (min(times), max(e.time for e in entries))
            else:
                from datetime import datetime

                self._span = (datetime(1970, 1, 1), datetime(1970, 1, 1))
        return self._span

    def _page_reach(self, pages) -> frozenset[str]:
        """Node ids reachable through the read pages (Src of every entry on them): the bounded reader's round
        partners must stay inside them (the harness checks every item against the pages the trace names)."""
        read = {p for p, _ in pages}
        out = set()
        for e in self.index.ordered():
            if e.page in read:
                for sid, turns in e.sources().items():
                    out.update(node_id_for(self.namespace, sid, t) for t in turns)
        return frozenset(out)

    def update_chains(self, context: Context) -> list:
        """RAMU's Update versions of each entry (not spills, which mix subjects) over the context's items."""
        from ..language.timeline import index_chain

        chains = []
        for e in self.index.ordered():
            if e.kind != "entry" or not e.versions:
                continue
            steps = [(v.time, v.pointers, v.states) for v in e.versions] + [(e.time, e.pointers, e.states)]
            chain = index_chain((e.top_entities(1) or [e.text[:40]])[0], e.entry_id, steps, context.items)
            if chain is not None:
                chains.append(chain)
        return chains

    # -- inspection --------------------------------------------------------------------------
    def describe(self) -> dict:
        count = self.models.token_counter.count
        use = self.index.usage(count)
        b = self.write_budget
        entries = []
        for e in self.index.ordered():
            entries.append({"id": e.entry_id, "page": f"p{e.page}", "kind": e.kind, "support": e.support,
                            "time": e.time.isoformat(), "pointers": sum(len(t) for t in e.sources().values()),
                            "labels": dict(e.labels), "text": e.render(),
                            "chain": [{"time": v.time.isoformat(), "states": v.states, "text": v.text}
                                      for v in e.versions] + [{"time": e.time.isoformat(), "states": e.states,
                                                               "text": e.text}] if e.versions else [],
                            "links": e.links})
        return {"method": self.name, "relation_head": self.head.name, "reader": self.cfg.reader,
                "selector": self.selector.name if self.selector is not None else None, "pointers": len(self.pointers()),
                "usage": {"entries": f"{use[0]}/{b.entries}", "pages": f"{use[1]}/{b.pages}",
                          "index_tokens": f"{use[2]}/{b.index_tokens}", "index_bytes": f"{use[3]}/{b.index_bytes}"},
                "pages": [{"id": f"p{i}", "summary": p.summary,
                           "entries": [e.entry_id for e in self.index.page_entries(i)]}
                          for i, p in enumerate(self.index.pages)],
                "entries": entries}


@register
class C3MPaper(C3M):
    """``c3m-paper``: the C3M paper's configuration (``PAPER``), so the paper can be run as written."""

    name = "c3m-paper"
    summary = "C3M as written: one entry per session, vector-only RAMU candidates, the C3M-only reader"
    reads = "Raw Nodes + images"
    paper = "C3M (this repo's paper reading)"
    preset = PAPER


def _origin(c) -> str:
    """Which channel found a candidate first: the index (routed / expanded), the Cold Store, or a round."""
    if c.via_round:
        return "round"
    if c.expanded == c.expanded:  # not NaN: the index channel found it
        return "expanded" if c.expanded else "routed"
    return "cold"


def _describe_many(methods, questions) -> list[set[str]]:
    """Every question's lexical keys, one anchor-extraction call per distinct describer."""
    out: list[set[str] | None] = [None] * len(questions)
    groups: dict[int, list[int]] = {}
    for i, m in enumerate(methods):
        groups.setdefault(id(m.anchors), []).append(i)
    for idx in groups.values():
        described = methods[idx[0]].anchors.describe([questions[i] for i in idx])
        for i, d in zip(idx, described):
            out[i] = C3M._keys(d)
    return out  # type: ignore[return-value]
