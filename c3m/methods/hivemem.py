"""``hivemem``: HiVe-Mem (arXiv 2611.12872) on c3m's interfaces — episodes, an anchor graph, and vertical
composition of evidence forms.

Write (per committed session, query-blind): cut the session into episodes of ~``episode_tokens`` text
tokens at turn ends (``c3m.write.episodes``); per episode keep a summary (``LeadSummarizer`` over the user
turns' text, ``summary_tokens``; ``summarizer="perception"`` uses the configured perception backend's
``summarize``), its text anchors (spaCy entity and noun-chunk keys of every turn, plus the head noun of
multi-word chunks) and its visual anchors (each perception record's anchor labels, and "value label" when an
attribute value is known), all normalised with ``anchor_key`` into one vocabulary, stopwords and pronouns
dropped; then add the episodes to the ``AnchorGraph`` (``c3m.index.anchor_graph``: IDF-weighted shared-anchor
edges, <= ``k_edge`` per episode, full rebuild when the episode count has grown by 25%).

Read: q = the question's embedding; seeds = the ``k_ret`` episodes with the highest cos(q, summary vector);
if ``expansion``, the seeds' anchors are embedded, sim(q, a) = max(0, cos), and the graph gives ``k_exp``
one-hop neighbours scored sum idf(a)·sim(q, a) over anchors shared with the seeds. The k_ret + k_exp memories
go to the shared vertical composition (``c3m.read.compose``), which picks evidence forms (raw text, summary,
caption, raw image, grounded crop) under the reader budget. Each candidate's ``score`` is its cos(q, summary)
(the cosine-like relevance compose expects, for seeds and expansions alike); the trace's ``entries`` hold
(episode id, retrieval score): cos for a seed, the anchor score for an expansion.

Options (``method_options``; the paper's defaults): ``episode_tokens`` 256, ``k_edge`` 4, ``k_ret`` 5,
``k_exp`` 2, ``summary_tokens`` 48, ``expansion`` True, ``visual_anchors`` True, ``idf`` True; composition
ablations ``summary_only``, ``no_raw_text``, ``no_raw_image``, ``no_caption``, ``no_crop``, ``no_summary``
(False), ``selector`` "rule" (or "mlp:PATH"); ``anchors`` "auto" (spaCy, else the heuristic extractor),
``summarizer`` "lead", ``rebuild_growth`` 0.25.

The index keeps every episode (one per ~256 tokens of history): it is unbounded (``bounded = False``) and
reaches every Raw Node (complete provenance).
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidInput
from ..index.active import decode_turns, encode_turns
from ..index.anchor_graph import REBUILD_GROWTH, AnchorGraph
from ..models.anchors import _PRONOUNS, _singular, anchor_key
from ..models.answer import STOPWORDS
from ..models.summary import LeadSummarizer
from ..types import BudgetUse, Context, ImagePerception, RawNode, ReaderBudget, RouteTrace, node_id_for
from ..write.episodes import episode_id, segment_episodes
from .base import MemoryMethod, register
from .options import parse_options

log = logging.getLogger(__name__)
STATE_VERSION = 1
#: options that shape the index (a snapshot written under others is rebuilt, not reused)
WRITE_OPTIONS = ("episode_tokens", "k_edge", "summary_tokens", "visual_anchors", "idf", "anchors", "summarizer",
                 "rebuild_growth")
SUMMARIZERS = ("lead", "perception")
#: composition ablation flag -> the evidence form it removes
ABLATIONS = {"no_raw_text": "raw_text", "no_summary": "summary", "no_caption": "caption",
             "no_raw_image": "raw_image", "no_crop": "grounded_crop"}


@dataclass(frozen=True)
class HiveMemConfig:
    episode_tokens: int = field(default=256, metadata={"minimum": 1})
    k_edge: int = field(default=4, metadata={"minimum": 1})
    k_ret: int = field(default=5, metadata={"minimum": 1})
    k_exp: int = field(default=2, metadata={"minimum": 0})
    summary_tokens: int = field(default=48, metadata={"minimum": 1})
    expansion: bool = True
    visual_anchors: bool = True
    idf: bool = True
    summary_only: bool = False
    no_raw_text: bool = False
    no_raw_image: bool = False
    no_caption: bool = False
    no_crop: bool = False
    no_summary: bool = False
    selector: str = "rule"
    #: what seeds are matched on: "summary" (published: the episode's summary) or "episode" (the mean of the
    #: episode's shared node embeddings — a stand-in for a VLM summary when only the extractive one exists)
    seed_on: str = "summary"
    anchors: str = "auto"
    summarizer: str = "lead"
    rebuild_growth: float = field(default=REBUILD_GROWTH, metadata={"minimum": 1e-9})

    @classmethod
    def from_options(cls, options: dict[str, Any], method: str = "hivemem") -> "HiveMemConfig":
        """Validated config; unknown keys or bad values raise ``InvalidInput("method_options.<key>")``."""
        cfg = parse_options(cls, options, method)
        if cfg.summarizer not in SUMMARIZERS:
            raise InvalidInput("method_options.summarizer", f"unknown summarizer {cfg.summarizer!r}",
                               fix=f"choose one of {SUMMARIZERS}")
        from ..read.compose import SELECTORS, is_selector_name

        if not is_selector_name(cfg.selector):
            raise InvalidInput("method_options.selector", f"unknown selector {cfg.selector!r}",
                               fix=f"use one of {SELECTORS}")
        if cfg.seed_on not in ("summary", "episode"):
            raise InvalidInput("method_options.seed_on", f"unknown seed vectors {cfg.seed_on!r}",
                               fix="use 'summary' (published) or 'episode'")
        if cfg.summary_only and cfg.no_summary:
            raise InvalidInput("method_options.summary_only", "summary_only and no_summary exclude each other",
                               fix="set at most one of them")
        if cfg.summary_only and any(getattr(cfg, k) for k in ABLATIONS if k != "no_summary"):
            raise InvalidInput("method_options.summary_only", "summary_only already drops every other form",
                               fix="do not combine summary_only with no_* flags")
        if not cfg.forms():
            raise InvalidInput("method_options.no_raw_text", "every evidence form is switched off",
                               fix="keep at least one form")
        return cfg

    def forms(self) -> tuple[str, ...]:
        """The evidence forms composition may use (``ComposeConfig.forms``)."""
        if self.summary_only:
            return ("summary",)
        return tuple(f for flag, f in ABLATIONS.items() if not getattr(self, flag))

    def changed(self) -> dict[str, Any]:
        """The options that differ from the paper's defaults."""
        default = HiveMemConfig()
        return {k: v for k, v in asdict(self).items() if getattr(default, k) != v}


# -- anchors ---------------------------------------------------------------------------------------------
def _keep(key: str) -> bool:
    """An anchor worth linking episodes by: not empty, not a pronoun, not only stopwords or one character."""
    words = key.split()
    return bool(words) and key not in _PRONOUNS and len(key) > 1 and not all(w in STOPWORDS or w in _PRONOUNS
                                                                             for w in words)


def text_anchor_keys(anchors) -> list[str]:
    """Keys of one text's anchors, plus the head noun (last word) of every multi-word noun chunk."""
    out = []
    for a in anchors:
        out.append(a.key)
        words = a.key.split()
        if a.kind == "noun_chunk" and len(words) > 1:
            out.append(words[-1])
    return [k for k in dict.fromkeys(out) if _keep(k)]


def visual_anchor_keys(records: Sequence[ImagePerception]) -> list[str]:
    """Keys of the records' visual anchors: the label, and "value label" when an attribute value exists
    (plural labels folded, so "dogs" meets the text lemma "dog")."""
    out = []
    for r in records:
        for va in r.anchors:
            label = [_singular(w) if i == len(va.label.split()) - 1 else w
                     for i, w in enumerate(va.label.lower().split())]
            out.append(anchor_key(label))
            if va.value:
                out.append(anchor_key(str(va.value).lower().split() + label))
    return [k for k in dict.fromkeys(out) if _keep(k)]


class _TextAnchors:
    """Per-process memo text -> anchor keys (spaCy is the slow part; small talk repeats)."""

    def __init__(self, name: str, max_items: int = 100_000):
        from ..models.anchors import make_anchor_extractor

        self.extractor = make_anchor_extractor(name)
        self.max_items = max_items
        self.memo: dict[str, list[str]] = {}

    def keys(self, texts: Sequence[str]) -> list[list[str]]:
        todo = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if todo:
            if len(self.memo) + len(todo) > self.max_items:
                self.memo.clear()
            for t, anchors in zip(todo, self.extractor.extract(todo)):
                self.memo[t] = text_anchor_keys(anchors)
        return [self.memo[t] for t in texts]


@lru_cache(maxsize=2)
def _text_anchors(name: str) -> _TextAnchors:
    return _TextAnchors(name)


@dataclass(frozen=True)
class _Ep:
    """One stored episode: its session, turns and summary (node ids are derived from them)."""

    session_id: str
    turns: tuple[int, ...]
    tokens: int
    summary: str


@register
class HiveMem(MemoryMethod):
    name = "hivemem"
    summary = "episodes + IDF anchor graph, one-hop horizontal expansion, vertical evidence composition"
    reads = "Raw Nodes, summaries, captions, images, crops"
    paper = "HiVe-Mem (arXiv 2611.12872)"
    bounded = False
    read_options = frozenset({"k_ret", "k_exp", "expansion", "summary_only", "no_raw_text", "no_raw_image",
                              "no_caption", "no_crop", "no_summary", "selector", "seed_on"})
    complete_provenance = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = HiveMemConfig.from_options(self.options, self.name)
        if self.cfg.summarizer == "perception" and self.models.perception is None:
            raise InvalidInput("method_options.summarizer", "summarizer 'perception' needs a perception backend",
                               fix="configure a perception backend, or use summarizer='lead'")
        from ..models.anchors import ANCHOR_EXTRACTORS

        if self.cfg.anchors not in ANCHOR_EXTRACTORS:
            raise InvalidInput("method_options.anchors", f"unknown anchor extractor {self.cfg.anchors!r}",
                               fix=f"choose one of {list(ANCHOR_EXTRACTORS)}")
        from ..read.compose import ComposeConfig, make_selector

        self.compose_cfg = ComposeConfig(forms=self.cfg.forms())
        try:
            self.selector = make_selector(self.cfg.selector)
        except InvalidInput as exc:
            raise InvalidInput("method_options.selector", exc.message, fix=exc.fix) from exc
        self.summarizer = LeadSummarizer()
        self.text_anchors = _text_anchors(self.cfg.anchors)
        self.reset()

    _device = "cpu"

    @property
    def device(self) -> str:
        """Where the anchor graph's kernels and the solver run (``MemoryMethod.device``); the graph follows it."""
        return self._device

    @device.setter
    def device(self, value: str) -> None:
        self._device = value
        if hasattr(self, "graph"):
            self.graph.device = value

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.episodes: list[_Ep] = []
        self.graph = AnchorGraph(self.cfg.k_edge, use_idf=self.cfg.idf, visual=self.cfg.visual_anchors,
                                 rebuild_growth=self.cfg.rebuild_growth)
        self.graph.device = self.device
        self._sum_vecs = np.zeros((0, self.models.text_embedder.dim), np.float32)
        self.upto_seq = 0

    def _write_options(self) -> dict[str, Any]:
        """What shaped the index: the non-default write options and the anchor extractor actually used."""
        return {"extractor": self.text_anchors.extractor.name,
                **{k: v for k, v in self.cfg.changed().items() if k in WRITE_OPTIONS}}

    def state(self) -> dict:
        return {"v": STATE_VERSION, "embedder": self.models.text_embedder.name, "write": self._write_options(),
                "upto_seq": self.upto_seq,
                "episodes": [[e.session_id, encode_turns(e.turns), e.tokens, e.summary] for e in self.episodes],
                "graph": self.graph.state()}

    def load_state(self, state: dict) -> None:
        """Load a snapshot; one written with other write-side options (episode length, K_edge, anchors, ...)
        is not reused but rebuilt from the Cold Store's Raw Nodes up to the same session."""
        if state.get("v") != STATE_VERSION:
            raise ValueError(f"unknown hivemem state version {state.get('v')!r}")
        self.reset()
        if state.get("write", {}) != self._write_options():
            log.warning("hivemem snapshot was built with write options %s, not %s: rebuilding from the store",
                        state.get("write"), self._write_options())
            for rec in self.store.sessions(self.namespace):
                if rec.seq <= int(state["upto_seq"]):
                    self.observe(rec.session_id, self.store.nodes_for_session(self.namespace, rec.session_id))
            return
        self.episodes = [_Ep(s, tuple(sorted(decode_turns(t))), int(n), summ) for s, t, n, summ in state["episodes"]]
        self.graph = AnchorGraph.from_state(state["graph"])
        self.graph.device = self.device
        self.upto_seq = int(state["upto_seq"])

    def pointers(self) -> set[str]:
        return {node_id_for(self.namespace, e.session_id, t) for e in self.episodes for t in e.turns}

    def episode_id(self, i: int) -> str:
        e = self.episodes[i]
        return episode_id(self.namespace, e.session_id, e.turns[0])

    def stats(self) -> dict[str, Any]:
        return self.graph.stats()

    def describe(self) -> dict:
        g = self.graph.stats()
        return {"method": self.name, "pointers": len(self.pointers()), "episodes": len(self.episodes),
                "anchors": g["anchors"], "edges": g["edges"], "rebuilds": g["rebuilds"],
                "seconds_per_session": g["seconds_per_session"], "options": self.cfg.changed(),
                "index": "one episode per ~%d tokens (unbounded)" % self.cfg.episode_tokens}

    # -- write -------------------------------------------------------------------------------
    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)
        self.text_anchors.keys([n.text for n in nodes if n.text.strip()])

    def _summary(self, group: Sequence[RawNode], seen: dict[str, list[ImagePerception]]) -> str:
        text = "\n".join(n.text.strip() for n in group if n.role == "user" and n.text.strip())
        if not text:  # no user words: the other turns, else the images' captions
            text = "\n".join(n.text.strip() for n in group if n.text.strip())
        if not text:
            text = " ".join(f"[image: {r.caption}]" for n in group for r in seen.get(n.node_id, ()) if r.caption)
        if not text:
            return ""
        if self.cfg.summarizer == "perception":
            return self.models.perception.summarize(text, self.cfg.summary_tokens).strip()
        return self.summarizer.summarize(text, self.cfg.summary_tokens)

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        rec = self.store.session_record(self.namespace, session_id)
        if rec is not None:
            self.upto_seq = rec.seq
        count = self.models.token_counter.count
        groups = segment_episodes(list(nodes), count, self.cfg.episode_tokens)
        if not groups:
            return []
        seen = self.perception(nodes) if any(n.images for n in nodes) else {}
        texts = self.text_anchors.keys([n.text for n in nodes if n.text.strip()])
        by_text = dict(zip([n.text for n in nodes if n.text.strip()], texts))
        actions, text_lists, visual_lists = [], [], []
        for g in groups:
            t_keys = list(dict.fromkeys(k for n in g if n.text.strip() for k in by_text[n.text]))
            v_keys = visual_anchor_keys([r for n in g for r in seen.get(n.node_id, ())])
            ep = _Ep(g[0].session_id, tuple(n.turn_index for n in g), sum(count(n.text) for n in g if n.text),
                     self._summary(g, seen))
            self.episodes.append(ep)
            text_lists.append(t_keys)
            visual_lists.append(v_keys)
            actions.append({"action": "episode", "episode": self.episode_id(len(self.episodes) - 1),
                            "session": ep.session_id, "turns": encode_turns(ep.turns), "tokens": ep.tokens,
                            "text_anchors": len(t_keys), "visual_anchors": len(v_keys)})
        rebuilds = self.graph.rebuilds
        self.graph.add(text_lists, visual_lists)
        actions.append({"action": "graph", "episodes": self.graph.num_episodes, "anchors": self.graph.num_anchors,
                        "edges": self.graph.num_edges(), "rebuild": self.graph.rebuilds > rebuilds,
                        "seconds": round(self.graph.session_seconds[-1], 6)})
        return actions

    # -- read --------------------------------------------------------------------------------
    def summary_vectors(self) -> np.ndarray:
        """[N, dim] unit summary vectors (the shared text embeddings, cached in the store), built lazily; with
        ``seed_on="episode"`` the mean of each episode's node embeddings (its nodes read once, then memoised)."""
        have = len(self._sum_vecs)
        if have < len(self.episodes):
            if self.cfg.seed_on == "episode":
                fresh = self._episode_vectors(self.episodes[have:])
            else:
                fresh = self.text_vectors([e.summary for e in self.episodes[have:]])
            norms = np.linalg.norm(fresh, axis=1, keepdims=True)
            fresh = np.where(norms > 0, fresh / np.maximum(norms, 1e-12), 0.0).astype(np.float32)
            self._sum_vecs = np.concatenate([self._sum_vecs, fresh]) if have else fresh
        return self._sum_vecs

    def _episode_vectors(self, episodes) -> np.ndarray:
        ids = [[node_id_for(self.namespace, e.session_id, t) for t in e.turns] for e in episodes]
        stored = self.store.get_nodes([i for row in ids for i in row])
        out = np.zeros((len(episodes), self.models.text_embedder.dim), np.float32)
        for k, row in enumerate(ids):
            nodes = [stored[i] for i in row if i in stored and not stored[i].redacted]
            if nodes:
                out[k] = self.node_vectors(nodes).mean(axis=0)
        return out

    def _anchor_sims(self, q: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
        """[A] sim(q, a) = max(0, cos) for the seeds' anchors (0 elsewhere: only those are read)."""
        sim = np.zeros(self.graph.num_anchors, np.float64)
        ids = np.unique(np.concatenate([self.graph.anchor_ids(s) for s in seeds])) if seeds else np.zeros(0, int)
        if len(ids):
            vecs = self.text_vectors([self.graph.keys[a] for a in ids])
            norms = np.maximum(np.linalg.norm(vecs, axis=1), 1e-12)
            sim[ids] = np.clip((vecs @ q) / norms, 0.0, None)
        return sim

    def route(self, question: str) -> tuple[np.ndarray, list[tuple[int, float]], list[tuple[int, float]]]:
        """(q, seeds, expansions): episode indices with their retrieval scores, best first."""
        q = np.asarray(self.models.text_embedder.embed([question])[0], np.float32)
        qn = float(np.linalg.norm(q))
        q = q / qn if qn > 0 else q
        cos = self.summary_vectors() @ q
        order = np.argsort(-cos, kind="stable")[: self.cfg.k_ret]
        seeds = [(int(i), float(cos[i])) for i in order]
        expanded: list[tuple[int, float]] = []
        if self.cfg.expansion and self.cfg.k_exp > 0 and seeds:
            ids = [s for s, _ in seeds]
            expanded = self.graph.expand(ids, self._anchor_sims(q, ids), self.cfg.k_exp)
        return q, seeds, expanded

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        from ..read.compose import Candidate, compose

        if not self.episodes:
            return Context(question, (), BudgetUse(), budget, RouteTrace(self.name, notes=("empty memory",)))
        q, seeds, expanded = self.route(question)
        chosen = [(e, s, "seed") for e, s in seeds] + [(e, s, "expanded") for e, s in expanded]
        ids = {e: [node_id_for(self.namespace, self.episodes[e].session_id, t) for t in self.episodes[e].turns]
               for e, _, _ in chosen}
        stored = self.store.get_nodes([nid for e in ids for nid in ids[e]])
        vecs = self.summary_vectors()
        cos = vecs @ q
        candidates = []
        for e, _, origin in chosen:
            nodes = tuple(stored[nid] for nid in ids[e] if nid in stored and not stored[nid].redacted)
            candidates.append(Candidate(self.episode_id(e), nodes, float(cos[e]), self.episodes[e].summary, vecs[e],
                                        self.perception(nodes) if any(n.images for n in nodes) else {}, origin))
        trace = RouteTrace(self.name, entries=tuple((self.episode_id(e), round(s, 4)) for e, s, _ in chosen),
                           notes=(f"{len(seeds)} seeds + {len(expanded)} expanded",), scored=len(self.episodes))
        return compose(question, q, candidates, budget, self.compose_cfg, selector=self.selector,
                       vectors=self.node_vectors, count=self.models.token_counter.count, trace=trace,
                       device=self.device)


__all__ = ["ABLATIONS", "HiveMem", "HiveMemConfig", "text_anchor_keys", "visual_anchor_keys"]
