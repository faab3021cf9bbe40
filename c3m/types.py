"""The c3m data model: what flows from a session to a budgeted, provenance-linked context.

Input side (what a user or a dataset gives): ``Session`` of ``Turn``s, grouped into a ``History``
with ``Question``s for evaluation. Storage side (immutable once written): ``RawNode`` with
``ImageRef``s. Index side (bounded, rewritten by maintenance): ``Entry``, ``Page``, ``Episode``.
Read side: ``ReaderBudget``, ``BudgetUse``, ``ContextItem``, ``Context``, ``RouteTrace``.

Defaults are the papers' (C3M §3.2, HiVe-Mem); see docs/architecture.md.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

ROLES = ("user", "assistant", "system")
CATEGORIES = ("IE", "MSR", "TR", "KU", "AR")

#: What a caller may pass as an image before it is stored: a file path or the encoded bytes.
ImageInput = Union[str, Path, bytes]


# ---------------------------------------------------------------------------------------------
# Input side
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    """One utterance; images are given as paths or encoded bytes and become ``ImageRef``s on store."""

    role: str
    text: str
    images: tuple[ImageInput, ...] = ()

    def __post_init__(self):
        _check_utf8(self.text, "Turn.text")
        object.__setattr__(self, "images", _as_tuple(self.images, "Turn.images", "images=[path_or_bytes, ...]",
                                                    (str, Path, bytes, bytearray, memoryview)))


@dataclass(frozen=True)
class Session:
    """A conversation session: the unit the write path sees (query-blind) and the unit of commit."""

    id: str
    time: datetime
    turns: tuple[Turn, ...]

    def __post_init__(self):
        _check_utf8(self.id, "Session.id")
        object.__setattr__(self, "turns", _as_tuple(self.turns, "Session.turns", "turns=[Turn(...), ...]", (Turn,)))
        for i, t in enumerate(self.turns):
            if not isinstance(t, Turn):
                from .errors import InvalidInput

                raise InvalidInput(f"Session.turns[{i}]", f"must be a Turn, got {type(t).__name__}",
                                   fix='build it with Turn(role="user", text="...")')


def _check_utf8(value: Any, field: str) -> None:
    """Text the store keeps as UTF-8 must be encodable: JSON's "\\ud800" gives a lone surrogate, which is not."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            from .errors import InvalidInput

            raise InvalidInput(field, f"holds an unpaired surrogate (\\u{ord(value[exc.start]):04x}) at character "
                               f"{exc.start}", fix="pass valid Unicode text (a surrogate pair, or the character itself)") \
                from None


def _as_tuple(value: Any, field: str, example: str, single: tuple[type, ...]) -> tuple:
    """A collection field as a tuple; one item given bare (a path string would be split into characters) or a
    non-iterable is refused naming the field."""
    from .errors import InvalidInput

    if isinstance(value, single) or isinstance(value, (str, bytes, Mapping)):
        raise InvalidInput(field, f"must be a list, got a single {type(value).__name__}", fix=f"pass {example}")
    try:
        return tuple(value)
    except TypeError:
        raise InvalidInput(field, f"must be a list, got {type(value).__name__}", fix=f"pass {example}") from None


@dataclass(frozen=True)
class EvidenceRef:
    """A gold evidence turn of a question: (session id, turn index)."""

    session: str
    turn: int


@dataclass(frozen=True)
class Question:
    """An evaluation question; never shown to the write path."""

    id: str
    question: str
    answer: str
    category: str
    time: datetime | None = None
    evidence: tuple[EvidenceRef, ...] = ()


@dataclass(frozen=True)
class History:
    """One user's history in a dataset (one line of ``episodes.jsonl``)."""

    id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...] = ()


# ---------------------------------------------------------------------------------------------
# Storage side: immutable
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageRef:
    """A stored original image, addressed by the SHA-256 of its bytes."""

    sha256: str
    mime: str
    width: int
    height: int
    nbytes: int


@dataclass(frozen=True)
class Provenance:
    """Where a Raw Node came from: enough to cite it back to the user."""

    namespace: str
    session_id: str
    turn_index: int
    time: datetime


@dataclass(frozen=True)
class RawNode:
    """One turn as stored in the Cold Store. Never changed by maintenance (only ``forget`` redacts)."""

    node_id: str
    provenance: Provenance
    role: str
    text: str
    images: tuple[ImageRef, ...] = ()
    redacted: bool = False

    @property
    def session_id(self) -> str:
        return self.provenance.session_id

    @property
    def turn_index(self) -> int:
        return self.provenance.turn_index

    @property
    def time(self) -> datetime:
        return self.provenance.time


#: strings json.dumps writes unchanged between its quotes (printable ASCII without a quote or a backslash)
_PLAIN = re.compile(r'[ !#-\[\]-~]*\Z')


@functools.lru_cache(maxsize=1 << 18)
def node_id_for(namespace: str, session_id: str, turn_index: int) -> str:
    """Deterministic Raw-Node id, so re-ingesting a session maps to the same nodes: a digest of
    ``json.dumps([namespace, session_id, turn_index])``, written directly when the names need no escaping (3× faster:
    a read's first touch of an entry's pointers computes hundreds). Memoised."""
    if type(turn_index) is int and _PLAIN.match(namespace) and _PLAIN.match(session_id):
        key = f'["{namespace}", "{session_id}", {turn_index}]'
    else:
        key = json.dumps([namespace, session_id, turn_index])
    return f"n-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


# ---------------------------------------------------------------------------------------------
# Index side: bounded, rewritten by maintenance (C3M §2.1, HiVe-Mem episodes)
# ---------------------------------------------------------------------------------------------
class Relation(str, enum.Enum):
    """RAMU relation labels (C3M Eq. 2)."""

    SAME = "same"
    UPDATE = "update"
    DISTINCT = "distinct"
    UNCERTAIN = "uncertain"


class Action(str, enum.Enum):
    """RAMU actions (C3M Eq. 3)."""

    MERGE = "merge"
    UPDATE = "update"
    ADD = "add"
    KEEP = "keep"


@dataclass(frozen=True)
class Episode:
    """A HiVe-Mem episode: ~256 tokens of consecutive turns of one session, cut at a turn end."""

    episode_id: str
    session_id: str
    node_ids: tuple[str, ...]
    text: str
    tokens: int
    time: datetime


@dataclass(frozen=True)
class Entry:
    """A compact index entry m = (z, P, tau) plus routing text and relation links.

    ``pointers`` are Raw-Node ids (P); ``predecessor`` links an Update to the state it replaced so that
    "before" states stay reachable; Src(e) is ``pointers`` plus the predecessor chain's pointers.
    """

    entry_id: str
    z: tuple[float, ...] = field(repr=False)
    pointers: frozenset[str]
    time: datetime
    text: str = ""
    page_id: str | None = None
    predecessor: str | None = None
    relation: Relation | None = None
    tokens: int = 0
    nbytes: int = 0

    def with_(self, **changes: Any) -> "Entry":
        return replace(self, **changes)


@dataclass(frozen=True)
class Page:
    """A group of entries with its own routing vector and summary."""

    page_id: str
    entry_ids: tuple[str, ...]
    z: tuple[float, ...] = field(repr=False, default=())
    summary: str = ""
    tokens: int = 0


@dataclass(frozen=True)
class VisualAnchor:
    """Something seen in an image: an object (``label``) with an optional attribute and its box (a perception
    backend's output; stored in the Cold Store's derived records)."""

    label: str
    attribute: str | None = None
    value: str | None = None
    score: float = 1.0
    bbox: tuple[int, int, int, int] | None = None  # x0, y0, x1, y1 in pixels


@dataclass(frozen=True)
class ImagePerception:
    """Write-time perception of one stored image of one Raw Node: a **derived record** in the Cold Store.

    Immutable and keyed by (backend, version, node, source image): a new backend or version adds records, it
    never rewrites old ones. ``crop`` is the grounded view: a **derived blob** cut from ``image`` around
    ``crop_box`` (the object the turn's own text names, chosen query-blind at write time); it never replaces
    the original. ``forget`` of the node redacts the record and deletes the crop.
    """

    node_id: str
    image: ImageRef
    backend: str
    version: str
    caption: str
    anchors: tuple[VisualAnchor, ...] = ()
    crop: ImageRef | None = None
    crop_box: tuple[int, int, int, int] | None = None
    crop_phrase: str | None = None


class EvidenceForm(str, enum.Enum):
    """What form of a memory reaches the reader (HiVe-Mem vertical composition)."""

    RAW_TEXT = "raw_text"
    SUMMARY = "summary"
    CAPTION = "caption"
    RAW_IMAGE = "raw_image"
    GROUNDED_CROP = "grounded_crop"


def _check_non_negative(obj: Any, names: Sequence[str]) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            from .errors import InvalidInput

            raise InvalidInput(f"{type(obj).__name__}.{name}", f"must be a non-negative integer, got {value!r}",
                               fix=f"pass an int >= 0 for {name}")


# ---------------------------------------------------------------------------------------------
# Budgets
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WriteBudget:
    """Hard limits on the active index after every commit (C3M §3.2)."""

    entries: int = 36
    pages: int = 6
    index_tokens: int = 6144
    index_bytes: int = 384 * 1024

    def scaled(self, factor: float) -> "WriteBudget":
        """C3M §4.2 scales all four limits together (C1.25, C1.5, C1.75)."""
        return WriteBudget(*(max(1, int(round(v * factor))) for v in self.as_tuple()))

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.entries, self.pages, self.index_tokens, self.index_bytes)

    def __post_init__(self):
        _check_non_negative(self, ("entries", "pages", "index_tokens", "index_bytes"))


#: The C3M §4 ablation capacity: 24 entries, other limits at the default.
C1_WRITE_BUDGET = WriteBudget(entries=24)


@dataclass(frozen=True)
class ReaderBudget:
    """Joint read budget over (pages, Raw Nodes, images, text tokens) (C3M Eq. 7).

    The paper's "12K text tokens" is read as 12 x 1024, the same convention as its 6,144 (6K) index
    tokens.
    """

    pages: int = 3
    raw_nodes: int = 12
    images: int = 8
    text_tokens: int = 12 * 1024

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.pages, self.raw_nodes, self.images, self.text_tokens)

    def __post_init__(self):
        _check_non_negative(self, ("pages", "raw_nodes", "images", "text_tokens"))


@dataclass(frozen=True)
class BudgetUse:
    """What a context actually charged, on the same four dimensions as ``ReaderBudget``."""

    pages: int = 0
    raw_nodes: int = 0
    images: int = 0
    text_tokens: int = 0

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.pages, self.raw_nodes, self.images, self.text_tokens)

    def fits(self, budget: ReaderBudget) -> bool:
        return all(u <= b for u, b in zip(self.as_tuple(), budget.as_tuple()))

    def __add__(self, other: "BudgetUse") -> "BudgetUse":
        return BudgetUse(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))


# ---------------------------------------------------------------------------------------------
# Read side
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ContextItem:
    """One piece of evidence handed to the answerer, with its provenance."""

    node_id: str
    provenance: Provenance
    role: str
    form: EvidenceForm
    text: str
    images: tuple[ImageRef, ...]
    score: float
    text_tokens: int
    #: a derived item's (summary, fact) provenance beyond the node it cites: the Raw Nodes whose content it
    #: states. The harness checks that each is a stored, unredacted node of the namespace; the evidence check
    #: credits the item for those turns only
    covers: tuple[str, ...] = ()
    #: where the item stands in an update chain of the context (``c3m.language.timeline``): ``current`` (the
    #: latest state), ``superseded`` (a later turn changed it; ``superseded_at`` says when) or "" (no change
    #: known). Metadata for the answerer; it charges nothing and selects nothing.
    status: str = ""
    superseded_at: datetime | None = None


@dataclass(frozen=True)
class ChainStep:
    """One state in an update chain: the context's turns that state it, when, and the values it introduced."""

    time: datetime
    node_ids: tuple[str, ...]
    turns: tuple[str, ...]          # "session#turn" of each node, for prompts and the CLI
    states: tuple[str, ...] = ()    # state values new at this step ("blue" after "red")


@dataclass(frozen=True)
class UpdateChain:
    """How one subject changed over time, oldest step first; the last step is the current state.

    ``source`` is ``index`` when the write path recorded the update (c3m's RAMU Update versions) and ``read``
    when the read path inferred it from the context's own turns (any method). Steps name only turns that are
    in the context, so a chain shows order and supersession, never content the budget did not pay for."""

    subject: str
    steps: tuple[ChainStep, ...]
    source: str = "read"
    entry_id: str | None = None


@dataclass(frozen=True)
class RouteTrace:
    """What the read path did, so update, routing and answerer failures can be told apart (C3M §2.2)."""

    method: str
    pages: tuple[tuple[str, float], ...] = ()
    entries: tuple[tuple[str, float], ...] = ()
    candidates: tuple[tuple[str, float], ...] = ()
    expanded_nodes: tuple[str, ...] = ()
    expanded_images: tuple[str, ...] = ()
    selected_nodes: tuple[str, ...] = ()
    covered_sessions: tuple[str, ...] = ()
    dropped_for_budget: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: Raw-Node ids handed to the final budgeted selection (the harness's Route-Hit looks here, and reports
    #: the pool's size beside it, so "route everything" is visible); selected nodes are always in it.
    pool: tuple[str, ...] = ()
    #: how many Raw Nodes (or their vectors / postings) were scored before selection: read amplification.
    scored: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(map(list, v)) if v and isinstance(v[0], tuple) else list(v)) if isinstance(v, tuple) else v
                for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Context:
    """The budgeted context for one question: items in time order, budget use, and the route trace."""

    question: str
    items: tuple[ContextItem, ...]
    use: BudgetUse
    budget: ReaderBudget
    trace: RouteTrace
    #: update chains over the context's items (``c3m.language.timeline``), filled on the answer path
    chains: tuple[UpdateChain, ...] = ()

    def step_of(self, node_id: str) -> tuple[UpdateChain, int] | None:
        """The update chain and step index an item belongs to (the first chain naming it)."""
        for c in self.chains:
            for k, s in enumerate(c.steps):
                if node_id in s.node_ids:
                    return c, k
        return None

    def text(self) -> str:
        """The context as the answerer reads it: one block per item with a citation header (and its status in
        an update chain), then the chains."""
        blocks = []
        for item in self.items:
            imgs = "".join(f" <image {im.sha256[:12]}>" for im in item.images)
            blocks.append(f"{item_header(item)} {item.text}{imgs}")
        return "\n".join(blocks + chain_lines(self.chains))


@dataclass(frozen=True)
class Answer:
    """An answer with the context it was read from."""

    text: str
    context: Context
    answerer: str
    cited: tuple[str, ...] = ()
    #: True when the answerer declined ("not in memory" / "not sure"): ``text`` then says so and no value is
    #: asserted. The harness scores selective accuracy (coverage = share not declined) from this flag.
    declined: bool = False
    #: True when it declined because memory holds no answer ("not in memory": a refusal, what an unanswerable
    #: question needs), False for "not sure" (the evidence is there but no span of the asked type was found)
    refused: bool = False
    #: the answerer's confidence in ``text`` (0..1, calibrated on dev data where the answerer says so), or None
    confidence: float | None = None
    #: the answer itself when the answerer can name it apart from its supporting quote (a value, count, name,
    #: place, date, yes/no); None when ``text`` is all there is. Token F1 / exact match score this when present.
    span: str | None = None


def item_header(item: ContextItem) -> str:
    """``[session#turn date time role]``, the form named when it is not raw text, and the item's status in an
    update chain: the one header every answerer prompt uses."""
    p = item.provenance
    form = getattr(item.form, "value", item.form)
    form = "" if form == EvidenceForm.RAW_TEXT.value else f" ({form})"
    return (f"[{p.session_id}#{p.turn_index} {p.time.isoformat(sep=' ', timespec='minutes')} {item.role}]{form}"
            f"{status_note(item)}")


def status_note(item: ContextItem) -> str:
    """`` (current)``, `` (superseded on 2026-04-02)`` or "": an item's mark in an update chain."""
    if item.status == "superseded":
        return f" (superseded on {item.superseded_at:%Y-%m-%d})" if item.superseded_at else " (superseded)"
    return " (current)" if item.status == "current" else ""


def chain_lines(chains: Sequence[UpdateChain], shown: Sequence[ContextItem] | None = None) -> list[str]:
    """The update chains as prompt lines: ``bike: red (s1#0, 2026-03-01) -> blue (s3#0, 2026-04-02, current)``.
    With ``shown`` (the items a prompt kept after dropping some to fit), only chains whose turns all stay."""
    if shown is not None:
        kept = {i.node_id for i in shown}
        chains = [c for c in chains if all(n in kept for s in c.steps for n in s.node_ids)]
    if not chains:
        return []
    lines = ["Updates (oldest first):"]
    for c in chains:
        steps = [f"{', '.join(s.states) or 'changed'} ({', '.join(s.turns) or 'not in context'}, {s.time:%Y-%m-%d}"
                 + (", current)" if k == len(c.steps) - 1 else ")") for k, s in enumerate(c.steps)]
        lines.append(f"- {c.subject}: " + " -> ".join(steps))
    return lines


def as_json_dict(obj: Any) -> Any:
    """Plain-JSON view of any of these dataclasses (datetimes as ISO strings, enums as values)."""
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, (bytes, Path)):
        return str(obj) if isinstance(obj, Path) else f"<{len(obj)} bytes>"
    if hasattr(obj, "__dataclass_fields__"):
        return {k: as_json_dict(getattr(obj, k)) for k in obj.__dataclass_fields__}
    if isinstance(obj, Mapping):
        return {str(k): as_json_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        return [as_json_dict(v) for v in items]
    return obj
