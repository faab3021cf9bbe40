"""Budget accounting that no method grades for itself: one definition, used by ``Memory`` and the harness.

**Reader budget** (``measure_context``): a context's use is recomputed from its items, never read from the
method's ``Context.use``, and every item is first **resolved against the store**; what an item claims about
itself (its provenance, its role) is never used:

- *Resolution*: every item must name a stored, unredacted Raw Node of the namespace, and its ``provenance`` and
  ``role`` must be that node's (a mismatch is forged provenance). The metrics read the turn an item shows from
  the stored node (``Measured.raw_turns``, ``Measured.view_turns``), never from the item.
- *Forms*: a raw-text item shows exactly its node's stored text; a raw-image item shows at least one image and
  only its own node's (its text empty or the stored text). Derived forms must match a derived record the store
  holds for that node: a **caption** item is ``caption_text`` of some of the node's stored perception captions
  (``[image: <caption>]`` joined by spaces, in stored order: what the reader composes); a **grounded crop**
  item shows only derived blobs cut from its node's images (``derived_blob``), its text empty or
  ``crop_text`` of a stored record of that crop; a **summary** item's text must be a summary the index
  snapshot holds (the store keeps no summary records: a summary is written into the measured snapshot at
  write time, query-blind, and charged there), citing a node it summarises, and ``covers`` may name only nodes
  that summary summarises. Only a summary may declare ``covers``. A store lookup that is not given
  (``perceptions``, ``derived_blob``) cannot verify the form that needs it: such an item is a problem. Without a
  ``view`` the snapshot checks (reach, pages, summaries) are not made; ``Memory.measure`` and the harness always
  give one.
- *Reach* (``view``: the ``SnapshotView`` of the snapshot the read was served from, ``c3m.index.reach``): for a
  method whose read path does not search the Cold Store (``searches_cold_store`` False), every item, every node
  a summary covers and every id of the trace's candidate pool must be reachable from that snapshot — through a
  page the trace names when the snapshot has pages (so naming fewer pages than were read cannot pay), else
  through the snapshot's pointers. A method that searches the Cold Store may show any stored, unredacted node
  of the namespace. Either way, a page the trace names must exist in the snapshot.
- *Raw Nodes*: distinct ``node_id``s of the items that show a node **raw** (raw text or raw image). Derived
  forms are compact views verified against derived records, so they do not take a Raw-Node slot (HiVe-Mem's
  vertical composition); they are charged their text tokens (a crop also as an image), and the metrics do not
  count a summary as evidence of a turn.
- *images*: distinct image hashes shown, grounded crops included.
- *text tokens*: every item's text recounted with the configured counter.
- *image tokens* (reported, not a budget dimension): every distinct image's cost under the configured
  image-token model (``c3m.models.tokens.image_tokens``); context tokens = text tokens + image tokens.
- *pages*: the distinct pages the route trace names that exist in the snapshot (without a ``view``: every
  page the trace names). Methods without pages charge none.
- *pool* (``Measured.pool``): the trace's candidate-pool ids that are stored, unredacted nodes of the namespace
  (and reachable, as above), plus the verified items' nodes: what Route-Hit and pool size count. A pool id that
  is not a stored node of the namespace is a problem (a made-up route trace).

A context over budget on any dimension, or with a problem, is a **violation**: ``Memory.retrieve`` raises
``BudgetExceeded`` (a real check, not an ``assert`` that ``python -O`` strips) and the harness scores it 0.

**Write budget** (``measure_index``): the active index is measured from the snapshot the method committed —
entries and pages counted, index tokens = the routing texts the snapshot holds (each entry's
``routing_text`` and each page's ``summary``) recounted, index bytes = the snapshot's compact JSON. A method
without entries in its snapshot (a flat, unbounded index) is measured as one entry per Raw Node it reaches
or points at (or its declared ``count``, whichever is largest), with its vectors' bytes: the harness passes the
reach of the snapshot (``c3m.index.reach``), never the method's own ``pointers()``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Mapping

from .errors import BudgetExceeded
from .types import BudgetUse, Context, EvidenceForm, ReaderBudget, WriteBudget

DIMENSIONS = ("pages", "raw_nodes", "images", "text_tokens")
INDEX_DIMENSIONS = ("entries", "pages", "index_tokens", "index_bytes")
_RAW_FORMS = (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)
_VIEW_FORMS = (EvidenceForm.CAPTION, EvidenceForm.GROUNDED_CROP)  # derived views of one node's own images


def caption_text(captions) -> str:
    """How the reader shows a node's perception captions to a text-only answerer (``c3m.read.compose``)."""
    return " ".join(f"[image: {c}]" for c in captions if c)


def crop_text(phrase: str | None) -> str:
    """The text a grounded-crop item carries (``c3m.read.compose``): its stored crop phrase."""
    return f"[crop: {phrase or 'object'}]"


@dataclass(frozen=True)
class SnapshotView:
    """What the index snapshot a read was served from lets it show (read by ``c3m.index.reach.snapshot_view``).

    ``pages``: page id (as route traces name it) -> Raw-Node ids reachable through it, or None when the
    snapshot has no pages; ``reachable``: every Raw-Node id the snapshot reaches; ``summaries``: each summary
    text the snapshot holds -> the Raw-Node ids it summarises."""

    format: str
    pages: Mapping[str, frozenset[str]] | None
    reachable: frozenset[str]
    summaries: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Measured:
    """The harness-side reading of one context."""

    use: BudgetUse
    over: tuple[str, ...]        # budget dimensions exceeded
    problems: tuple[str, ...]    # items that are not what they claim (not a stored node, altered text, ...)
    image_tokens: int = 0        # what the shown images cost the answerer (reported beside the budget)
    #: (session, turn) of the stored nodes shown raw / as a caption or crop of their own images, by verified
    #: items only (a summary shows no turn); the metrics' evidence, never the items' own provenance
    raw_turns: frozenset = frozenset()
    view_turns: frozenset = frozenset()
    #: verified candidate-pool node ids (stored, unredacted, reachable) and the verified items' nodes
    pool: frozenset = frozenset()

    @property
    def context_tokens(self) -> int:
        return self.use.text_tokens + self.image_tokens

    @property
    def violation(self) -> str | None:
        parts = [f"over {d}" for d in self.over] + list(self.problems[:3])
        return "; ".join(parts) if parts else None


def caption_matches(text: str, captions) -> bool:
    """``text == caption_text(S)`` for a non-empty subsequence S of ``captions`` (in stored order): the reader
    may show some of a node's images' captions, never a caption the store does not hold."""
    parts = [caption_text([c]) for c in captions if c]

    @lru_cache(maxsize=None)
    def rest(pos: int, first: int) -> bool:
        for j in range(first, len(parts)):
            if text.startswith(parts[j], pos):
                end = pos + len(parts[j])
                if end == len(text) or (text.startswith(" ", end) and rest(end + 1, j + 1)):
                    return True
        return False

    return bool(text) and rest(0, 0)


def measure_context(ctx: Context, budget: ReaderBudget, get_nodes: Callable, namespace: str,
                    count: Callable[[str], int], *, derived_blob: Callable[[str], dict | None] | None = None,
                    perceptions: Callable | None = None, view: SnapshotView | None = None,
                    searches_cold_store: bool = False, image_token_model: str = "qwen2-vl") -> Measured:
    """Recompute ``ctx``'s use from its items, each resolved against the store (module docstring).
    ``get_nodes(ids) -> {id: RawNode}``; ``derived_blob(sha) -> {links: [(node_id, source_sha256)], ...} | None``
    verifies grounded crops; ``perceptions(node_ids) -> {node_id: [ImagePerception]}`` verifies captions and crop
    texts; ``view`` is the served snapshot (reach and summaries); ``searches_cold_store`` is the serving method's
    declaration (``MemoryMethod.searches_cold_store``)."""
    from .models.tokens import image_tokens

    items, trace = ctx.items, ctx.trace
    wanted = [i.node_id for i in items] + [c for i in items for c in i.covers] + list(trace.pool)
    stored = get_nodes(list(dict.fromkeys(wanted))) if wanted else {}
    problems: list[str] = []

    def why_not(nid: str) -> str | None:
        node = stored.get(nid)
        if node is None:
            return "not in the store"
        if node.provenance.namespace != namespace:
            return "another namespace"
        return "redacted" if node.redacted else None

    # pages: only pages the snapshot holds are read (and charged); a page it does not hold is a made-up trace
    named = list(dict.fromkeys(p for p, _ in trace.pages))
    if view is None:
        read_pages = named
    else:
        read_pages = [p for p in named if view.pages is not None and p in view.pages]
        missing = [p for p in named if p not in read_pages]
        if missing:
            problems.append(f"the route trace names {len(missing)} page(s) the index snapshot does not hold "
                            f"(e.g. {missing[0]!r})")
    if view is None or searches_cold_store:
        reachable = None  # any stored node of the namespace (the Cold Store is searchable; or no snapshot given)
    elif view.pages is not None:
        def reachable(nid: str) -> bool:
            return any(nid in view.pages[p] for p in read_pages)
    else:
        reachable = view.reachable.__contains__
    where = ("not reachable through the pages the route trace names" if view is not None and view.pages is not None
             else "not reachable from the index snapshot")

    with_records = [i.node_id for i in items if i.form in _VIEW_FORMS]
    records = perceptions(list(dict.fromkeys(with_records))) if with_records and perceptions is not None else {}
    nodes, images, tokens = set(), {}, 0
    raw_turns, view_turns, shown = set(), set(), set()
    for item in items:
        bad = why_not(item.node_id)
        if bad:
            problems.append(f"item {item.node_id}: {bad}")
            continue
        node = stored[item.node_id]
        mine = _item_problems(item, node, records.get(item.node_id, ()), derived_blob, view,
                              records_given=perceptions is not None)
        if item.provenance != node.provenance or item.role != node.role:
            mine.append("its provenance differs from the stored Raw Node's (forged provenance)")
        if reachable is not None and not reachable(item.node_id):
            mine.append(where)
        if item.covers:
            bad = [c for c in item.covers if why_not(c) or (reachable is not None and not reachable(c))]
            if bad:
                mine.append(f"covers {len(bad)} nodes that are not stored, reachable nodes of the namespace "
                            f"(e.g. {bad[0]})")
        problems.extend(f"item {item.node_id}: {m}" for m in mine)
        if item.form in _RAW_FORMS:
            nodes.add(item.node_id)
        for im in item.images:
            images[im.sha256] = im
        tokens += count(item.text) if item.text else 0
        if not mine:
            shown.add(item.node_id)
            turn = (node.session_id, node.turn_index)
            if item.form in _RAW_FORMS:
                raw_turns.add(turn)
            elif item.form in _VIEW_FORMS:
                view_turns.add(turn)
    pool = set(shown)
    fake = [p for p in dict.fromkeys(trace.pool) if why_not(p) in ("not in the store", "another namespace")]
    if fake:
        problems.append(f"the route trace's pool names {len(fake)} ids that are not stored nodes of the namespace "
                        f"(e.g. {fake[0]})")
    live = [p for p in dict.fromkeys(trace.pool) if why_not(p) is None]
    unreachable = [p for p in live if reachable is not None and not reachable(p)]
    if unreachable:
        problems.append(f"the route trace's pool names {len(unreachable)} nodes {where} (e.g. {unreachable[0]})")
    pool.update(p for p in live if reachable is None or reachable(p))
    use = BudgetUse(len(read_pages), len(nodes), len(images), tokens)
    over = tuple(d for d, u, b in zip(DIMENSIONS, use.as_tuple(), budget.as_tuple()) if u > b)
    itoks = sum(image_tokens(im.width, im.height, image_token_model) for im in images.values())
    return Measured(use, over, tuple(problems), itoks, frozenset(raw_turns), frozenset(view_turns),
                    frozenset(pool))


def _item_problems(item, node, records, derived_blob, view: SnapshotView | None, *, records_given: bool) -> list[str]:
    """What is wrong with one resolved item's form (module docstring, *Forms*): [] when it shows what it claims."""
    out = []
    own = {im.sha256 for im in node.images}
    shas = [im.sha256 for im in item.images]
    unchecked = "" if records_given else " (no perception lookup was given)"
    if item.form in _RAW_FORMS:
        if item.form is EvidenceForm.RAW_TEXT and item.text != node.text:
            out.append("raw_text differs from the stored Raw Node")
        if item.form is EvidenceForm.RAW_IMAGE and (not shas or item.text not in ("", node.text)):
            out.append("a raw_image item must show at least one of its node's images, and no other text")
        foreign = [s[:12] for s in shas if s not in own]
        if foreign:
            out.append(f"shows images not of its node ({', '.join(foreign)})")
    elif item.form is EvidenceForm.GROUNDED_CROP:
        if not shas:
            out.append("a grounded_crop item shows no crop")
        for sha in shas:
            rec = derived_blob(sha) if derived_blob is not None else None
            links = rec.get("links", [(rec.get("node_id"), rec.get("source_sha256"))]) if rec else []
            if not any(node_id == item.node_id and source in own for node_id, source in links):
                out.append(f"crop {sha[:12]} is not a derived blob of its node's images")
        phrases = {crop_text(r.crop_phrase) for r in records if r.crop is not None and r.crop.sha256 in shas}
        if item.text and item.text not in phrases:
            out.append("its text is not the crop phrase of a stored perception record of that crop" + unchecked)
    elif item.images:
        out.append(f"a {item.form.value} item shows images")
    elif item.form is EvidenceForm.CAPTION:
        if not caption_matches(item.text, [r.caption for r in records]):
            out.append("its caption is not a perception record the store holds for its node" + unchecked)
    elif item.form is EvidenceForm.SUMMARY:
        covered = view.summaries.get(item.text) if view is not None else None
        if view is None:
            pass  # no snapshot given: the snapshot checks (reach, pages, summaries) are not made
        elif covered is None or item.node_id not in covered:
            out.append("its summary is not one the index snapshot holds for its node")
        elif not set(item.covers) <= covered:
            out.append("covers nodes its stored summary does not summarise")
    if item.covers and item.form is not EvidenceForm.SUMMARY:
        out.append(f"a {item.form.value} item declares covers (only a summary states several turns)")
    return out


def check_context(measured: Measured, method: str) -> None:
    """Raise ``BudgetExceeded`` for a violating context."""
    if measured.violation:
        raise BudgetExceeded(f"method {method!r} returned a context that violates the reader budget: "
                             f"{measured.violation} (measured use {measured.use})", over=measured.over,
                             problems=measured.problems,
                             fix="report this as a bug in the method; its retrieve() must stay within the budget "
                                 "and return stored Raw Nodes unaltered")


@dataclass(frozen=True)
class IndexUse:
    entries: int
    pages: int
    index_tokens: int
    index_bytes: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.entries, self.pages, self.index_tokens, self.index_bytes)

    def over(self, budget: WriteBudget) -> tuple[str, ...]:
        return tuple(d for d, u, b in zip(INDEX_DIMENSIONS, self.as_tuple(), budget.as_tuple()) if u > b)


def state_bytes(state: dict) -> int:
    """Bytes of a snapshot's state as compact JSON: the shared definition of index bytes."""
    return len(json.dumps(state, separators=(",", ":"), sort_keys=True).encode())


def measure_index(state: dict, count: Callable[[str], int], *, pointers: int = 0, reach: int = 0) -> IndexUse:
    """One definition of an active index's size, measured from its snapshot state (module docstring).

    ``reach``: how many Raw Nodes the snapshot reaches (``c3m.index.reach.snapshot_view``, the same reach the read
    checks use). A state without entries is charged one entry and one vector per Raw Node it reaches or points at,
    so neither an empty ``pointers()`` nor a small declared ``count`` can hide an index that reaches every node."""
    if "entries" not in state:
        dim = int(state.get("dim", 384))
        n = max(int(state.get("count", 0)), pointers, reach)  # a declared count cannot hide what it keeps
        return IndexUse(n, 0, 0, state_bytes(state) + n * dim * 4)
    entries, pages = state["entries"], state.get("pages", [])
    tokens = sum(count(e.get("routing_text", "")) for e in entries) + sum(count(p.get("summary", "")) for p in pages)
    return IndexUse(len(entries), len(pages), tokens, state_bytes(state))
