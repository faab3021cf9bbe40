"""``summary-only``: one extractive summary per session; the reader is shown summaries, never raw text.

A simple reference point for issue #14 (baselines under one fair protocol): how far does a memory get that
keeps only a short gist of every session?

Write (per committed session, query-blind): the session's user turns' text (all turns' text when it has no
user turn), plus the captions of its images when perception records exist (``[image: <caption>]``), is
summarised by ``LeadSummarizer`` within ``summary_tokens`` (option, default 96) and embedded with the shared
text embedder. One entry per session keeps the session id, its time, the summary, the session's turn range
(its pointers) and the unit summary vector (float16, base64, as in ``c3m.index.active``).

Read: cosine of the embedded question against every summary; summaries are taken best-first while they fit
the reader budget's text tokens (the token counter's count of the summary text); each is a ``SUMMARY``
``ContextItem`` (derived text, no images) whose provenance is the first unredacted Raw Node of its session,
so it takes no Raw-Node slot (``c3m.budget``). A session whose nodes are all redacted, or whose summary is
empty, is skipped. Items come back in time order.

One entry per session grows without bound (``bounded = False``); every session's entry points at all its
turns (complete provenance). A ``forget`` rebuilds the index from the redacted store (``Memory.forget``), so
a summary never keeps forgotten text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

import numpy as np

from ..index.active import decode_turns, decode_vec, encode_turns, encode_vec, normalize
from ..models.summary import LeadSummarizer
from ..types import Context, RawNode, ReaderBudget, node_id_for
from .base import MemoryMethod, register
from .derived import DerivedText, read_derived
from .options import parse_options

STATE_VERSION = 1


@dataclass(frozen=True)
class SummaryOnlyConfig:
    summary_tokens: int = field(default=96, metadata={"minimum": 8})  # per-session summary length


@dataclass(frozen=True)
class _Summary:
    session_id: str
    time: datetime
    text: str
    turns: tuple[int, ...]
    z: np.ndarray = field(repr=False, compare=False)


def session_text(nodes: Sequence[RawNode], captions: dict[str, list]) -> str:
    """What a session's summary is made from: user turns' text (all turns when none is a user turn), then
    its images' captions."""
    speakers = [n for n in nodes if n.role == "user" and n.text.strip()] or [n for n in nodes if n.text.strip()]
    parts = [n.text.strip() for n in speakers]
    parts += [f"[image: {r.caption}]" for n in nodes for r in captions.get(n.node_id, ()) if r.caption]
    return "\n".join(parts)


@register
class SummaryOnly(MemoryMethod):
    name = "summary-only"
    bounded = False
    complete_provenance = True
    summary = "one extractive summary per session; reads summaries only, never raw text"
    reads = "session summaries"
    paper = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = parse_options(SummaryOnlyConfig, self.options, self.name)
        self.summarizer = LeadSummarizer()
        self.reset()

    def write_options(self) -> dict[str, Any]:
        default = SummaryOnlyConfig()
        return {"summary_tokens": self.cfg.summary_tokens} if self.cfg != default else {}

    # -- state -------------------------------------------------------------------------------
    def reset(self) -> None:
        self.summaries: list[_Summary] = []
        self.upto_seq = 0

    @staticmethod
    def summary_id(s: _Summary) -> str:
        return f"sum:{s.session_id}"

    def state(self) -> dict:
        return {"v": STATE_VERSION, "embedder": self.models.text_embedder.name, "upto_seq": self.upto_seq,
                "summary_tokens": self.cfg.summary_tokens,
                "entries": [{"id": self.summary_id(s), "session": s.session_id, "time": s.time.isoformat(),
                             "routing_text": s.text, "turns": encode_turns(s.turns), "vec": encode_vec(s.z)}
                            for s in self.summaries]}

    def load_state(self, state: dict) -> None:
        if state.get("v") != STATE_VERSION:
            raise ValueError(f"unknown summary-only state version {state.get('v')!r}")
        self.reset()
        self.summaries = [_Summary(e["session"], datetime.fromisoformat(e["time"]), e["routing_text"],
                                   tuple(sorted(decode_turns(e["turns"]))), decode_vec(e["vec"]))
                          for e in state["entries"]]
        self.upto_seq = int(state.get("upto_seq", 0))

    def pointers(self) -> set[str]:
        return {node_id_for(self.namespace, s.session_id, t) for s in self.summaries for t in s.turns}

    def describe(self) -> dict:
        return {"method": self.name, "pointers": len(self.pointers()), "summaries": len(self.summaries),
                "summary_tokens": self.cfg.summary_tokens, "index": "one summary per session (unbounded)"}

    # -- write -------------------------------------------------------------------------------
    def _summarize(self, nodes: Sequence[RawNode]) -> str:
        seen = self.perception(nodes) if any(n.images for n in nodes) else {}
        text = session_text(nodes, seen)
        return self.summarizer.summarize(text, self.cfg.summary_tokens) if text else ""

    def prepare(self, nodes: Sequence[RawNode]) -> None:
        text = self._summarize(nodes)
        if text:
            self.text_vectors([text])

    def observe(self, session_id: str, nodes: Sequence[RawNode]) -> list[dict]:
        rec = self.store.session_record(self.namespace, session_id)
        if rec is not None:
            self.upto_seq = rec.seq
        if not nodes:
            return []
        text = self._summarize(nodes)
        dim = self.models.text_embedder.dim
        z = normalize(self.text_vectors([text])[0]) if text else np.zeros(dim, np.float32)
        time = min(n.time for n in nodes)
        s = _Summary(session_id, time, text, tuple(sorted(n.turn_index for n in nodes)), z)
        self.summaries.append(s)
        return [{"action": "add", "summary": self.summary_id(s), "session": session_id,
                 "turns": encode_turns(s.turns), "tokens": self.models.token_counter.count(text)}]

    # -- read --------------------------------------------------------------------------------
    def retrieve(self, question: str, budget: ReaderBudget) -> Context:
        docs = [DerivedText(self.summary_id(s), s.text, tuple(node_id_for(self.namespace, s.session_id, t)
                                                               for t in s.turns)) for s in self.summaries]
        Z = (np.stack([s.z for s in self.summaries]) if self.summaries
             else np.zeros((0, self.models.text_embedder.dim), np.float32))
        return read_derived(self, question, budget, docs, Z, what="summary")


__all__ = ["SummaryOnly", "SummaryOnlyConfig", "session_text"]
