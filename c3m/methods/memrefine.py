"""``memrefine``: Delete / Merge / Preserve on the globally most similar entry pairs, under the shared protocol.

The C3M paper compares against MemRefine, compared in C3M §3.2 [6] (its reference list is not at hand here:
no authors or venue are claimed): "text-based MemRefine applies LLM-guided Delete/Merge/Preserve to globally
similar pairs". What is kept from that description, and what is simplified:

- **Kept**: the reduction step looks at the *globally* most similar pair of entries (cosine of their routing
  vectors over all pairs — not only the pairs a new entry forms), and a judge picks one of three actions:
  *Delete* the older entry (the newer one supersedes it; its pointers leave the index, its Raw Nodes stay in
  the Cold Store — Delete never touches the store), *Merge* the pair into one entry (``merged``: sources
  united, nothing dropped) or *Preserve* both (the pair is marked and not asked again).
- **Simplified**: it runs only while the index is over the write budget (the shared protocol's ``shrink``), not
  as a periodic global pass; entries are the protocol's per-node entries (text cut to ``entry_tokens``), not
  free-form memory notes; the judge is by default the offline relation head (``judge="relation-head"``: the
  RAMU features phi(newer, older) through ``relation_head``, default ``feature``; SAME -> Merge, UPDATE ->
  Delete the older, DISTINCT / UNCERTAIN -> Preserve). ``judge="smollm2"`` / ``judge="api"`` ask an LLM with a
  one-word prompt (``judge_messages``; the reply is read by ``parse_decision``, anything unreadable is
  PRESERVE, the safe action).
- **Budget**: preserved marks live in the snapshot (``meta["preserved"]``: [id, id] lists, ids sorted) so they
  are counted in index bytes and persist; a mark is dropped when either entry is gone or merged. When every
  remaining pair is preserved and the index is still over budget, the most similar pair is merged anyway
  (logged ``{"action": "merge", "forced": true}``), so the write budget always holds.

Entry descriptors (``entities`` / ``states``) come from ``describe_text`` of the entry's text with the
heuristic anchor extractor, and document frequencies (``index.df`` / ``n_docs``) are observed once per new
entry, so the relation features have what they need. Delete drops pointers: ``complete_provenance = False``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InvalidInput
from ..index.active import IndexEntry
from ..models.relation_head import make_relation_head
from ..types import Relation
from ..write.features import judge as head_judge
from ..write.features import relation_features
from ..write.units import Unit
from .base import register
from .bounded import BoundedConfig, BoundedIndexMethod, by_time, describe_texts

JUDGES = ("relation-head", "smollm2", "api")
DELETE, MERGE, PRESERVE = "delete", "merge", "preserve"
#: the relation head's answer -> the MemRefine action (UPDATE: the newer entry supersedes the older one)
RELATION_ACTION = {Relation.SAME: MERGE, Relation.UPDATE: DELETE, Relation.DISTINCT: PRESERVE,
                   Relation.UNCERTAIN: PRESERVE}
JUDGE_SYSTEM = ("You maintain an assistant's long-term memory. You are shown two similar memories, an older one "
                "and a newer one. Answer with exactly one word:\n"
                "DELETE if the newer memory replaces the older one (the same thing, changed or corrected),\n"
                "MERGE if both say the same thing,\n"
                "PRESERVE if they are about different things or you are unsure.")
_DECISION = re.compile(r"\b(delete|merge|preserve|keep)\b", re.IGNORECASE)


@dataclass(frozen=True)
class MemRefineConfig(BoundedConfig):
    judge: str = "relation-head"     # "relation-head" | "smollm2" | "api"
    relation_head: str = "feature"   # the head of judge="relation-head" (c3m.models.relation_head)

    def validate(self) -> None:
        if self.judge not in JUDGES:
            raise InvalidInput("method_options.judge", f"unknown judge {self.judge!r}", fix=f"choose one of {JUDGES}")


def judge_messages(older: IndexEntry, newer: IndexEntry) -> list[dict[str, str]]:
    """The LLM judge's prompt: the two memories with their dates, older first."""
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"Older memory ({older.time.date().isoformat()}): {older.text}\n"
                                        f"Newer memory ({newer.time.date().isoformat()}): {newer.text}\n"
                                        "One word (DELETE, MERGE or PRESERVE):"}]


def parse_decision(reply: str | None) -> str:
    """An LLM reply -> ``delete`` / ``merge`` / ``preserve``: the first of the three words it contains (``keep``
    reads as preserve); a reply without one is ``preserve``, the safe action."""
    m = _DECISION.search(reply or "")
    if m is None:
        return PRESERVE
    word = m.group(1).lower()
    return PRESERVE if word == "keep" else word


def make_llm(judge: str) -> Callable[[list[dict]], str]:
    """messages -> reply text, for ``judge="smollm2"`` (SmolLM2 on one CPU thread) or ``judge="api"`` (the
    OpenAI-compatible endpoint of $C3M_API_BASE_URL / $C3M_API_MODEL / $C3M_API_KEY)."""
    if judge == "smollm2":
        from ..models.smollm import SmolLMAnswerer

        model = SmolLMAnswerer(threads=1)
        return lambda messages: model.chat(messages, max_new_tokens=4).text
    if judge == "api":
        from ..models.api import ApiClient

        client = ApiClient.from_env()
        return lambda messages: client.chat(messages, max_tokens=4).text
    raise ValueError(f"judge {judge!r} is not an LLM judge")


@register
class MemRefine(BoundedIndexMethod):
    name = "memrefine"
    complete_provenance = False
    Config = MemRefineConfig
    summary = "LLM-guided Delete/Merge/Preserve on globally similar entry pairs (offline: the relation head)"
    reads = "Raw Nodes via entries"
    paper = "MemRefine (as in C3M §3.2)"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.head = None
        self.llm: Callable[[list[dict]], str] | None = None  # built on first use (tests may set a stub)
        if self.cfg.judge == "relation-head":
            try:
                self.head = make_relation_head(self.cfg.relation_head)
            except InvalidInput as exc:
                raise InvalidInput("method_options.relation_head", exc.message, fix=exc.fix) from exc

    def judge_name(self) -> str:
        return f"relation-head:{self.head.name}" if self.head is not None else self.cfg.judge

    # -- write ---------------------------------------------------------------------------------
    def fold(self, session_id: str, entries: list[IndexEntry]) -> list[dict]:
        for e, (ents, states, *_) in zip(entries, self.describe_entries(entries)):
            self.index.entries[e.entry_id] = e
            self.index.observe_df(set(ents) | set(states))
        return [{"action": "add", "entries": [e.entry_id for e in entries], "session": session_id}] if entries else []

    def preserved(self) -> set[tuple[str, str]]:
        live = self.index.entries
        return {tuple(sorted(p)) for p in self.index.meta.get("preserved", []) if p[0] in live and p[1] in live}

    def _set_preserved(self, marks: set[tuple[str, str]]) -> None:
        self.index.meta["preserved"] = [list(p) for p in sorted(marks)]

    def _unit(self, e: IndexEntry) -> Unit:
        _, _, change, again, another = describe_texts([e.text])[0]
        turns = sorted(t for ts in e.sources().values() for t in ts)
        return Unit(next(iter(sorted(e.sources())), ""), turns, [], e.time, e.text, e.z, set(e.entities),
                    set(e.states), change, 0, again, another)

    def decide(self, older: IndexEntry, newer: IndexEntry) -> str:
        if self.head is not None:
            phi = relation_features(self._unit(newer), older, self.index.df, self.index.n_docs)
            (relation, _), = head_judge(self.head, [phi], [(older.text, newer.text)])
            return RELATION_ACTION[relation]
        if self.llm is None:
            self.llm = make_llm(self.cfg.judge)
        return parse_decision(self.llm(judge_messages(older, newer)))

    def shrink(self) -> list[dict]:
        """Walk the pairs from the most similar down, judging each pair not yet preserved, until one is merged
        or deleted; the pairs judged Preserve on the way are marked (one pass per reduction, so a full index of
        distinct entries costs each pair one judgement, not one sort per judgement)."""
        entries = self.index.ordered()
        if len(entries) < 2:
            raise RuntimeError(f"{self.name}: the index is over the write budget {self.usage()} with one entry left "
                               "(the write budget is smaller than one entry)")
        marks = self.preserved()
        Z = self.index.matrix(entries)
        S = Z @ Z.T
        iu, ju = np.triu_indices(len(entries), k=1)
        sims = S[iu, ju]
        order = np.argsort(-sims, kind="stable")
        preserved: list[list] = []  # [older id, newer id, sim] judged Preserve on the way (one log row)
        for k in order:
            i, j = int(iu[k]), int(ju[k])
            pair = (entries[i].entry_id, entries[j].entry_id)
            if pair in marks:
                continue
            older, newer = by_time([entries[i], entries[j]])
            sim = float(sims[k])
            action = self.decide(older, newer)
            if action == MERGE:
                return [*self._preserve_row(preserved), self._merge(older, newer, sim, marks)]
            if action == DELETE:
                self.index.entries.pop(older.entry_id)
                self._set_preserved({p for p in marks if older.entry_id not in p})
                return [*self._preserve_row(preserved), {"action": DELETE, "entries": [older.entry_id], "kept": newer.entry_id,
                                     "sim": round(sim, 4), "judge": self.judge_name()}]
            marks.add(tuple(sorted(pair)))
            self._set_preserved(marks)
            preserved.append([older.entry_id, newer.entry_id, round(sim, 4)])
        # every pair is preserved: merge the most similar one so the budget holds
        k = int(order[0])
        i, j = int(iu[k]), int(ju[k])
        return [*self._preserve_row(preserved), self._merge(entries[i], entries[j], float(sims[k]), marks, forced=True)]

    def _preserve_row(self, pairs: list[list]) -> list[dict]:
        """The Preserve judgements of one reduction as one maintenance-log row (a full index of distinct entries
        judges hundreds of pairs per session)."""
        if not pairs:
            return []
        return [{"action": PRESERVE, "pairs": len(pairs), "entries": pairs[0][:2], "sim": pairs[0][2],
                 "sample": pairs[:8], "judge": self.judge_name()}]

    def _merge(self, a: IndexEntry, b: IndexEntry, sim: float, marks: set, *, forced: bool = False) -> dict:
        new = self.merged([a, b])
        self.replace_entries([a, b], new)
        gone = {a.entry_id, b.entry_id}
        self._set_preserved({p for p in marks if not gone & set(p)})  # the merged entry is judged afresh
        out = {"action": MERGE, "entries": sorted(gone), "into": new.entry_id, "sim": round(sim, 4),
               "judge": "forced" if forced else self.judge_name()}
        if forced:
            out["forced"] = True
        return out


__all__ = ["JUDGES", "MemRefine", "MemRefineConfig", "judge_messages", "make_llm", "parse_decision"]
