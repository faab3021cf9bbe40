"""What an answerer reads: the measured context plus the answer path's annotations.

Two additions, both after the harness's (or ``Memory.retrieve``'s) budget measurement and both selecting
nothing: update chains with current/superseded marks (``MemoryMethod.annotate``, ``c3m.language.timeline``), and,
for an answerer that cannot see images (``sees_images`` False: extractive, SmolLM2, a text-only local model),
a CAPTION item after each item with images, holding the write-time perception backend's captions. The
evaluation harness measures the context with those captions (they are charged as text tokens of derived
evidence); ``Memory.ask`` adds them after ``retrieve``'s check. Without a perception backend nothing is added.

The chains are built over the context *with* those captions, for every answerer: a photo whose words say little
("another shot of the bike") states its new value only in its caption, so without it no chain could give the photo
its step and the older turn would never be marked superseded (#43). For an answerer that sees images the caption
items are then taken out again (it reads the image; nothing is shown or charged beyond what was retrieved); the
marks they helped set stay on the image's own items.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..types import Context, EvidenceForm


def with_captions(context: Context, method: Any) -> Context:
    """Each item with images (a grounded crop included: its source image's caption) is followed by a CAPTION
    item holding the captions (``[image: ...]``, from the write-time perception records, ``method.perception``),
    unless the method already put a caption of that node in the context. The harness measures (charges) them."""
    return _captioned(context, method)[0]


def _captioned(context: Context, method: Any) -> tuple[Context, frozenset[int]]:
    """``with_captions``, and the positions of the caption items it added."""
    captioned = {i.node_id for i in context.items if i.form is EvidenceForm.CAPTION}
    want = [i.node_id for i in context.items if i.images and i.node_id not in captioned]
    nodes = method.store.get_nodes(want) if want else {}
    seen = method.perception(list(nodes.values())) if nodes else {}
    if not any(r.caption for recs in seen.values() for r in recs):
        return context, frozenset()
    items, added = [], []
    done: set[str] = set()
    for item in context.items:
        items.append(item)
        if item.images and item.node_id in nodes and item.node_id not in done:
            shas = {im.sha256 for im in item.images}
            caps = [r.caption for r in seen.get(item.node_id, ())
                    if r.caption and (r.image.sha256 in shas or r.crop is not None and r.crop.sha256 in shas)]
            if caps:
                done.add(item.node_id)  # one caption item per node
                added.append(len(items))
                items.append(replace(item, form=EvidenceForm.CAPTION, text=" ".join(f"[image: {c}]" for c in caps),
                                     images=(), text_tokens=0))
    return replace(context, items=tuple(items)), frozenset(added)


def answer_view(context: Context, method: Any, answerer: Any) -> Context:
    """The context as ``answerer`` should read it (module docstring): chains over the captioned context; the
    captions kept for an answerer that cannot see images, taken out again for one that can."""
    captioned, added = _captioned(context, method)
    annotated = method.annotate(captioned)
    if not added or not getattr(answerer, "sees_images", False):
        return annotated
    if len(annotated.items) != len(captioned.items):  # a method whose annotate reshapes the items: as before
        return method.annotate(context)
    return replace(annotated, items=tuple(i for k, i in enumerate(annotated.items) if k not in added))
