"""``moviechat``: MovieChat's short-/long-term memory over turns (a bounded baseline, C3M §3.2).

MovieChat (Song et al., "MovieChat: From Dense Token to Sparse Memory for Long Video Understanding",
CVPR 2024) streams video frames into a fixed-length short-term memory; when it is full, the most similar
*temporally adjacent* frames are merged repeatedly until a few consolidated tokens remain, which move to
the long-term memory, and the short-term memory starts again. On c3m's shared protocol
(``c3m.methods.bounded``) a Raw Node plays the frame:

- **Kept from the original**: a short-term buffer of ``short_term`` per-node entries; when it overflows it is
  consolidated by merging the most similar adjacent pair (cosine of the entries' vectors) until
  ``consolidated`` entries remain, which join the long-term memory. Merges are only ever between neighbours
  in time, so every entry covers one contiguous run of turns.
- **Extended for the budget**: the original long-term memory grows without bound; here, while the index is
  over the shared write budget, the most similar adjacent pair of the long-term memory is merged the same
  way (MovieChat's own consolidation rule applied to its long-term store).
- **Simplified**: a merged entry's vector is the support-weighted mean of its parts (the original averages
  frame tokens); its routing text is an extractive summary (``merged_tokens``) of its parts' texts, since a
  text index needs one; the reader is the protocol's shared one (no Q-Former, no per-frame tokens) and
  expands a routed entry into its Raw Nodes, originals and images included (Src is never dropped).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..index.active import IndexEntry
from .base import register
from .bounded import BoundedConfig, BoundedIndexMethod, by_time, cosine


@dataclass(frozen=True)
class MovieChatConfig(BoundedConfig):
    short_term: int = field(default=16, metadata={"minimum": 2})     # entries in the short-term buffer
    consolidated: int = field(default=4, metadata={"minimum": 1})    # entries a full buffer is merged down to
    merged_tokens: int = field(default=96, metadata={"minimum": 8})  # routing text of a merged entry

    def validate(self) -> None:
        if self.consolidated >= self.short_term:
            from ..errors import InvalidInput

            raise InvalidInput("method_options.consolidated", f"must be below short_term ({self.short_term})",
                               fix="e.g. short_term = 16, consolidated = 4")


def merge_adjacent(entries: list[IndexEntry]) -> int:
    """Index i of the most similar adjacent pair (entries[i], entries[i + 1]); ties go to the earlier pair."""
    sims = [cosine(a, b) for a, b in zip(entries, entries[1:])]
    return max(range(len(sims)), key=lambda i: (sims[i], -i))


@register
class MovieChat(BoundedIndexMethod):
    name = "moviechat"
    Config = MovieChatConfig
    summary = "short-term buffer of turns consolidated by merging adjacent similar entries into long-term memory"
    reads = "Raw Nodes via merged entries"
    paper = "MovieChat (Song et al., CVPR 2024)"

    def short(self) -> list[IndexEntry]:
        ids = set(self.index.meta.get("short_term", []))
        return by_time(e for e in self.index.entries.values() if e.entry_id in ids)

    def long(self) -> list[IndexEntry]:
        ids = set(self.index.meta.get("short_term", []))
        return by_time(e for e in self.index.entries.values() if e.entry_id not in ids)

    def _merge_pair(self, run: list[IndexEntry]) -> dict:
        i = merge_adjacent(run)
        a, b = run[i], run[i + 1]
        new = self.merged([a, b], tokens=self.cfg.merged_tokens)
        self.replace_entries([a, b], new)
        return {"a": a.entry_id, "b": b.entry_id, "sim": round(cosine(a, b), 4), "into": new.entry_id}

    def _consolidate(self) -> dict:
        merges = 0
        while len(self.short()) > self.cfg.consolidated:
            b = self._merge_pair(self.short())["b"]  # the merged entry took the earlier part's id
            self.index.meta["short_term"] = [i for i in self.index.meta["short_term"] if i != b]
            merges += 1
        moved = [e.entry_id for e in self.short()]
        self.index.meta["short_term"] = []
        return {"action": "consolidate", "merges": merges, "to_long_term": moved}

    def fold(self, session_id: str, entries: list[IndexEntry]) -> list[dict]:
        actions = []
        for e in entries:
            self.index.entries[e.entry_id] = e
            self.index.meta["short_term"] = [*self.index.meta.get("short_term", []), e.entry_id]
            if len(self.index.meta["short_term"]) > self.cfg.short_term:
                actions.append(self._consolidate())
        return actions

    def shrink(self) -> dict:
        long = self.long()
        if len(long) >= 2:
            return {"action": "merge_long_term", **self._merge_pair(long)}
        return self._consolidate()
