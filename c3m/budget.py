"""Budget accounting that no method grades for itself: one definition, used by ``Memory`` and the harness.

**Reader budget** (``measure_context``): a context's use is recomputed from its items, never read from the
method's ``Context.use``:

- *Raw Nodes*: distinct ``node_id``s of the items that show a node **raw** (raw text or raw image), each
  looked up in the Cold Store. Every item, raw or derived, must name a stored, unredacted Raw Node of the
  namespace (its provenance), else it is a problem (fabricated or foreign evidence).
- *images*: distinct image hashes shown, grounded crops included. A raw-text or raw-image item may only show
  its own node's images; a grounded-crop item only crops that are derived blobs of its own node's images
  (``derived_blob`` lookup); a summary or caption item shows no image.
- *text tokens*: every item's text recounted with the configured counter. A raw-text item must show its
  node's stored text exactly; derived evidence (summary, caption, grounded crop) is charged as what it is:
  its own text tokens (a crop also as an image). Derived forms are compact views, so they do not take a
  Raw-Node slot (HiVe-Mem's vertical composition), but the metrics do not count a summary as evidence.
- *image tokens* (reported, not a budget dimension): every distinct image's cost under the configured
  image-token model (``c3m.models.tokens.image_tokens``); context tokens = text tokens + image tokens.
- *pages*: the distinct pages the route trace says were read (methods without pages charge none).

A context over budget on any dimension, or with a problem, is a **violation**: ``Memory.retrieve`` raises
``BudgetExceeded`` (a real check, not an ``assert`` that ``python -O`` strips) and the harness scores it 0.

**Write budget** (``measure_index``): the active index is measured from the snapshot the method committed —
entries and pages counted, index tokens = the routing texts the snapshot holds (each entry's
``routing_text`` and each page's ``summary``) recounted, index bytes = the snapshot's compact JSON. A method
without entries in its snapshot (a flat, unbounded index) is measured as one entry per Raw-Node pointer,
with its vectors' bytes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from .errors import BudgetExceeded
from .types import BudgetUse, Context, EvidenceForm, ReaderBudget, WriteBudget

DIMENSIONS = ("pages", "raw_nodes", "images", "text_tokens")
INDEX_DIMENSIONS = ("entries", "pages", "index_tokens", "index_bytes")
_RAW_FORMS = (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)


@dataclass(frozen=True)
class Measured:
    """The harness-side reading of one context."""

    use: BudgetUse
    over: tuple[str, ...]        # budget dimensions exceeded
    problems: tuple[str, ...]    # items that are not what they claim (not a stored node, altered text, ...)
    image_tokens: int = 0        # what the shown images cost the answerer (reported beside the budget)

    @property
    def context_tokens(self) -> int:
        return self.use.text_tokens + self.image_tokens

    @property
    def violation(self) -> str | None:
        parts = [f"over {d}" for d in self.over] + list(self.problems[:3])
        return "; ".join(parts) if parts else None


def measure_context(ctx: Context, budget: ReaderBudget, get_nodes: Callable, namespace: str,
                    count: Callable[[str], int], *, derived_blob: Callable[[str], dict | None] | None = None,
                    image_token_model: str = "qwen2-vl") -> Measured:
    """Recompute ``ctx``'s use from its items (module docstring). ``get_nodes(ids) -> {id: RawNode}``;
    ``derived_blob(sha) -> {node_id(s), source_sha256, ...} | None`` verifies grounded crops."""
    from .models.tokens import image_tokens

    stored = get_nodes([i.node_id for i in ctx.items]) if ctx.items else {}
    problems: list[str] = []
    nodes, images, tokens = set(), {}, 0
    for item in ctx.items:
        node = stored.get(item.node_id)
        if node is None or node.provenance.namespace != namespace or node.redacted:
            why = "not in the store" if node is None else ("redacted" if node.redacted else "another namespace")
            problems.append(f"item {item.node_id}: {why}")
            continue
        own = {im.sha256 for im in node.images}
        if item.form in _RAW_FORMS:
            nodes.add(item.node_id)
            if item.form is EvidenceForm.RAW_TEXT and item.text != node.text:
                problems.append(f"item {item.node_id}: raw_text differs from the stored Raw Node")
            foreign = [im.sha256[:12] for im in item.images if im.sha256 not in own]
            if foreign:
                problems.append(f"item {item.node_id}: shows images not of its node ({', '.join(foreign)})")
        elif item.form is EvidenceForm.GROUNDED_CROP:
            for im in item.images:
                rec = derived_blob(im.sha256) if derived_blob is not None else None
                links = rec.get("links", [(rec.get("node_id"), rec.get("source_sha256"))]) if rec else []
                if not any(node_id == item.node_id and source in own for node_id, source in links):
                    problems.append(f"item {item.node_id}: crop {im.sha256[:12]} is not a derived blob of its node's "
                                    "images")
        elif item.images:
            problems.append(f"item {item.node_id}: a {item.form.value} item shows images")
        if item.covers:
            covered = get_nodes(list(item.covers))
            bad = [c for c in item.covers if c not in covered or covered[c].redacted
                   or covered[c].provenance.namespace != namespace]
            if bad:
                problems.append(f"item {item.node_id}: covers {len(bad)} nodes that are not stored nodes of the "
                                f"namespace (e.g. {bad[0]})")
        for im in item.images:
            images[im.sha256] = im
        tokens += count(item.text) if item.text else 0
    pages = len({p for p, _ in ctx.trace.pages})
    use = BudgetUse(pages, len(nodes), len(images), tokens)
    over = tuple(d for d, u, b in zip(DIMENSIONS, use.as_tuple(), budget.as_tuple()) if u > b)
    itoks = sum(image_tokens(im.width, im.height, image_token_model) for im in images.values())
    return Measured(use, over, tuple(problems), itoks)


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


def measure_index(state: dict, count: Callable[[str], int], *, pointers: int = 0) -> IndexUse:
    """One definition of an active index's size, measured from its snapshot state (module docstring)."""
    if "entries" not in state:
        dim = int(state.get("dim", 384))
        n = int(state.get("count", pointers))
        return IndexUse(n, 0, 0, state_bytes(state) + n * dim * 4)
    entries, pages = state["entries"], state.get("pages", [])
    tokens = sum(count(e.get("routing_text", "")) for e in entries) + sum(count(p.get("summary", "")) for p in pages)
    return IndexUse(len(entries), len(pages), tokens, state_bytes(state))
