"""What an index snapshot lets a read reach: its pages, its Raw Nodes and the summaries it holds.

The harness checks every context against the snapshot the read was served from (``c3m.budget.measure_context``
with a ``SnapshotView``), so it reads pages, reachable nodes and stored summaries out of the snapshot's committed
*state*. ``snapshot_view`` is a pure function of that JSON, and the reader is chosen by the state's shape — never
asked of the method, which could answer anything at read time. One shape per method family:

``active-index``
    ``c3m.index.active.ActiveIndex.state`` (c3m, c3m-paper, and the bounded baselines resum, moviechat,
    memrefine, cdrs): ``entries`` with ``page``, ``pointers`` and ``versions``, and ``pages``. Page ``p<i>`` (the
    id a route trace names) reaches Src(e) — an entry's pointers and every version's pointers — of each entry
    whose ``page`` is i. An entry's ``text`` is a stored summary of Src(e) (a bounded baseline shows a summary
    entry as its text).
``episodes``
    hivemem: ``episodes`` = [session, turn ranges, tokens, summary]; no pages; each summary speaks for its
    episode's turns.
``derived-entries``
    summary-only and facts: ``entries`` with ``routing_text`` and either ``session`` + ``turns`` (turn ranges) or
    ``sources`` ([[session, turn], ...]); no pages; the routing text is the stored summary (fact) of those turns.
``flat``
    dense-topk, bm25, hybrid, full-context — a state with neither entries nor episodes: no pages, no summaries;
    it reaches the snapshot's pointer list, which ``c3m.budget.measure_index`` charges one entry (and one vector)
    each.
``unknown``
    any other state with ``entries`` or ``episodes``: it reaches nothing, so a method with a new state shape has
    every item flagged until a reader for its shape is added here — a method cannot leave the check by
    inventing a format, nor by keeping pointers the measured state does not hold.
"""
from __future__ import annotations

from typing import Iterable

from ..budget import SnapshotView
from ..types import node_id_for
from .active import decode_turns

EMPTY = SnapshotView("empty", None, frozenset(), {})


def snapshot_view(state: dict | None, pointers: Iterable[str], namespace: str) -> SnapshotView:
    """The ``SnapshotView`` of one committed snapshot (module docstring); ``EMPTY`` for no snapshot."""
    if state is None:
        return EMPTY
    if not isinstance(state, dict):
        return SnapshotView("unknown", None, frozenset(), {})
    entries = state.get("entries")
    if isinstance(entries, list) and isinstance(state.get("pages"), list) and all(
            isinstance(e, dict) and "page" in e and "pointers" in e for e in entries):
        return _active_index(state, namespace)
    if entries is None and isinstance(state.get("episodes"), list):
        return _episodes(state["episodes"], namespace)
    if isinstance(entries, list) and all(isinstance(e, dict) and "routing_text" in e and
                                         ("sources" in e or ("session" in e and "turns" in e)) for e in entries):
        return _derived_entries(entries, namespace)
    if entries is None and "episodes" not in state:
        return SnapshotView("flat", None, frozenset(pointers), {})
    return SnapshotView("unknown", None, frozenset(), {})


def _ids(namespace: str, ranges: dict) -> set[str]:
    return {node_id_for(namespace, s, t) for s, turns in ranges.items() for t in decode_turns(turns)}


def _add(summaries: dict[str, set[str]], text, nodes: set[str]) -> None:
    if isinstance(text, str):
        summaries.setdefault(text, set()).update(nodes)


def _active_index(state: dict, namespace: str) -> SnapshotView:
    n_pages = len(state["pages"])
    pages: dict[str, set[str]] = {f"p{i}": set() for i in range(n_pages)}
    summaries: dict[str, set[str]] = {}
    reach: set[str] = set()
    for e in state["entries"]:
        src = _ids(namespace, e["pointers"])
        for v in e.get("versions", ()):
            src |= _ids(namespace, v["pointers"])
        reach |= src
        page = e["page"]
        if isinstance(page, int) and 0 <= page < n_pages:
            pages[f"p{page}"] |= src
        _add(summaries, e.get("text"), src)
    return SnapshotView("active-index", _frozen(pages), frozenset(reach), _frozen(summaries))


def _episodes(episodes: list, namespace: str) -> SnapshotView:
    summaries: dict[str, set[str]] = {}
    reach: set[str] = set()
    for session, turns, _tokens, summary in episodes:
        nodes = {node_id_for(namespace, session, t) for t in decode_turns(turns)}
        reach |= nodes
        _add(summaries, summary, nodes)
    return SnapshotView("episodes", None, frozenset(reach), _frozen(summaries))


def _derived_entries(entries: list, namespace: str) -> SnapshotView:
    summaries: dict[str, set[str]] = {}
    reach: set[str] = set()
    for e in entries:
        if "sources" in e:
            nodes = {node_id_for(namespace, s, int(t)) for s, t in e["sources"]}
        else:
            nodes = {node_id_for(namespace, e["session"], t) for t in decode_turns(e["turns"])}
        reach |= nodes
        _add(summaries, e["routing_text"], nodes)
    return SnapshotView("derived-entries", None, frozenset(reach), _frozen(summaries))


def _frozen(d: dict[str, set[str]]) -> dict[str, frozenset[str]]:
    return {k: frozenset(v) for k, v in d.items()}


__all__ = ["EMPTY", "snapshot_view"]
