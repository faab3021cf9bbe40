"""Shared scaffolding of the bounded baselines (``resum``, ``moviechat``, ``memrefine``, ``cdrs``).

The C3M paper's fair protocol (§3.2): "Raw Nodes and embeddings are shared; only maintenance and routing
differ", under one write budget (36 entries, 6 pages, 6,144 index tokens, 384 KiB) and one reader budget.
So every bounded baseline here

- keeps its index as a ``c3m.index.active.ActiveIndex`` (entries with a routing text, a vector and pointers
  into the Cold Store; at most ``WriteBudget.pages`` pages), whose snapshot the harness measures exactly as it
  measures c3m's (``c3m.budget.measure_index``): whatever a baseline keeps — summaries, buffers, graph edges,
  candidate lists — lives in that snapshot and is counted;
- starts each Raw Node as one entry (``node_entries``: the node's shared embedding, its text cut to
  ``entry_tokens`` by ``LeadSummarizer``), folds it in with its own policy (``fold``) and, while the index is
  over the write budget, applies its own reduction step (``shrink``) — never an implicit eviction;
- groups entries into pages by similarity (``assign_pages``: deterministic spherical k-means, the protocol's
  page structure; none of the originals has pages);
- reads through one shared reader (``retrieve``): BMER's page and entry routing without anchors
  (``c3m.read.bmer.route``, β = 0), each routed entry expanded into its Raw Nodes (``expand_pool``: pool by
  cos(q, node) + η·s(q, e)), or, for an entry of kind ``summary``, shown as its text (a SUMMARY item: derived
  text that takes no Raw-Node slot); the candidates are then taken best-first while they fit the reader budget,
  the rule ``dense-topk`` uses (the selection stage's greedy mode, ``c3m.read.select``). A baseline may add candidates (``widen``: CDRs's one-hop graph expansion) and
  re-rank them (``rerank``: CDRs's query-local conflict detection) before the selection.
"""
from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

import numpy as np

from ..index.active import MAX_ENTITIES, MAX_STATES, ActiveIndex, IndexEntry, merge_pointers, normalize
from ..models.summary import LeadSummarizer
from ..read.bmer import BmerConfig, expand_pool, route
from ..read.select import greedy, item_cost
from ..types import BudgetUse, Context, ContextItem, EvidenceForm, RawNode, ReaderBudget, RouteTrace, node_id_for
from ..write.units import describer
from .base import MemoryMethod
from .options import parse_options

#: an entry shown as its own text (a derived SUMMARY item) instead of being expanded into its Raw Nodes
SUMMARY_KIND = "summary"
#: anchor extractor of the baselines' entity descriptors (fast, deterministic)
DESCRIPTION_ANCHORS = "heuristic"
#: safety stop for a reduction loop that makes no progress (a bug in a ``shrink``, not a budget policy)
MAX_SHRINK_STEPS = 10_000


@dataclass(frozen=True)
class BoundedConfig:
    entry_tokens: int = field(default=64, metadata={"minimum": 4})  # routing text kept per entry
    entries_k: int = field(default=12, metadata={"minimum": 1})     # entries routed within the chosen pages
    pool: int = field(default=48, metadata={"minimum": 1})          # expanded nodes handed to the selection
    entry_boost: float = 0.3                                        # η: share of the entry score a node inherits


def describe_texts(texts: Sequence[str]) -> list[tuple]:
    """``describe_text`` of each text with the baselines' anchor extractor, through the per-process memo."""
    return describer(DESCRIPTION_ANCHORS).describe(list(texts))


def time_key(e: IndexEntry) -> tuple:
    return (e.first_time, e.entry_id)


class BoundedIndexMethod(MemoryMethod):
    """A bounded baseline: per-node entries folded by ``fold``, reduced by ``shrink``, read by the shared reader."""

    bounded = True
    complete_provenance = True
    Config: ClassVar[type] = BoundedConfig
    read_options = frozenset({"entries_k", "pool", "entry_boost"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = parse_options(self.Config, self.options, self.name)
        self.summarizer = LeadSummarizer()
        self.reset()

    # -- what a baseline provides ----------------------------------------------------------------
    @abstractmethod
    def fold(self, session_id: str, entries: list[IndexEntry]) -> list[dict]:
        """Fold the new session's per-node entries (time order) into ``self.index``; return the actions."""

    @abstractmethod
    def shrink(self) -> dict | list[dict]:
        """One reduction step of the index (the baseline's own policy); return its action(s). Called while the
        index is over the write budget."""

    def shows_as_summary(self, e: IndexEntry) -> bool:
        """Whether the reader shows this entry as its text (a SUMMARY item) rather than expanding it."""
        return e.kind == SUMMARY_KIND

    def widen(self, q, pages, routed, pool: list[tuple]) -> tuple[list[tuple], list[str], list[str]]:
        """More read candidates beyond the routed entries' nodes (default: none): (candidates, the node ids
        expanded to find them, trace notes). ``pages``/``routed`` are the routing's (page, score) and (entry,
        score) lists; candidates are ``(value, "node"|"summary", RawNode, entry)``."""
        return [], [], []

    def rerank(self, question: str, pool: list[tuple]) -> tuple[list[tuple], list[str]]:
        """Re-order the read candidates (best first) before selection; returns them and trace notes."""
        return pool, []

    def write_options(self) -> dict:
        defaults = self.Config()
        read = self.read_options
        return {k: v for k, v in vars(self.cfg).items() if k not in read and getattr(defaults, k) != v}

    # -- building blocks ---------------------------------------------------------------------------
    def reset(self) -> None:
        self.index = ActiveIndex(self.models.text_embedder.dim,
                                 {"method": self.name, "embedder": self.models.text_embedder.name})

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        self.node_vectors(nodes)

    def cut(self, text: str, tokens: int | None = None) -> str:
        return self.summarizer.summarize(text, tokens or self.cfg.entry_tokens)

    def node_entries(self, nodes: Sequence[RawNode]) -> list[IndexEntry]:
        """One entry per Raw Node: its shared embedding, its embedding text cut to ``entry_tokens``."""
        texts = self.embedding_texts(nodes)
        vecs = self.text_vectors(texts)
        out = []
        for node, text, z in zip(nodes, texts, vecs):
            e = IndexEntry(self.index.new_id(), normalize(z), {node.session_id: {node.turn_index}}, node.time,
                           node.time, self.cut(text))
            out.append(e)
        return out

    def merged(self, parts: Sequence[IndexEntry], *, kind: str = "entry", text: str | None = None,
               tokens: int | None = None) -> IndexEntry:
        """One entry standing for ``parts``: Src = the union of their sources (nothing is dropped), z = their
        support-weighted mean direction, text = ``text`` or an extractive summary of their texts in time
        order, cut to ``tokens``, entity counts summed (the ``MAX_ENTITIES`` most frequent kept), attribute
        values newest first (at most ``MAX_STATES``); it takes the id of the earliest part."""
        parts = sorted(parts, key=time_key)
        z = normalize(sum(p.z * p.support for p in parts))
        pointers: dict[str, set[int]] = {}
        for p in parts:
            pointers = merge_pointers(pointers, p.sources())
        if text is None:
            text = self.cut(" ".join(p.text for p in parts if p.text), tokens)
        entities, states = Counter(), []
        for p in parts:
            entities.update(p.entities)
        for p in reversed(parts):  # the newest values first
            states += [v for v in p.states if v not in states]
        top = sorted(entities.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_ENTITIES]
        return IndexEntry(parts[0].entry_id, z, pointers, max(p.time for p in parts),
                          min(p.first_time for p in parts), text, kind=kind, support=sum(p.support for p in parts),
                          entities=Counter(dict(top)), states=states[:MAX_STATES])

    def describe_entries(self, entries: Sequence[IndexEntry]) -> list[tuple]:
        """Give new entries their descriptors (``describe_text`` of their text: each entity once, at most
        ``MAX_ENTITIES`` / ``MAX_STATES``) and return the descriptor tuples (entities, states, cues)."""
        described = describe_texts([e.text for e in entries])
        for e, (ents, states, *_) in zip(entries, described):
            e.entities = Counter({k: 1 for k in sorted(ents)[:MAX_ENTITIES]})
            e.states = sorted(set(states))[:MAX_STATES]
        return described

    def replace_entries(self, old: Sequence[IndexEntry], new: IndexEntry) -> None:
        for e in old:
            self.index.entries.pop(e.entry_id, None)
        self.index.entries[new.entry_id] = new

    def usage(self) -> tuple[int, int, int, int]:
        return self.index.usage(self.models.token_counter.count)

    def over_budget(self) -> list[str]:
        return ActiveIndex.over(self.usage(), self.write_budget)

    def assign_pages(self) -> None:
        """Pages = a deterministic spherical k-means of the entries (k = the page budget; seeds spread evenly
        over time, 8 rounds), then ``ActiveIndex.refresh_pages`` (centroids, labels)."""
        entries = sorted(self.index.entries.values(), key=time_key)
        k = min(self.write_budget.pages, len(entries))
        if k == 0:
            self.index.pages = []
            return
        Z = np.stack([e.z for e in entries])
        centres = Z[np.linspace(0, len(entries) - 1, k).round().astype(int)]
        labels = np.zeros(len(entries), dtype=int)
        for _ in range(8):
            labels = np.argmax(Z @ centres.T, axis=1)
            for c in range(k):
                members = Z[labels == c]
                if len(members):
                    centres[c] = normalize(members.sum(0))
        for e, p in zip(entries, labels):
            e.page = int(p)
        self.index.refresh_pages()

    # -- write path ----------------------------------------------------------------------------
    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        if not nodes:
            return []
        actions = self.fold(session_id, self.node_entries(nodes))
        steps = 0
        while len(self.index.entries) > self.write_budget.entries:  # the cheap dimension first
            self._log_step(actions, self.shrink())
            steps += 1
            if steps >= MAX_SHRINK_STEPS:
                raise RuntimeError(f"{self.name}: shrink made no progress after {steps} steps")
        self.assign_pages()  # no shrink reads pages; the byte budget counts them
        while self.over_budget():
            if steps >= MAX_SHRINK_STEPS:
                raise RuntimeError(f"{self.name}: shrink made no progress after {steps} steps ({self.usage()})")
            self._log_step(actions, self.shrink())
            self.assign_pages()
            steps += 1
        return actions

    @staticmethod
    def _log_step(actions: list[dict], step) -> None:
        actions.extend(step if isinstance(step, list) else [step])

    def state(self) -> dict:
        return self.index.state()

    def load_state(self, state: dict) -> None:
        self.index = ActiveIndex.from_state(state)

    def pointers(self) -> set[str]:
        return self.index.pointer_ids(self.namespace)

    def describe(self) -> dict:
        kinds: dict[str, int] = {}
        for e in self.index.entries.values():
            kinds[e.kind] = kinds.get(e.kind, 0) + 1
        used = self.usage()
        return {"method": self.name, "entries": used[0], "pages": used[1], "index_tokens": used[2],
                "index_bytes": used[3], "kinds": kinds, "pointers": len(self.pointers())}

    # -- read path -----------------------------------------------------------------------------
    def _summary_node(self, e: IndexEntry) -> tuple[RawNode | None, tuple[str, ...]]:
        """The Raw Node a summary item cites (the latest unredacted node it points at) and every unredacted node
        it summarises (``ContextItem.covers``)."""
        ids = [node_id_for(self.namespace, s, t) for s, turns in e.sources().items() for t in turns]
        got = self.store.get_nodes(ids)
        live = sorted((n for n in got.values() if not n.redacted), key=lambda n: (n.time, n.session_id, n.turn_index))
        return (live[-1] if live else None), tuple(sorted(n.node_id for n in live))

    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        if not self.index.entries:
            return Context(question, (), BudgetUse(), budget, RouteTrace(self.name, notes=("empty memory",)))
        q = self.models.text_embedder.embed([question])[0]
        bcfg = BmerConfig(entries_k=self.cfg.entries_k, lexical=0.0, entry_boost=self.cfg.entry_boost,
                          pool=self.cfg.pool)
        pages, routed = route(self.index, q, set(), budget, bcfg)
        raw = [(e, s) for e, s in routed if not self.shows_as_summary(e)]
        expanded, scored = expand_pool(raw, self.namespace, q, bcfg, get_nodes=self.store.get_nodes,
                                       vectors=self.node_vectors)
        pool: list[tuple] = [(rel, "node", node, e) for node, rel, e, _ in scored]
        covers: dict[str, tuple[str, ...]] = {}
        for e, s in routed:
            if self.shows_as_summary(e) and e.text.strip():
                node, covers[e.entry_id] = self._summary_node(e)
                if node is not None:
                    pool.append((s, "summary", node, e))
        extra, widened, notes = self.widen(q, pages, routed, pool)
        pool = sorted(pool + extra, key=lambda c: -c[0])
        pool, reranked = self.rerank(question, pool)
        expanded = sorted(set(expanded) | set(widened))
        count = self.models.token_counter.count
        priced = []  # (value, kind, node, entry, text, tokens): a node item shows its text and images, a summary its text
        for value, kind, node, e in pool:
            text = node.text if kind == "node" else e.text
            priced.append((value, kind, node, e, text, count(text)))

        def cost(k, shown):
            _, kind, node, _, _, tokens = priced[k]
            images = node.images if kind == "node" else ()
            return (item_cost(raw_node=kind == "node", images=images, tokens=tokens, shown=shown),
                    {im.sha256 for im in images})

        filled = greedy(range(len(priced)), budget, cost)  # the selection stage's greedy mode (best-first, skip)
        chosen = [priced[k] for k in filled.chosen]
        dropped = [priced[k][2].node_id for k in filled.dropped]
        use = filled.use
        chosen.sort(key=lambda c: (c[2].time, c[2].session_id, c[2].turn_index, c[1]))
        items = tuple(ContextItem(n.node_id, n.provenance, n.role,
                                  EvidenceForm.RAW_TEXT if kind == "node" else EvidenceForm.SUMMARY, text,
                                  n.images if kind == "node" else (), round(v, 4), t,
                                  () if kind == "node" else covers[e.entry_id])
                      for v, kind, n, e, text, t in chosen)
        use = BudgetUse(len(pages), use.raw_nodes, use.images, use.text_tokens)  # every routed page was read
        trace = RouteTrace(
            self.name,
            pages=tuple((f"p{p}", round(s, 4)) for p, s in pages),
            entries=tuple((e.entry_id, round(s, 4)) for e, s in routed),
            candidates=tuple((n.node_id, round(v, 4)) for v, _, n, _ in pool),
            expanded_nodes=tuple(expanded),
            expanded_images=tuple(dict.fromkeys(im.sha256 for _, k, n, _ in pool if k == "node" for im in n.images)),
            selected_nodes=tuple(n.node_id for _, _, n, _, _, _ in chosen),
            covered_sessions=tuple(dict.fromkeys(n.session_id for _, _, n, _, _, _ in chosen)),
            dropped_for_budget=tuple(dropped),
            notes=(f"{len(expanded)} nodes expanded from {len(raw)} entries, {len(routed) - len(raw)} summaries, "
                   f"on {len(pages)} pages", *notes, *reranked),
            pool=tuple(dict.fromkeys(n.node_id for _, k, n, _ in pool if k == "node")),
            scored=len(expanded),
        )
        return Context(question, items, use, budget, trace)


def by_time(entries) -> list[IndexEntry]:
    return sorted(entries, key=time_key)


def cosine(a: IndexEntry, b: IndexEntry) -> float:
    return float(a.z @ b.z)


__all__ = ["BoundedConfig", "BoundedIndexMethod", "SUMMARY_KIND", "by_time", "cosine", "describe_texts", "time_key"]
