"""Evidence metrics per question, and their aggregation with 95% bootstrap intervals.

Definitions (all from the final context and the route trace; no answerer needed):

- **Route-Hit**: 1 iff some gold evidence turn was *reached by routing* — among the Raw Nodes the method
  expanded before the final budgeted selection (``RouteTrace.expanded_nodes``, falling back to the
  selected nodes). Separates routing failures from selection failures (C3M §2.2).
- **Support Recall**: share of gold evidence turns present in the final context.
- **judged accuracy** (only with ``--judge``): the configured answerer answers from the context and the
  judge (exact match, token F1, or an LLM) scores it; reported beside, never merged with, oracle-reader.
- **oracle-reader accuracy**: for IE/MSR/TR/KU, 1 iff *all* gold evidence turns are in the context (a
  perfect reader could answer). For AR (the subject was never mentioned, so refusing is correct), 1 iff
  the context holds no *misleading* item: no turn that contains every content word of the question's
  subject (a named heuristic — such a turn could lure a reader into answering). Always reported as
  "oracle-reader", never mixed with judged accuracy.

Intervals are a cluster bootstrap over histories (questions of one history are not independent).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models.answer import content_words
from ..types import Context, Question, node_id_for

METRICS = ("route_hit", "support_recall", "oracle_reader_acc", "judged_acc", "text_tokens", "images",
           "raw_nodes_read", "read_ms")
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


def _misleading(question: str, ctx: Context) -> bool:
    subject = content_words(question) - _QUESTION_WORDS
    return bool(subject) and any(subject <= content_words(item.text) for item in ctx.items)


def score_context(namespace: str, q: Question, ctx: Context, read_seconds: float) -> QuestionResult:
    """Score one context; Raw-Node ids are deterministic in (namespace, session, turn), so gold turns map
    to the node ids the route trace logs."""
    got = {(i.provenance.session_id, i.provenance.turn_index) for i in ctx.items}
    gold = {(e.session, e.turn) for e in q.evidence}
    if gold:
        routed = set(ctx.trace.expanded_nodes or ctx.trace.selected_nodes)
        route_hit = float(any(node_id_for(namespace, s, t) in routed for s, t in gold))
        recall = len(gold & got) / len(gold)
        oracle = float(gold <= got)
    else:
        route_hit = recall = None
        oracle = float(not _misleading(q.question, ctx)) if q.category == "AR" else 0.0
    return QuestionResult(namespace, q.id, q.category, route_hit, recall, oracle, ctx.use.text_tokens,
                          ctx.use.images, ctx.use.raw_nodes, round(read_seconds * 1000, 3))


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


def aggregate(results, *, n_boot: int = 1000, seed: int = 0) -> dict:
    """{category|'overall': {metric: {mean, lo, hi, n}}} plus resource metrics, from HistoryResults."""
    out: dict[str, dict] = {}
    cats = sorted({q.category for r in results for q in r.questions})
    for cat in cats + ["overall"]:
        row = {}
        for metric in METRICS:
            clusters = [[getattr(q, metric) for q in r.questions
                         if (cat == "overall" or q.category == cat) and getattr(q, metric) is not None]
                        for r in results]
            n = sum(len(c) for c in clusters)
            mean, lo, hi = bootstrap_ci(clusters, n_boot=n_boot, seed=seed) if n else (None, None, None)
            row[metric] = {"mean": mean, "lo": lo, "hi": hi, "n": n}
        lat = [q.read_ms for r in results for q in r.questions if cat == "overall" or q.category == cat]
        row["read_ms_p50"] = float(np.percentile(lat, 50)) if lat else None
        row["read_ms_p95"] = float(np.percentile(lat, 95)) if lat else None
        out[cat] = row
    writes = [w * 1000 for r in results for w in r.write_seconds]
    out["overall"].update({
        "write_ms_p50": float(np.percentile(writes, 50)) if writes else None,
        "write_ms_p95": float(np.percentile(writes, 95)) if writes else None,
        "raw_node_pointers": float(np.mean([r.pointers for r in results])) if results else None,
        "raw_nodes": float(np.mean([r.raw_nodes for r in results])) if results else None,
        "overflow_repairs": float(np.mean([r.overflow_repairs for r in results])) if results else None,
        "histories": len(results),
    })
    return out
