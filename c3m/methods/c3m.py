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
from ..read.expand import anchor_graph, expand_entries
from ..types import BudgetUse, Context, RawNode, ReaderBudget, RouteTrace
from ..write.capacity import enforce
from ..index.active import MAX_VISUAL, ActiveIndex, normalize, top_counts
from ..write.ramu import apply, decide, propose
from ..write.units import Unit, describer, segment
from .base import MemoryMethod, register
from .options import parse_options

READERS = ("unified", "c3m")
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
    # read: BMER (C3M §2.2)
    gamma: float = 0.1
    entries_k: int = 12
    lexical: float = 0.3
    entry_boost: float = 0.3
    lam: float = 0.05
    pool: int = 48
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
                  "lam_tokens", "gamma", "lam"):
            if getattr(self, k) < 0:
                raise InvalidInput(f"method_options.{k}", f"must be >= 0, got {getattr(self, k)}", fix=f"{k} = 0 or more")

    def bmer(self) -> BmerConfig:
        return BmerConfig(**{f.name: getattr(self, f.name) for f in fields(BmerConfig)})

    def compose(self) -> ComposeConfig:
        return ComposeConfig(forms=self.forms, threshold=self.threshold, lam_tokens=self.lam_tokens, lam_cov=self.lam,
                             image_token_model=self.image_token_model)


#: the C3M paper as written (C3M §2–3): one incoming entry per session, vector-only RAMU candidates, BMER over
#: raw text and the original images, no anchor graph
PAPER = C3MConfig(unit_tokens=10**9, entity_candidates=False, lexical=0.0, reader="c3m", expansion=False)


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
                              "lam_tokens", "image_token_model"})

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
        self.reset()

    def write_options(self) -> dict[str, Any]:
        return {f.name: getattr(self.cfg, f.name) for f in fields(C3MConfig)
                if f.name not in self.read_options and getattr(self.cfg, f.name) != getattr(self.preset, f.name)}

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        self._route_keys, self._graph = None, False
        self.index = ActiveIndex(self.models.text_embedder.dim,
                                 {"embedder": self.models.text_embedder.name, "head": self.head.name})

    def state(self) -> dict:
        return self.index.state()  # embedder and head names ride in the index's meta, so they are counted

    def load_state(self, state: dict) -> None:
        self.index = ActiveIndex.from_state(state)
        self._route_keys, self._graph = None, False

    def pointers(self) -> set[str]:
        return self.index.pointer_ids(self.namespace)

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)
        self.anchors.describe([n.text for n in nodes])

    # -- write -------------------------------------------------------------------------------
    def _units(self, nodes: Sequence[RawNode]) -> list[Unit]:
        count = self.models.token_counter.count
        groups = segment(nodes, self.cfg.unit_tokens, count)
        vecs = self.node_vectors(nodes)
        row = {n.node_id: i for i, n in enumerate(nodes)}
        described = self.anchors.describe([n.text for n in nodes])
        seen = self.perception(nodes) if any(n.images for n in nodes) else {}
        units = []
        for g in groups:
            ents, states, change, again, another = set(), set(), False, False, False
            speakers = [n for n in g if n.role == "user"] or g  # see write.units: descriptors from user turns
            for n in speakers:
                e, s, c, a, o = described[row[n.node_id]]
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
        self._route_keys, self._graph = None, False  # the index changes below
        actions = []
        c = self.cfg
        for unit in self._units(nodes):
            cands = propose(self.index, unit, c.candidates, c.min_sim, entities=c.entity_candidates)
            decision = decide(unit, cands, self.head, self.index, c.delta)
            log = apply(self.index, unit, decision, self._summary(unit, nodes), self.write_budget, c.page_open_sim)
            actions.append(log)
            if unit.visual and log.get("entry") in self.index.entries:
                e = self.index.entries[log["entry"]]
                e.visual = top_counts(e.visual + Counter(unit.visual), MAX_VISUAL)
            self.index.observe_df(unit.entities | unit.states)  # IDF over the past: counted after the decision
        actions += enforce(self.index, self.write_budget, self.head, self.models.token_counter.count, c.delta)
        return actions

    # -- read --------------------------------------------------------------------------------
    def _query(self, question: str) -> tuple[np.ndarray, set[str]]:
        """The question's vector and its lexical keys (entities, states and the entities' words)."""
        q = query_vectors([self.models.text_embedder], [question])[0]
        return q, self._keys(self.anchors.describe([question])[0])

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
            self._graph = anchor_graph(self.index, k_edge=c.k_edge, use_idf=c.idf, visual=c.visual_anchors)
        return self._graph

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        return C3M._read_batch([(self, question, budget)])[0]

    @staticmethod
    def _read_batch(requests) -> list[Context]:
        """The read path for a batch of (method, question, budget) over any tenants, stage by stage: one embedding
        call, one anchor-extraction call, one ragged launch for routing scores, one for every question's node pool,
        one budget solve for every composition. Routing, expansion and composition run per question in between
        (a few dozen entries each). ``retrieve`` is the batch of one."""
        ms = [m for m, _, _ in requests]
        questions = [q for _, q, _ in requests]
        Q = query_vectors([m.models.text_embedder for m in ms], questions)
        keys = _describe_many(ms, questions)
        device = ms[0].device if ms else "cpu"
        cos = segments_scores(Q, [m._routing_keys() for m in ms], device=device)
        out: list[Context | None] = [None] * len(requests)
        staged = []
        for i, (m, question, budget) in enumerate(requests):
            if m.cfg.reader == "c3m":
                out[i] = select(m.index, m.namespace, question, Q[i], keys[i], budget, m.read_cfg,
                                vectors=m.node_vectors, get_nodes=m.store.get_nodes,
                                count=m.models.token_counter.count, method=m.name, cos=cos[i])
                continue
            found = m._route_expand(question, Q[i], keys[i], budget, cos[i])
            if isinstance(found, Context):
                out[i] = found
            else:
                staged.append((i, found))
        pools = expand_pools([requests[i][0]._pool_job(Q[i], found) for i, found in staged], device=device)
        plans = []
        for (i, (pages, members, routed, expanded_n)), (ids, pool) in zip(staged, pools):
            m, question, budget = requests[i]
            cands, trace = m._candidates(pages, members, routed, expanded_n, ids, pool)
            plan = compose_plan(question, Q[i], cands, budget, m.compose_cfg, selector=m.selector,
                                vectors=m.node_vectors, count=m.models.token_counter.count, trace=trace)
            if isinstance(plan, Context):
                out[i] = plan
            else:
                plans.append((i, plan, solve_instance(plan, m.compose_cfg)))
        solved = iter(solve_many([inst for _, _, inst in plans if inst is not None]))
        for i, plan, inst in plans:
            out[i] = compose_finish(plan, next(solved) if inst is not None else np.zeros(0, bool))
        return out  # type: ignore[return-value]

    def retrieval_pool(self, question: str, budget: ReaderBudget) -> tuple[np.ndarray, list[Candidate]]:
        """The unified reader's memories before composition: (query vector, candidates). The selector's training
        data (``training/train_selector_ppo.py``) is exactly what ``compose`` would be handed."""
        q, keys = self._query(question)
        cos, = segments_scores(q[None], [self._routing_keys()], device=self.device)
        found = self._route_expand(question, q, keys, budget, cos)
        if isinstance(found, Context):
            return q, []
        (ids, pool), = expand_pools([self._pool_job(q, found)], device=self.device)
        return q, self._candidates(*found, ids, pool)[0]

    def _pool_job(self, q: np.ndarray, found) -> tuple:
        """``bmer.expand_pools``'s job for routed + expanded members (``found`` from ``_route_expand``)."""
        return (found[1], self.namespace, q, self.read_cfg, self.store.get_nodes, self.node_vectors)

    def _route_expand(self, question: str, q: np.ndarray, keys: set[str], budget: ReaderBudget, cos: np.ndarray):
        """Route and expand: (pages, members, routed count, expanded count), or an empty Context when nothing can
        be routed."""
        c = self.cfg
        reserve = min(c.expansion_pages, max(0, budget.pages - 1)) if c.expansion else 0
        pages, routed = route(self.index, q, keys, replace(budget, pages=budget.pages - reserve), self.read_cfg, cos)
        if not routed:
            note = "empty memory" if not self.index.entries else "no page routed (page budget 0)"
            return Context(question, (), BudgetUse(), budget, RouteTrace(self.name, notes=(note,)))
        expanded: list = []
        if c.expansion:
            read_pages = {p for p, _ in pages}
            found = expand_entries(self.index, [e for e, _ in routed], q, self.text_vectors,
                                   k_exp=c.k_exp if not reserve else 4 * c.k_exp, k_edge=c.k_edge, use_idf=c.idf,
                                   visual=c.visual_anchors, allowed=None if reserve else (lambda e: e.page in read_pages),
                                   graph=self._anchor_graph())
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

    def update_chains(self, context: Context) -> list:
        """RAMU's Update versions of each entry (not spills, which mix subjects) over the context's items."""
        from ..read.timeline import index_chain

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
