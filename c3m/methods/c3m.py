"""``c3m``: the flagship method — a bounded active index maintained by RAMU, read by BMER (C3M §2).

Write (per committed session, query-blind): cut the session into units (``write.units``), embed them
(the mean of their Raw Nodes' shared embeddings), extract entities and attribute values, then for each
unit run RAMU (``write.ramu``: candidates → relation head → Merge / Update / Add / Keep), and finally the
capacity policy (``write.capacity``) so the index fits the write budget after every commit. Every action is
returned for the maintenance log.
Read — the **unified reader** (``reader="unified"``, default): BMER routes pages → entries (``read.bmer``);
anchor-graph expansion adds the one-hop neighbour entries the routing missed (``read.expand``); the routed and
expanded entries' Raw Nodes become memories whose evidence forms (raw text, caption, raw image, grounded crop)
are chosen by the selector and solved under the joint reader budget (``read.compose``, ``read.select``); the
stages run in ``c3m.read.reader``, this class supplies the index (``reader.IndexSource``).
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
from ..read import reader
from ..read.bmer import BmerConfig, routing_keys
from ..read.channels import make_channels
from ..read.compose import FORM_NAMES, SELECTORS, Candidate, ComposeConfig, is_selector_name, make_selector
from ..read.expand import anchor_graph
from ..read.features import extra_columns, terms
from ..read.pipeline import Gathered, PipelineConfig
from ..read.rerank import RERANKERS, make_reranker
from ..read.scorers import NodeKeys
from ..types import Context, RawNode, ReaderBudget, node_id_for
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
class C3MConfig(PipelineConfig):
    """Every option of ``c3m`` (write, BMER routing, expansion, composition); a preset or an ablation is a value. The
    reranked reader's options (``cold``, ``cold_k``, ``window_k``, ``rounds``, ``pool``, ``length_price``,
    ``channels``, ``features``) are ``c3m.read.pipeline.PipelineConfig``'s, inherited, not copied."""

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
    capacity_room: float = 0.0     # 0: a fallback frees the index down to its floor (full headroom); > 0: room for
                                   # this many commits of the current intake (write.capacity)
    spill_homes: bool = True       # fold an entry into the spill that holds its subject (write.capacity.home_spill)
    capacity_dedupe: bool = True   # at capacity, merge word-for-word repeats first (write.capacity.duplicate_pair)
    # read: BMER (C3M §2.2)
    gamma: float = 0.1
    entries_k: int = 12
    lexical: float = 0.3
    entry_boost: float = 0.3
    lam: float = 0.05
    spill_reach: float = 0.5       # ρ: a spill's share of the question keys' spilled mentions in s(q, e) (read.bmer)
    #: μ: a page's share of the index's support in page routing (read.bmer), for a reader that sees only the index
    #: (cold=false): a spill holding most of a long history is then read unless the question clearly points
    #: elsewhere. The full reader reaches the Cold Store through its channels and routes by relevance alone.
    bounded_page_mass: float = 0.2
    pool_share: float = 0.1        # the index pool keeps max(pool, ⌈share · expanded⌉) nodes (read.bmer.pool_size)
    pool_max: int = 192            # ... and at most this many
    # read: the channels and the reranker (c3m.read.pipeline; cold, cold_k, window_k, rounds, pool, length_price,
    # channels and features are PipelineConfig's)
    reranker: str = "auto"         # auto | lgbm | lgbm:PATH | rrf | bmer (the reader before reranking: BMER order)
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
        make_channels(self.channels)  # unknown names refused here, naming the option
        extra_columns((), self.features)
        for k in ("candidates", "entries_k", "pool", "k_exp", "k_edge", "unit_tokens", "summary_tokens", "threshold",
                  "lam_tokens", "gamma", "lam", "spill_reach", "capacity_room", "cold_k", "window_k", "length_price",
                  "rerank_lam", "pool_share", "pool_max", "bounded_page_mass"):
            if getattr(self, k) < 0:
                raise InvalidInput(f"method_options.{k}", f"must be >= 0, got {getattr(self, k)}", fix=f"{k} = 0 or more")

    def bmer(self) -> BmerConfig:
        cfg = BmerConfig(**{f.name: getattr(self, f.name) for f in fields(BmerConfig) if f.name != "page_mass"})
        return replace(cfg, page_mass=0.0 if self.reranked and self.cold else self.bounded_page_mass)

    @property
    def reranked(self) -> bool:
        """The unified reader with a reranker (the pipeline), not the reader before it (``reranker="bmer"``)."""
        return self.reader == "unified" and self.reranker != "bmer"

    def pipeline(self) -> PipelineConfig:
        return PipelineConfig(**{f.name: getattr(self, f.name) for f in fields(PipelineConfig)})

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
                  reranker="bmer", spill_reach=0.0, spill_homes=False, capacity_dedupe=False, capacity_room=3.0,
                  pool_share=0.0, bounded_page_mass=0.0)


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
    read_options = frozenset({"gamma", "entries_k", "lexical", "entry_boost", "lam", "spill_reach",
                              "bounded_page_mass", "pool_share", "pool_max", "reader",
                              "expansion",
                              "expansion_pages",
                              "k_exp", "k_edge", "visual_anchors", "idf", "forms", "selector", "threshold",
                              "lam_tokens", "image_token_model", "reranker", "rerank_lam"}
                             | {f.name for f in fields(PipelineConfig)})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = C3MConfig.from_options(self.options, self.name, self.preset)
        self.read_cfg = self.cfg.bmer()
        self.pipeline_cfg = self.cfg.pipeline()
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
    def _read_caches_index(self) -> None:
        """Forget what the read path derived from the index (routing keys, the anchor graph, the time span)."""
        self._route_keys, self._graph, self._span = None, False, None

    def _read_caches(self) -> None:
        """Forget what the read path derived from the index or the store (after a reset, a load or a forget)."""
        self._read_caches_index()
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
        self._read_caches_index()  # the index changes below
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
        room = math.ceil(c.capacity_room * intake) if c.capacity_room > 0 else self.write_budget.entries
        actions += enforce(self.index, self.write_budget, self.head, self.models.token_counter.count, c.delta,
                           room=room, planned=c.capacity == "planned", homes=c.spill_homes,
                           dedupe=c.capacity_dedupe)
        return actions

    # -- read: the index channel's source for c3m.read.reader (IndexSource) -----------------------------
    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        return C3M._read_batch([(self, question, budget)])[0]

    @staticmethod
    def _read_batch(requests) -> list[Context]:
        """The read path (``c3m.read.reader.read_batch``) for a batch of (method, question, budget) over any tenants;
        ``retrieve`` is the batch of one."""
        return reader.read_batch([reader.ReadRequest(m, q, b) for m, q, b in requests])

    def rerank_inputs(self, questions: Sequence[str], budget: ReaderBudget) -> list[Gathered | None]:
        """The reranker's input for each question on this index (``reader.rerank_inputs``): what
        ``training/train_reranker.py`` learns from is exactly what the read path ranks."""
        if not self.reranked:
            raise InvalidInput("method_options.reranker", "the bmer reader has no reranker inputs",
                               fix="use reranker=auto, lgbm or rrf")
        return reader.rerank_inputs(self, questions, budget)

    def retrieval_pool(self, question: str, budget: ReaderBudget) -> tuple[np.ndarray, list[Candidate]]:
        """The unified reader's memories before composition (``reader.retrieval_pool``): the selector's training data
        (``training/train_selector_ppo.py``) is exactly what composition would be handed."""
        return reader.retrieval_pool(self, question, budget)

    def route_keys(self) -> np.ndarray:
        """``bmer.routing_keys`` of the current index, kept until the index changes (observe / load / reset)."""
        if self._route_keys is None:
            self._route_keys = routing_keys(self.index)
        return self._route_keys

    def index_graph(self):
        """``expand.anchor_graph`` of the current index, kept like the routing keys."""
        if self._graph is False:
            c = self.cfg
            self._graph = anchor_graph(self.index, k_edge=c.k_edge, use_idf=c.idf, visual=c.visual_anchors,
                                       device=self.device)
        return self._graph

    def node_terms(self, node: RawNode) -> list[str]:
        """``read.features.terms`` of a node's text, memoised per (node, redacted) like its vector."""
        key = (node.node_id, node.redacted)
        got = self._terms.get(key)
        if got is None:
            if len(self._terms) > 200_000:
                self._terms.clear()
            got = self._terms[key] = terms(node.text)
        return got

    def time_span(self) -> tuple:
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

    def page_reach(self, pages) -> frozenset[str]:
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
