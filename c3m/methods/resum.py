"""``resum``: ReSum — summarise older blocks, keep the recent nodes verbatim (a bounded baseline, C3M §3.2).

ReSum (Wu et al., "ReSum: Unlocking Long-Horizon Search Intelligence via Context Summarization",
arXiv 2509.13313, 2025) keeps an agent's context bounded by periodically replacing the interaction history
with a summary and continuing from it. On c3m's shared protocol (``c3m.methods.bounded``):

- **Kept from the original**: the recent window stays verbatim (one entry per Raw Node, the ``recent`` most
  recent nodes); whenever the index is over the write budget, the oldest block of ``block`` verbatim entries
  beyond the window is replaced by one summary entry; once only summaries can give way, the two oldest
  summaries are re-summarised into one — the rolling summary, so the oldest history is compressed most.
  The reader is shown summaries as summaries (SUMMARY items: derived text, no Raw Node behind them is
  expanded), which is what ReSum's agent continues from.
- **Simplified**: the summariser is the offline extractive ``LeadSummarizer`` (``summary_tokens`` per
  summary), not the paper's fine-tuned summary model; summarisation is triggered by the shared write budget,
  not by the agent's context limit; routing is the protocol's shared reader, so a summary competes with the
  recent nodes for the reader budget by similarity to the question.
- **Provenance**: a summary keeps the pointers of everything it compresses (Src is never dropped; ``c3m
  inspect`` and ``verify`` can reach them), but the reader does not expand them unless
  ``expand_summaries=true`` (an ablation: "ReSum with provenance expansion").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..index.active import IndexEntry
from .base import register
from .bounded import SUMMARY_KIND, BoundedConfig, BoundedIndexMethod, by_time


@dataclass(frozen=True)
class ResumConfig(BoundedConfig):
    recent: int = field(default=24, metadata={"minimum": 1})          # nodes kept verbatim
    block: int = field(default=8, metadata={"minimum": 1})            # verbatim entries per new summary
    summary_tokens: int = field(default=128, metadata={"minimum": 8})  # tokens per summary
    expand_summaries: bool = False                                     # read a summary's Raw Nodes (ablation)


@register
class ReSum(BoundedIndexMethod):
    name = "resum"
    Config = ResumConfig
    read_options = BoundedIndexMethod.read_options | {"expand_summaries"}
    summary = "summarise the oldest blocks (rolling summary), keep the recent nodes verbatim"
    reads = "recent Raw Nodes + summaries"
    paper = "ReSum (Wu et al., 2025)"

    def shows_as_summary(self, e: IndexEntry) -> bool:
        return e.kind == SUMMARY_KIND and not self.cfg.expand_summaries

    def fold(self, session_id: str, entries: list[IndexEntry]) -> list[dict]:
        for e in entries:
            self.index.entries[e.entry_id] = e
        return [{"action": "add", "entries": [e.entry_id for e in entries]}]

    def verbatim(self) -> list[IndexEntry]:
        return by_time(e for e in self.index.entries.values() if e.kind != SUMMARY_KIND)

    def summaries(self) -> list[IndexEntry]:
        return by_time(e for e in self.index.entries.values() if e.kind == SUMMARY_KIND)

    def shrink(self) -> dict:
        raw, sums = self.verbatim(), self.summaries()
        older = raw[:max(0, len(raw) - self.cfg.recent)]
        if older:  # summarise the oldest block beyond the recent window
            block = older[:self.cfg.block]
        elif len(sums) >= 2:  # the rolling summary: fold the two oldest summaries
            block = sums[:2]
        else:  # the window alone is over budget: the oldest verbatim entries give way
            block = (sums + raw)[:max(2, min(self.cfg.block, len(raw)))]
        new = self.merged(block, kind=SUMMARY_KIND, tokens=self.cfg.summary_tokens)
        self.replace_entries(block, new)
        return {"action": "summarise", "into": new.entry_id, "entries": [e.entry_id for e in block],
                "support": new.support}
