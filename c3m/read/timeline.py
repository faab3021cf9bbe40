"""Update chains and current/superseded marks over a context: the answer path's sense of time.

Retrieval ranks by relevance, so "I painted my bike red" and "I repainted my bike blue" arrive side by side
and an answerer that quotes the best-matching sentence may answer *now* with the old state. This module says
which items are the latest state of something that changed and which were superseded, and when:

- **index chains** come from the write path: c3m's RAMU recorded an Update, and the entry kept the old
  state as a version with its own pointers (``C3M.update_chains``);
- **read-time chains** (any method, named heuristic ``timeline-v1``): context items that name the same
  subject as the question (an entity key) and state values (colours, materials...), ordered by time; an item
  that introduces a value not stated before opens a new step, and every earlier step is superseded.

A chain names only turns that are in the context (a step whose turns were not selected keeps its time and
nothing else), so it adds order, not content the reader budget did not pay for. Marks select nothing and
charge nothing; the harness's measurement is unchanged.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Callable, Iterable, Sequence

from ..types import ChainStep, Context, ContextItem, UpdateChain

#: (entity keys, state values) of each text: ``write.units.DescriptionMemo.describe`` or a stand-in
Describe = Callable[[Sequence[str]], Sequence[tuple]]


def _turn(item: ContextItem) -> str:
    return f"{item.provenance.session_id}#{item.provenance.turn_index}"


def index_chain(subject: str, entry_id: str, steps: Iterable[tuple[datetime, dict, Sequence[str]]],
                items: Sequence[ContextItem]) -> UpdateChain | None:
    """A chain from a write-time version list ``[(time, {session: turns}, states), ...]`` (oldest first, the
    current state last) over the context's items; None when no step is in the context."""
    where = {(i.provenance.session_id, i.provenance.turn_index): i for i in items}
    out, seen = [], set()
    for time, pointers, states in steps:
        hit = [where[(s, t)] for s in sorted(pointers) for t in sorted(pointers[s]) if (s, t) in where]
        new = tuple(v for v in states if v not in seen)
        seen.update(states)
        out.append(ChainStep(time, tuple(i.node_id for i in hit), tuple(_turn(i) for i in hit),
                             new if hit else ()))
    if len(out) < 2 or not any(step.node_ids for step in out):
        return None
    return UpdateChain(subject, tuple(out), "index", entry_id)


def read_time_chains(question: str, items: Sequence[ContextItem], describe: Describe) -> list[UpdateChain]:
    """``timeline-v1``: per subject the question names, the items about it that state values, by time; a new
    value opens a step (module docstring)."""
    if not items:
        return []
    q_ents = describe([question])[0][0]
    if not q_ents:
        return []
    described = describe([i.text for i in items])
    chains = []
    for subject in sorted(q_ents):
        head = subject.split()[-1]
        about = sorted(((i, d[1]) for i, d in zip(items, described)
                        if d[1] and (subject in d[0] or any(head == k.split()[-1] for k in d[0]))),
                       key=lambda x: (x[0].provenance.time, x[0].provenance.turn_index))
        steps: list[tuple[datetime, list[ContextItem], tuple[str, ...]]] = []
        seen: set[str] = set()
        for item, states in about:
            new = tuple(sorted(set(states) - seen))
            seen.update(states)
            if new or not steps:
                steps.append((item.provenance.time, [item], new))
            else:
                steps[-1][1].append(item)  # restates a known value: part of the latest step
        if len(steps) >= 2:
            chains.append(UpdateChain(subject, tuple(ChainStep(t, tuple(i.node_id for i in its),
                                                               tuple(_turn(i) for i in its), new)
                                                     for t, its, new in steps), "read"))
    return chains


def annotate(context: Context, *, index_chains: Sequence[UpdateChain] = (),
             describe: Describe | None = None) -> Context:
    """The context with its chains and each chained item marked ``current`` or ``superseded`` (index chains
    first; read-time chains over the items they do not cover, when ``describe`` is given)."""
    chains = list(index_chains)
    covered = {n for c in chains for s in c.steps for n in s.node_ids}
    if describe is not None:
        rest = [i for i in context.items if i.node_id not in covered]
        chains += read_time_chains(context.question, rest, describe)
    if not chains:
        return context
    status: dict[str, tuple[str, datetime | None]] = {}
    for c in chains:
        for k, step in enumerate(c.steps):
            mark = ("current", None) if k == len(c.steps) - 1 else ("superseded", c.steps[k + 1].time)
            for n in step.node_ids:
                if status.get(n, ("",))[0] != "superseded":  # superseded anywhere wins
                    status[n] = mark
    items = tuple(replace(i, status=status[i.node_id][0], superseded_at=status[i.node_id][1])
                  if i.node_id in status else i for i in context.items)
    return replace(context, items=items, chains=tuple(chains))
