"""Evidence metrics per question, their aggregation with 95% bootstrap intervals, and paired differences.

Every number is the harness's own measurement (``c3m.budget``), never the method's report; which turn an item
shows is read from the stored Raw Node it resolves to, never from the item's own provenance:

- **Route-Hit**: 1 iff some gold evidence turn is in the **candidate pool the method handed to its final
  selection**: the first ``ROUTE_POOL`` (48, c3m's reader pool) ids of ``RouteTrace.pool`` in the trace's order,
  united with the selected items, one definition for every method, counting only pool ids that are stored,
  unredacted nodes of the namespace (and reachable from the served snapshot for a method that does not search
  the Cold Store: ``Measured.pool``). A trace that lists every stored node gains nothing past its first 48; the
  pool's full size is still reported beside it (``pool_size``).
- **Support Recall**: share of gold evidence turns present in the final context: shown raw (text or image) or
  as a view of their own image (caption, grounded crop) that matches a derived record the store holds. A
  summary is not evidence of a turn (it compresses several), so a summary item alone does not count.
- **raw Support Recall**: the stricter reading — only gold turns shown *raw* (their stored text, or their
  original image) count; captions and crops, which depend on the perception backend, do not. Reported beside
  Support Recall so a gain that comes only through derived views is visible.
- **context tokens**: text tokens + image tokens (each image priced by the configured image-token model; a
  grounded crop costs less than its image), measured by the harness.
- **oracle-reader accuracy**: 1 iff *all* gold evidence turns are in the context (a perfect reader could
  answer). AR questions with gold evidence (the turns a reader needs to refuse correctly: the asked entity
  exists, but the asked change happened to its twin or never) use the same rule; AR questions whose subject
  was never mentioned (no evidence) score 1 iff the context holds no *misleading* item — no turn containing
  every content word of the question's subject (a named heuristic). AR is reported on its own row and is
  **excluded from "overall"** (an empty context is a near-perfect refuser on easy data).
- **evidence-check accuracy** (``evidence_acc``, synthetic datasets with hidden gold only): 1 iff every
  support detail of the question (session, turn, entity, attribute, value) is *visible* in some shown form
  (``c3m.eval.evidence``, "evidence-check-v1": the value in a raw text, caption, summary or fact of that
  turn — a summary speaks for its whole session — or carried by an object of a shown image or crop, read
  as a VLM would see it). Unlike Support Recall it credits derived text that states the detail (a fact
  store, per-session summaries) and refuses a caption or summary that lost it. AR questions without
  support items have none (None).
- **answers** (always, unless ``--no-answer``): the configured answerer answers every question from the context
  as it read it, in the method's process; here its answer is scored against the gold with the SQuAD/LoCoMo
  normalisation: ``answer_f1`` (token F1) and ``answer_em`` (exact match) of the answer's ``span`` (its ``text``
  when it names none); a declined answer (``Answer.declined``, or a refusal by the judge's lexicon for an answerer
  that does not say) scores 0 on both outside AR. ``answer_correct``: the judge's verdict with ``--judge``, else
  token F1 >= 0.5 — and on AR, declining. **Which photo**: a gold answer that is one image reference
  (``<session>:IMG_<n>``, ``image_reference``; Mem-Gallery's "which image shows X?") is scored by what the answer
  points at, not by its words (a converted chat carries the photo's caption, not its id): when the answer's
  ``span`` (its ``text`` when it names none) names image ids, it is right iff the one it names is the gold one
  (``IMG_1`` = ``IMG_001``; naming several is wrong); when it names none, it is right iff its **first cited node** is a gold evidence turn of the session the gold id names
  (``image_verdict``). A declined answer is wrong whatever it cites. ``answer_f1``, ``answer_em``,
  ``answer_correct`` (and ``judged_acc`` with ``--judge``: a judge reading words cannot tell which photo a
  caption is) are all that verdict, 1 or 0. A gold *list* of images ("D8:IMG_001, D8:IMG_002") keeps the token
  rule. A decline is either a **refusal** ("not in memory": ``Answer.refused``)
  or "not sure" (the evidence is shown, no span of the asked type found); an answerer that does not say which is
  read by the judge's refusal lexicon. From these the report gives **selective accuracy** (``coverage`` = share
  of answerable questions answered rather than declined, ``precision`` = share correct among those answered),
  **refusals** (``refusal recall`` on AR, and on every question whose gold evidence is not all in the context —
  "should decline"; ``refusal precision`` = share of refusals that should have been), the share of answerable
  questions with all their evidence in the context that were **refused anyway** (and, apart, "not sure"), and
  **mark errors**
  (a KU question whose gold evidence turn the answerer read marked ``superseded``) and, on synthetic data whose
  generator knows which turns are about which entity (``_hidden/world.jsonl``), **chain mark errors**
  (``chain_mark_errors``): every turn a chain step of the read context names that is not an *event turn* (a
  generator observation: introduced, changed, re-shown, sold) of the chain's subject entity — a passing mention,
  a near miss ("I almost repainted my bike") or another entity's turn. The chain's subject is mapped to an entity
  by the question's gold support when every support item names one entity whose words (kind, type, name,
  reference) include the chain's subject word, else by the entity whose event turns the chain names most
  (preferring entities whose words include the subject); a chain whose turns are no entity's events has every
  turn counted. Judged in this process from the hidden world, never in the method's.
- **judged accuracy** (only with ``--judge``): the judge scores the answer; reported beside, never merged with,
  oracle-reader.
- **violation**: the measured context was over the reader budget on some dimension, or showed evidence that
  is not a stored Raw Node of the namespace. It scores 0 on every metric and is counted in the report.
- **read amplification**: ``nodes_read`` = Raw Nodes the read path fetched from the Cold Store (measured
  on the store), ``scored`` = Raw Nodes (vectors or postings) the method says it scored before selection —
  **self-reported** (``RouteTrace.scored``): the harness cannot see what a read path scores in memory, so it is
  labelled so in every table and never enters a score.
- **read latency**: a history's questions are read in one batch (``Memory.retrieve_many``), so a question's
  ``read_ms`` and ``nodes_read`` are its share of the batch (total / questions); per-question latency of the
  unbatched path is measured by ``benchmarks/e2e/read.py``.

Intervals are a cluster bootstrap over histories (questions of one history are not independent); a paired
difference between two methods resamples the *same* histories for both (``paired_difference``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np

from ..models.answer import content_words
from ..budget import INDEX_DIMENSIONS, Measured
from ..types import Context, EvidenceForm, Question, node_id_for

METRICS = ("route_hit", "support_recall", "raw_support_recall", "oracle_reader_acc", "evidence_acc", "judged_acc",
           "answer_f1", "answer_em", "answer_correct", "answered", "precision_answered", "refused_should",
           "declined_with_evidence", "unsure_with_evidence", "mark_error",
           "text_tokens", "image_tokens",
           "context_tokens", "images",
           "raw_nodes_read", "read_ms", "pool_size", "nodes_read", "scored", "violation_rate")
#: Route-Hit counts the first this many ids of a trace's pool (c3m's reader pool, ``PipelineConfig.pool``)
ROUTE_POOL = 48
#: categories whose retrieval metrics make up "overall" (AR is reported on its own row)
RETRIEVAL_CATEGORIES = ("IE", "MSR", "TR", "KU")
_QUESTION_WORDS = {"name", "called", "colour", "color", "kind", "type", "many", "much", "long", "old", "ever", "tell"}


@dataclass(frozen=True)
class QuestionResult:
    namespace: str
    question_id: str
    category: str
    route_hit: float | None
    support_recall: float | None
    oracle_reader_acc: float
    text_tokens: int
    images: int
    raw_nodes_read: int
    read_ms: float
    judged_acc: float | None = None  # only when an answerer + judge are configured
    prediction: str | None = None
    pool_size: int | None = None     # candidates handed to the final selection (selected included)
    nodes_read: int = 0              # Raw Nodes fetched from the Cold Store by the read path (measured)
    scored: int = 0                  # Raw Nodes scored before selection: self-reported (the method's trace)
    violation: str | None = None     # why the context broke the reader budget (then every score is 0)
    pages: int = 0
    image_tokens: int = 0            # the shown images under the image-token model (crops cheaper)
    raw_support_recall: float | None = None  # gold turns shown raw (text or original image) only
    evidence_acc: float | None = None  # evidence-check-v1: every support detail visible in some shown form
    answer_f1: float | None = None     # token F1 of the answer's span (text) against the gold answer; None outside
    answer_em: float | None = None     # exact match, the same normalisation
    answer_correct: float | None = None  # judge's verdict, else F1 >= 0.5; on AR: declined
    declined: bool | None = None       # the answerer declined ("not in memory" / "not sure")
    refused: bool | None = None        # ... because memory holds no answer ("not in memory"): a refusal
    answer_confidence: float | None = None
    mark_error: float | None = None    # KU only: a gold evidence turn read marked superseded
    chain_turns: int | None = None     # turns named by the read context's chain steps (None: no hidden world)
    chain_errors: int | None = None    # ... of which not an event turn of the chain's subject entity

    @property
    def answered(self) -> float | None:
        """1 answered / 0 declined, on answerable questions (coverage)."""
        return None if self.declined is None or self.category == "AR" else float(not self.declined)

    @property
    def precision_answered(self) -> float | None:
        """Correct among answered answerable questions (selective precision)."""
        return None if self.declined is None or self.declined or self.category == "AR" else self.answer_correct

    @property
    def should_decline(self) -> bool:
        """AR, or the gold evidence is not all in the context (forgotten, or never found)."""
        return self.category == "AR" or self.oracle_reader_acc < 1.0

    @property
    def refused_should(self) -> float | None:
        """On questions that should be declined: 1 refused ("not in memory"; refusal recall)."""
        return None if self.declined is None or not self.should_decline else float(bool(self.refused))

    @property
    def declined_with_evidence(self) -> float | None:
        """On answerable questions whose gold evidence is all in the context: 1 refused anyway ("not in memory")."""
        return None if self.declined is None or self.should_decline else float(bool(self.refused))

    @property
    def unsure_with_evidence(self) -> float | None:
        """On answerable questions whose gold evidence is all in the context: 1 "not sure" (declined, not refused)."""
        return None if self.declined is None or self.should_decline else float(self.declined and not self.refused)

    @property
    def context_tokens(self) -> int:
        return self.text_tokens + self.image_tokens

    @property
    def violation_rate(self) -> float:
        return float(self.violation is not None)


def _misleading(question: str, ctx: Context) -> bool:
    subject = content_words(question) - _QUESTION_WORDS
    return bool(subject) and any(subject <= content_words(item.text) for item in ctx.items)


def score_context(namespace: str, q: Question, ctx: Context, read_seconds: float, measured: Measured | None = None,
                  nodes_read: int = 0, *, route_pool: int | None = ROUTE_POOL) -> QuestionResult:
    """Score one context from the harness's measurement (``measured``: every item resolved against the store by
    the caller, ``c3m.budget.measure_context``). Raw-Node ids are deterministic in (namespace, session, turn), so
    gold turns map to node ids. Without ``measured`` (a caller with no store: unit tests of the rules) the items'
    own provenance and the trace's pool are read as given."""
    if measured is not None:
        use, violation = measured.use, measured.violation
        raw, got, pool = set(measured.raw_turns), set(measured.raw_turns | measured.view_turns), set(measured.pool)
    else:
        use, violation = ctx.use, None
        got = {(i.provenance.session_id, i.provenance.turn_index) for i in ctx.items
               if i.form is not EvidenceForm.SUMMARY}
        raw = {(i.provenance.session_id, i.provenance.turn_index) for i in ctx.items
               if i.form in (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE)}
        pool = set(ctx.trace.pool) | {i.node_id for i in ctx.items}
    size = len(pool)
    if route_pool is not None:  # the first route_pool ids of the trace, in its order, plus the selected items
        pool &= set(tuple(ctx.trace.pool)[:route_pool]) | {i.node_id for i in ctx.items}
    gold = {(e.session, e.turn) for e in q.evidence}
    if gold:
        route_hit = float(any(node_id_for(namespace, s, t) in pool for s, t in gold))
        recall = len(gold & got) / len(gold)
        raw_recall = len(gold & raw) / len(gold)
        oracle = float(gold <= got)
    else:
        route_hit = recall = raw_recall = None
        oracle = float(not _misleading(q.question, ctx)) if q.category == "AR" else 0.0
    if violation:
        zero = lambda v: 0.0 if v is not None else None  # noqa: E731
        route_hit, recall, raw_recall, oracle = zero(route_hit), zero(recall), zero(raw_recall), 0.0
    return QuestionResult(namespace, q.id, q.category, route_hit, recall, oracle, use.text_tokens, use.images,
                          use.raw_nodes, round(read_seconds * 1000, 3), pool_size=size, nodes_read=nodes_read,
                          scored=int(ctx.trace.scored), violation=violation, pages=use.pages,
                          image_tokens=measured.image_tokens if measured is not None else 0,
                          raw_support_recall=raw_recall)


#: one image of a conversation as a gold answer names it: ``D6:IMG_001`` (session ``D6``, its first photo)
_IMAGE_REF = re.compile(r"([A-Za-z0-9_-]+):IMG_(\d+)")


def image_reference(gold: str) -> tuple[str, int] | None:
    """(session, number) when the gold answer is exactly one image reference (``D6:IMG_001``; a trailing full stop
    allowed), else None: a list of images or any other answer is not one."""
    m = _IMAGE_REF.fullmatch(gold.strip().rstrip("."))
    return (m.group(1), int(m.group(2))) if m else None


def image_gold_nodes(namespace: str, q: Question) -> frozenset[str]:
    """The node ids of ``q``'s gold evidence turns in the session its image answer names (empty when the gold is
    not one image reference)."""
    ref = image_reference(q.answer)
    if ref is None:
        return frozenset()
    return frozenset(node_id_for(namespace, e.session, e.turn) for e in q.evidence if e.session == ref[0])


def image_verdict(gold: str, said: str | None, cited: Sequence[str], gold_nodes: Iterable[str],
                  declined: bool = False) -> bool | None:
    """Whether an answer to a "which photo" question is right (module docstring), None when ``gold`` is not one
    image reference (the token rule applies). ``gold_nodes``: the gold evidence turns' node ids in the gold id's
    session (``image_gold_nodes``). ``said``: the answer's span, else its text. An id it names decides (a wrong id
    is wrong whatever is cited); with none, the first cited node does; a decline is wrong."""
    ref = image_reference(gold)
    if ref is None:
        return None
    if declined:
        return False
    named = {(s, int(k)) for s, k in _IMAGE_REF.findall(said or "")}
    if named:
        return named == {ref}
    return bool(cited) and cited[0] in set(gold_nodes)


def score_answer(scored: QuestionResult, q: Question, answer, judge=None, read: Context | None = None) -> QuestionResult:
    """``scored`` with the answer's metrics (module docstring): ``answer`` carries ``text``, ``declined``, ``span``,
    ``confidence`` and ``cited`` (``c3m.eval.sandbox.AnswerRecord``). A context that violated the budget scores 0.
    A gold answer that is one image reference is scored by the photo the answer points at (``image_verdict``);
    given ``read`` (the context the answerer read), a cited node that is not one of its items points at nothing."""
    from ..models.judge import exact_match, is_refusal, token_f1

    said_so = bool(answer.declined)  # an answerer that says; else the judge's refusal lexicon
    declined = said_so or is_refusal(answer.text)
    refused = bool(answer.refused) if said_so else declined
    said = answer.span if answer.span else answer.text
    cited = tuple(getattr(answer, "cited", ()) or ())
    if read is not None and cited and cited[0] not in {i.node_id for i in read.items}:
        cited = ()  # the answer points at a node it was not shown
    photo = None if q.category == "AR" else image_verdict(q.answer, said, cited, image_gold_nodes(scored.namespace, q),
                                                          declined)
    judged = None
    if q.category == "AR":
        f1 = em = None
        correct = float(declined)
    elif photo is not None:  # which photo: what the answer points at, not its words
        f1 = em = correct = float(photo)
    else:
        f1 = 0.0 if declined else token_f1(q.answer, said)
        em = 0.0 if declined else float(exact_match(q.answer, said))
        correct = float(f1 >= 0.5)
    if judge is not None:
        judged = correct if photo is not None else float(judge.judge(q.question, q.answer, answer.text,
                                                                     q.category).correct)
        correct = judged
    if scored.violation:  # a context that broke the budget earns nothing, as in score_context
        zero = lambda v: None if v is None else 0.0  # noqa: E731
        f1, em, judged, correct = zero(f1), zero(em), zero(judged), 0.0
    return replace(scored, prediction=answer.text, answer_f1=f1, answer_em=em, answer_correct=correct,
                   judged_acc=judged, declined=declined, refused=refused, answer_confidence=answer.confidence)


def mark_errors(namespace: str, q: Question, read: Context) -> float | None:
    """KU only: 1 when a gold evidence turn is in what the answerer read marked ``superseded`` (the latest state
    shown as outdated), else 0."""
    if q.category != "KU" or not q.evidence:
        return None
    gold = {node_id_for(namespace, e.session, e.turn) for e in q.evidence}
    return float(any(i.status == "superseded" and i.node_id in gold for i in read.items))


class WorldTurns:
    """One synthetic history's hidden world, as chain mark errors read it: each entity's event turns (as node ids of
    ``namespace``) and the words that name it. Built in the harness's process from ``_hidden/world.jsonl``."""

    def __init__(self, namespace: str, record: dict):
        self.events: dict[str, frozenset[str]] = {}
        self.words: dict[str, frozenset[str]] = {}
        for ent in record.get("entities", ()):
            self.events[ent["id"]] = frozenset(node_id_for(namespace, o["session"], int(o["turn"]))
                                               for o in ent.get("observations", ()))
            names = " ".join(str(ent.get(k) or "") for k in ("kind", "type", "name", "ref")).lower()
            self.words[ent["id"]] = frozenset(w for w in names.replace("'s", " ").split() if w not in ("my", "the"))

    def subject_entity(self, subject: str, named: set[str], support_entities: set[str]) -> str | None:
        """The entity a chain about ``subject`` naming node ids ``named`` is about (module docstring)."""
        words = set(subject.lower().split())
        if len(support_entities) == 1:
            (eid,) = support_entities
            if eid in self.words and words & self.words[eid]:
                return eid
        ranked = sorted(self.events, key=lambda e: (-bool(words & self.words[e]), -len(named & self.events[e]), e))
        best = [e for e in ranked if named & self.events[e]]
        return best[0] if best else None


def chain_mark_errors(read: Context, world: WorldTurns, support_entities=()) -> tuple[int, int]:
    """(turns the read context's chain steps name, of which not an event turn of the chain's subject entity): each
    (step, node) once. ``support_entities``: the entity ids of the question's gold support (hidden record)."""
    named = errors = 0
    for chain in read.chains:
        nodes = [(k, n) for k, step in enumerate(chain.steps) for n in dict.fromkeys(step.node_ids)]
        entity = world.subject_entity(chain.subject, {n for _, n in nodes}, set(support_entities))
        ok = world.events.get(entity, frozenset()) if entity is not None else frozenset()
        named += len(nodes)
        errors += sum(n not in ok for _, n in nodes)
    return named, errors


def bootstrap_ci(values_by_cluster: list[list[float]], *, n_boot: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% percentile interval, resampling whole clusters (histories) with replacement."""
    clusters = [np.asarray(v, dtype=float) for v in values_by_cluster if len(v)]
    if not clusters:
        return (float("nan"),) * 3
    flat = np.concatenate(clusters)
    mean = float(flat.mean())
    if len(clusters) == 1:
        return mean, mean, mean
    rng = np.random.default_rng(seed)
    sums = np.array([c.sum() for c in clusters])
    counts = np.array([len(c) for c in clusters])
    picks = rng.integers(0, len(clusters), size=(n_boot, len(clusters)))
    boots = sums[picks].sum(1) / counts[picks].sum(1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return mean, float(lo), float(hi)


def in_category(cat: str, q) -> bool:
    """Whether question result ``q`` counts toward ``cat`` ("overall" = the retrieval categories)."""
    return q.category in RETRIEVAL_CATEGORIES if cat == "overall" else q.category == cat


def aggregate(results, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """{category|'overall': {metric: {mean, lo, hi, n}}} plus resource and write-budget figures, from
    HistoryResults. "overall" pools the retrieval categories only (``RETRIEVAL_CATEGORIES``)."""
    out: dict[str, dict] = {}
    results = sorted(results, key=lambda r: r.history)  # the bootstrap's clusters in one order, however the workers finished
    cats = sorted({q.category for r in results for q in r.questions})
    for cat in cats + ["overall"]:
        row = {}
        for metric in METRICS:
            clusters = [[getattr(q, metric) for q in r.questions if in_category(cat, q) and getattr(q, metric) is not None]
                        for r in results]
            n = sum(len(c) for c in clusters)
            mean, lo, hi = bootstrap_ci(clusters, n_boot=n_boot, seed=seed) if n else (None, None, None)
            row[metric] = {"mean": mean, "lo": lo, "hi": hi, "n": n}
        lat = [q.read_ms for r in results for q in r.questions if in_category(cat, q)]
        row["read_ms_p50"] = float(np.percentile(lat, 50)) if lat else None
        row["read_ms_p95"] = float(np.percentile(lat, 95)) if lat else None
        row["violations"] = sum(q.violation is not None for r in results for q in r.questions if in_category(cat, q))
        out[cat] = row
    qs = [q for r in results for q in r.questions if q.declined is not None]
    refused = [q for q in qs if q.refused]
    should = [q for q in qs if q.should_decline]
    answers = {  # over every category, AR included: refusals are about AR too (kept beside "overall"'s figures)
        "answers_n": len(qs),
        "refusal_recall": {"mean": sum(bool(q.refused) for q in should) / len(should) if should else None,
                           "n": len(should)},
        "refusal_precision": {"mean": sum(q.should_decline for q in refused) / len(refused) if refused else None,
                              "n": len(refused)},
    }
    checked = [q for r in results for q in r.questions if q.chain_turns is not None]
    answers["chain_turns"] = sum(q.chain_turns for q in checked)  # 0 without a hidden world (nothing to judge)
    answers["chain_mark_errors"] = sum(q.chain_errors for q in checked)
    answers["chain_questions"] = len(checked)
    out["overall"].update(answers)
    writes = [w * 1000 for r in results for w in r.write_seconds]
    peaks = np.array([r.index_peak for r in results if r.index_peak], dtype=float).reshape(-1, 4)
    out["overall"].update({
        "write_ms_p50": float(np.percentile(writes, 50)) if writes else None,
        "write_ms_p95": float(np.percentile(writes, 95)) if writes else None,
        "raw_node_pointers": float(np.mean([r.pointers for r in results])) if results else None,
        "raw_nodes": float(np.mean([r.raw_nodes for r in results])) if results else None,
        "overflow_repairs": float(np.mean([r.overflow_repairs for r in results])) if results else None,
        "histories": len(results),
        "bounded": bool(results) and all(r.bounded for r in results),
        # peak active-index size per history (harness-measured from every snapshot), mean and max over histories
        "index_peak_mean": dict(zip(INDEX_DIMENSIONS, peaks.mean(0).tolist())) if len(peaks) else None,
        "index_peak_max": dict(zip(INDEX_DIMENSIONS, peaks.max(0).tolist())) if len(peaks) else None,
        "write_violations": sum(len(r.write_violations) for r in results),
        "searches_cold_store": any(r.searches_cold_store for r in results),
        "cold_search_bytes_mean": float(np.mean([r.cold_search_bytes for r in results])) if results else 0.0,
        # reads of the live instance vs the instance reloaded from the snapshot (replay: RELOAD_CHECK)
        "reload_checked": sum(r.reload_checked for r in results),
        "reload_changed": sum(r.reload_changed for r in results),
        "read_violations": sum(q.violation is not None for r in results for q in r.questions),
    })
    return out


def paired_difference(results_a, results_b, metric: str, category: str = "overall", *, n_boot: int = 2000,
                      seed: int = 0) -> dict | None:
    """Mean of (A − B) over the questions both methods answered on the same histories, with a 95% paired
    cluster-bootstrap interval (each resample draws histories once and uses both methods' scores on them).
    ``win`` is "A" or "B" only when the interval excludes 0 over at least two histories, else None. None when
    nothing is shared."""
    b_by = {r.history: {q.question_id: q for q in r.questions} for r in results_b}
    clusters = []  # per shared history: the per-question differences A − B
    for ra in sorted(results_a, key=lambda r: r.history):  # cluster order fixed, as in ``aggregate``
        qb = b_by.get(ra.history)
        if qb is None:
            continue
        clusters.append([getattr(q, metric) - getattr(qb[q.question_id], metric) for q in ra.questions
                         if in_category(category, q) and q.question_id in qb and getattr(q, metric) is not None
                         and getattr(qb[q.question_id], metric) is not None])
    clusters = [c for c in clusters if c]
    if not clusters:
        return None
    mean, lo, hi = bootstrap_ci(clusters, n_boot=n_boot, seed=seed)  # the same cluster resampling, on differences
    # one history has no between-history spread to resample: its "interval" is a point, never a win
    win = None if len(clusters) < 2 else "A" if lo > 0 else ("B" if hi < 0 else None)
    return {"mean": mean, "lo": lo, "hi": hi, "n": sum(map(len, clusters)), "histories": len(clusters), "win": win}
