"""The capacity policy: bring the index back within its write budget after a commit (C3M §2.1, end), in one
planned step.

"At capacity, C3M consolidates only confirmed safe redundancy. Otherwise, it uses a separately recorded
pointer-preserving fallback rather than a semantic merge." In that order, once per commit:

1. **Safe consolidation** (entries or bytes over), until the index has room (``target`` entries, below); each
   merge is logged as ``consolidate`` (not a fallback). First, with ``dedupe`` (``c3m``'s default), entries
   that say word for word what another entry holds (``duplicate_pair``: the same ``statement_key``, of a live
   entry or of a spill's member, texts with images never): the same statement said again is confirmed
   redundancy without asking the head. Then the pairs of entries the relation head calls *same* with
   confidence ≥ δ, most confident first.
2. **Compaction** (index tokens over): shorten the longest routing text one level (fewer entities and "before"
   states shown, shorter text). Pointers and versions are untouched; logged as ``compact``.
3. **The pointer-preserving fallback**, planned once for the commit — one *overflow repair*: the least useful
   entries are folded, in utility order, into a spill entry, keeping all their pointers, versions and relation
   labels. Least useful = lowest *specificity-recency* utility: mean IDF of its entities (repeated small talk
   has common entities), plus a tenth of its recency rank as a tie-break. A named heuristic, query-blind.
   *Which spill*: with ``homes`` (``c3m``'s default) the spill that already holds most of the entry's subject
   (``home_spill``), else its own page's spill (created from it when the page has none). When entries are
   over, the step frees room down to ``target = entries − room``, never below a quarter of the entry budget
   (``room``: the entries the caller expects the next commits to add; ``c3m`` passes the whole entry budget by
   default — ``capacity_room`` 0, *full headroom* — or ``capacity_room`` × this commit's intake). When only
   tokens or bytes are over, it folds entries one by one until they fit (within the same step).

   Why full headroom and dedupe (issue #43): the repairs per history are about the new entries a history adds
   divided by the room one repair frees. With room for three commits of the current intake (the earlier
   default), a history of many short sessions (the ``photo`` split: 300 sessions of ~2 new entries at 48K)
   repaired every few commits, 58 times per 48K history; freeing down to the floor at once made it 20, and
   merging word-for-word repeats first (28% of that split's new entries repeat an earlier statement) 13; at
   128K, 31 (one history; 49 with full headroom alone). On 48K ``hard``, 27 → 20. Why subject homes: RAMU
   places entries by their vectors, so one subject's entries sit on every page and folding each into its own
   page's spill spread the subject over all spills; the bounded reader reads 3 of 6 pages and missed the rest
   (issue #43: 19 of its 22 misses). Homes keep a subject's spilled evidence on one page, which routing's
   lexical match (and ``read.bmer``'s spill reach) finds.
4. Within the same step, when every entry is already a spill and a limit still fails, the two closest pages'
   spills are folded together; when one spill is left and the limit still fails, the budget cannot hold this
   history's pointers at all and ``CapacityError`` names the limit (the commit is then rolled back, nothing
   lost).

The step is one maintenance-log record (``overflow_repair``) listing every entry moved, where to, and the pointers
moved; the pointer set is the same before and after (asserted). ``enforce(..., planned=False)`` is the earlier
entry-by-entry loop (one record per moved entry, no room), kept as the reference the planned step is measured
against (``benchmarks/results/write-cost-cpu``).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..errors import C3MError
from ..index.active import (MAX_SAID, MAX_STATES, MAX_VISUAL, ActiveIndex, IndexEntry, idf, mean_direction,
                            merge_pointers, normalize, statement_key, top_counts)
from ..types import Relation, WriteBudget
from ..models.relation_head import FeatureRelationHead
from .features import judge, relation_features
from .units import Unit

MAX_COMPACT = 3


class CapacityError(C3MError):
    """The write budget cannot hold the index even after every repair."""


def _as_unit(e: IndexEntry) -> Unit:
    return Unit("", [], [], e.time, e.text, e.z, set(e.entities), set(e.states), image_z=e.image_z)


def _fold(index: ActiveIndex, src: IndexEntry, dst: IndexEntry, label: str, said: bool = False) -> None:
    """Move everything of ``src`` into ``dst`` (pointers, versions, labels, entities) and drop ``src``. ``said``: a
    spill ``dst`` also keeps the ``statement_key`` of ``src``'s texts (for ``duplicate_pair``)."""
    dst.pointers = merge_pointers(dst.pointers, src.pointers)
    dst.versions = sorted(dst.versions + src.versions, key=lambda v: v.time)
    dst.labels.update(src.labels)
    dst.labels[label] += 1
    dst.entities.update(src.entities)
    dst.visual = top_counts(dst.visual + src.visual, MAX_VISUAL)
    dst.z = normalize(dst.z * dst.support + src.z * src.support)
    dst.image_z = mean_direction(dst.image_z, src.image_z)
    dst.support += src.support
    dst.time, dst.first_time = max(dst.time, src.time), min(dst.first_time, src.first_time)
    if dst.kind == "spill":
        dst.members += [src.entry_id] + src.members
        dst.states = []
        if said:
            keys = src.said + [k for k in (statement_key(t) for t in [v.text for v in src.versions] + [src.text]) if k]
            dst.said = list(dict.fromkeys(dst.said + keys))[-MAX_SAID:]
        elif src.said:
            dst.said = list(dict.fromkeys(dst.said + src.said))[-MAX_SAID:]
    else:
        dst.states = list(dict.fromkeys(dst.states + src.states))[-MAX_STATES:]
    dst.touch()  # labels and entities changed in place
    del index.entries[src.entry_id]
    for e in index.entries.values():
        if any(t == src.entry_id for t, _, _ in e.links):  # only these change (the others' accounting stays cached)
            e.links = [[dst.entry_id if t == src.entry_id else t, r, c] for t, r, c in e.links]


def nearest(Z: np.ndarray, k: int) -> np.ndarray:
    """[n, min(k, n)] each entry's ``k`` most similar entries (itself included): score descending, then index
    ascending — ``candidate_topk``'s tie rule. The index holds at most a few dozen entries, so this is one small
    numpy product; the kernel's dispatch (and its numba start-up on the first repair) would cost more."""
    S = Z @ Z.T
    return np.argsort(-S, axis=1, kind="stable")[:, :min(k, len(Z))]


def safe_pair(index: ActiveIndex, head, delta: float, k: int = 4, memo: dict | None = None):
    """The most confident (same, c ≥ δ) pair among regular entries, or None.

    ``memo`` (one ``enforce`` call, in which the document frequencies do not change) keeps each pair's features,
    and the feature head's judgement (it judges each row on its own), until either entry changes
    (``IndexEntry.revision``): a repair step touches one or two entries, and the others' pairs are judged once."""
    entries = [e for e in index.ordered() if e.kind == "entry"]
    if len(entries) < 2:
        return None
    memo = {} if memo is None else memo
    idx = nearest(index.matrix(entries), k + 1)
    pairs, feats, cached = [], [], []
    for i, row in enumerate(idx):
        for j in row:
            j = int(j)
            if j > i:  # each unordered pair once, the older entry first
                a, b = entries[i], entries[j]
                got = memo.get((a.entry_id, b.entry_id))
                if got is None or got[0] != (a.revision, b.revision):
                    got = memo[a.entry_id, b.entry_id] = [(a.revision, b.revision),
                                                          relation_features(_as_unit(b), a, index.df, index.n_docs),
                                                          None]
                pairs.append((a, b))
                feats.append(got[1])
                cached.append(got)
    if type(head) is FeatureRelationHead:  # per-row judgements: judge only the pairs not judged yet
        todo = [g for g in cached if g[2] is None]
        for g, rc in zip(todo, judge(head, [g[1] for g in todo], None)):
            g[2] = rc
        judged = [g[2] for g in cached]
    else:
        judged = judge(head, feats, [(a.text, b.text) for a, b in pairs])
    best = None
    for (a, b), (r, c) in zip(pairs, judged):
        if r is Relation.SAME and c >= delta and (best is None or c > best[2]):
            best = (a, b, c)
    return best


def utility(index: ActiveIndex, e: IndexEntry, recency_rank: float) -> float:
    ents = e.top_entities()
    spec = sum(idf(k, index.df, index.n_docs) for k in ents) / len(ents) if ents else 0.0
    top = max(idf("\0never-seen", index.df, index.n_docs), 1e-9)
    return spec / top + 0.1 * recency_rank


def _victim(index: ActiveIndex) -> IndexEntry | None:
    regular = sorted((e for e in index.entries.values() if e.kind == "entry"), key=lambda e: (e.time, e.entry_id))
    if not regular:
        return None
    n = max(1, len(regular) - 1)
    return min((utility(index, e, rank / n), e.entry_id, e) for rank, e in enumerate(regular))[2]


def _spill_of(index: ActiveIndex, page: int) -> IndexEntry | None:
    return next((e for e in index.ordered() if e.kind == "spill" and e.page == page), None)


def home_spill(index: ActiveIndex, victim: IndexEntry) -> IndexEntry | None:
    """The spill that is the home of ``victim``'s subject, or None (then its own page's spill takes it).

    Each existing spill is scored by Σ_k idf(k) · count_spill(k) / Σ_spills count(k) over the victim's entity keys
    k that some spill holds: the IDF-weighted share of the subject's *spilled* mentions that the spill already
    holds. The best spill with a score above 0 is the home (ties: the victim's own page, then the lower entry
    id). Why: RAMU places entries on pages by their vectors, so one subject's entries land on every page over a
    long history, and folding each into its own page's spill spread the subject over all of them; a reader that
    reads 3 of 6 pages then missed the spilled evidence on the others (issue #43). Folding into the spill that
    already holds the subject keeps a subject's spilled evidence on one page, which ``read.bmer``'s spill reach
    routes to. Only where the pointers go changes (never which are kept)."""
    spills = [e for e in index.ordered() if e.kind == "spill"]
    if not spills or not victim.entities:
        return None
    totals = {k: n for k in victim.entities if (n := sum(s.entities.get(k, 0) for s in spills)) > 0}
    if not totals:
        return None
    w = {k: idf(k, index.df, index.n_docs) for k in totals}

    def score(s: IndexEntry) -> float:
        return sum(w[k] * s.entities.get(k, 0) / n for k, n in totals.items())
    best = max(spills, key=lambda s: (score(s), s.page == victim.page))  # ties: the first, i.e. the lower id
    return best if score(best) > 0 else None


def _to_spill(index: ActiveIndex, victim: IndexEntry, homes: bool = False,
              said: bool = False) -> tuple[IndexEntry, int]:
    """Fold ``victim`` into its subject's home spill (``homes``: ``home_spill``) or else its page's spill (a new spill
    takes its place when the page has none); returns (spill, pointers moved). Pages are not refreshed here."""
    spill = home_spill(index, victim) if homes else None
    if spill is None:
        spill = _spill_of(index, victim.page)
    if spill is None:  # the page's first spill: a new spill entry takes the victim's place
        spill = IndexEntry(index.new_id(), victim.z, {}, victim.time, victim.first_time, "",
                           page=victim.page, kind="spill", support=0)
        index.entries[spill.entry_id] = spill
    moved = sum(len(t) for t in victim.sources().values())
    _fold(index, victim, spill, "spilled", said)
    return spill, moved


def _merge_closest_spills(index: ActiveIndex) -> tuple[IndexEntry, IndexEntry, int, int] | None:
    """Every entry is a spill: fold the two closest pages' spills together; (kept, moved, its page, pointers)."""
    spills = index.ordered()
    if len(spills) < 2:
        return None
    a, b = max(((x, y) for i, x in enumerate(spills) for y in spills[i + 1:]),
               key=lambda p: (float(p[0].z @ p[1].z), p[1].entry_id))
    moved = sum(len(t) for t in b.sources().values())
    for e in index.entries.values():
        if e.page == b.page and e is not b:
            e.page = a.page
    page_b = b.page
    _fold(index, b, a, "spilled")
    index.refresh_pages()
    return a, b, page_b, moved


def _ranked_victims(index: ActiveIndex) -> list[IndexEntry]:
    """Every regular entry, least useful first (specificity-recency ``utility``; ties by entry id)."""
    regular = sorted((e for e in index.entries.values() if e.kind == "entry"), key=lambda e: (e.time, e.entry_id))
    n = max(1, len(regular) - 1)
    return [e for _, _, e in sorted((utility(index, e, rank / n), e.entry_id, e) for rank, e in enumerate(regular))]


def duplicate_pair(index: ActiveIndex) -> tuple[IndexEntry, IndexEntry] | None:
    """A regular entry that says word for word what another entry already holds, as (keeper, duplicate), or None:
    the oldest pair of regular entries with the same ``statement_key``, else the oldest regular entry whose key a
    spill keeps (``IndexEntry.said``; the spill is the keeper).

    Confirmed safe redundancy without asking the relation head: the same statement said again (small talk
    repeated word for word: 28% of a 48K ``photo`` history's new entries) made a second entry only because RAMU
    compared it with other candidates, was unsure, or its twin had already been folded into a spill; one entry
    holding both turns' pointers says exactly what the two said. Texts with images are never keyed
    (``statement_key``): a re-shot photo with the same caption may show a changed state (issue #43), an update,
    not a repeat."""
    seen: dict[str, IndexEntry] = {}
    regular = sorted((e for e in index.entries.values() if e.kind == "entry"), key=lambda e: (e.first_time, e.entry_id))
    for e in regular:
        if e.image_z is not None or e.visual:
            continue
        key = statement_key(e.text)
        if key is None:
            continue
        if key in seen:
            return seen[key], e
        seen[key] = e
    if seen:
        for spill in index.ordered():
            if spill.kind == "spill" and spill.said:
                said = set(spill.said)
                for key, e in seen.items():
                    if key in said:
                        return spill, e
    return None


def _consolidate(index: ActiveIndex, head, delta: float, memo: dict, over, dedupe: bool = False) -> dict | None:
    dup = duplicate_pair(index) if dedupe else None
    if dup is not None:
        a, b = dup
        _fold(index, b, a, "same", True)
        index.refresh_pages()
        return {"action": "consolidate", "kept": a.entry_id, "merged": b.entry_id, "relation": "same",
                "confidence": 1.0, "over": over, "reason": "identical text"}
    pair = safe_pair(index, head, delta, memo=memo)
    if pair is None:
        return None
    a, b, c = pair
    _fold(index, b, a, "same")
    index.refresh_pages()
    return {"action": "consolidate", "kept": a.entry_id, "merged": b.entry_id, "relation": "same",
            "confidence": round(c, 4), "over": over}


def _shed_said(index: ActiveIndex) -> bool:
    """Index bytes over: drop the older half of the longest ``said`` list (statement keys only spare later
    fallbacks; they are the cheapest thing to give up, before any entry is folded). False when no spill has any."""
    spill = max((e for e in index.entries.values() if e.said), key=lambda e: (len(e.said), e.entry_id), default=None)
    if spill is None:
        return False
    spill.said = spill.said[len(spill.said) // 2:] if len(spill.said) > 1 else []
    return True


def _compact(index: ActiveIndex, count, over) -> dict | None:
    longest = max((e for e in index.entries.values() if e.compact < MAX_COMPACT),
                  key=lambda e: (count(e.render()), e.entry_id), default=None)
    if longest is None:
        return None
    longest.compact += 1
    return {"action": "compact", "entry": longest.entry_id, "level": longest.compact, "over": over}


def enforce(index: ActiveIndex, budget: WriteBudget, head, count, delta: float, *, room: int = 0,
            planned: bool = True, homes: bool = False, dedupe: bool = False) -> list[dict]:
    """Bring the index within ``budget`` (module docstring); returns the log records. ``room``: entries to free
    beyond the budget when the fallback runs; ``planned=False``: the entry-by-entry reference loop."""
    over = index.over(index.usage(count), budget)
    if not over:
        return []
    if not planned:
        return _enforce_stepwise(index, budget, head, count, delta, homes, dedupe)
    before = index.sources()
    log: list[dict] = []
    memo: dict = {}  # safe_pair's pair features and judgements for this call
    target = max(min(budget.entries, max(1, -(-budget.entries // 4))), budget.entries - max(0, room))
    step: dict | None = None  # this commit's one overflow repair
    while True:
        over = index.over(index.usage(count), budget)
        roomy = len(index.entries) <= target
        if not over and (roomy or step is not None or not log):
            break
        if ("entries" in over or "index_bytes" in over or not roomy) and step is None:
            done = _consolidate(index, head, delta, memo, over, dedupe)
            if done is not None:
                log.append(done)
                continue
            if not over:  # within budget, no room beyond it, and no more safe pairs: no fallback needed
                break
        if over == ["index_tokens"]:
            done = _compact(index, count, over)
            if done is not None:
                log.append(done)
                continue
        if "index_bytes" in over and _shed_said(index):
            continue  # the statement keys go before any pointer moves
        if step is None:
            step = {"action": "overflow_repair", "moved": [], "into": [], "page": [], "pointers": 0,
                    "labels": {}, "over": over, "target": target if "entries" in over else None}
            log.append(step)
            # entries over: the least useful entries in utility order until ``target`` is reached (a victim that
            # becomes its page's first spill frees no slot); tokens or bytes: one more at a time
            victims, stop = (_ranked_victims(index), target) if "entries" in over else ([], None)
        else:
            victims, stop = [], None
        if not victims:
            victims, stop = _ranked_victims(index)[:1], None
        if victims:
            labels = Counter(step["labels"])
            for v in victims:
                if stop is not None and len(index.entries) <= stop:
                    break
                labels.update(v.labels)
                spill, moved = _to_spill(index, v, homes, dedupe)
                step["moved"].append(v.entry_id)
                step["into"].append(spill.entry_id)
                step["page"].append(spill.page)
                step["pointers"] += moved
            step["labels"] = dict(labels)
            index.refresh_pages()
            continue
        merged = _merge_closest_spills(index)
        if merged is not None:
            a, b, page_b, moved = merged
            step["moved"].append(b.entry_id)
            step["into"].append(a.entry_id)
            step["page"].append(page_b)
            step["pointers"] += moved
            step.setdefault("pages_merged", []).append(page_b)
            continue
        _last_resort(index, budget, count, over)
    assert index.sources() == before, "capacity repair changed the pointer set"
    return log


def _last_resort(index: ActiveIndex, budget: WriteBudget, count, over) -> None:
    """Every entry is one spill and a limit still fails: compact the spill's routing text fully when tokens are
    over (the caller loops again), else the budget cannot hold this history's pointers at all."""
    spills = index.ordered()
    if "index_tokens" in over and spills and spills[0].compact < MAX_COMPACT:
        spills[0].compact = MAX_COMPACT
        return
    raise CapacityError(f"the write budget's {', '.join(over)} cannot hold this index even "
                        f"as one spill entry (usage {index.usage(count)}, budget {budget.as_tuple()})",
                        fix=f"raise write_budget.{over[0]} (e.g. WriteBudget.scaled) or use a smaller history")


def _enforce_stepwise(index: ActiveIndex, budget: WriteBudget, head, count, delta: float,
                      homes: bool = False, dedupe: bool = False) -> list[dict]:
    """The entry-by-entry loop (one ``overflow_repair`` record per moved entry): the reference for the planned
    step."""
    before = index.sources()
    log: list[dict] = []
    memo: dict = {}
    while True:
        over = index.over(index.usage(count), budget)
        if not over:
            break
        if "entries" in over or "index_bytes" in over:
            done = _consolidate(index, head, delta, memo, over, dedupe)
            if done is not None:
                log.append(done)
                continue
        if over == ["index_tokens"]:
            done = _compact(index, count, over)
            if done is not None:
                log.append(done)
                continue
        if "index_bytes" in over and _shed_said(index):
            continue
        victim = _victim(index)
        if victim is not None:
            spill, moved = _to_spill(index, victim, homes, dedupe)
            index.refresh_pages()
            log.append({"action": "overflow_repair", "moved": victim.entry_id, "into": spill.entry_id,
                        "page": spill.page, "pointers": moved, "labels": dict(victim.labels), "over": over})
            continue
        merged = _merge_closest_spills(index)
        if merged is not None:
            a, b, page_b, moved = merged
            log.append({"action": "overflow_repair", "moved": b.entry_id, "into": a.entry_id, "page": page_b,
                        "pointers": moved, "labels": {}, "over": over, "pages_merged": True})
            continue
        _last_resort(index, budget, count, over)
    assert index.sources() == before, "capacity repair changed the pointer set"
    return log
