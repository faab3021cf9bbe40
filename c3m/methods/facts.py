"""``facts``: a mem0-style fact store — the memory design most users know, under the project's protocol.

Mem0 (Chhikara et al., "Mem0: Building Production-Ready AI Agents with Scalable Long-Term Memory", arXiv
2504.19413, 2025) extracts salient facts from each new exchange, and for every new fact retrieves the most
similar stored facts and chooses one operation: ADD a new fact, UPDATE a stored one, DELETE a stored one that the
new fact contradicts, or NOOP. The reader is shown facts (derived text), never the conversation.

**Kept from mem0**: the two phases (extraction, then update against the top-s similar stored facts by embedding
similarity), the four operations and their meaning, an UPDATE that replaces the fact's text by the newer one
(the reader sees only the current text, mem0's behaviour), a DELETE that removes the contradicted fact from the
store, and a reader that sees retrieved facts only.

**Simplified** (offline, deterministic, no LLM):

- *Extraction* is the named extractive heuristic ``facts-extract-v1`` instead of an LLM prompt: every user
  turn (all turns when a session has no user turn) is split into sentences (``c3m.models.summary.sentences``);
  a sentence with at least one content word (``density > 0``) and at least 4 words is a fact; an image turn
  with perception records contributes each caption as a fact ``"[image] <caption>"``. Images are otherwise lost
  — the point of this baseline, whose losses on image details are measured. At most ``max_facts_per_session``
  (default 24) facts per session, the most content-dense first (ties: the earlier); the kept facts are decided
  in conversation order.
- *Decisions* come from the project's relation head (``relation_head``, default ``feature``) over the relation
  features phi (``c3m.write.features.relation_features``) instead of an LLM tool call. A new fact's entities,
  states and cues come from ``describe_text`` over the ``heuristic`` anchor extractor (option ``anchors``; the
  heuristic is fast and deterministic); IDF uses this store's own document frequencies of entity keys (one
  document per decided fact, counted after its decision). For the top ``candidates`` (default 3) stored facts by
  cosine with cosine >= ``min_sim`` (default 0.5), best first, the first whose relation is *same* or *update*
  decides:

  - *same* -> NOOP: the stored fact keeps its text and gains the new source pointer;
  - *update* -> UPDATE: text, vector, entities, states and time become the new fact's, the pointers keep both
    sources, and the old text is kept in the fact's ``history`` (with its time; never shown to the reader);
  - the named negation rule ``facts-delete-v1``: when the new text has a negation/removal cue ("no longer",
    "not anymore", "got rid", "gave away", "sold", "threw away", ...) and the relation is *same* or *update*,
    the stored fact is DELETEd from the fact store (the maintenance log keeps its text) and the new fact is
    ADDed. DELETE never touches the Cold Store: Raw Nodes are immutable there;
  - no such candidate (all *distinct* / *uncertain*, or none similar enough) -> ADD.
- No graph variant (mem0^g), no per-user/agent scoping beyond the namespace.

``observe`` returns every operation as a maintenance action ``{"action": "add"|"update"|"delete"|"noop",
"fact": id, ...}``.

Read: cosine of the embedded question against every live fact; facts best-first while they fit the reader
budget's text tokens, at most ``top_k`` (option, default 24); each a ``SUMMARY`` item (derived text, no images)
citing its most recent unredacted source turn (a fact whose sources are all redacted is dropped); items in time
order. Derived forms take no Raw-Node slot (``c3m.budget``).

A fact store grows without bound (``bounded = False``), and deleted facts' and unextracted turns' nodes are not
reachable (``complete_provenance = False``).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidInput
from ..index.active import decode_vec, encode_vec, normalize
from ..models.relation_head import RELATION_HEADS, is_relation_head_name, make_relation_head
from ..models.summary import density, sentences
from ..types import Context, RawNode, ReaderBudget, Relation, node_id_for
from ..write.features import judge, relation_features
from ..write.units import Unit, describer
from .base import MemoryMethod, register
from .derived import DerivedText, read_derived
from .options import parse_options

STATE_VERSION = 1
EXTRACTOR = "facts-extract-v1"
DELETE_RULE = "facts-delete-v1"
MIN_WORDS = 4
_WORDS = re.compile(r"\w+")
#: negation / removal cues of the DELETE rule (phrases matched in the lower-cased text; "sold" as a word)
NEGATION_PHRASES = ("no longer", "not anymore", "not any more", "don't have", "do not have", "got rid",
                    "gave away", "given away", "threw away", "thrown away", "throw away")
NEGATION_WORDS = frozenset("sold anymore".split())
ANCHORS = ("heuristic", "auto", "spacy", "spacy-ner", "spacy-tagger")
READ_OPTIONS = frozenset({"top_k"})


def negates(text: str) -> bool:
    """``facts-delete-v1``: the text has a negation/removal cue."""
    lower = text.lower().replace("\u2019", "'")
    return any(p in lower for p in NEGATION_PHRASES) or bool(set(_WORDS.findall(lower)) & NEGATION_WORDS)


@dataclass(frozen=True)
class FactsConfig:
    max_facts_per_session: int = field(default=24, metadata={"minimum": 1})
    candidates: int = field(default=3, metadata={"minimum": 1})
    min_sim: float = 0.5
    relation_head: str = "feature"
    anchors: str = "heuristic"
    top_k: int = field(default=24, metadata={"minimum": 1})

    def validate(self) -> None:
        if not is_relation_head_name(self.relation_head):
            raise InvalidInput("method_options.relation_head", f"unknown relation head {self.relation_head!r}",
                               fix=f"choose one of {RELATION_HEADS}")
        if self.anchors not in ANCHORS:
            raise InvalidInput("method_options.anchors", f"unknown anchor extractor {self.anchors!r}",
                               fix=f"choose one of {list(ANCHORS)}")
        if not -1.0 <= self.min_sim <= 1.0:
            raise InvalidInput("method_options.min_sim", f"must be a cosine in [-1, 1], got {self.min_sim!r}",
                               fix="e.g. min_sim = 0.5")


@dataclass
class Fact:
    """One stored fact; also the entry-like side of ``relation_features`` (z, entities, states, time)."""

    fact_id: str
    text: str
    sources: list[tuple[str, int]]
    time: datetime
    z: np.ndarray = field(repr=False)
    entities: set[str] = field(default_factory=set)
    states: list[str] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    image_z: None = None


@dataclass(frozen=True)
class _Extracted:
    text: str
    node: RawNode
    images: int


@register
class Facts(MemoryMethod):
    name = "facts"
    bounded = False
    complete_provenance = False
    read_options = READ_OPTIONS
    summary = ("mem0-style fact store: extract facts per session, ADD/UPDATE/DELETE/NOOP against similar facts; "
               "reads facts only")
    reads = "facts (derived text)"
    paper = "Mem0 (Chhikara et al., 2025)"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = parse_options(FactsConfig, self.options, self.name)
        try:
            self.head = make_relation_head(self.cfg.relation_head)
        except InvalidInput as exc:
            raise InvalidInput("method_options.relation_head", exc.message, fix=exc.fix) from exc
        self.describer = describer(self.cfg.anchors)
        self.reset()

    def write_options(self) -> dict[str, Any]:
        default = FactsConfig()
        return {k: v for k, v in asdict(self.cfg).items() if k not in READ_OPTIONS and getattr(default, k) != v}

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.facts: dict[str, Fact] = {}  # live facts, in insertion order
        self.df: Counter = Counter()
        self.n_docs = 0
        self.next_id = 1
        self.upto_seq = 0

    def state(self) -> dict:
        return {"v": STATE_VERSION, "embedder": self.models.text_embedder.name, "head": self.head.name,
                "extractor": EXTRACTOR, "anchors": self.describer.extractor.name, "upto_seq": self.upto_seq,
                "entries": [{"id": f.fact_id, "routing_text": f.text, "sources": [[s, t] for s, t in f.sources],
                             "time": f.time.isoformat(), "vec": encode_vec(f.z), "entities": sorted(f.entities),
                             "states": list(f.states), "history": [dict(h) for h in f.history]}
                            for f in self.facts.values()],
                "df": dict(sorted(self.df.items())), "n_docs": self.n_docs, "next_id": self.next_id}

    def load_state(self, state: dict) -> None:
        if state.get("v") != STATE_VERSION:
            raise ValueError(f"unknown facts state version {state.get('v')!r}")
        self.reset()
        for e in state["entries"]:
            self.facts[e["id"]] = Fact(e["id"], e["routing_text"], [(s, int(t)) for s, t in e["sources"]],
                                       datetime.fromisoformat(e["time"]), decode_vec(e["vec"]), set(e["entities"]),
                                       list(e["states"]), [dict(h) for h in e.get("history", [])])
        self.df = Counter({k: int(v) for k, v in state.get("df", {}).items()})
        self.n_docs = int(state.get("n_docs", 0))
        self.next_id = int(state.get("next_id", len(self.facts) + 1))
        self.upto_seq = int(state.get("upto_seq", 0))

    def pointers(self) -> set[str]:
        return {node_id_for(self.namespace, s, t) for f in self.facts.values() for s, t in f.sources}

    def describe(self) -> dict:
        return {"method": self.name, "pointers": len(self.pointers()), "facts": len(self.facts),
                "relation_head": self.head.name, "extractor": EXTRACTOR,
                "updated": sum(1 for f in self.facts.values() if f.history),
                "index": "one fact per extracted statement (unbounded)"}

    # -- write: extraction -------------------------------------------------------------------
    def extract(self, nodes: Sequence[RawNode]) -> list[_Extracted]:
        """``facts-extract-v1`` (module docstring): the session's facts in conversation order."""
        speakers = [n for n in nodes if n.role == "user"] or list(nodes)
        seen = self.perception(speakers) if any(n.images for n in speakers) else {}
        found: list[_Extracted] = []
        for n in speakers:
            if n.redacted:
                continue
            for s in sentences(n.text):
                if density(s) > 0 and len(_WORDS.findall(s)) >= MIN_WORDS:
                    found.append(_Extracted(s, n, 0))
            for r in seen.get(n.node_id, ()):
                if r.caption and r.caption.strip():
                    found.append(_Extracted(f"[image] {r.caption.strip()}", n, len(n.images)))
        if len(found) > self.cfg.max_facts_per_session:
            keep = sorted(range(len(found)), key=lambda i: (-density(found[i].text), i))
            kept = set(keep[: self.cfg.max_facts_per_session])
            found = [f for i, f in enumerate(found) if i in kept]
        return found

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        facts = self.extract(nodes)
        if facts:
            self.text_vectors([f.text for f in facts])
            self.describer.describe([f.text for f in facts])

    # -- write: decisions --------------------------------------------------------------------
    def _unit(self, x: _Extracted, z: np.ndarray) -> Unit:
        ents, states, change, again, another = self.describer.describe([x.text])[0]
        return Unit(x.node.session_id, [x.node.turn_index], [x.node.node_id], x.node.time, x.text, z, set(ents),
                    set(states), change, x.images, again, another)

    def _candidates(self, z: np.ndarray) -> list[tuple[Fact, float]]:
        live = list(self.facts.values())
        if not live:
            return []
        cos = np.stack([f.z for f in live]) @ z
        order = np.argsort(-cos, kind="stable")[: self.cfg.candidates]
        return [(live[int(i)], float(cos[i])) for i in order if cos[i] >= self.cfg.min_sim]

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        rec = self.store.session_record(self.namespace, session_id)
        if rec is not None:
            self.upto_seq = rec.seq
        extracted = self.extract(nodes)
        if not extracted:
            return []
        vecs = self.text_vectors([x.text for x in extracted])
        actions: list[dict] = []
        for x, v in zip(extracted, vecs):
            actions += self._decide(x, normalize(v))
        return actions

    def _decide(self, x: _Extracted, z: np.ndarray) -> list[dict]:
        unit = self._unit(x, z)
        source = (x.node.session_id, x.node.turn_index)
        cands = self._candidates(z)
        match: tuple[Fact, float, Relation, float] | None = None
        if cands:
            feats = [relation_features(unit, f, self.df, self.n_docs) for f, _ in cands]
            rels = judge(self.head, feats, [(f.text, unit.text) for f, _ in cands])
            for (f, sim), (rel, conf) in zip(cands, rels):
                if rel in (Relation.SAME, Relation.UPDATE):
                    match = (f, sim, rel, conf)
                    break
        out: list[dict] = []
        if match is None:
            out.append(self._add(unit, source, x.text))
        else:
            f, sim, rel, conf = match
            why = {"relation": rel.value, "confidence": round(float(conf), 4), "sim": round(sim, 4),
                   "source": list(source)}
            if negates(x.text):
                del self.facts[f.fact_id]
                out.append({"action": "delete", "fact": f.fact_id, "text": f.text, "rule": DELETE_RULE, **why})
                out.append({**self._add(unit, source, x.text), "replaces": f.fact_id})
            elif rel is Relation.SAME:
                if source not in f.sources:
                    f.sources.append(source)
                out.append({"action": "noop", "fact": f.fact_id, **why})
            else:
                f.history.append({"text": f.text, "time": f.time.isoformat()})
                f.text, f.z, f.time = x.text, z, unit.time
                f.entities, f.states = set(unit.entities), sorted(unit.states)
                if source not in f.sources:
                    f.sources.append(source)
                out.append({"action": "update", "fact": f.fact_id, "text": x.text, "old": f.history[-1]["text"],
                            **why})
        self.df.update(set(unit.entities))  # IDF over the past: counted after the decision
        self.n_docs += 1
        return out

    def _add(self, unit: Unit, source: tuple[str, int], text: str) -> dict:
        fid = f"f{self.next_id}"
        self.next_id += 1
        self.facts[fid] = Fact(fid, text, [source], unit.time, unit.z, set(unit.entities), sorted(unit.states))
        return {"action": "add", "fact": fid, "text": text, "source": list(source)}

    # -- read --------------------------------------------------------------------------------
    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        live = list(self.facts.values())
        docs = [DerivedText(f.fact_id, f.text, tuple(node_id_for(self.namespace, s, t) for s, t in f.sources),
                            cite_latest=True) for f in live]
        Z = np.stack([f.z for f in live]) if live else np.zeros((0, self.models.text_embedder.dim), np.float32)
        return read_derived(self, question, budget, docs, Z, top_k=self.cfg.top_k, what="fact")


__all__ = ["DELETE_RULE", "EXTRACTOR", "Fact", "Facts", "FactsConfig", "negates"]
