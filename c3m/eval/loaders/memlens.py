"""MemLens (Ren et al. 2026, ``dataset_{32k,64k,128k,256k}.json``) -> c3m dataset.

The public schema is only partly documented, so this reader is defensive where the brief allows it and
strict everywhere else. Mapping decisions:

* One item = one History with one question; both take ``question_id`` as id.
* Sessions: ``haystack_sessions`` is a list of ``{date, session: [turns]}`` (a session id is taken from
  ``session_id``/``id``, else ``haystack_session_ids[j]``, else "session_<j+1>"); a plain list of turns
  with ``haystack_dates`` (the LongMemEval layout) is accepted too. Dates are LongMemEval-style
  ("2023/05/20 (Sat) 02:21"), "2023/05/20", or ISO 8601. Sessions are sorted by time (stable); empty ones
  are skipped. ``question_date``, when present, is the question time.
* Images: ``images`` of a turn are paths relative to the source file (copied into the dataset) or URLs
  (not downloaded; written into the text as "[image: <caption or 'no caption'> <url>]", caption from a
  ``captions`` list when present). The k-th ``<image>`` placeholder in ``content`` is replaced by the k-th
  image's URL marker, or removed for a local image (the image itself is attached to the turn).
* Categories: ``question_type`` containing a code IE/MSR/TR/KU/AR, or a long name (information
  extraction, multi-session reasoning, temporal reasoning, knowledge update, answer refusal/abstention),
  or a LongMemEval type; an id ending in "_abs" -> AR.
* Evidence: ``answer_session_ids`` (or ``evidence``) entries naming a session by id or by 0-based index,
  or {session, turn} objects for single turns. In a named session, the turns with ``has_answer: true``,
  else all its user turns. Unresolvable entries are dropped and counted; AR questions carry no evidence.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...types import CATEGORIES, ROLES, EvidenceRef, History, Question, Session, Turn
from .common import ConversionSummary, Reader, answer_turns, convert_records, url_marker
from .longmemeval import category_of as lme_category

DATE_FORMATS = ("%Y/%m/%d %H:%M", "%Y/%m/%d %H:%M:%S", "%Y/%m/%d", "%Y-%m-%d %H:%M")
DATE_EXAMPLE = "2023/05/20 (Sat) 02:21"
LONG_NAMES = (("information extraction", "IE"), ("multi session", "MSR"), ("multisession", "MSR"),
              ("temporal", "TR"), ("knowledge update", "KU"), ("refusal", "AR"), ("abstention", "AR"),
              ("unanswerable", "AR"))


def convert_memlens(src: str | Path, out: str | Path) -> ConversionSummary:
    """Convert a MemLens JSON file (images relative to it) into a c3m dataset folder ``out``."""
    return convert_records(src, out, "memlens", "MemLens", _item)


def category_of(question_type: str, question_id: str = "") -> str | None:
    """Our category for a MemLens question type (code, long name or LongMemEval type), or None."""
    if question_id.endswith("_abs"):
        return "AR"
    tokens = [tok for tok in re.split(r"[^A-Za-z]+", question_type) if tok]
    codes = [tok.upper() for tok in tokens if tok.upper() in CATEGORIES and (tok.isupper() or len(tokens) == 1)]
    if codes:
        return codes[0]
    words = " ".join(re.split(r"[^a-z]+", question_type.lower()))
    return next((cat for name, cat in LONG_NAMES if name in words), None) or lme_category(question_type, "")


def _item(r: Reader, obj: dict, path: str, summary: ConversionSummary) -> History:
    qid = r.text(obj, "question_id", path)
    qtype = r.get(obj, "question_type", path, str)
    category = category_of(qtype, qid)
    if category is None:
        raise r.fail(f"{path}.question_type", f"cannot tell the category of question type {qtype!r}",
                     "use a type naming IE, MSR, TR, KU or AR (or their long names)")
    question = r.get(obj, "question", path, str)
    answer = r.text(obj, "answer", path)
    asked = None
    if obj.get("question_date") is not None:
        asked = r.time(obj["question_date"], f"{path}.question_date", DATE_FORMATS, DATE_EXAMPLE, iso=True)
    ids = obj.get("haystack_session_ids") or []
    sessions, index = [], []  # index[j]: (our id, raw turns, turns) of source session j, or None if skipped
    for j, entry in enumerate(r.get(obj, "haystack_sessions", path, list)):
        spath = f"{path}.haystack_sessions[{j}]"
        if isinstance(entry, dict):
            raw, date, dpath = r.get(entry, "session", spath, list), entry.get("date"), f"{spath}.date"
            sid = entry.get("session_id") or entry.get("id") or (ids[j] if j < len(ids) else None)
            tpath = f"{spath}.session"
        elif isinstance(entry, list):
            dates = r.get(obj, "haystack_dates", path, list)
            raw, date, dpath = entry, dates[j] if j < len(dates) else None, f"{path}.haystack_dates[{j}]"
            sid, tpath = (ids[j] if j < len(ids) else None), spath
        else:
            raise r.fail(spath, f"must be an object {{date, session}}, got {type(entry).__name__}",
                         'write each session as {"date": "...", "session": [turns]}')
        if not raw:
            summary.empty_sessions_skipped += 1
            index.append(None)
            continue
        if date is None:
            raise r.fail(dpath, "is missing", f"give the session's date, e.g. {DATE_EXAMPLE!r}")
        when = r.time(date, dpath, DATE_FORMATS, DATE_EXAMPLE, iso=True)
        turns = tuple(_turn(r, r.obj(t, f"{tpath}[{k}]"), f"{tpath}[{k}]", summary) for k, t in enumerate(raw))
        our_id = str(sid) if sid is not None else f"session_{j + 1}"
        if any(s.id == our_id for s in sessions):
            our_id = f"{our_id}#{j + 1}"
        sessions.append(Session(our_id, when, turns))
        index.append((our_id, raw, turns))
    evidence: list[EvidenceRef] = []
    if category != "AR":
        refs = obj.get("answer_session_ids", obj.get("evidence")) or []
        for ref in refs if isinstance(refs, list) else [refs]:
            found = _resolve(ref, index)
            summary.evidence_dropped += 0 if found else 1
            evidence += [e for e in found if e not in evidence]
    return History(qid, tuple(sessions), (Question(qid, question, answer, category, asked, tuple(evidence)),))


def _resolve(ref: Any, index: list) -> list[EvidenceRef]:
    """Evidence turns for one entry: a session id, a 0-based session index, or {session, turn}."""
    turn = None
    if isinstance(ref, dict):
        ref, turn = ref.get("session"), ref.get("turn")
    if isinstance(ref, int) and not isinstance(ref, bool):
        hit = index[ref] if 0 <= ref < len(index) else None
    else:
        hit = next((e for e in index if e is not None and e[0] == str(ref)), None)
    if hit is None:
        return []
    our_id, raw, turns = hit
    if turn is None:
        return [EvidenceRef(our_id, k) for k in answer_turns(raw, turns)]
    return [EvidenceRef(our_id, turn)] if isinstance(turn, int) and 0 <= turn < len(turns) else []


def _turn(r: Reader, t: dict, path: str, summary: ConversionSummary) -> Turn:
    role = r.get(t, "role", path, str)
    if role not in ROLES:
        raise r.fail(f"{path}.role", f"unknown role {role!r}", f"use one of {', '.join(ROLES)}")
    content = r.get(t, "content", path, str)
    refs = t.get("images") or []
    refs = [refs] if isinstance(refs, str) else refs
    captions = t.get("captions") if isinstance(t.get("captions"), list) else []
    images, markers = [], []
    for k, ref in enumerate(refs):
        image = r.image(ref, f"{path}.images[{k}]")
        if isinstance(image, Path):
            images.append(image)
            markers.append("")
        else:
            markers.append(url_marker(image, captions[k] if k < len(captions) else None))
            summary.images_kept_as_url += 1
    parts = re.split(r" ?<image>", content)  # a removed placeholder takes its leading space with it
    text = parts[0] + "".join((" " + markers[k] if k < len(markers) and markers[k] else "") + part
                              for k, part in enumerate(parts[1:]))
    extra = [m for m in markers[len(parts) - 1:] if m]  # more images than placeholders
    return Turn(role, " ".join([text.strip(), *extra]).strip(), tuple(images))
