"""The ``hard`` synthetic preset: deterministic, split-disjoint phrasings and cues, filler that names
nothing, AR questions with real evidence, mentions that are never evidence and never change the world,
and sessions with more pictures than the reader's 8-image budget."""
from __future__ import annotations

import hashlib
import json
import re
from itertools import combinations
from pathlib import Path

import pytest

from c3m.cli import main
from c3m.dataset import load_dataset, validate_dataset
from c3m.eval.synth import generate_dataset, load_hidden
from c3m.eval.synth.hard_vocab import CUES, HARD_FILLER, HARD_TEMPLATES
from c3m.eval.synth.vocab import POOLS, RELATIONS, SPLITS, TEMPLATES, pool_words, shared_words

LENGTH, EPISODES, SEED = 8000, 2, 11
#: Easy templates the hard preset still uses for the kinds it does not override.
FALLBACK = ("room_intro", "person_intro", "pet_owner", "pet_photo", "vehicle_intro", "shop_intro", "ack")


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _words(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word.lower())}(?![\w-])", text.lower()) is not None


def _history_phrasings(split: str) -> list[str]:
    """Every phrase a hard history of ``split`` can contain (questions are not part of a history)."""
    texts = [t for k, ts in HARD_TEMPLATES[split].items() if not k.startswith(("q_", "a_")) for t in ts]
    texts += [t for k in FALLBACK for t in TEMPLATES[split][k]]
    return texts + [t for ts in HARD_FILLER[split].values() for t in ts]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("hard") / "a", length=LENGTH, episodes=EPISODES, seed=SEED,
                            preset="hard", progress=False)


@pytest.fixture(scope="module")
def data(out):
    return load_dataset(out), load_hidden(out)


@pytest.fixture(scope="module")
def by_split(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("splits")
    return {s: generate_dataset(root / s, length=4000, episodes=1, seed=3, split=s, preset="hard", progress=False)
            for s in SPLITS}


def _turn(history, session: str, turn: int):
    return next(s for s in history.sessions if s.id == session).turns[turn]


# --- determinism, format ---------------------------------------------------------------------------
def test_hard_is_deterministic_valid_and_recorded(out, tmp_path):
    again = generate_dataset(tmp_path / "b", length=LENGTH, episodes=EPISODES, seed=SEED, preset="hard",
                             progress=False)
    assert _files(out) == _files(again)
    assert validate_dataset(out) == []
    assert json.loads((out / "manifest.json").read_text())["preset"] == "hard"
    easy = generate_dataset(tmp_path / "e", length=LENGTH, episodes=1, seed=SEED, progress=False)
    assert "preset" not in json.loads((easy / "manifest.json").read_text())  # easy manifests unchanged
    assert (easy / "episodes.jsonl").read_bytes() != (out / "episodes.jsonl").read_bytes()


def test_cli_preset_flag(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "c"), "--length", "4000", "--episodes", "1", "--preset", "hard", "-q"]) == 0
    assert "preset hard" in capsys.readouterr().out
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["preset"] == "hard"


# --- split-disjoint phrasings and cues ---------------------------------------------------------------
def test_hard_phrasings_and_cues_are_disjoint_across_splits(by_split):
    for a, b in combinations(SPLITS, 2):
        assert not set(_history_phrasings(a)) & set(_history_phrasings(b)), (a, b)
        qa = {t for k, ts in HARD_TEMPLATES[a].items() if k.startswith(("q_", "a_")) for t in ts}
        qb = {t for k, ts in HARD_TEMPLATES[b].items() if k.startswith(("q_", "a_")) for t in ts}
        assert not qa & qb
    for split in SPLITS:
        assert set(HARD_TEMPLATES[split]) == set(HARD_TEMPLATES["test"])
        for key in ("obj_repaint_text", "obj_repaint_image", "obj_move", "obj_same", "obj_twin", "near_miss_object"):
            assert len(HARD_TEMPLATES[split][key]) >= 3, (split, key)
        foreign = [c for other in SPLITS if other != split for c in CUES[other]]
        for phrase in _history_phrasings(split):
            assert not [c for c in foreign if _words(phrase, c)], (split, phrase)
        text = (by_split[split] / "episodes.jsonl").read_text()  # and so the generated history
        assert not [c for c in foreign if _words(text, c)], split
        others = set().union(*(pool_words(s) for s in SPLITS if s != split))
        assert not [w for w in others if _words(text, w)], split


def test_hard_filler_never_names_world_vocabulary(data):
    banned = set().union(*(pool_words(s) for s in SPLITS)) | shared_words() | set(RELATIONS)
    for split in SPLITS:
        for piece in (t for ts in HARD_FILLER[split].values() for t in ts):
            assert not [w for w in banned if _words(piece, w)], (split, piece)
    histories, hidden = data
    for h in histories:  # every user turn that is neither a fact nor a mention is filler
        world = hidden["world"][h.id]
        named = {(o["session"], o["turn"]) for e in world["entities"] for o in e["observations"]}
        named |= {(m["session"], m["turn"]) for m in world["mentions"]}
        filler = [t.text for s in h.sessions for i, t in enumerate(s.turns)
                  if t.role == "user" and (s.id, i) not in named]
        assert filler
        for text in filler:
            assert 2 <= text.count(".") <= 4 and not [w for w in banned if _words(text, w)], text


# --- AR with evidence --------------------------------------------------------------------------------
def test_hard_ar_questions_have_evidence_that_names_the_asked_entity(data):
    histories, hidden = data
    for h in histories:
        ents = {e["id"]: e for e in hidden["world"][h.id]["entities"]}
        ar = [q for q in h.questions if q.category == "AR"]
        with_evidence = [q for q in ar if q.evidence]
        assert len(with_evidence) * 2 >= len(ar)
        for q in with_evidence:
            spec = hidden["questions"][(h.id, q.id)]
            asked = ents[spec["about"]]
            assert spec["type"] in ("ar_twin", "ar_never")
            assert {(e.session, e.turn) for e in q.evidence} == {(s["session"], s["turn"]) for s in spec["support"]}
            attr = spec["attribute"]
            assert len(asked["timeline"][attr]) == 1  # what is asked never happened to it
            intro = spec["support"][0]
            assert (intro["session"], intro["turn"]) == (asked["observations"][0]["session"],
                                                         asked["observations"][0]["turn"])
            assert _words(_turn(h, intro["session"], intro["turn"]).text, asked["kind"])
            if spec["type"] == "ar_twin":  # ... but to its look-alike, whose change turn is evidence too
                change = spec["support"][1]
                twin = ents[change["entity"]]
                assert twin["twin_group"] == asked["twin_group"] is not None and twin["id"] != asked["id"]
                text = _turn(h, change["session"], change["turn"]).text
                assert _words(text, asked["kind"]) and _words(text, str(change["value"]))
                assert [x["value"] for x in twin["timeline"][attr]][-1] == change["value"]


# --- mentions are noise, not facts -------------------------------------------------------------------
def test_mentions_are_never_evidence_and_never_change_the_world(data):
    histories, hidden = data
    kinds = set()
    for h in histories:
        world = hidden["world"][h.id]
        ents = {e["id"]: e for e in world["entities"]}
        colours = set(POOLS[world["split"]].colours)
        mentions = {(m["session"], m["turn"]): m for m in world["mentions"]}
        kinds |= {m["kind"] for m in mentions.values()}
        evidence = {(e.session, e.turn) for q in h.questions for e in q.evidence}
        assert not set(mentions) & evidence
        changes = {(x["session"], x["turn"]) for e in ents.values() for line in e["timeline"].values() for x in line}
        observed = {(o["session"], o["turn"]) for e in ents.values() for o in e["observations"]}
        assert not set(mentions) & (changes | observed)
        for (sid, t), m in mentions.items():
            turn = _turn(h, sid, t)
            assert turn.role == "user" and not turn.images
            assert not [c for c in colours if _words(turn.text, c)], turn.text  # states no value
            for eid in m["entities"]:
                e = ents[eid]
                name = e["static"]["street"] if e["type"] == "shop" else (
                    e["name"] if e["type"] in ("person", "pet", "room") else e["kind"])
                assert _words(turn.text, name), (m, turn.text)
        per_entity = {}
        for m in mentions.values():
            for eid in m["entities"]:
                per_entity[eid] = per_entity.get(eid, 0) + 1
        assert max(per_entity.values()) >= 2
    assert {"mention", "near_miss", "attr", "twins"} <= kinds


def test_some_session_has_more_images_than_the_reader_budget(data):
    histories, hidden = data
    for h in histories:
        per_session = [sum(len(t.images) for t in s.turns) for s in h.sessions]
        assert max(per_session) > 8
    bursts = [s for s in hidden["scenes"] if s["event"] == "obj_same"]
    assert bursts


def test_hard_refuses_lengths_it_cannot_hit(tmp_path):
    from c3m.errors import InvalidInput
    with pytest.raises(InvalidInput):
        generate_dataset(tmp_path / "short", length=3000, episodes=1, preset="hard", progress=False)
    with pytest.raises(InvalidInput):
        generate_dataset(tmp_path / "bad", length=LENGTH, episodes=1, preset="medium", progress=False)
