"""The dataset format (docs/architecture.md, Formats): every kind of bad input is reported with field, line and fix."""
from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from c3m.dataset import (ImageLimits, history_from_dict, history_to_dict, iter_histories, load_dataset,
                         validate_dataset, write_dataset)
from c3m.errors import InvalidInput
from c3m.types import EvidenceRef, History, Question, Session, Turn

try:
    from fixtures_dataset import IMAGE, history_dict, make_dataset, png_bytes, write_png
except ImportError:  # tests/ made a package
    from tests.fixtures_dataset import IMAGE, history_dict, make_dataset, png_bytes, write_png


def only_problem(folder: Path, *, limits: ImageLimits = ImageLimits()) -> InvalidInput:
    """The single problem in a dataset; also checks that loading raises that same problem."""
    problems = validate_dataset(folder, limits=limits)
    assert len(problems) == 1, [str(p) for p in problems]
    with pytest.raises(InvalidInput) as info:
        load_dataset(folder, limits=limits)
    assert (info.value.field, info.value.line) == (problems[0].field, problems[0].line)
    assert problems[0].source == "episodes.jsonl"
    return problems[0]


def check(problem: InvalidInput, field: str, line: int | None, fix: str, message: str = "") -> None:
    assert problem.field == field, str(problem)
    assert problem.line == line, str(problem)
    assert problem.fix and fix in problem.fix, str(problem)
    assert message in problem.message, str(problem)


def with_second_line(tmp_path: Path, mutate) -> Path:
    """A dataset whose line 1 is valid and whose line 2 is a valid history changed by ``mutate``."""
    bad = history_dict("ep-0002")
    mutate(bad)
    return make_dataset(tmp_path / "ds", [history_dict(), bad])


# ---------------------------------------------------------------------------------------------
# Valid input
# ---------------------------------------------------------------------------------------------
def test_loads_valid_dataset_with_absolute_image_paths(tmp_path):
    folder = make_dataset(tmp_path / "ds", ["", history_dict(), "   ", history_dict("ep-0002")])
    histories = load_dataset(folder)
    assert [h.id for h in histories] == ["ep-0001", "ep-0002"]
    h = histories[0]
    assert h.sessions[0].time == datetime(2026, 3, 2, 10, 0)
    image = h.sessions[0].turns[0].images[0]
    assert isinstance(image, Path) and image.is_absolute() and image == (folder / IMAGE).resolve()
    assert h.sessions[0].turns[1].images == ()
    assert h.questions[0] == Question("q1", "What shape were the window frames in my studio?", "arched", "IE",
                                      datetime(2026, 5, 1, 9), (EvidenceRef("s1", 0),))
    assert h.questions[1].time is None
    assert validate_dataset(folder) == []
    # the episodes file itself is accepted too
    assert load_dataset(folder / "episodes.jsonl") == histories


def test_iter_histories_streams_and_raises_at_the_first_bad_line(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict(), "{not json", history_dict("ep-0003")])
    it = iter_histories(folder)
    assert next(it).id == "ep-0001"
    with pytest.raises(InvalidInput) as info:
        next(it)
    assert info.value.line == 2


def test_timezone_aware_times_become_naive_utc(tmp_path):
    def mutate(h):
        h["sessions"][0]["time"] = "2026-03-02T12:00:00+02:00"
        h["sessions"][1]["time"] = "2026-03-05T08:30:00Z"
    folder = with_second_line(tmp_path, mutate)
    h = load_dataset(folder)[1]
    assert h.sessions[0].time == datetime(2026, 3, 2, 10, 0) and h.sessions[0].time.tzinfo is None
    assert h.sessions[1].time == datetime(2026, 3, 5, 8, 30)


def test_symlink_inside_the_folder_is_fine(tmp_path):
    folder = make_dataset(tmp_path / "ds", [])
    os.symlink(folder / IMAGE, folder / "images" / "link.png")
    h = history_dict()
    h["sessions"][0]["turns"][0]["images"] = ["images/link.png"]
    make_dataset(folder, [h])
    loaded = load_dataset(folder)[0]
    assert loaded.sessions[0].turns[0].images[0] == (folder / IMAGE).resolve()


# ---------------------------------------------------------------------------------------------
# File and line level
# ---------------------------------------------------------------------------------------------
def test_invalid_json_line(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict(), '{"id": "ep-2", "sessions": [],}'])
    check(only_problem(folder), "(line)", 2, "one JSON object per line", "not valid JSON")


def test_line_not_an_object(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict(), "", "[1, 2]"])
    check(only_problem(folder), "(line)", 3, "one history per line", "must be a JSON object")


def test_empty_file(tmp_path):
    folder = make_dataset(tmp_path / "ds", ["", "  "])
    check(only_problem(folder), "(file)", None, "one JSON object per line", "no histories")


def test_missing_episodes_file(tmp_path):
    (tmp_path / "ds").mkdir()
    check(only_problem(tmp_path / "ds"), "(file)", None, "episodes.jsonl", "does not exist")


def test_invalid_utf8(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict()])
    with open(folder / "episodes.jsonl", "ab") as fh:
        fh.write(b'{"id": "\xff"}\n')
    check(only_problem(folder), "(line)", 2, "UTF-8", "not valid UTF-8")


# ---------------------------------------------------------------------------------------------
# Fields
# ---------------------------------------------------------------------------------------------
MISSING = [
    ("id", lambda h: h.pop("id")),
    ("sessions", lambda h: h.pop("sessions")),
    ("sessions[0].id", lambda h: h["sessions"][0].pop("id")),
    ("sessions[0].time", lambda h: h["sessions"][0].pop("time")),
    ("sessions[1].turns", lambda h: h["sessions"][1].pop("turns")),
    ("sessions[0].turns[1].role", lambda h: h["sessions"][0]["turns"][1].pop("role")),
    ("sessions[0].turns[1].text", lambda h: h["sessions"][0]["turns"][1].pop("text")),
    ("questions[0].id", lambda h: h["questions"][0].pop("id")),
    ("questions[1].question", lambda h: h["questions"][1].pop("question")),
    ("questions[0].answer", lambda h: h["questions"][0].pop("answer")),
    ("questions[0].category", lambda h: h["questions"][0].pop("category")),
    ("questions[0].evidence[0].session", lambda h: h["questions"][0]["evidence"][0].pop("session")),
]


@pytest.mark.parametrize("field,mutate", MISSING, ids=[m[0] for m in MISSING])
def test_missing_required_field(tmp_path, field, mutate):
    key = field.rsplit(".", 1)[-1]
    check(only_problem(with_second_line(tmp_path, mutate)), field, 2, f'add "{key}"', "is missing")


WRONG_TYPES = [
    ("id", lambda h: h.update(id=7), "must be a string"),
    ("id", lambda h: h.update(id=""), "is empty"),
    ("sessions", lambda h: h.update(sessions={"s1": {}}), "must be a list"),
    ("sessions", lambda h: h.update(sessions=[]), "is empty"),
    ("sessions[1]", lambda h: h["sessions"].__setitem__(1, "s2"), "must be an object"),
    ("sessions[0].turns[1]", lambda h: h["sessions"][0]["turns"].__setitem__(1, None), "must be an object"),
    ("sessions[0].turns[0].text", lambda h: h["sessions"][0]["turns"][0].update(text=["hi"]), "must be a string"),
    ("sessions[0].turns[0].images", lambda h: h["sessions"][0]["turns"][0].update(images=IMAGE), "must be a list"),
    ("sessions[0].turns[0].images[1]", lambda h: h["sessions"][0]["turns"][0]["images"].append(3),
     "must be a string path"),
    ("questions", lambda h: h.update(questions={}), "must be a list"),
    ("questions[0].evidence[0].turn", lambda h: h["questions"][0]["evidence"][0].update(turn="0"),
     "must be an integer"),
    ("questions[0].evidence[0].turn", lambda h: h["questions"][0]["evidence"][0].update(turn=True),
     "must be an integer"),
    ("questions[0].evidence", lambda h: h["questions"][0].update(evidence={"session": "s1"}), "must be a list"),
]


@pytest.mark.parametrize("field,mutate,message", WRONG_TYPES, ids=[f"{m[0]}-{i}" for i, m in enumerate(WRONG_TYPES)])
def test_wrong_type(tmp_path, field, mutate, message):
    problem = only_problem(with_second_line(tmp_path, mutate))
    assert problem.field == field and problem.line == 2, str(problem)
    assert message in problem.message and problem.fix, str(problem)


def test_unknown_role(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["sessions"][1]["turns"][0].update(role="human"))
    check(only_problem(folder), "sessions[1].turns[0].role", 2, "user, assistant, system", "unknown role 'human'")


def test_unknown_category(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["questions"][1].update(category="XX"))
    check(only_problem(folder), "questions[1].category", 2, "IE, MSR, TR, KU, AR", "unknown category")


@pytest.mark.parametrize("field,mutate", [
    ("sessions[0].time", lambda h: h["sessions"][0].update(time="March 2nd")),
    ("questions[0].time", lambda h: h["questions"][0].update(time="2026-13-01T00:00:00")),
])
def test_bad_timestamp(tmp_path, field, mutate):
    check(only_problem(with_second_line(tmp_path, mutate)), field, 2, "2026-03-02T10:00:00", "ISO 8601")


def test_sessions_out_of_order(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["sessions"][1].update(time="2026-03-01T00:00:00"))
    check(only_problem(folder), "sessions[1].time", 2, "oldest first", "chronological")


def test_equal_session_times_are_allowed(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["sessions"][1].update(time="2026-03-02T10:00:00"))
    assert validate_dataset(folder) == []


def test_duplicate_history_id(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict(), history_dict("ep-0002"), history_dict()])
    check(only_problem(folder), "id", 3, "unique id", "first used on line 1")


def test_duplicate_session_id(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["sessions"][1].update(id="s1"))
    check(only_problem(folder), "sessions[1].id", 2, "unique id", "duplicate session id 's1'")


def test_duplicate_question_id(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["questions"][1].update(id="q1"))
    check(only_problem(folder), "questions[1].id", 2, "unique id", "duplicate question id 'q1'")


def test_evidence_unknown_session(tmp_path):
    folder = with_second_line(tmp_path, lambda h: h["questions"][0]["evidence"][0].update(session="s9"))
    check(only_problem(folder), "questions[0].evidence[0].session", 2, "'s1', 's2'", "not in this history")


@pytest.mark.parametrize("turn", [2, -1])
def test_evidence_turn_out_of_range(tmp_path, turn):
    folder = with_second_line(tmp_path, lambda h: h["questions"][0]["evidence"][0].update(turn=turn))
    check(only_problem(folder), "questions[0].evidence[0].turn", 2, "from 0 to 1", "out of range")


# ---------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------
def with_image(tmp_path: Path, rel: str) -> Path:
    return with_second_line(tmp_path, lambda h: h["sessions"][1]["turns"][0].update(images=[rel]))


FIELD = "sessions[1].turns[0].images[0]"


def test_image_missing(tmp_path):
    check(only_problem(with_image(tmp_path, "images/nope.png")), FIELD, 2, "add the image", "does not exist")


def test_image_not_an_image(tmp_path):
    folder = with_image(tmp_path, "images/fake.png")
    (folder / "images" / "fake.png").write_text("not a png")
    check(only_problem(folder), FIELD, 2, "valid image file", "not a readable image")


def test_image_truncated(tmp_path):
    folder = with_image(tmp_path, "images/cut.png")
    data = png_bytes(64, 64)
    (folder / "images" / "cut.png").write_bytes(data[: len(data) // 2])
    check(only_problem(folder), FIELD, 2, "valid image file", "not a readable image")


def test_image_too_many_bytes(tmp_path):
    folder = with_image(tmp_path, IMAGE)
    limits = ImageLimits(max_bytes=10)
    problems = validate_dataset(folder, limits=limits)
    # the same file is named on both lines; each mention is reported where it occurs
    assert [(p.field, p.line) for p in problems] == [("sessions[0].turns[0].images[0]", 1),
                                                     ("sessions[0].turns[0].images[0]", 2), (FIELD, 2)]
    check(problems[0], "sessions[0].turns[0].images[0]", 1, "ImageLimits.max_bytes", "over the limit")


def test_image_too_many_pixels(tmp_path):
    folder = with_image(tmp_path, "images/big.png")
    write_png(folder / "images" / "big.png", 100, 100)
    check(only_problem(folder, limits=ImageLimits(max_pixels=9999)), FIELD, 2, "ImageLimits.max_pixels",
          "100x100")


@pytest.mark.parametrize("rel,message", [
    ("/etc/passwd", "absolute path"),
    ("images/../../outside.png", "'..'"),
    ("", "empty path"),
])
def test_image_path_escapes_folder(tmp_path, rel, message):
    write_png(tmp_path / "outside.png")
    check(only_problem(with_image(tmp_path, rel)), FIELD, 2, "relative to that folder", message)


def test_image_absolute_path_to_existing_image_is_rejected(tmp_path):
    outside = write_png(tmp_path / "outside.png")
    check(only_problem(with_image(tmp_path, str(outside))), FIELD, 2, "relative to that folder", "absolute")


def test_image_symlink_outside_folder(tmp_path):
    outside = write_png(tmp_path / "outside.png")
    folder = with_image(tmp_path, "images/escape.png")
    os.symlink(outside, folder / "images" / "escape.png")
    check(only_problem(folder), FIELD, 2, "copy of the image", "outside the dataset folder")


def test_image_dir_symlink_outside_folder(tmp_path):
    write_png(tmp_path / "elsewhere" / "a.png")
    folder = with_image(tmp_path, "linked/a.png")
    os.symlink(tmp_path / "elsewhere", folder / "linked")
    check(only_problem(folder), FIELD, 2, "copy of the image", "outside the dataset folder")


# ---------------------------------------------------------------------------------------------
# Many problems at once
# ---------------------------------------------------------------------------------------------
def test_validate_reports_all_problems(tmp_path):
    bad = history_dict("ep-0002")
    bad["sessions"][0]["turns"][0]["role"] = "bot"
    bad["sessions"][1]["time"] = "yesterday"
    bad["questions"][0]["category"] = "??"
    bad["questions"][1]["evidence"][0]["turn"] = 5
    folder = make_dataset(tmp_path / "ds", [history_dict(), bad, "oops", history_dict(), [], history_dict("ok")])
    found = [(p.line, p.field) for p in validate_dataset(folder)]
    assert found == [
        (2, "sessions[0].turns[0].role"),
        (2, "sessions[1].time"),
        (2, "questions[0].category"),
        (2, "questions[1].evidence[0].turn"),
        (3, "(line)"),
        (4, "id"),
        (5, "(line)"),
    ]
    assert all(p.fix for p in validate_dataset(folder))


# ---------------------------------------------------------------------------------------------
# Writing and round trips
# ---------------------------------------------------------------------------------------------
def sample_histories(tmp_path: Path, folder: Path) -> list[History]:
    outside = write_png(tmp_path / "elsewhere" / "photo.png", 5, 5, (0, 0, 255))
    inside = write_png(folder / "pics" / "mine.png", 6, 2, (0, 255, 0))
    t0 = datetime(2026, 1, 1, 9)
    return [
        History("ep/1 odd id", (
            Session("s1", t0, (Turn("user", "a photo", (png_bytes(3, 3), outside)), Turn("assistant", "nice"))),
            Session("s2", t0.replace(day=2), (Turn("user", "mine", (inside, "pics/mine.png")),)),
        ), (Question("q1", "what colour?", "blue", "IE", t0.replace(month=2), (EvidenceRef("s1", 0),)),
            Question("q2", "unknown?", "I don't know", "AR"))),
        History("ep-2", (Session("x", t0, (Turn("system", "", ()),)),)),
    ]


def test_write_then_load_round_trips(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    original = sample_histories(tmp_path, folder)
    assert write_dataset(original, folder) == folder
    loaded = load_dataset(folder)
    assert len(loaded) == 2
    # everything but the images is identical; images became absolute paths inside the folder
    strip = lambda h: history_to_dict(History(h.id, tuple(Session(s.id, s.time, tuple(Turn(t.role, t.text)
                                      for t in s.turns)) for s in h.sessions), h.questions), folder)
    assert [strip(h) for h in loaded] == [strip(h) for h in original]
    images = loaded[0].sessions[0].turns[0].images
    assert images[0].read_bytes() == png_bytes(3, 3)
    assert images[1].read_bytes() == (tmp_path / "elsewhere" / "photo.png").read_bytes()
    assert all(p.is_relative_to(folder.resolve()) and p.suffix == ".png" for p in images)
    assert loaded[0].sessions[1].turns[0].images == ((folder / "pics" / "mine.png").resolve(),) * 2
    # loaded histories write back unchanged and reload equal
    write_dataset(loaded, folder)
    assert load_dataset(folder) == loaded
    # writing to another folder copies the images in
    copy = write_dataset(loaded, tmp_path / "copy")
    copied = load_dataset(copy)
    assert [strip(h) for h in copied] == [strip(h) for h in original]
    pairs = [(a, b) for h, g in zip(copied, loaded) for s, r in zip(h.sessions, g.sessions)
             for t, u in zip(s.turns, r.turns) for a, b in zip(t.images, u.images, strict=True)]
    assert len(pairs) == 4
    assert all(a.is_relative_to(copy.resolve()) and a.read_bytes() == b.read_bytes() for a, b in pairs)


def test_dict_round_trip(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict()])
    h = load_dataset(folder)[0]
    assert history_to_dict(h, folder) == history_dict()
    assert history_from_dict(history_to_dict(h, folder), root=folder, line=1) == h


def test_history_from_dict_raises_first_problem(tmp_path):
    bad = history_dict()
    bad["sessions"][0]["turns"][0]["role"] = "bot"
    bad["questions"][0]["category"] = "??"
    make_dataset(tmp_path, [])
    with pytest.raises(InvalidInput) as info:
        history_from_dict(bad, root=tmp_path, line=7, source="x.jsonl")
    assert (info.value.field, info.value.line, info.value.source) == ("sessions[0].turns[0].role", 7, "x.jsonl")
    assert "x.jsonl:7" in str(info.value) and "fix:" in str(info.value)


def test_history_to_dict_rejects_bytes_and_outside_paths(tmp_path):
    t = datetime(2026, 1, 1)
    for image in (png_bytes(), write_png(tmp_path / "out.png")):
        h = History("h", (Session("s", t, (Turn("user", "x", (image,)),)),))
        with pytest.raises(InvalidInput, match="write_dataset"):
            history_to_dict(h, tmp_path / "ds")


def test_write_dataset_rejects_invalid_histories_without_touching_the_file(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict()])
    before = (folder / "episodes.jsonl").read_bytes()
    t = datetime(2026, 1, 1)
    bad = [History("h", (Session("s", t, (Turn("robot", "x"),)),))]
    with pytest.raises(InvalidInput) as info:
        write_dataset(bad, folder)
    assert info.value.field == "sessions[0].turns[0].role"
    with pytest.raises(InvalidInput, match="not an image"):
        write_dataset([History("h", (Session("s", t, (Turn("user", "x", (b"not an image",)),)),))], folder)
    with pytest.raises(InvalidInput, match="no histories"):
        write_dataset([], folder)
    dup = History("h", (Session("s", t, (Turn("user", "x"),)),))
    with pytest.raises(InvalidInput, match="duplicate history id"):
        write_dataset([dup, dup], folder)
    assert (folder / "episodes.jsonl").read_bytes() == before
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_written_file_is_one_json_object_per_line(tmp_path):
    folder = tmp_path / "ds"
    folder.mkdir()
    write_dataset(sample_histories(tmp_path, folder), folder)
    lines = (folder / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["ep/1 odd id", "ep-2"]
    first = json.loads(lines[0])["sessions"][0]["turns"][0]["images"]
    assert all(not Path(p).is_absolute() and p.startswith("images/") for p in first)


def test_image_limits_must_be_positive():
    with pytest.raises(InvalidInput, match="positive"):
        ImageLimits(max_bytes=0)


def test_image_path_with_nul_is_reported_not_raised(tmp_path):
    check(only_problem(with_image(tmp_path, "images/a\u0000.png")), FIELD, 2, "relative to that folder",
          "cannot be read")


def test_deeply_nested_json_is_reported(tmp_path):
    folder = make_dataset(tmp_path / "ds", [history_dict(), "[" * 100_000 + "]" * 100_000])
    check(only_problem(folder), "(line)", 2, "one JSON object per line", "nested too deeply")


_ids = st.text(min_size=1, max_size=12)
_text = st.text(max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hid=_ids, sids=st.lists(_ids, min_size=1, max_size=3, unique=True), text=_text,
       role=st.sampled_from(["user", "assistant", "system"]), with_image=st.booleans())
def test_any_ids_and_text_round_trip(tmp_path_factory, hid, sids, text, role, with_image):
    """Arbitrary unicode ids and text (including line separators) survive write + load."""
    folder = tmp_path_factory.mktemp("rt")
    t0 = datetime(2026, 1, 1)
    images = (png_bytes(),) if with_image else ()
    sessions = tuple(Session(sid, t0.replace(day=i + 1), (Turn(role, text, images),)) for i, sid in enumerate(sids))
    question = Question(hid, text or "?", text, "TR", None, (EvidenceRef(sids[-1], 0),))
    write_dataset([History(hid, sessions, (question,))], folder)
    (loaded,) = load_dataset(folder)
    assert (loaded.id, [s.id for s in loaded.sessions], loaded.questions) == (hid, sids, (question,))
    assert all(t.text == text and len(t.images) == len(images) for s in loaded.sessions for t in s.turns)
