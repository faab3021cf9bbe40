"""Incoming units for RAMU: how a session is cut, and what each unit says (entities, states, cues).

**Granularity** (``unit_tokens``): a unit is a run of consecutive turns that starts at a user turn; a new
unit starts at the next user turn once the current one holds at least ``unit_tokens`` tokens. ``0`` gives
one unit per exchange (a user turn and the replies to it), ``256`` HiVe-Mem's episodes, a huge value one
unit per session (the C3M paper's reading). Default 0 — measured in
``benchmarks/results/c3m-synth-cpu/``: a fact lives in one turn, and a session-level vector is dominated by
the small talk around it, so coarser units hide facts from both RAMU and routing.

**Descriptors** (the inputs of the relation features, all from the unit's own text, query-blind):

- ``entities``: anchor keys (spaCy noun chunks and named entities, or the heuristic fallback) with
  colour/material/shape words stripped, plus each chunk's head noun — what the unit is *about*.
- ``states``: attribute values — colour, material, pattern and shape words, numbers, and proper names
  introduced by "called"/"named" (a shop's new name; the name stays an entity too, so "Ziggy is staying
  with me" finds the rabbit called Ziggy). A named lexicon heuristic; the trained relation
  head (training issue) is meant to replace what it misses.
- ``change``: the unit's user turn uses a change cue (a general lexicon of change verbs by stem, plus a few
  phrases: "repaint…", "now", "moved", "renam…", "no longer", "new coat", ...). Small-talk phrases that look
  like cues ("Quick update:", "a nice change") are deliberately not in the list.
- ``again``: a re-mention cue ("again", "still") — the unit shows or uses something already known;
  ``another``: a new-instance cue ("another", "a second") — a look-alike, not the known one.

Entities and states come from the unit's *user* turns (all turns when it has none): the replies around a
fact ("Thanks for the update!", "Take care") would otherwise make unrelated units look alike.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from datetime import datetime
from typing import Sequence

import numpy as np

from ..types import RawNode

STATE_WORDS = frozenset("""
red orange yellow green blue purple pink brown black white grey gray silver gold beige teal navy turquoise
cream maroon olive violet ivory
wooden wood metal metallic plastic glass ceramic leather cotton wool stone marble steel iron copper brass
bamboo rattan linen silk velvet concrete paper cardboard porcelain
striped spotted dotted checked plain floral patterned
round square rectangular oval triangular arched curved flat tall short big small large tiny huge
""".split())
#: Change cues: a general English lexicon of state-change verbs and phrases, written from the language, not
#: from any generator's templates (tuned on the dev split only; see benchmarks/README.md). Stems match any
#: inflection ("repaint" ~ repainted, repainting); bare words and phrases match exactly. Ambiguous small-talk
#: words ("a nice change", "update") are deliberately absent.
CHANGE_STEMS = ("repaint", "recolo", "respray", "redecorat", "refinish", "revarnish", "relocat", "renam", "rebrand",
                "replac", "swapp", "upgrad", "dyed", "painted", "resprayed", "moved", "shifted", "transferr",
                "switched", "sold", "selling", "traded", "donated", "retired", "redid", "redone")
CHANGE_WORDS = frozenset("now anymore became become becomes turned changed converted swapped".split())
CHANGE_PHRASES = ("no longer", "got rid", "gave away", "given away", "new coat", "new colour", "new color",
                  "new paint", "paint job", "new name", "new home", "new spot", "new place", "different colour",
                  "different color", "moved it", "put it in", "these days", "from now on", "isn't there")
_NAME_AFTER = re.compile(r"\b(?:called|named|renamed(?:\s+to)?)\s+((?:[A-Z][\w'&-]*\s?){1,4})")
_NUMBER = re.compile(r"\b\d[\d.,:]*\b")
_WORD = re.compile(r"[a-z]+")
_GENERIC = frozenset("lot day time way thing bit one today yesterday week weekend evening morning night".split())
#: re-mention cues: the unit shows or uses something already known ("my mug again", "still", "same as before")
SAME_CUES = frozenset("again still usual unchanged same".split())
SAME_PHRASES = ("once more", "one more time", "as before", "as ever", "as always", "one more photo",
                "one more picture", "one more shot", "nothing new", "nothing to report", "no change",
                "no difference", "not changed", "hasn't changed", "as it was")
#: new-instance cues: a second thing of a known kind ("another mug", "a second lamp") is not the first one
OTHER_CUES = frozenset("another second different other lookalike look-alike identical twin similar".split())
#: "another photo of X" re-shows X: a photo word right after "another" makes it a re-mention, not a new thing
_PHOTO_WORDS = frozenset("photo picture pic shot snap snapshot image look angle view".split())
_WORD_DASH = re.compile(r"[a-z]+(?:-[a-z]+)*")
_NOT_PART_OF_NAME = frozenset("new another other same".split())  # "my new basket" is about a "basket"


@dataclass
class Unit:
    """One incoming unit m_t: its Raw Nodes, routing vector z, time and descriptors."""

    session_id: str
    turns: list[int]
    node_ids: list[str]
    time: datetime
    text: str
    z: np.ndarray
    entities: set[str] = field(default_factory=set)
    states: set[str] = field(default_factory=set)
    change: bool = False
    images: int = 0
    again: bool = False
    another: bool = False
    image_z: np.ndarray | None = None
    visual: set[str] = field(default_factory=set)  # visual anchor keys of its images (the anchor graph's)


def segment(nodes: Sequence[RawNode], unit_tokens: int, count) -> list[list[RawNode]]:
    """Cut a session's nodes into units (see module docstring); every node lands in exactly one unit."""
    units: list[list[RawNode]] = []
    tokens = 0
    for node in nodes:
        starts = not units or (node.role == "user" and tokens >= unit_tokens)
        if starts:
            units.append([])
            tokens = 0
        units[-1].append(node)
        tokens += count(node.text)
    return units


def speakers(group: Sequence[RawNode]) -> list[RawNode]:
    """The turns a unit's descriptors come from: its user turns, or all its turns when it has none (module
    docstring). Only these are sent to the anchor extractor: the replies around a fact are never described."""
    return [n for n in group if n.role == "user"] or list(group)


def describe_text(text: str, anchors) -> tuple[set[str], set[str], bool, bool, bool]:
    """(entities, states, change cue, re-mention cue, new-instance cue) of one text (module docstring)."""
    entities, states = set(), set()
    for a in anchors:
        if a.label in ("DATE", "TIME", "CARDINAL", "ORDINAL", "QUANTITY", "PERCENT"):
            continue
        words = [w for w in a.key.split() if w]
        states.update(w for w in words if w in STATE_WORDS)
        rest = [w for w in words if w not in STATE_WORDS and w not in _NOT_PART_OF_NAME]
        if not rest or (len(rest) == 1 and rest[0] in _GENERIC):
            continue
        entities.add(" ".join(rest))
        if len(rest) > 1 and a.kind == "noun_chunk":
            entities.add(rest[-1])  # the head noun: "amara rabbit" is also about a "rabbit"
    lower = text.lower()
    words = set(_WORD.findall(lower))
    states.update(w for w in words if w in STATE_WORDS)
    states.update(m.group().strip(".,:") for m in _NUMBER.finditer(text))
    for m in _NAME_AFTER.finditer(text):
        name = m.group(1).strip().lower()
        states.add(name)
    return entities, states, *cues(lower)


def cues(lower: str) -> tuple[bool, bool, bool]:
    """(change, re-mention, new-instance) cues of a lower-cased text (module docstring)."""
    seq = _WORD_DASH.findall(lower)
    words = set(seq)
    change = (bool(words & CHANGE_WORDS) or any(w.startswith(CHANGE_STEMS) for w in words)
              or any(p in lower for p in CHANGE_PHRASES))
    reshown = any(a == "another" and b in _PHOTO_WORDS for a, b in zip(seq, seq[1:]))
    again = bool(words & SAME_CUES) or reshown or any(p in lower for p in SAME_PHRASES)
    other = bool(words & OTHER_CUES) and not (reshown and not (words & OTHER_CUES) - {"another"})
    return change, again, other


class DescriptionMemo:
    """Per-process memo of text -> ``describe_text`` over one anchor extractor: small talk repeats across
    sessions and histories, and the extractor (spaCy) is the slow part. Shared by every method that needs the
    descriptors (c3m's RAMU, the baselines' relation features, the relation-pair builder)."""

    def __init__(self, name: str, max_items: int = 100_000):
        self.name = name
        self.max_items = max_items
        self.memo: dict[str, tuple] = {}
        self._extractor = None
        self.__setstate__({})

    def __getstate__(self):  # locks do not pickle; a copy gets its own
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_extracting", "_inflight")}

    def __setstate__(self, state):
        # one memo per process, shared by threads (a server's reader and writer, the ingest's prefetcher): _lock
        # guards the memo for a moment; _extracting lets one thread at a time run the extractor (a spaCy pipeline
        # is not made for two), and _inflight says which texts it is on, so a caller whose texts are done or
        # being done never waits for someone else's batch
        self.__dict__.update(state, _lock=threading.Lock(), _extracting=threading.Lock(), _inflight={})

    @property
    def extractor(self):
        """Loaded on first use: commands that never describe a text (inspect, verify, a no-op ingest) skip
        spaCy's start-up."""
        if self._extractor is None:
            from ..models.anchors import make_anchor_extractor

            self._extractor = make_anchor_extractor(self.name)
        return self._extractor

    def describe(self, texts: Sequence[str]) -> list[tuple[set, set, bool, bool, bool]]:
        texts = list(texts)
        while True:
            with self._lock:
                missing = [t for t in dict.fromkeys(texts) if t not in self.memo]
                if not missing:
                    return [self.memo[t] for t in texts]
                waits = {id(e): e for e in (self._inflight.get(t) for t in missing) if e is not None}
                todo = [t for t in missing if t not in self._inflight]
                done = threading.Event()
                self._inflight.update(dict.fromkeys(todo, done))
            if todo:
                try:
                    with self._extracting:
                        found = [describe_text(t, a) for t, a in zip(todo, self.extractor.extract(todo))]
                    with self._lock:
                        if len(self.memo) + len(found) > self.max_items:
                            self.memo.clear()
                        self.memo.update(zip(todo, found))
                finally:
                    with self._lock:
                        for t in todo:
                            self._inflight.pop(t, None)
                    done.set()
            for event in waits.values():  # another thread's batch holds them; if it failed, the loop retries here
                event.wait()


@lru_cache(maxsize=3)
def describer(name: str) -> DescriptionMemo:
    """The process's one ``DescriptionMemo`` for an anchor extractor name."""
    return DescriptionMemo(name)
