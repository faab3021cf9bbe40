"""The bounded active index: entries and pages, their accounting against the write budget, and its JSON.

An entry is m = (z, P, tau) plus what routing and RAMU need: entity counts, current attribute values, a
short routing text, the update chain (``versions``: each predecessor state with its own pointers, so
"before" states stay reachable — Src(e) is ``pointers`` plus every version's pointers), relation labels,
and keep-links to related entries. A *spill* entry is the capacity fallback's page-level entry: it holds
the pointers, versions and relation labels of every entry folded into it.

Pointers are stored per session as turn-index ranges (``{"s004": "0-5,7"}``): Raw-Node ids are derived
from (namespace, session, turn) (``types.node_id_for``), so nothing is lost, and a long history's pointer
list costs bytes in proportion to its sessions rather than its turns.

**Accounting** (checked against ``WriteBudget`` after every commit, and measured again by the harness from
the committed snapshot with ``c3m.budget.measure_index``, which ``ActiveIndex.usage`` equals exactly while
re-measuring only the entries that changed): entries and pages are counted
directly; index tokens are the token counts of every routing text the index holds (each entry's
``routing_text``, i.e. ``render()``, stored in the snapshot, and the page summaries); index bytes are the
length of the index's compact JSON (``state()``, vectors as base64 float16, pointers as ranges, document
frequencies included).
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping

import numpy as np

from ..types import WriteBudget, node_id_for

def idf(key: str, df: Mapping[str, int], n_docs: int) -> float:
    """IDF without the usual +1, so words in a large share of units ("plan", "update") weigh almost
    nothing; one phantom unit that holds no key keeps every weight above 0 (in a young index a key can be
    in every unit so far)."""
    return math.log((2 + n_docs) / (1 + min(df.get(key, 0), n_docs)))


MAX_ENTITIES = 12      # entity keys kept per entry (most frequent)
MAX_STATES = 8         # current attribute values kept per entry
MAX_VISUAL = 8         # visual anchor keys kept per entry (most frequent)
MAX_RENDERED_VERSIONS = 4
MAX_DF_KEYS = 4000     # document-frequency table size (least frequent keys dropped first)
MAX_SAID = 1024        # statement keys a spill keeps (the oldest dropped first)
#: (entities shown, "before" states shown, words of text kept; None = all) per compaction level
COMPACT_LEVELS = ((8, MAX_RENDERED_VERSIONS, None), (4, 2, 16), (2, 1, 8), (1, 0, 0))


_IMAGE_MARK = re.compile(r"\[\d+ images?\]\s*$")


def statement_key(text: str) -> str | None:
    """A short key of a statement's exact words (case and spacing ignored), or None for an empty text or one that
    comes with images (its summary ends "[n image(s)]").

    A spill keeps these for its members (``IndexEntry.said``, 12 hex characters each, charged to the index bytes
    like every field), so the capacity policy can recognise a later entry that says word for word what a folded
    entry said (``write.capacity.duplicate_pair``). A text with images is never keyed: a re-shot photo with the same
    caption may show a changed state."""
    norm = " ".join(text.lower().split())
    if not norm or _IMAGE_MARK.search(norm):
        return None
    return hashlib.blake2b(norm.encode(), digest_size=6).hexdigest()


def encode_vec(z: np.ndarray) -> str:
    return base64.b64encode(np.asarray(z, np.float16).tobytes()).decode("ascii")


def _json_len(obj) -> int:
    """Bytes of ``obj`` as the compact, key-sorted JSON that ``c3m.budget.state_bytes`` measures."""
    return len(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode())


def decode_vec(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=np.float16).astype(np.float32)


def normalize(z: np.ndarray) -> np.ndarray:
    """Unit length, rounded through float16 exactly as the snapshot stores it, so an index rebuilt from its
    snapshot behaves bit-for-bit like the one that wrote it."""
    z = np.asarray(z, np.float32)
    n = float(np.linalg.norm(z))
    if n < 1e-15:  # squares of such components are subnormal or zero in float32: measure and divide in float64
        n = float(np.linalg.norm(z.astype(np.float64)))
        return decode_vec(encode_vec((z.astype(np.float64) / n).astype(np.float32) if n > 0 else z))
    return decode_vec(encode_vec(z / n if n > 0 else z))


def mean_direction(acc: np.ndarray | None, new: np.ndarray | None) -> np.ndarray | None:
    """A running mean direction of unit vectors: ``acc`` with ``new`` folded in (either may be missing). An
    entry's image vector (RAMU's image–image feature) is kept this way."""
    if new is None:
        return acc
    return normalize(new if acc is None else acc + new)


def encode_turns(turns) -> str:
    """Sorted turn indices as ranges: [0,1,2,5] -> "0-2,5"."""
    out, run = [], []
    for t in sorted(set(turns)):
        if run and t == run[-1] + 1:
            run.append(t)
        else:
            if run:
                out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = [t]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def decode_turns(s: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, s.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def _union_into(out: dict[str, set[int]], b: dict[str, set[int]]) -> None:
    """``out = merge_pointers(out, b)`` without copying ``out`` (same keys in the same order, same sets)."""
    for s, t in b.items():
        got = out.get(s)
        if got is None:
            out[s] = set(t)
        else:
            got.update(t)


def merge_pointers(a: dict[str, set[int]], b: dict[str, set[int]]) -> dict[str, set[int]]:
    out = {s: set(t) for s, t in a.items()}
    for s, t in b.items():
        out.setdefault(s, set()).update(t)
    return out


@dataclass
class Version:
    """A predecessor state of an updated entry (kept, with its pointers, when Update moves on)."""

    time: datetime
    pointers: dict[str, set[int]]
    states: list[str]
    text: str

    def __setattr__(self, name, value):
        object.__setattr__(self, "_nbytes", None)  # any reassignment invalidates the cached size (json_len)
        object.__setattr__(self, "_json", None)  # ... and the cached JSON form (to_json)
        object.__setattr__(self, name, value)

    def to_json(self) -> dict:
        """The JSON form, cached like ``json_len`` (every snapshot writes every version: ~7% of a 128K ingest's
        writer time went here). Callers must not mutate it: snapshots only encode it."""
        if getattr(self, "_json", None) is None:
            object.__setattr__(self, "_json", {
                "time": self.time.isoformat(), "pointers": {s: encode_turns(t) for s, t in self.pointers.items()},
                "states": self.states, "text": self.text})
        return self._json

    def json_len(self) -> int:
        """Bytes of ``to_json()`` as compact JSON, cached: a version is written once and moved, never edited in
        place (an edit in place must reassign a field, which drops the cache)."""
        if getattr(self, "_nbytes", None) is None:
            object.__setattr__(self, "_nbytes", _json_len(self.to_json()))
        return self._nbytes

    def __getstate__(self):  # copies and pickles carry the fields, not the caches
        return {k: v for k, v in self.__dict__.items() if k not in ("_nbytes", "_json")}

    @classmethod
    def from_json(cls, d: dict) -> "Version":
        return cls(datetime.fromisoformat(d["time"]), {s: decode_turns(t) for s, t in d["pointers"].items()},
                   list(d["states"]), d["text"])


_REVISIONS = itertools.count()  # IndexEntry.revision: a new number at every change of any entry


@dataclass
class IndexEntry:
    entry_id: str
    z: np.ndarray
    pointers: dict[str, set[int]]
    time: datetime
    first_time: datetime
    text: str
    page: int = 0
    kind: str = "entry"  # "entry" | "spill"
    support: int = 1
    entities: Counter = field(default_factory=Counter)
    states: list[str] = field(default_factory=list)
    versions: list[Version] = field(default_factory=list)
    labels: Counter = field(default_factory=Counter)       # relation labels recorded on this entry
    links: list[list] = field(default_factory=list)         # [entry_id, relation, confidence] (Keep)
    members: list[str] = field(default_factory=list)        # spill: ids of the entries folded in
    compact: int = 0                                        # routing-text compaction level (0..3)
    visual: Counter = field(default_factory=Counter)        # visual anchor keys of its images (anchor graph)
    image_z: np.ndarray | None = None                       # mean image vector of its units' images (RAMU)
    said: list[str] = field(default_factory=list)           # spill: ``statement_key``s of its members' texts

    def __setattr__(self, name, value):
        self.touch()  # any reassignment invalidates what is cached about the entry
        object.__setattr__(self, name, value)

    def touch(self) -> None:
        """Drop the cached accounting and move ``revision`` on after an in-place change (``entities.update``,
        ``versions.append``, ...); reassigning a field does this by itself."""
        object.__setattr__(self, "_acct", None)
        object.__setattr__(self, "revision", next(_REVISIONS))

    def accounting(self, count) -> tuple[int, int]:
        """(tokens of ``render()``, bytes of ``to_json()`` as compact JSON), cached until the entry changes, so a
        capacity repair step re-measures only the entries it touched. The bytes are exactly those the entry adds
        to ``c3m.budget.state_bytes`` of the index state: the versions' JSON is summed from each version's cached
        length instead of being re-encoded (a spill holds many)."""
        got = getattr(self, "_acct", None)
        if got is not None and got[0] == count:
            return got[1], got[2]
        d = self._json([])
        nv = len(self.versions)
        nbytes = _json_len(d) + sum(v.json_len() for v in self.versions) + max(0, nv - 1)
        tokens = count(d["routing_text"])
        object.__setattr__(self, "_acct", (count, tokens, nbytes))
        return tokens, nbytes

    def __getstate__(self):  # copies and pickles carry the fields, not the cache (which holds ``count``)
        return {k: v for k, v in self.__dict__.items() if k not in ("_acct", "revision")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.touch()  # a copy is a new entry: its own revision

    def sources(self) -> dict[str, set[int]]:
        """Src(e): own pointers plus every predecessor version's pointers."""
        out = {s: set(t) for s, t in self.pointers.items()}
        for v in self.versions:
            _union_into(out, v.pointers)
        return out

    def top_entities(self, n: int = MAX_ENTITIES) -> list[str]:
        return [k for k, _ in sorted(self.entities.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

    def render(self) -> str:
        """The routing text this entry holds in the index (what ``c3m inspect`` shows, and what is charged
        to the index-token budget); shorter at each compaction level."""
        entities, versions, words = COMPACT_LEVELS[self.compact]
        text = " ".join(self.text.split()[:words]) if words is not None else self.text
        parts = [text] if text else []
        if self.kind == "spill":
            parts.insert(0, f"[spill of {len(self.members)} entries]")
        ents = self.top_entities(entities)
        if ents:
            parts.append("about: " + ", ".join(ents))
        if self.states:
            parts.append("state: " + ", ".join(self.states))
        shown = self.versions[-versions:] if versions else []
        if shown:
            before = "; ".join(f"{v.time.date().isoformat()} {', '.join(v.states) or v.text[:40]}" for v in shown)
            more = len(self.versions) - len(shown)
            parts.append("before: " + before + (f" (+{more} earlier)" if more > 0 else ""))
        return " | ".join(parts)

    def to_json(self) -> dict:
        return self._json([v.to_json() for v in self.versions])

    def _json(self, versions: list) -> dict:
        return {"id": self.entry_id, "z": encode_vec(self.z), "time": self.time.isoformat(),
                "first_time": self.first_time.isoformat(), "text": self.text, "page": self.page, "kind": self.kind,
                "support": self.support, "pointers": {s: encode_turns(t) for s, t in self.pointers.items()},
                "entities": dict(self.entities), "states": self.states,
                "versions": versions, "labels": dict(self.labels),
                "links": self.links, "members": self.members, "compact": self.compact,
                **({"visual": dict(self.visual)} if self.visual else {}),
                **({"image_z": encode_vec(self.image_z)} if self.image_z is not None else {}),
                **({"said": self.said} if self.said else {}),
                "routing_text": self.render()}  # what the harness charges to index tokens (c3m.budget)

    @classmethod
    def from_json(cls, d: dict) -> "IndexEntry":
        return cls(d["id"], decode_vec(d["z"]), {s: decode_turns(t) for s, t in d["pointers"].items()},
                   datetime.fromisoformat(d["time"]), datetime.fromisoformat(d["first_time"]), d["text"],
                   d["page"], d["kind"], d["support"], Counter(d["entities"]), list(d["states"]),
                   [Version.from_json(v) for v in d["versions"]], Counter(d["labels"]), list(d["links"]),
                   list(d["members"]), d.get("compact", 0), Counter(d.get("visual", {})),
                   decode_vec(d["image_z"]) if "image_z" in d else None, list(d.get("said", ())))


@dataclass
class IndexPage:
    z: np.ndarray
    summary: str = ""


PAGE_LABEL_WORDS = 6   # words of an entry's text in a page label that has no entity keys


def _top_keys(counts: Counter, n: int) -> list[str]:
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def top_counts(counts: Counter, n: int) -> Counter:
    """The ``n`` most frequent keys, ties by key. Not ``Counter.most_common``: it breaks ties by insertion
    order, which for keys that came from a set is the process's string-hash order, so two runs of one
    history kept different visual anchors and document frequencies (only 9 of 58 snapshots equal)."""
    return Counter(dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]))


def page_label(members: list[IndexEntry]) -> str:
    """A page's summary: ``"page: "`` + a label that is never empty for a non-empty page.

    The label is the page's 10 most frequent entity keys (summed over its entries); a page whose entries
    have no entity keys falls back to the first ``PAGE_LABEL_WORDS`` words of its most-supported entry's text
    (ties: lowest entry id; entries with empty text are skipped), then to its most frequent visual anchor
    keys, its entries' states, and finally its entry ids.
    """
    ents: Counter = Counter()
    for e in members:
        ents.update(e.entities)
    label = ", ".join(_top_keys(ents, 10))
    if not label:
        for e in sorted(members, key=lambda e: (-e.support, e.entry_id)):
            label = " ".join(e.text.split()[:PAGE_LABEL_WORDS])
            if label:
                break
    if not label:
        visual: Counter = Counter()
        for e in members:
            visual.update(e.visual)
        label = ", ".join(_top_keys(visual, 10))
    if not label:
        label = ", ".join(dict.fromkeys(s for e in members for s in e.states if s.strip()))
    if not label:
        label = ", ".join(e.entry_id for e in members)
    return "page: " + label


_STATE_KEYS = frozenset({"dim", "next_id", "n_docs", "df", "entries", "pages"})


class ActiveIndex:
    """Entries + pages + write-time document frequencies, with budget accounting (module docstring)."""

    def __init__(self, dim: int, meta: dict | None = None):
        self.dim = dim
        self.meta = dict(meta or {})  # the owner's labels (embedder, head): part of the snapshot, so counted
        self.entries: dict[str, IndexEntry] = {}
        self.pages: list[IndexPage] = []
        self.df: Counter = Counter()
        self.n_docs = 0
        self.next_id = 0
        self._node_ids: dict[tuple[str, str, int], str] = {}  # pointer_ids' memo

    # -- ids, statistics ---------------------------------------------------------------------
    def new_id(self) -> str:
        self.next_id += 1
        return f"e{self.next_id:05d}"

    def observe_df(self, keys) -> None:
        self.n_docs += 1
        self.df.update(set(keys))
        if len(self.df) > MAX_DF_KEYS:
            self.df = top_counts(self.df, MAX_DF_KEYS)

    # -- views ---------------------------------------------------------------------------------
    def ordered(self) -> list[IndexEntry]:
        return sorted(self.entries.values(), key=lambda e: e.entry_id)

    def page_entries(self, page: int) -> list[IndexEntry]:
        return [e for e in self.ordered() if e.page == page]

    def matrix(self, entries=None) -> np.ndarray:
        entries = self.ordered() if entries is None else entries
        return np.stack([e.z for e in entries]).astype(np.float32) if entries else np.zeros((0, self.dim), np.float32)

    def sources(self) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for e in self.entries.values():
            _union_into(out, e.sources())
        return out

    def pointer_ids(self, namespace: str) -> set[str]:
        """Raw-Node ids of every pointer (each commit's snapshot stores them). The ids are memoised per
        (namespace, session, turn): hashing every pointed-to turn again at each commit grew with the history."""
        memo = self._node_ids
        out = set()
        for s, turns in self.sources().items():
            for t in turns:
                key = (namespace, s, t)
                nid = memo.get(key)
                if nid is None:
                    nid = memo[key] = node_id_for(namespace, s, t)
                out.add(nid)
        return out

    # -- accounting ----------------------------------------------------------------------------
    def usage(self, count) -> tuple[int, int, int, int]:
        """(entries, pages, index tokens, index bytes) — the WriteBudget dimensions, exactly what the harness's
        ``c3m.budget.measure_index(self.state(), count)`` gives, so the two cannot disagree; but incremental:
        each entry's routing-text tokens and JSON bytes are cached on the entry (``IndexEntry.accounting``), and
        the state's JSON is the rest of the state (entries left out) plus the entries' bytes and their commas."""
        per_entry = [e.accounting(count) for e in self.entries.values()]
        pages = [{"z": encode_vec(p.z), "summary": p.summary} for p in self.pages]
        rest = _json_len(self._state([], pages))
        n = len(per_entry)
        tokens = sum(t for t, _ in per_entry) + sum(count(p["summary"]) for p in pages)
        return n, len(pages), tokens, rest + sum(b for _, b in per_entry) + max(0, n - 1)

    @staticmethod
    def over(usage, budget: WriteBudget) -> list[str]:
        """The write-budget dimensions ``usage`` exceeds (the harness's ``IndexUse.over``, as a list)."""
        from ..budget import IndexUse

        return list(IndexUse(*usage).over(budget))

    # -- pages ---------------------------------------------------------------------------------
    def refresh_pages(self, labels: bool = True) -> None:
        """Drop empty pages (renumbering), recompute each page's centroid and summary (``page_label``).

        ``labels=False`` recomputes the centroids only and keeps each page's old summary: RAMU places entries by
        the centroids alone, so within one commit the labels (the costly part: every page's entity counts
        summed and sorted) are computed once, after the last unit (``C3M.observe``)."""
        used = sorted({e.page for e in self.entries.values()})
        remap = {old: new for new, old in enumerate(used)}
        for e in self.entries.values():
            if e.page != remap[e.page]:  # an unchanged entry keeps its cached accounting
                e.page = remap[e.page]
        old = {remap[p]: page for p, page in enumerate(self.pages) if p in remap}
        self.pages = []
        by_page: dict[int, list[IndexEntry]] = {}
        for e in self.ordered():  # one sort for all pages (page_entries per page sorted them all each time)
            by_page.setdefault(e.page, []).append(e)
        for p in range(len(used)):
            members = by_page[p]
            z = normalize(sum(e.z * e.support for e in members))
            self.pages.append(IndexPage(z, page_label(members) if labels or p not in old else old[p].summary))

    # -- persistence -------------------------------------------------------------------------
    def state(self) -> dict:
        return self._state([e.to_json() for e in self.ordered()],
                           [{"z": encode_vec(p.z), "summary": p.summary} for p in self.pages])

    def _state(self, entries: list, pages: list) -> dict:
        return {**self.meta, "dim": self.dim, "next_id": self.next_id, "n_docs": self.n_docs, "df": dict(self.df),
                "entries": entries, "pages": pages}

    @classmethod
    def from_state(cls, d: dict) -> "ActiveIndex":
        idx = cls(d["dim"], {k: v for k, v in d.items() if k not in _STATE_KEYS})
        idx.next_id, idx.n_docs, idx.df = d["next_id"], d["n_docs"], Counter(d["df"])
        idx.entries = {e["id"]: IndexEntry.from_json(e) for e in d["entries"]}
        idx.pages = [IndexPage(decode_vec(p["z"]), p["summary"]) for p in d["pages"]]
        return idx
