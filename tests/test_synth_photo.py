"""The ``photo`` synthetic preset (issue 43): changes shown only in a photo under a short generic caption
(gold for "what is X now?" questions), small talk repeated word for word that is never evidence, at least
two changes per changed entity, deterministic output and split-disjoint wording."""
from __future__ import annotations

import hashlib
import json
import re
from itertools import combinations
from pathlib import Path

import pytest

from c3m.cli import main
from c3m.dataset import load_dataset, validate_dataset
from c3m.errors import InvalidInput
from c3m.eval.synth import generate_dataset, load_hidden
from c3m.eval.synth.hard_vocab import CUES
from c3m.eval.synth.photo_vocab import PHOTO_TEMPLATES
from c3m.eval.synth.vocab import POOLS, ROOMS, SPLITS, VEHICLES, pool_words

LENGTH, EPISODES, SEED, PER_CATEGORY = 12000, 3, 5, 4
#: words that would say a change happened or what the new state is; a photo-only caption has none of them
CHANGE_WORDS = ("new", "now", "paint", "painted", "colour", "color", "coat", "changed", "renamed", "moved",
                "shifted", "again", "still", "same", "different", "sold", "called", "name")
PHOTO_UPDATES = {"obj_repaint_image", "room_repaint_image", "vehicle_repaint_image", "shop_rename"}


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _words(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word.lower())}(?![\w-])", text.lower()) is not None


def _turn(history, session: str, turn: int):
    return next(s for s in history.sessions if s.id == session).turns[turn]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("photo") / "a", length=LENGTH, episodes=EPISODES, seed=SEED,
                            split="dev", preset="photo", per_category=PER_CATEGORY, progress=False)


@pytest.fixture(scope="module")
def data(out):
    return load_dataset(out), load_hidden(out)


# --- determinism, format -----------------------------------------------------------------------------
def test_photo_is_deterministic_valid_and_recorded(out, data, tmp_path):
    again = generate_dataset(tmp_path / "b", length=LENGTH, episodes=EPISODES, seed=SEED, split="dev",
                             preset="photo", per_category=PER_CATEGORY, progress=False, workers=2)
    assert _files(out) == _files(again)
    assert validate_dataset(out) == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["preset"] == "photo"
    assert manifest["sessions"]["min"] >= LENGTH // 200  # many short sessions, as in long chat histories
    histories, hidden = data
    for h in histories:
        assert {"photo_turns", "small_talk", "mentions"} <= set(hidden["world"][h.id])


def test_cli_photo_preset_and_its_minimum_length(tmp_path, capsys):
    assert main(["synth", str(tmp_path / "c"), "--length", "8k", "--episodes", "1", "--preset", "photo",
                 "--split", "train", "-q"]) == 0
    assert "preset photo" in capsys.readouterr().out
    with pytest.raises(InvalidInput):
        generate_dataset(tmp_path / "d", length=4000, episodes=1, preset="photo", progress=False)


# --- short photo-only changes ------------------------------------------------------------------------
def test_photo_only_changes_are_short_generic_captions_of_the_new_state(data):
    histories, hidden = data
    for h in histories:
        world = hidden["world"][h.id]
        ents = {e["id"]: e for e in world["entities"]}
        scenes = {(s["session"], s["turn"]): s for s in hidden["scenes"] if s["history"] == h.id}
        values = set()
        for e in ents.values():
            values |= {str(x["value"]).lower() for line in e["timeline"].values() for x in line}
        photo = world["photo_turns"]
        assert len(photo) >= 4
        for p in photo:
            turn = _turn(h, p["session"], p["turn"])
            assert 25 <= len(turn.text) <= 60 and p["chars"] == len(turn.text), turn.text
            assert turn.images and (p["session"], p["turn"]) in scenes
            ent = ents[p["entity"]]
            named = ent["ref"] if ent["type"] != "shop" else f"the shop on {ent['name']}"
            assert named.lower() in turn.text.lower(), (named, turn.text)
            assert not [w for w in CHANGE_WORDS if _words(turn.text, w)], turn.text
            assert not [v for v in values if _words(turn.text, v) and v not in named.lower()], turn.text
            # ... while the picture shows the state after the change
            obs = next(o for o in ent["observations"] if (o["session"], o["turn"]) == (p["session"], p["turn"]))
            assert obs["text_attrs"] == [] and obs["image"]
            drawn = next(o for o in scenes[(p["session"], p["turn"])]["objects"] if o["entity"] == ent["id"])
            for attr in p["attributes"]:
                line = ent["timeline"][attr]
                at = next(x for x in line if (x["session"], x["turn"]) == (p["session"], p["turn"]))
                assert drawn["attributes"][{"name": "name"}.get(attr, attr)] == at["value"]


def test_ku_gold_is_the_newest_change_and_often_a_short_photo_turn(data):
    histories, hidden = data
    ku_photo = ku_text = 0
    for h in histories:
        world = hidden["world"][h.id]
        ents = {e["id"]: e for e in world["entities"]}
        photo_at = {(p["session"], p["turn"]) for p in world["photo_turns"]}
        for q in (q for q in h.questions if q.category == "KU"):
            spec = hidden["questions"][(h.id, q.id)]
            if spec["type"] == "ku_owned":
                continue
            (row,) = spec["support"]
            newest = ents[row["entity"]]["timeline"][row["attribute"]][-1]
            assert (row["session"], row["turn"]) == (newest["session"], newest["turn"]) == \
                (q.evidence[0].session, q.evidence[0].turn)
            assert row["photo_only"] == ((row["session"], row["turn"]) in photo_at)
            assert row["text_chars"] == len(_turn(h, row["session"], row["turn"]).text)
            assert spec["updates"] >= 2  # older values compete
            if row["photo_only"]:
                ku_photo += 1
                assert row["text_chars"] < 60 and spec["visual_only"]
            else:
                ku_text += 1
    assert ku_photo and ku_text  # both kinds of gold exist


def test_every_changed_entity_changes_at_least_twice(data):
    histories, hidden = data
    changed = 0
    for h in histories:
        for e in hidden["world"][h.id]["entities"]:
            changes = {(x["session"], x["turn"]) for line in e["timeline"].values() for x in line[1:]}
            if changes:
                changed += 1
                assert len(changes) >= 2, (e["ref"], e["timeline"])
    assert changed >= 6 * len(histories)


def test_previous_colour_questions_need_the_last_two_changes(data):
    histories, hidden = data
    seen = 0
    for h in histories:
        ents = {e["id"]: e for e in hidden["world"][h.id]["entities"]}
        for q in h.questions:
            spec = hidden["questions"][(h.id, q.id)]
            if spec["type"] != "tr_previous":
                continue
            seen += 1
            line = ents[spec["support"][0]["entity"]]["timeline"]["colour"]
            assert len(line) >= 3 and q.answer == line[-2]["value"]
            assert [(r["session"], r["turn"]) for r in spec["support"]] == \
                [(x["session"], x["turn"]) for x in line[-2:]]
    assert seen


# --- repeated small talk -----------------------------------------------------------------------------
def test_small_talk_is_repeated_word_for_word_and_never_evidence(data):
    histories, hidden = data
    for h in histories:
        world = hidden["world"][h.id]
        lines = world["small_talk"]
        assert 8 <= len(lines) <= 11
        ents = {e["id"]: e for e in world["entities"]}
        observed = {(o["session"], o["turn"]) for e in ents.values() for o in e["observations"]}
        evidence = {(ev.session, ev.turn) for q in h.questions for ev in q.evidence}
        at = set()
        for line in lines:
            assert len(line["at"]) >= 3  # repeated many times (7 each on average at this length, 30 at 48K)
            assert 1 <= len(line["entities"]) <= 3
            for eid in line["entities"]:
                assert ents[eid]["ref"].lower() in line["text"].lower()
            for x in line["at"]:
                turn = _turn(h, x["session"], x["turn"])
                assert turn.text == line["text"] and not turn.images  # word for word
                at.add((x["session"], x["turn"]))
        assert len(at) >= 5 * len(lines)
        assert not at & evidence and not at & observed
        assert {(m["session"], m["turn"]) for m in world["mentions"]} == at
        texts = [t.text for s in h.sessions for t in s.turns if t.role == "user"]
        for line in lines:
            assert texts.count(line["text"]) == len(line["at"])


# --- split-disjoint wording --------------------------------------------------------------------------
def test_photo_wording_is_disjoint_across_splits(tmp_path):
    for a, b in combinations(SPLITS, 2):
        ta = {t for ts in PHOTO_TEMPLATES[a].values() for t in ts}
        tb = {t for ts in PHOTO_TEMPLATES[b].values() for t in ts}
        assert not ta & tb, (a, b)
    for split in SPLITS:
        assert set(PHOTO_TEMPLATES[split]) == set(PHOTO_TEMPLATES["test"])
        foreign = [c for other in SPLITS if other != split for c in CUES[other]]
        others = set().union(*(pool_words(s) for s in SPLITS if s != split))
        for key, ts in PHOTO_TEMPLATES[split].items():
            for t in ts:
                assert not [c for c in foreign if _words(t, c)], (split, t)
                assert not [w for w in others | pool_words(split) if _words(t, w)], (split, t)
                if key == "photo_state":  # 25-60 characters with the shortest and the longest reference
                    refs = [f"my {k}" for k in POOLS[split].kinds] + [f"my {v}" for v in VEHICLES]
                    refs += [f"the {k} in the {r}" for k in POOLS[split].kinds for r in ROOMS]
                    lengths = [len(t.format(ref=r)) for r in refs]
                    assert 25 <= min(lengths) and max(lengths) <= 60, t
                    assert not [w for w in CHANGE_WORDS if _words(t, w)], t
        folder = generate_dataset(tmp_path / split, length=8000, episodes=1, seed=2, split=split, preset="photo",
                                  progress=False)
        text = (folder / "episodes.jsonl").read_text()
        histories = load_dataset(folder)
        history = " ".join(t.text for h in histories for s in h.sessions for t in s.turns)
        assert not [c for c in foreign if _words(history, c)], split
        assert not [w for w in others if _words(text, w)], split
