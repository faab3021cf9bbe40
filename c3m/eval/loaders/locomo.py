"""LoCoMo (Maharana et al. 2024, ``locomo10.json``) -> c3m dataset. One sample = one History.

Mapping decisions:

* Speakers: ``speaker_a`` -> role "user", ``speaker_b`` -> role "assistant" (both are people in LoCoMo;
  c3m needs a user/assistant split). The speaker's name is kept as a text prefix ("Caroline: ...")
  because LoCoMo questions name the speakers.
* Sessions: ``session_N`` keeps its key as the session id; the time is ``session_N_date_time``
  ("1:56 pm on 8 May, 2023"); sessions are sorted by time (stable). Empty sessions are skipped.
* Images: LoCoMo images are URLs (``img_url``), which are not downloaded: the turn text gets
  "[image: <blip_caption or 'no caption'> <url>]". A local path instead is copied into the dataset.
  ``query`` (the search string used to find the image) is dropped.
* Categories: 1 multi-hop -> MSR, 2 temporal -> TR, 3 open-domain/commonsense -> IE, 4 single-hop -> IE,
  5 adversarial -> AR with the gold answer ``REFUSAL`` (``adversarial_answer`` is the trap, not gold).
* Evidence: "D<session>:<turn>" (1-based turn, as in ``dia_id``) -> {session: "session_N", turn: i}
  (0-based); ids matching no turn are dropped and counted. AR questions carry no evidence: in c3m,
  evidence supports the gold answer and nothing supports a refusal.
* Question ids are "q1", "q2", ... in ``qa`` order; LoCoMo questions have no time.
"""
from __future__ import annotations

import re
from pathlib import Path

from ...types import EvidenceRef, History, Question, Session, Turn
from .common import ConversionSummary, Reader, convert_records, url_marker

CATEGORY = {1: "MSR", 2: "TR", 3: "IE", 4: "IE", 5: "AR"}
REFUSAL = "Not mentioned in the conversation."
DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")
DATE_EXAMPLE = "1:56 pm on 8 May, 2023"
_DIA = re.compile(r"D(\d+):(\d+)")


def convert_locomo(src: str | Path, out: str | Path) -> ConversionSummary:
    """Convert a LoCoMo JSON file into a c3m dataset folder ``out``."""
    return convert_records(src, out, "locomo", "LoCoMo", _sample)


def _sample(r: Reader, obj: dict, path: str, summary: ConversionSummary) -> History:
    hid = r.text(obj, "sample_id", path)
    cpath = f"{path}.conversation"
    conv = r.get(obj, "conversation", path, dict)
    roles = {r.get(conv, "speaker_a", cpath, str): "user", r.get(conv, "speaker_b", cpath, str): "assistant"}
    numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    sessions, where = [], {}  # where: (session number, 1-based turn) -> EvidenceRef
    for n in numbers:
        key = f"session_{n}"
        raw = r.get(conv, key, cpath, list)
        if not raw:
            summary.empty_sessions_skipped += 1
            continue
        when = r.time(r.get(conv, f"{key}_date_time", cpath, str), f"{cpath}.{key}_date_time",
                      DATE_FORMATS, DATE_EXAMPLE)
        turns = []
        for j, t in enumerate(raw):
            tpath = f"{cpath}.{key}[{j}]"
            turns.append(_turn(r, r.obj(t, tpath), tpath, roles, summary))
            m = _DIA.fullmatch(str(t.get("dia_id", "")).strip())
            where[(int(m.group(1)), int(m.group(2))) if m else (n, j + 1)] = EvidenceRef(key, j)
        sessions.append(Session(key, when, tuple(turns)))
    questions = [_question(r, r.obj(qa, f"{path}.qa[{k}]"), f"{path}.qa[{k}]", k, where, summary)
                 for k, qa in enumerate(r.get(obj, "qa", path, list))]
    return History(hid, tuple(sessions), tuple(questions))


def _turn(r: Reader, t: dict, path: str, roles: dict[str, str], summary: ConversionSummary) -> Turn:
    speaker = r.get(t, "speaker", path, str)
    if speaker not in roles:
        raise r.fail(f"{path}.speaker", f"{speaker!r} is neither speaker_a nor speaker_b ({', '.join(roles)})",
                     "use one of the two speaker names given in the conversation")
    text = f"{speaker}: {r.get(t, 'text', path, str)}"
    urls = t.get("img_url") or []
    images = []
    for k, ref in enumerate([urls] if isinstance(urls, str) else urls):
        image = r.image(ref, f"{path}.img_url[{k}]")
        if isinstance(image, Path):
            images.append(image)
        else:
            text += " " + url_marker(image, t.get("blip_caption"))
            summary.images_kept_as_url += 1
    return Turn(roles[speaker], text, tuple(images))


def _question(r: Reader, qa: dict, path: str, k: int, where: dict, summary: ConversionSummary) -> Question:
    question = r.get(qa, "question", path, str)
    number = r.get(qa, "category", path, int)
    if number not in CATEGORY:
        raise r.fail(f"{path}.category", f"unknown LoCoMo category {number}", "use a category from 1 to 5")
    category = CATEGORY[number]
    if category == "AR":
        return Question(f"q{k + 1}", question, REFUSAL, category)
    answer = r.text(qa, "answer", path)
    evidence: list[EvidenceRef] = []
    for ref in qa.get("evidence") or []:
        found = [where.get((int(s), int(t))) for s, t in _DIA.findall(str(ref))]  # "D8:6; D9:17" happens
        summary.evidence_dropped += found.count(None) + (0 if found else 1)
        for e in found:
            if e is not None and e not in evidence:
                evidence.append(e)
    return Question(f"q{k + 1}", question, answer, category, None, tuple(evidence))
