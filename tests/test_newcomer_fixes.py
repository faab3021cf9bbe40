"""Problems a new user hit: evidence naming a session or turn that does not exist, the wording of the JSON
error in episodes.jsonl, and index pages whose label was empty."""
from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timedelta

import numpy as np
import pytest

from c3m.config import MemoryConfig
from c3m.dataset import load_dataset
from c3m.dataset.format import iter_histories, validate_dataset
from c3m.errors import InvalidInput
from c3m.index.active import ActiveIndex, IndexEntry, normalize, page_label
from c3m.memory import Memory
from c3m.types import Session, Turn, WriteBudget

T0 = datetime(2026, 3, 1, 9, 0)


def _history(evidence) -> dict:
    return {"id": "ep-0001",
            "sessions": [{"id": "s1", "time": "2026-03-02T10:00:00",
                          "turns": [{"role": "user", "text": "My mug is blue."},
                                    {"role": "assistant", "text": "Noted."}]},
                         {"id": "s2", "time": "2026-03-03T10:00:00",
                          "turns": [{"role": "user", "text": "I painted the mug red."}]}],
            "questions": [{"id": "q1", "question": "What colour is my mug?", "answer": "red", "category": "IE",
                           "evidence": evidence}]}


def _write(tmp_path, *lines: str):
    (tmp_path / "episodes.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return tmp_path


# -- 1. evidence must name a session and a turn of the history --------------------------------------------
def test_evidence_naming_an_unknown_session_is_reported(tmp_path):
    folder = _write(tmp_path, json.dumps(_history([{"session": "s1", "turn": 0}, {"session": "s9", "turn": 0}])))
    problems = validate_dataset(folder)
    assert len(problems) == 1, [str(p) for p in problems]
    p = problems[0]
    assert (p.line, p.field) == (1, "questions[0].evidence[1].session")
    assert "'s9'" in p.message and "not in this history" in p.message
    assert p.fix == "use one of the history's session ids: 's1', 's2'"
    with pytest.raises(InvalidInput, match=re.escape("questions[0].evidence[1].session")):
        load_dataset(folder)


@pytest.mark.parametrize("turn, fix", [(2, "from 0 to 1"), (-1, "from 0 to 1")])
def test_evidence_turn_out_of_range_is_reported(tmp_path, turn, fix):
    folder = _write(tmp_path, json.dumps(_history([{"session": "s1", "turn": turn}])))
    problems = validate_dataset(folder)
    assert [(p.line, p.field) for p in problems] == [(1, "questions[0].evidence[0].turn")]
    assert "out of range" in problems[0].message and "session 's1' has 2 turns" in problems[0].message
    assert fix in problems[0].fix


def test_out_of_range_message_of_a_one_turn_session_reads_naturally(tmp_path):
    folder = _write(tmp_path, json.dumps(_history([{"session": "s2", "turn": 1}])))
    [problem] = validate_dataset(folder)
    assert "session 's2' has 1 turn" in problem.message and "1 turns" not in problem.message
    assert "from 0 to 0" in problem.fix


def test_valid_evidence_still_loads(tmp_path):
    folder = _write(tmp_path, json.dumps(_history([{"session": "s1", "turn": 1}, {"session": "s2", "turn": 0}])))
    assert validate_dataset(folder) == []
    [history] = list(iter_histories(folder))
    assert [(e.session, e.turn) for e in history.questions[0].evidence] == [("s1", 1), ("s2", 0)]


def test_synthetic_datasets_pass_the_evidence_check(tmp_path):
    from c3m.eval.synth import generate_dataset

    generate_dataset(tmp_path / "ds", preset="hard", split="dev", length="32k", episodes=2, seed=0, progress=False)
    assert validate_dataset(tmp_path / "ds") == []
    histories = load_dataset(tmp_path / "ds")
    assert any(q.evidence for h in histories for q in h.questions)


# -- 2. the JSON error names line and column and reads naturally -------------------------------------------
def test_broken_json_line_names_line_and_column_without_doubled_words(tmp_path):
    good = json.dumps(_history([{"session": "s1", "turn": 0}]))
    folder = _write(tmp_path, good, "", '{"id": "ep-0002" "sessions": []}')
    [problem] = validate_dataset(folder)
    text = str(problem)
    assert problem.line == 3 and problem.field == "(line)"
    assert "at at" not in text and not re.search(r"\b(\w+) \1\b", text), text
    assert "is not valid JSON: Expecting ',' delimiter at column 18" in text
    assert text.startswith("episodes.jsonl:3: ")


# -- 3. every non-empty page has a label -------------------------------------------------------------------
def _entry(eid: str, text: str, page: int, *, support: int = 1, entities=(), dim: int = 8) -> IndexEntry:
    z = normalize(np.eye(dim, dtype=np.float32)[int(eid[1:]) % dim])
    return IndexEntry(eid, z, {"s1": {0}}, T0, T0, text, page=page, support=support, entities=Counter(entities))


def test_page_without_entity_keys_is_labelled_from_its_most_supported_entry():
    idx = ActiveIndex(8)
    for e in (_entry("e00001", "Here is my blue mug in the kitchen.", 0, entities={"mug": 2, "kitchen": 1}),
              _entry("e00002", "Hello there!", 1),
              _entry("e00003", "I think so too, and that is all I wanted to say today.", 1, support=3),
              _entry("e00004", "", 2)):
        idx.entries[e.entry_id] = e
    idx.refresh_pages()
    labels = [p.summary for p in idx.pages]
    assert labels[0] == "page: mug, kitchen"  # entity keys, most frequent first: as before
    assert labels[1] == "page: I think so too, and that"  # first words of the most-supported entry
    assert labels[2] == "page: e00004"  # nothing else to go on: the entry id
    assert all(s.removeprefix("page: ").strip() for s in labels)
    again = ActiveIndex.from_state(idx.state())
    assert [p.summary for p in again.pages] == labels


def test_page_label_with_entities_is_unchanged():
    members = [_entry("e00001", "a", 0, entities={"lamp": 1, "garage": 1}),
               _entry("e00002", "b", 0, entities={"lamp": 2, "zebra": 1})]
    assert page_label(members) == "page: lamp, garage, zebra"


def test_c3m_index_pages_of_entityless_sessions_get_a_label(store_path, models):
    texts = ["Here is my blue mug in the kitchen.", "Yes, sure, it is so.", "Hello there!", "I think so too.",
             "My green lamp sits in the garage."]
    cfg = MemoryConfig(method="c3m", write_budget=WriteBudget(entries=6, pages=3))
    with Memory(store_path, "u", config=cfg, models=models) as mem:
        for i, t in enumerate(texts):
            mem.add_session(Session(f"s{i}", T0 + timedelta(days=i), (Turn("user", t), Turn("assistant", "Ok."))))
        d = mem.method.describe()
        index = mem.method.index
    entries = {e.entry_id: e for e in index.entries.values()}
    assert any(not any(entries[e].entities for e in p["entries"]) for p in d["pages"]), d["pages"]
    for p in d["pages"]:
        assert p["entries"] and p["summary"].removeprefix("page: ").strip(), d["pages"]
        if any(entries[e].entities for e in p["entries"]):  # labelled by entity keys exactly as before
            ents = Counter()
            for e in p["entries"]:
                ents.update(entries[e].entities)
            top = [k for k, _ in sorted(ents.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
            assert p["summary"] == "page: " + ", ".join(top)


@pytest.mark.parametrize("name,text,needle", [
    ("bad.toml", 'method = "c3m"\nanswerer = extractive\n', "is not valid TOML"),
    ("bad.yaml", "method: [c3m\n", "is not valid YAML"),
    ("list.yaml", "- c3m\n", "not a table of settings"),
])
def test_broken_config_files_are_named_with_a_fix(tmp_path, name, text, needle):
    from c3m.config import MemoryConfig
    from c3m.errors import InvalidInput

    path = tmp_path / name
    path.write_text(text)
    if name.endswith(".yaml"):
        pytest.importorskip("yaml")
    with pytest.raises(InvalidInput) as err:
        MemoryConfig.load(path)
    assert needle in str(err.value) and name in str(err.value) and err.value.fix
    assert " at at " not in str(err.value)
