"""Benchmark loaders: hand-made fixtures in each benchmark's own shape round-trip into valid c3m datasets,
and bad input fails with an InvalidInput naming the field."""
from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from c3m.dataset import load_dataset, validate_dataset
from c3m.errors import InvalidInput
from c3m.eval.loaders import LOADERS, SUMMARY_FILE, convert
from c3m.eval.loaders.locomo import REFUSAL
from c3m.eval.loaders.memlens import category_of as memlens_category
from c3m.types import EvidenceRef

FIXTURES = Path(__file__).parent / "fixtures" / "loaders"
SOURCES = {"locomo": FIXTURES / "locomo.json", "longmemeval": FIXTURES / "longmemeval.json",
           "memlens": FIXTURES / "memlens" / "memlens.json"}


def _convert(kind, tmp_path):
    summary = LOADERS[kind](SOURCES[kind], tmp_path / "out")
    assert validate_dataset(tmp_path / "out") == []
    return summary, {h.id: h for h in load_dataset(tmp_path / "out")}


def _ev(*pairs):
    return tuple(EvidenceRef(s, t) for s, t in pairs)


def _chronological(history):
    times = [s.time for s in history.sessions]
    return times == sorted(times)


def test_locomo_round_trip(tmp_path):
    summary, hs = _convert("locomo", tmp_path)
    assert (summary.histories, summary.sessions, summary.turns) == (2, 4, 9)
    assert summary.questions == {"IE": 4, "MSR": 1, "TR": 1, "KU": 0, "AR": 1}
    assert (summary.images_kept_as_url, summary.images_copied) == (2, 0)
    assert summary.evidence_dropped == 2  # "D9:1" names no turn; "not-an-id" is no id at all
    assert summary.empty_sessions_skipped == 1

    h = hs["conv-1"]
    assert all(_chronological(x) for x in hs.values())
    assert [s.id for s in h.sessions] == ["session_3", "session_1", "session_2"]  # sorted by time
    assert h.sessions[0].time == datetime(2023, 1, 2, 9, 5)
    assert h.sessions[1].time == datetime(2023, 5, 8, 13, 56)
    s1 = h.sessions[1]
    assert [t.role for t in s1.turns] == ["user", "assistant", "user"]
    assert s1.turns[1].text == "Melanie: That's great! I painted a lake sunrise last year."
    bowl = h.sessions[2].turns[0]
    assert bowl.images == ()
    assert bowl.text.endswith("[image: a photo of a blue bowl on a table https://example.com/bowl.jpg]")
    assert h.sessions[0].turns[0].text.endswith("[image: no caption https://example.com/fireworks.png]")

    q = {x.id: x for x in h.questions}
    assert (q["q1"].category, q["q1"].answer, q["q1"].evidence) == ("IE", "a lake sunrise", _ev(("session_1", 1)))
    assert (q["q2"].category, q["q2"].evidence) == ("TR", _ev(("session_2", 0)))
    assert (q["q3"].category, q["q3"].evidence) == ("MSR", _ev(("session_1", 0), ("session_2", 1)))
    assert q["q4"].category == "IE"
    assert (q["q5"].category, q["q5"].answer, q["q5"].evidence) == ("AR", REFUSAL, ())

    h2 = hs["conv-2"]
    assert [s.id for s in h2.sessions] == ["session_1"]  # the empty session_2 is skipped
    assert h2.questions[0].answer == "2022"  # a numeric answer becomes text
    assert set(h2.questions[0].evidence) == set(_ev(("session_1", 0), ("session_1", 1)))  # "D1:2; D1:1"


def test_longmemeval_round_trip(tmp_path):
    summary, hs = _convert("longmemeval", tmp_path)
    assert (summary.histories, summary.sessions, summary.turns) == (2, 5, 12)
    assert summary.questions == {"IE": 0, "MSR": 1, "TR": 0, "KU": 1, "AR": 0}
    assert (summary.evidence_dropped, summary.empty_sessions_skipped) == (1, 1)

    h = hs["gpt4_ms_01"]
    assert [s.id for s in h.sessions] == ["sharegpt_a1", "answer_c3", "answer_b2"]  # sorted by time
    assert h.sessions[0].time == datetime(2023, 5, 20, 2, 21)
    (q,) = h.questions
    assert (q.id, q.category, q.answer, q.time) == ("gpt4_ms_01", "MSR", "3", datetime(2023, 5, 30, 23, 40))
    assert q.evidence == _ev(("answer_b2", 2), ("answer_c3", 0))  # only has_answer turns

    (q,) = hs["ku_02"].questions
    assert [s.id for s in hs["ku_02"].sessions] == ["answer_k1", "answer_k3"]
    assert q.category == "KU"
    assert q.evidence == _ev(("answer_k3", 0), ("answer_k3", 2))  # nothing flagged: all user turns


def test_memlens_round_trip(tmp_path):
    summary, hs = _convert("memlens", tmp_path)
    assert (summary.histories, summary.sessions, summary.turns) == (2, 4, 8)
    assert summary.questions == {"IE": 1, "MSR": 1, "TR": 0, "KU": 0, "AR": 0}
    assert (summary.images_copied, summary.images_kept_as_url, summary.evidence_dropped) == (2, 1, 1)

    h = hs["ml_ie_001"]
    assert [s.id for s in h.sessions] == ["haystack_7", "needle_1"]  # sorted by time
    mug = h.sessions[1].turns[0]
    assert mug.text == "Here is my kitchen shelf with the new mug."
    (image,) = mug.images
    assert image.is_relative_to((tmp_path / "out").resolve())
    assert image.read_bytes() == (FIXTURES / "memlens" / "images" / "red_mug.png").read_bytes()
    (q,) = h.questions
    assert (q.category, q.answer, q.time, q.evidence) == ("IE", "red", datetime(2023, 7, 1, 10), _ev(("needle_1", 0)))

    h = hs["ml_msr_002"]
    assert [s.id for s in h.sessions] == ["session_1", "session_2"]
    assert h.sessions[0].turns[0].text == "My new hatchback arrived!" and len(h.sessions[0].turns[0].images) == 1
    truck = h.sessions[1].turns[0]
    assert truck.images == ()
    assert truck.text == "And this is my old truck: [image: a white pickup truck https://example.com/truck.jpg]"
    (q,) = h.questions
    assert q.category == "MSR" and q.time is None
    assert q.evidence == _ev(("session_1", 0), ("session_2", 0))  # indices 0 and 1; index 5 is dropped


@pytest.mark.parametrize("name,category", [
    ("IE", "IE"), ("information_extraction", "IE"), ("Multi-Session Reasoning", "MSR"), ("temporal reasoning", "TR"),
    ("KU", "KU"), ("Knowledge Update", "KU"), ("Answer Refusal", "AR"), ("abstention", "AR"),
    ("single-session-user", "IE"), ("knowledge-update", "KU"), ("something else", None)])
def test_memlens_question_types(name, category):
    assert memlens_category(name) == category


def test_longmemeval_abstention_is_ar_without_evidence(tmp_path):
    data = json.loads(SOURCES["longmemeval"].read_text())
    data[0]["question_id"] += "_abs"
    src = tmp_path / "lme.json"
    src.write_text(json.dumps(data))
    LOADERS["longmemeval"](src, tmp_path / "out")
    (q,) = load_dataset(tmp_path / "out")[0].questions
    assert (q.category, q.evidence) == ("AR", ())


def test_convert_registry_writes_summary_and_is_deterministic(tmp_path):
    assert set(LOADERS) == {"locomo", "longmemeval", "memlens"}
    for kind, src in SOURCES.items():
        first = convert(kind, src, tmp_path / kind / "a")
        second = convert(kind, src, tmp_path / kind / "b")
        assert first == tmp_path / kind / "a"
        assert (first / "episodes.jsonl").read_bytes() == (second / "episodes.jsonl").read_bytes()
        assert json.loads((first / SUMMARY_FILE).read_text())["histories"] == 2
    with pytest.raises(InvalidInput) as err:
        convert("mem-gallery", SOURCES["locomo"], tmp_path / "x")
    assert err.value.field == "kind"


def _broken(kind, tmp_path, edit):
    """A copy of the fixture (with its images) with one edit applied; returns the InvalidInput raised."""
    folder = shutil.copytree(SOURCES[kind].parent, tmp_path / "src")
    data = json.loads(SOURCES[kind].read_text())
    edit(data)
    src = folder / SOURCES[kind].name
    src.write_text(json.dumps(data))
    with pytest.raises(InvalidInput) as err:
        LOADERS[kind](src, tmp_path / "out")
    return err.value


@pytest.mark.parametrize("kind,edit,field", [
    ("locomo", lambda d: d[0]["conversation"].update(session_2_date_time="27/06/2023"),
     "[0].conversation.session_2_date_time"),
    ("locomo", lambda d: d[1].pop("conversation"), "[1].conversation"),
    ("locomo", lambda d: d[0]["conversation"]["session_1"][0].update(speaker="Bob"),
     "[0].conversation.session_1[0].speaker"),
    ("locomo", lambda d: d[0]["qa"][0].update(category=9), "[0].qa[0].category"),
    ("longmemeval", lambda d: d[0]["haystack_dates"].__setitem__(1, "May 22nd"), "[0].haystack_dates[1]"),
    ("longmemeval", lambda d: d[1].pop("question_date"), "[1].question_date"),
    ("longmemeval", lambda d: d[0]["haystack_dates"].pop(), "[0].haystack_sessions"),
    ("longmemeval", lambda d: d[0].update(question_type="trivia"), "[0].question_type"),
    ("memlens", lambda d: d[0]["haystack_sessions"][0].update(date="yesterday"), "[0].haystack_sessions[0].date"),
    ("memlens", lambda d: d[1].pop("question"), "[1].question"),
    ("memlens", lambda d: d[0]["haystack_sessions"][0]["session"][0].update(images=["images/missing.png"]),
     "[0].haystack_sessions[0].session[0].images[0]"),
])
def test_bad_input_names_the_field(tmp_path, kind, edit, field):
    err = _broken(kind, tmp_path, edit)
    assert err.field == field
    assert err.fix and err.source
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


def test_missing_source_file(tmp_path):
    with pytest.raises(InvalidInput) as err:
        LOADERS["locomo"](tmp_path / "nope.json", tmp_path / "out")
    assert err.value.field == "(file)"
