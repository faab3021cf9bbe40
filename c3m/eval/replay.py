"""Chronological replay (C3M §3.1): sessions one by one, then every question of the history.

The write path is handed sessions only (``Memory.add_session``); questions reach the method solely
through ``retrieve`` after the last session. Metrics here are evidence-based and need no answerer:

- **Support Recall**: share of a question's gold evidence turns present in the final context.
- **oracle-reader accuracy**: 1 iff *all* gold evidence turns are in the context, i.e. a perfect reader
  could answer. It is undefined for AR (refusal) questions, which have no evidence, and reported as such.
  Always labelled "oracle-reader", never mixed with judged answer accuracy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import MemoryConfig
from ..types import History, ReaderBudget


@dataclass(frozen=True)
class QuestionResult:
    history: str
    question_id: str
    category: str
    support_recall: float | None
    oracle_reader: float | None
    text_tokens: int
    images: int
    raw_nodes: int
    read_seconds: float


def evaluate(histories: list[History], store: str | Path, *, config: MemoryConfig | None = None,
             budget: ReaderBudget | None = None, progress: bool = True) -> list[QuestionResult]:
    from tqdm import tqdm

    from ..memory import Memory

    results, models = [], None
    bar = tqdm(total=sum(len(h.sessions) + len(h.questions) for h in histories), desc="eval", unit="step",
               disable=not progress)
    for history in histories:
        with Memory(store, history.id, config=config, models=models) as mem:
            models = mem.models
            for session in history.sessions:  # write path: sessions only
                mem.add_session(session)
                bar.update(1)
            for q in history.questions:  # read path: after the last session
                t0 = time.perf_counter()
                ctx = mem.retrieve(q.question, budget)
                dt = time.perf_counter() - t0
                got = {(i.provenance.session_id, i.provenance.turn_index) for i in ctx.items}
                gold = {(e.session, e.turn) for e in q.evidence}
                recall = len(gold & got) / len(gold) if gold else None
                oracle = float(gold <= got) if gold else None
                results.append(QuestionResult(history.id, q.id, q.category, recall, oracle, ctx.use.text_tokens,
                                              ctx.use.images, ctx.use.raw_nodes, dt))
                bar.update(1)
    bar.close()
    return results


def summarize(results: list[QuestionResult]) -> dict[str, dict[str, float | int | None]]:
    """Per category and overall: n, means of the metrics, read latency p50/p95 (ms)."""
    out: dict[str, dict[str, float | int | None]] = {}
    groups = sorted({r.category for r in results})
    for name in groups + ["overall"]:
        rows = [r for r in results if name in ("overall", r.category)]

        def mean(values):
            values = [v for v in values if v is not None]
            return round(float(np.mean(values)), 4) if values else None

        lat = np.array([r.read_seconds for r in rows]) * 1000
        out[name] = {"n": len(rows), "support_recall": mean(r.support_recall for r in rows),
                     "oracle_reader_acc": mean(r.oracle_reader for r in rows),
                     "text_tokens": mean(r.text_tokens for r in rows), "images": mean(r.images for r in rows),
                     "read_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
                     "read_ms_p95": round(float(np.percentile(lat, 95)), 2) if len(lat) else None}
    return out
