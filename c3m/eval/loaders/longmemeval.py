"""LongMemEval (Wu et al. 2025, ``longmemeval_{s,m,oracle}.json``) -> c3m dataset.

Mapping decisions:

* One instance = one History (its own haystack) with one question; both take ``question_id`` as id.
* Sessions: id from ``haystack_session_ids`` (a repeated id gets "#2", "#3"...), time from
  ``haystack_dates`` ("2023/05/20 (Sat) 02:21"), sorted by time (stable); empty sessions are skipped.
  The question time is ``question_date``.
* Categories: single-session-user / -assistant / -preference -> IE (one fact in one session),
  multi-session -> MSR, temporal-reasoning -> TR, knowledge-update -> KU; any id ending in "_abs" -> AR
  (LongMemEval's own answer, an explanation of why it cannot be answered, is kept as the gold refusal).
* Evidence: in each ``answer_session_ids`` session, the turns with ``has_answer: true``; if none is
  flagged there, all user turns of that session. Answer ids naming no session are dropped and counted.
  AR questions carry no evidence (nothing supports a refusal).
"""
from __future__ import annotations

from pathlib import Path

from ...types import ROLES, EvidenceRef, History, Question, Session, Turn
from .common import ConversionSummary, Reader, answer_turns, convert_records

CATEGORY = {"single-session-user": "IE", "single-session-assistant": "IE", "single-session-preference": "IE",
            "multi-session": "MSR", "temporal-reasoning": "TR", "knowledge-update": "KU"}
DATE_FORMATS = ("%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S")
DATE_EXAMPLE = "2023/05/20 (Sat) 02:21"


def convert_longmemeval(src: str | Path, out: str | Path) -> ConversionSummary:
    """Convert a LongMemEval JSON file into a c3m dataset folder ``out``."""
    return convert_records(src, out, "longmemeval", "LongMemEval", _instance)


def category_of(question_type: str, question_id: str) -> str | None:
    """Our category for a LongMemEval question type, or None if unknown."""
    if question_id.endswith("_abs") or question_type.endswith("_abs"):
        return "AR"
    return CATEGORY.get(question_type)


def _instance(r: Reader, obj: dict, path: str, summary: ConversionSummary) -> History:
    qid = r.text(obj, "question_id", path)
    qtype = r.get(obj, "question_type", path, str)
    category = category_of(qtype, qid)
    if category is None:
        raise r.fail(f"{path}.question_type", f"unknown LongMemEval question type {qtype!r}",
                     f"use one of {', '.join(CATEGORY)} (an id ending in _abs marks abstention)")
    question = r.get(obj, "question", path, str)
    answer = r.text(obj, "answer", path)
    asked = r.time(r.get(obj, "question_date", path, str), f"{path}.question_date", DATE_FORMATS, DATE_EXAMPLE)
    ids = r.get(obj, "haystack_session_ids", path, list)
    dates = r.get(obj, "haystack_dates", path, list)
    raw_sessions = r.get(obj, "haystack_sessions", path, list)
    if not len(ids) == len(dates) == len(raw_sessions):
        raise r.fail(f"{path}.haystack_sessions", (f"has {len(raw_sessions)} sessions but {len(ids)} ids and "
                                                    f"{len(dates)} dates"), "give one id and one date per session")
    sessions, by_source_id, seen = [], {}, {}
    for j, (sid, date, raw) in enumerate(zip(ids, dates, raw_sessions)):
        spath = f"{path}.haystack_sessions[{j}]"
        if not isinstance(raw, list):
            raise r.fail(spath, f"must be a list of turns, got {type(raw).__name__}",
                         "write each session as a list of turns")
        if not raw:
            summary.empty_sessions_skipped += 1
            continue
        seen[str(sid)] = seen.get(str(sid), 0) + 1
        our_id = str(sid) if seen[str(sid)] == 1 else f"{sid}#{seen[str(sid)]}"
        when = r.time(date, f"{path}.haystack_dates[{j}]", DATE_FORMATS, DATE_EXAMPLE)
        turns = tuple(_turn(r, r.obj(t, f"{spath}[{k}]"), f"{spath}[{k}]") for k, t in enumerate(raw))
        sessions.append(Session(our_id, when, turns))
        by_source_id.setdefault(str(sid), []).append((our_id, raw, turns))
    evidence: list[EvidenceRef] = []
    if category != "AR":
        for sid in r.get(obj, "answer_session_ids", path, list):
            matches = by_source_id.get(str(sid), [])
            summary.evidence_dropped += 0 if matches else 1
            for our_id, raw, turns in matches:
                evidence += [EvidenceRef(our_id, k) for k in answer_turns(raw, turns)]
    return History(qid, tuple(sessions), (Question(qid, question, answer, category, asked, tuple(evidence)),))


def _turn(r: Reader, t: dict, path: str) -> Turn:
    role = r.get(t, "role", path, str)
    if role not in ROLES:
        raise r.fail(f"{path}.role", f"unknown role {role!r}", f"use one of {', '.join(ROLES)}")
    return Turn(role, r.get(t, "content", path, str))
