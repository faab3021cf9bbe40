"""Reading derived text (per-session summaries, facts) under the reader budget: shared by ``summary-only`` and
``facts``, whose reader is shown only text they derived from the conversation.

Each document is scored by cosine with the embedded question and taken best-first (ties: the earlier
document) while its text tokens fit the budget, at most ``top_k``. It becomes a SUMMARY item that cites one
unredacted Raw Node it was derived from (the first or the latest) and declares every unredacted one in
``covers``, which the harness verifies. A document whose nodes are all redacted is never shown. Items come
out in the time order of the nodes they cite.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..read.select import greedy, item_cost
from ..types import BudgetUse, Context, ContextItem, EvidenceForm, ReaderBudget, RouteTrace


@dataclass(frozen=True)
class DerivedText:
    key: str                    # the summary's or fact's id (the trace's entry)
    text: str
    node_ids: tuple[str, ...]   # the Raw Nodes it states, in time order
    cite_latest: bool = False   # cite the latest node (a fact's current statement) rather than the first


def read_derived(method, question: str, budget: ReaderBudget, docs: Sequence[DerivedText], Z: np.ndarray, *,
                 top_k: int | None = None, what: str = "document") -> Context:
    """The context of ``docs`` (vectors ``Z``, one row each) for ``question`` (module docstring)."""
    if not docs:
        return Context(question, (), BudgetUse(), budget, RouteTrace(method.name, notes=("empty memory",)))
    q = np.asarray(method.models.text_embedder.embed([question])[0], np.float32)
    norm = float(np.linalg.norm(q))
    cos = np.asarray(Z, np.float32) @ (q / norm if norm > 0 else q)
    count = method.models.token_counter.count
    candidates: list = []

    def shown():
        """The documents that can be shown, best first (ties: the earlier document): (doc, cited, score, live ids)."""
        for i in (int(i) for i in np.argsort(-cos, kind="stable")):
            doc, score = docs[i], float(cos[i])
            if not doc.text:
                continue
            stored = method.store.get_nodes(list(doc.node_ids))
            live = [stored[n] for n in doc.node_ids if n in stored and not stored[n].redacted]
            if not live:
                continue  # every node it was derived from is redacted: it is not shown
            cited = live[-1] if doc.cite_latest else live[0]
            candidates.append((doc.key, round(score, 4)))
            yield doc, cited, score, count(doc.text), tuple(n.node_id for n in live)

    # the selection stage's greedy mode: text tokens only, at most top_k documents
    filled = greedy(shown(), budget, lambda d, _: (item_cost(raw_node=False, tokens=d[3]), set()),
                    stop=None if top_k is None else (lambda _, taken: taken >= top_k))
    use, chosen, dropped = filled.use, filled.chosen, [d[1].node_id for d in filled.dropped]
    chosen.sort(key=lambda c: (c[1].time, c[1].session_id, c[1].turn_index, c[0].key))
    items = tuple(ContextItem(n.node_id, n.provenance, n.role, EvidenceForm.SUMMARY, d.text, (), score, tokens,
                              covers) for d, n, score, tokens, covers in chosen)
    pool = tuple(dict.fromkeys(n.node_id for _, n, _, _, _ in chosen))
    trace = RouteTrace(
        method.name,
        entries=tuple((d.key, round(score, 4)) for d, _, score, _, _ in chosen),
        candidates=tuple(candidates),
        selected_nodes=pool,
        covered_sessions=tuple(dict.fromkeys(n.session_id for _, n, _, _, _ in chosen)),
        dropped_for_budget=tuple(dropped),
        notes=() if chosen else (f"no {what} fits the budget",),
        pool=pool,
        scored=len(docs),
    )
    return Context(question, items, use, budget, trace)
