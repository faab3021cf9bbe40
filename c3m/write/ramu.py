"""RAMU (C3M §2.1): propose candidates by similarity, judge the relation, act conservatively (Eq. 3).

``propose`` takes the TopK entries by routing-vector similarity (dropping those under ``min_sim``) plus the TopK
by shared rare entities; a unit like nothing in the index has no candidates and is *Added*. The similarities of
all of a session's units against the index as the session found it are one matrix product
(``session_scores``); only the entries the session itself creates or moves are scored again, unit by unit.
Scores are computed in float64 and rounded to float32, so the batched and the one-unit forms give the same
numbers bit for bit (a float32 GEMM sums in another order than a float32 GEMV: their last bits differ).

**Device.** That float64 matrix is the CPU path (``device="cpu"``, the default: numpy, unchanged). On a CUDA device
(``c3m_kernels.dispatch.placement``) ``session_scores`` instead asks ``candidate_topk`` (Triton, IEEE fp32) for each
unit's best ``k + units − 1`` entries of the index as the session found it, in one launch, and brings them to the
host once: a unit sees at most ``units − 1`` entries moved by the units before it, so the best ``k`` entries it can
still use are among them (when more moved, that unit is scored on the host as on the CPU path). Entries the session
created or moved, and the entries found by shared entities, are scored on the host as on the CPU path. So on CUDA the
similarities are fp32 sums (they may differ from the CPU's in the last bits), an exact tie at the fetched boundary
may keep another entry, and the batched form equals the one-unit form only up to that rounding.
``decide`` runs the relation head over phi(m_t, e) for every candidate. e* is the candidate with the
strongest *actionable* relation (the highest same-or-update confidence): taking the paper's "highest-
confidence candidate" literally would let a confidently *distinct* stranger veto a confident merge with
the entry the unit is really about. Then Eq. 3: Merge if same ∧ c ≥ δ, Update if update ∧ c ≥ δ, Add if no
candidates, Keep otherwise. ``apply`` carries the action out; Src(e') ⊇ Src(e*) ∪ P_t holds by
construction (pointers are only ever unioned, and an Update keeps the old state as a version).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..types import Action, Relation, WriteBudget
from .features import judge, relation_features
from ..index.active import (MAX_ENTITIES, MAX_STATES, ActiveIndex, idf, IndexEntry, IndexPage, Version, mean_direction,
                            merge_pointers, normalize)
from .units import Unit


@dataclass(frozen=True)
class Decision:
    action: Action
    target: str | None           # e*
    relation: Relation | None
    confidence: float
    judged: tuple                # ((entry_id, relation, confidence, similarity), ...) for the log


def cosines(Z: np.ndarray, U: np.ndarray) -> np.ndarray:
    """[units, entries] routing-vector similarities, float64 products rounded to float32 (module docstring)."""
    return (np.asarray(U, np.float64) @ np.asarray(Z, np.float64).T).astype(np.float32)


class SessionScores:
    """Every unit's similarity to every entry of the index as the session found it, from one matrix product.

    ``row(i, unit, entries)`` is unit ``i``'s similarities to ``entries`` (the index now): an entry whose vector
    is the one scored at the start reads its column, and one the session created or moved (a Merge or Update
    re-points ``z``) is scored again against this unit alone.

    On a CUDA ``device`` (module docstring, "Device") the one call is a ``candidate_topk`` launch for each unit's
    best ``k + units − 1`` entries instead (``exact`` is False, ``S`` is None): ``top`` then gives a unit's ``k``
    best entries of the index now, ``row`` is not available."""

    def __init__(self, index: ActiveIndex, units, *, k: int | None = None, device: str = "cpu") -> None:
        from c3m_kernels.dispatch import placement

        base = [e for e in index.ordered() if e.kind == "entry"]
        self.vectors = {e.entry_id: e.z for e in base}  # the arrays scored (an edit assigns a new one)
        self.column = {e.entry_id: j for j, e in enumerate(base)}
        at = placement(device, "candidate_topk")
        self.exact = not at.tensors
        if self.exact:
            self.S = (cosines(index.matrix(base), np.stack([u.z for u in units]))
                      if base and len(units) else np.zeros((len(units), len(base)), np.float32))
            return
        from c3m_kernels.candidate_topk import candidate_topk

        self.S = None
        self.ids = [e.entry_id for e in base]
        n, N = len(units), len(base)
        self.fetched = N if k is None else min(N, max(0, k) + max(0, n - 1))
        if n and self.fetched:
            U = np.stack([u.z for u in units]).astype(np.float32)
            self.top_s, self.top_i = at.host(candidate_topk(at.put(U), at.put(index.matrix(base), np.float32),
                                                            self.fetched))
        else:
            self.top_s, self.top_i = np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)

    def top(self, i: int, unit: Unit, entries: list[IndexEntry], k: int) -> tuple[list[tuple[int, float]], dict]:
        """The device path: unit ``i``'s ``k`` best ``entries`` as [(position, similarity)] (score desc, position asc),
        and every similarity known so far as {position: similarity}."""
        pos = {e.entry_id: n for n, e in enumerate(entries)}
        known: dict[int, float] = {}
        kept = 0
        for s, j in zip(self.top_s[i].tolist(), self.top_i[i].tolist()):
            if j < 0:
                break
            n = pos.get(self.ids[j])
            if n is not None and entries[n].z is self.vectors[self.ids[j]]:
                known[n] = s
        for eid in self.ids:
            n = pos.get(eid)
            kept += n is not None and entries[n].z is self.vectors[eid]
        lost = len(self.ids) - kept  # base entries moved or gone since the launch
        if self.fetched < len(self.ids) and lost > self.fetched - k:  # the launch may miss one: score on the host
            known = {}
            todo = list(range(len(entries)))
        else:
            todo = [n for n, e in enumerate(entries) if self.vectors.get(e.entry_id) is not e.z]
        if todo:
            got = cosines(np.stack([entries[n].z for n in todo]), unit.z[None, :])[0]
            known.update(zip(todo, got.tolist()))
        best = sorted(known.items(), key=lambda x: (-x[1], x[0]))[:k]
        return best, known

    def row(self, i: int, unit: Unit, entries: list[IndexEntry]) -> np.ndarray:
        out = np.empty(len(entries), np.float32)
        fresh = []
        for n, e in enumerate(entries):
            if self.vectors.get(e.entry_id) is e.z:
                out[n] = self.S[i, self.column[e.entry_id]]
            else:
                fresh.append(n)
        if fresh:
            out[fresh] = cosines(np.stack([entries[n].z for n in fresh]), unit.z[None, :])[0]
        return out


def session_scores(index: ActiveIndex, units, *, k: int | None = None, device: str = "cpu") -> SessionScores:
    """The session's one scoring call (``SessionScores``); pass it to ``propose`` as ``scores``. ``k``: the candidates
    ``propose`` will ask for (used on a CUDA ``device`` only, to size the top-k launch); ``device``: the memory's."""
    return SessionScores(index, units, k=k, device=device)


def propose(index: ActiveIndex, unit: Unit, k: int, min_sim: float, *, entities: bool = True,
            scores: SessionScores | None = None, row: int = 0) -> list[tuple[IndexEntry, float]]:
    """Hybrid candidates: TopK by routing-vector similarity (at least ``min_sim``; ties: the older entry) plus
    TopK by IDF-weighted shared entities. Vector similarity alone misses the entry a unit is about when the
    wording differs ("I repainted my clock red" sits nearer other repaint sentences than the clock's intro);
    shared rare entities find it (``entities=False``: vector-only, as in the C3M paper). Returns (entry, cosine)
    pairs. ``scores``/``row``: the session's ``SessionScores`` and this unit's row in it (without: this unit is
    scored alone, with the same numbers)."""
    entries = [e for e in index.ordered() if e.kind == "entry"]
    if not entries or k <= 0:
        return []
    if scores is not None and not scores.exact:  # the device path (module docstring, "Device")
        best, known = scores.top(row, unit, entries, k)
        picked = {i: s for i, s in best if s >= min_sim}

        def sim(i: int) -> float:
            if i not in known:
                known[i] = float(cosines(entries[i].z[None, :], unit.z[None, :])[0, 0])
            return known[i]
    else:
        sims = (scores.row(row, unit, entries) if scores is not None
                else cosines(index.matrix(entries), unit.z[None, :])[0])
        top = np.lexsort((np.arange(len(entries)), -sims))[:k]  # score desc, index asc (candidate_topk's order)
        picked = {int(i): float(sims[i]) for i in top if sims[i] >= min_sim}

        def sim(i: int) -> float:
            return float(sims[i])
    if not entities:
        return sorted(((entries[i], s) for i, s in picked.items()), key=lambda c: (-c[1], c[0].entry_id))
    w = {key: idf(key, index.df, index.n_docs) for key in unit.entities}
    shared = [(sum(w[key] for key in unit.entities if key in e.entities), i) for i, e in enumerate(entries)]
    for overlap, i in sorted(shared, key=lambda x: (-x[0], x[1]))[:k]:
        if overlap > 0 and i not in picked:
            picked[i] = sim(i)
    return sorted(((entries[i], s) for i, s in picked.items()), key=lambda c: (-c[1], c[0].entry_id))


def decide(unit: Unit, candidates, head, index: ActiveIndex, delta: float) -> Decision:
    if not candidates:
        return Decision(Action.ADD, None, None, 1.0, ())
    feats = [relation_features(unit, e, index.df, index.n_docs) for e, _ in candidates]
    judged = judge(head, feats, [(e.text, unit.text) for e, _ in candidates])
    rows = tuple((e.entry_id, r, float(c), s) for (e, s), (r, c) in zip(candidates, judged))

    def strength(row):  # actionable relations first, then the most confident
        _, r, c, s = row
        return (r in (Relation.SAME, Relation.UPDATE), c, s)

    best = max(rows, key=strength)
    _, r, c, _ = best
    if r is Relation.SAME and c >= delta:
        action = Action.MERGE
    elif r is Relation.UPDATE and c >= delta:
        action = Action.UPDATE
    else:
        action = Action.KEEP
    return Decision(action, best[0], r, c, rows)


def _entity_counter(unit: Unit) -> Counter:
    return Counter({k: 1 for k in unit.entities})


def _trim(entry: IndexEntry) -> None:
    if len(entry.entities) > MAX_ENTITIES:
        entry.entities = Counter(dict(sorted(entry.entities.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_ENTITIES]))
    entry.states = entry.states[-MAX_STATES:]


def unit_pointers(unit: Unit) -> dict[str, set[int]]:
    return {unit.session_id: set(unit.turns)}


def place(index: ActiveIndex, entry: IndexEntry, budget: WriteBudget, page_open_sim: float) -> None:
    """Choose the entry's page: the most similar page with room; a new page when none is similar enough
    (or none has room) and the page limit allows. Per-page capacity = ceil(entries / pages)."""
    max_pages = max(1, min(budget.pages, budget.entries))
    per_page = max(1, math.ceil(budget.entries / max(1, budget.pages)))
    counts = [len(index.page_entries(p)) for p in range(len(index.pages))]
    sims = [float(p.z @ entry.z) for p in index.pages]
    roomy = [p for p in range(len(index.pages)) if counts[p] < per_page]
    best = max(roomy, key=lambda p: sims[p], default=None)
    if (best is None or sims[best] < page_open_sim) and len(index.pages) < max_pages:
        entry.page = len(index.pages)
        index.pages.append(IndexPage(entry.z))
    elif best is not None:
        entry.page = best
    else:
        entry.page = int(np.argmax(sims))


def apply(index: ActiveIndex, unit: Unit, decision: Decision, summary: str, budget: WriteBudget,
          page_open_sim: float, *, labels: bool = True) -> dict:
    """Carry out the decision; returns the maintenance-log record. ``labels=False`` leaves the page summaries to
    the caller's one ``refresh_pages`` after the session's last unit (``ActiveIndex.refresh_pages``)."""
    P_t = unit_pointers(unit)
    log = {"action": decision.action.value, "session": unit.session_id, "turns": unit.turns,
           "candidate": decision.target, "relation": decision.relation.value if decision.relation else None,
           "confidence": round(decision.confidence, 4),
           "candidates": [[e, r.value, round(c, 4), round(s, 4)] for e, r, c, s in decision.judged]}
    if decision.action in (Action.MERGE, Action.UPDATE):
        e = index.entries[decision.target]
        if decision.action is Action.UPDATE:
            e.versions.append(Version(e.time, e.pointers, list(e.states), e.text))
            e.pointers = P_t
            e.states = sorted(unit.states) or list(e.states)
            e.text = summary
            e.labels["update"] += 1
        else:
            e.pointers = merge_pointers(e.pointers, P_t)
            e.states = list(dict.fromkeys(e.states + sorted(unit.states)))
            e.labels["same"] += 1
        e.z = normalize(e.z * e.support + unit.z)
        e.image_z = mean_direction(e.image_z, unit.image_z)
        e.support += 1
        e.entities.update(_entity_counter(unit))
        e.time = max(e.time, unit.time)
        _trim(e)
        e.touch()  # versions, labels and entities changed in place
        log["entry"] = e.entry_id
    else:
        e = IndexEntry(index.new_id(), normalize(unit.z), P_t, unit.time, unit.time, summary,
                       entities=_entity_counter(unit), states=sorted(unit.states)[:MAX_STATES],
                       image_z=mean_direction(None, unit.image_z))
        if decision.action is Action.KEEP and decision.target:
            e.links.append([decision.target, decision.relation.value, round(decision.confidence, 4)])
            e.labels[decision.relation.value] += 1
        place(index, e, budget, page_open_sim)
        index.entries[e.entry_id] = e
        log["entry"] = e.entry_id
    index.refresh_pages(labels=labels)
    return log
