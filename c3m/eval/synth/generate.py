"""Generate a synthetic dataset: histories (episodes.jsonl + images) and the hidden sidecars.

Each history is built from its own ``random.Random`` seeded by (seed, split, index), so the output does
not depend on the number of worker processes or the order they finish in; JSON is written with sorted
keys and PNGs without metadata, so the same arguments give byte-identical files.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable

from ...dataset import write_dataset
from ...errors import InvalidInput
from ...types import CATEGORIES, EvidenceRef, History, Question, Session, Turn
from .dialogue import assemble, count_tokens, ref
from .questions import QSpec, build_questions
from .render import render_event
from .vocab import HIDDEN, SPLITS
from .world import MUTABLE, PHOTO_UPDATES, World, add_bursts, build_world, schedule, visible_attrs

GENERATOR = "c3m.eval.synth"
VERSION = "1.0"
TOLERANCE = 0.10
MIN_LENGTH = 2000
_OURS = {"episodes.jsonl", "images", HIDDEN, "manifest.json"}
PRESETS = ("easy", "hard", "photo")
HARD_MIN_LENGTH = 4000  # below this the hard preset's facts and mentions alone overshoot the length
PHOTO_MIN_LENGTH = 8000  # below this the photo preset's 2-4 changes per entity overshoot the length
#: ``photo``: text tokens per session (several hundred short sessions at 48K, as in long chat histories)
PHOTO_SESSION_TOKENS = 160


def parse_length(length: int | str) -> int:
    """``"32k"`` -> 32000; ints pass through."""
    if isinstance(length, bool):
        raise InvalidInput("length", f"must be a token count, got {length!r}", fix='pass e.g. "32k" or 32000')
    if isinstance(length, int):
        value = length
    else:
        text = str(length).strip().lower()
        try:
            value = int(float(text[:-1]) * 1000) if text.endswith("k") else int(text)
        except ValueError:
            raise InvalidInput("length", f"cannot read {length!r} as a token count",
                               fix='pass "32k", "64k", "128k" or an integer') from None
    if value < MIN_LENGTH:
        raise InvalidInput("length", f"{value} tokens is too short for a history with every question category",
                           fix=f"pass at least {MIN_LENGTH}")
    return value


def history_seed(seed: int, split: str, index: int) -> int:
    """A per-history seed from (seed, split, index): independent of workers and of Python's hash salt."""
    return int.from_bytes(hashlib.sha256(f"{GENERATOR}:{seed}:{split}:{index}".encode()).digest()[:8], "big")


def _session_times(rng: random.Random, n: int) -> list[datetime]:
    """One session per day at most, 1-4 days apart, so every session has its own date."""
    when = datetime(rng.choice((2024, 2025)), rng.randint(1, 12), rng.randint(1, 28))
    times = []
    for _ in range(n):
        when += timedelta(days=rng.randint(1, 4))
        times.append(when.replace(hour=rng.randint(8, 21), minute=rng.choice((0, 15, 30, 45))))
    return times


@dataclass
class _Result:
    history: History
    scenes: list[dict]
    relations: list[dict]
    world: dict
    questions: list[dict]
    tokens: int
    images: int


def generate_history(root: Path, split: str, index: int, seed: int, target: int, per_category: int,
                     preset: str = "easy") -> _Result:
    """One history; its images are written under ``root/images/<history id>/``. ``hard`` adds bursts
    of re-shared photos (sessions with more pictures than the reader's 8-image budget), mention noise,
    the filler grammar and AR questions with evidence (see ``hard_vocab`` / ``dialogue``). ``photo`` is
    ``hard`` with short photo-only changes, repeated small talk instead of the mentions, 2-4 changes per
    changing entity and many short sessions (``photo_vocab`` / ``world._photo_updates``)."""
    rng = random.Random(history_seed(seed, split, index))
    hid = f"{split}-{index:05d}"
    photo = preset == "photo"
    hard = preset == "hard" or photo
    n_images = max(12, min(60, target // 900))
    world = build_world(rng, split, n_images=n_images, per_category=per_category, preset=preset)
    n_sessions = max(len(world.events) + 2, round(target / (PHOTO_SESSION_TOKENS if photo else 550)))
    schedule(world, rng, n_sessions)
    if hard:
        add_bursts(world, rng, 1 + target // 40000)
    pairs = assemble(world, rng, n_sessions, target, hard, photo)
    times = _session_times(rng, n_sessions)
    sids = [f"s{i + 1:03d}" for i in range(n_sessions)]

    image_dir = root / "images" / hid
    image_dir.mkdir(parents=True, exist_ok=True)
    event_index = {id(e): i for i, e in enumerate(world.events)}
    sessions, scenes, image_of, texts = [], [], {}, []
    for s, session_pairs in enumerate(pairs):
        turns = []
        for pair in session_pairs:
            images = ()
            if pair.event is not None and pair.event.image:
                data, scene = render_event(world, event_index[id(pair.event)], rng)
                rel = f"images/{hid}/{sids[s]}-{len(turns)}.png"
                (root / rel).write_bytes(data)
                images = (root / rel,)
                image_of[id(pair.event)] = rel
                scenes.append({"image": rel, "history": hid, "session": sids[s], "turn": len(turns),
                               "entity": pair.event.entity, "event": pair.event.kind, **scene})
            turns.append(Turn("user", pair.user, images))
            turns.append(Turn("assistant", pair.assistant))
            texts += [pair.user, pair.assistant]
        sessions.append(Session(sids[s], times[s], tuple(turns)))

    specs = build_questions(world, rng, times, texts, per_category, hard, photo)
    asked_at = times[-1] + timedelta(days=1)
    questions, q_hidden = [], []
    for n, spec in enumerate(specs, 1):
        evidence = sorted({(ev.session, ev.turn) for ev, *_ in spec.support})
        qid = f"q{n:02d}"
        questions.append(Question(qid, spec.question, spec.answer, spec.category, asked_at,
                                  tuple(EvidenceRef(sids[s], t) for s, t in evidence)))
        q_hidden.append(_question_record(hid, qid, spec, sids, image_of))
    history = History(hid, tuple(sessions), tuple(questions))
    record = _world_record(world, hid, sids, times, image_of)
    if photo:
        _photo_records(record, q_hidden, pairs, sids, sessions)
    elif hard:  # statement-free mention turns, so tests can check they are never evidence nor change a timeline
        record["mentions"] = [{"session": sids[s], "turn": p.turn, "kind": p.mention[0], "entities": list(p.mention[1])}
                              for s, session_pairs in enumerate(pairs) for p in session_pairs if p.mention]
    return _Result(history, scenes, _relation_records(world, hid, sids, image_of), record, q_hidden,
                   sum(count_tokens(t) for t in texts), len(scenes))


def _photo_records(record: dict, q_hidden: list[dict], pairs, sids: list[str], sessions: list[Session]) -> None:
    """``photo``: what diagnostics break numbers down by. ``record["photo_turns"]``: every user turn whose
    change is shown only in its picture under a short generic caption; ``record["small_talk"]``: the
    distinct small-talk lines, each with every (session, turn) it is repeated at (statement-free: never
    evidence, never a change); ``record["mentions"]``: the same turns one per row, as the hard preset lists
    its mentions. Each question's support rows get ``photo_only`` and ``text_chars`` (the turn's length)."""
    photo_turns, lines = [], {}
    for s, session_pairs in enumerate(pairs):
        for p in session_pairs:
            if p.event is not None and p.event.kind in PHOTO_UPDATES:
                photo_turns.append({"session": sids[s], "turn": p.turn, "entity": p.event.entity,
                                    "event": p.event.kind, "attributes": sorted(p.event.changes),
                                    "chars": len(p.user)})
            if p.mention is not None:
                line = lines.setdefault(p.user, {"text": p.user, "entities": list(p.mention[1]), "at": []})
                line["at"].append({"session": sids[s], "turn": p.turn})
    record["photo_turns"] = photo_turns
    record["small_talk"] = sorted(lines.values(), key=lambda x: x["text"])
    record["mentions"] = [{"session": at["session"], "turn": at["turn"], "kind": "small_talk",
                           "entities": line["entities"]} for line in record["small_talk"] for at in line["at"]]
    photo_at = {(p["session"], p["turn"]) for p in photo_turns}
    text = {(sids[s], t): turn.text for s, session in enumerate(sessions) for t, turn in enumerate(session.turns)}
    for q in q_hidden:
        for row in q["support"]:
            row["photo_only"] = (row["session"], row["turn"]) in photo_at
            row["text_chars"] = len(text[(row["session"], row["turn"])])


def _question_record(hid: str, qid: str, spec: QSpec, sids: list[str], image_of: dict) -> dict:
    return {"history": hid, "id": qid, "category": spec.category, "type": spec.type, "question": spec.question,
            "answer": spec.answer, "visual_only": spec.visual_only, **spec.extra,
            "support": [{"session": sids[ev.session], "turn": ev.turn, "entity": entity, "attribute": attr,
                         "value": value, "modality": "text" if attr in ev.text_attrs or attr in ("kind", "owner")
                         else "image", "image": image_of.get(id(ev))}
                        for ev, entity, attr, value in spec.support]}


def _obs(world: World, ev, sids, image_of) -> dict:
    return {"session": sids[ev.session], "turn": ev.turn, "entity": ev.entity, "image": image_of.get(id(ev))}


def _relation_records(world: World, hid: str, sids: list[str], image_of: dict) -> list[dict]:
    """Gold same / update / distinct labels between observations, for training a relation head.

    Same entity: ``update`` if a mutable attribute differs between the two observations, else ``same``.
    Different entities of one type: ``distinct``; look-alike twins are marked ``hard``.
    """
    index = {id(e): i for i, e in enumerate(world.events)}
    out = []
    by_entity: dict[str, list] = {}
    for ev in world.events:
        by_entity.setdefault(ev.entity, []).append(ev)
    for eid, evs in by_entity.items():
        ent = world.entities[eid]
        for i, a in enumerate(evs):
            for b in evs[i + 1:]:
                sa, sb = world.state_at(eid, index[id(a)]), world.state_at(eid, index[id(b)])
                changed = sorted(k for k in MUTABLE[ent.type] if sa.get(k) != sb.get(k))
                out.append({"history": hid, "a": _obs(world, a, sids, image_of), "b": _obs(world, b, sids, image_of),
                            "label": "update" if changed else "same", "changed": changed, "hard": False})
    rng = random.Random(hid)
    entities = list(world.entities.values())
    for i, x in enumerate(entities):
        for y in entities[i + 1:]:
            if x.type != y.type or x.id not in by_entity or y.id not in by_entity:
                continue
            hard = x.twin_group is not None and x.twin_group == y.twin_group
            pairs = [(a, b) for a in by_entity[x.id] for b in by_entity[y.id]]
            if not hard:  # keep ordinary negatives few; twins keep every pair
                pairs = [rng.choice(pairs)]
            for a, b in pairs:
                first, second = (a, b) if index[id(a)] < index[id(b)] else (b, a)
                out.append({"history": hid, "a": _obs(world, first, sids, image_of),
                            "b": _obs(world, second, sids, image_of), "label": "distinct", "changed": [],
                            "hard": hard})
    return out


def _world_record(world: World, hid: str, sids: list[str], times: list[datetime], image_of: dict) -> dict:
    entities = []
    for ent in world.entities.values():
        timeline = {attr: [{"value": v, "session": sids[e.session], "turn": e.turn,
                            "time": times[e.session].isoformat()} for v, e in world.timeline(ent.id, attr)]
                    for attr in MUTABLE[ent.type] if world.timeline(ent.id, attr)}
        observations = [{"session": sids[e.session], "turn": e.turn, "event": e.kind, "image": image_of.get(id(e)),
                         "text_attrs": list(e.text_attrs), "visible_attrs": list(visible_attrs(e, ent))}
                        for e in world.observations(ent.id)]
        entities.append({"id": ent.id, "type": ent.type, "kind": ent.kind, "name": ent.name, "ref": ref(world, ent),
                         "static": ent.static, "twin_group": ent.twin_group, "timeline": timeline,
                         "observations": observations})
    return {"history": hid, "split": world.split, "entities": entities,
            "sessions": [{"id": s, "time": t.isoformat()} for s, t in zip(sids, times)]}


def _job(args: tuple) -> _Result:
    return generate_history(*args)


def _is_ours(out: Path) -> bool:
    try:
        return json.loads((out / "manifest.json").read_text(encoding="utf-8")).get("generator") == GENERATOR
    except (OSError, ValueError, AttributeError):
        return False


def _prepare(out: Path) -> None:
    """Use an empty folder, or replace a previous output of this generator; never delete anything else."""
    if out.exists() and not out.is_dir():
        raise InvalidInput("out", f"{out} is a file", fix="pass a folder path")
    if out.exists() and any(out.iterdir()):
        foreign = sorted(p.name for p in out.iterdir() if p.name not in _OURS)
        if foreign or not _is_ours(out):
            shown = ", ".join(foreign[:3]) or "no manifest.json from this generator"
            raise InvalidInput("out", f"{out} is not empty and is not a previous `c3m synth` output ({shown})",
                               fix="pass an empty or new folder (or delete this one yourself)")
        (out / "manifest.json").unlink()  # written last: a crash mid-run leaves no claim of a whole dataset
        for name in ("images", HIDDEN):
            shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def _write_jsonl(path: Path, records: Iterable[Any]) -> None:
    _write(path, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def generate_dataset(out: str | Path, *, length: int | str = "32k", episodes: int = 10, seed: int = 0,
                     split: str = "test", workers: int = 1, progress: bool = True, per_category: int = 2,
                     preset: str = "easy") -> Path:
    """Write ``episodes`` synthetic histories of about ``length`` text tokens to ``out`` and return it.

    ``preset="easy"`` is the original generator (output unchanged); ``"hard"`` is calibrated so dense
    top-k retrieval does not saturate (benchmarks/results/hard-synth-cpu/calibration.md); ``"photo"`` has
    changes shown only in photos under short generic captions, word-for-word repeated small talk and 2-4
    changes per entity (benchmarks/results/photo-synth-cpu/calibration.md).

    See the package docstring for the files written. Same arguments give byte-identical files, whatever
    ``workers`` is.
    """
    target = parse_length(length)
    if split not in SPLITS:
        raise InvalidInput("split", f"unknown split {split!r}", fix=f"use one of {', '.join(SPLITS)}")
    if preset not in PRESETS:
        raise InvalidInput("preset", f"unknown preset {preset!r}", fix=f"use one of {', '.join(PRESETS)}")
    if preset == "hard" and target < HARD_MIN_LENGTH:
        raise InvalidInput("length", f"{target} tokens is too short for the hard preset",
                           fix=f"pass at least {HARD_MIN_LENGTH}")
    if preset == "photo" and target < PHOTO_MIN_LENGTH:
        raise InvalidInput("length", f"{target} tokens is too short for the photo preset",
                           fix=f"pass at least {PHOTO_MIN_LENGTH}")
    for name, value, low in (("episodes", episodes, 1), ("workers", workers, 1), ("per_category", per_category, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise InvalidInput(name, f"must be an integer >= {low}, got {value!r}", fix=f"pass {name}={low} or more")
    if per_category > 4:
        raise InvalidInput("per_category", f"{per_category} is more than the world plan supports", fix="pass 1-4")
    out = Path(out)
    _prepare(out)
    root = out.resolve()
    jobs = [(root, split, i, seed, target, per_category, preset) for i in range(episodes)]
    from tqdm import tqdm

    bar = tqdm(total=episodes, desc=f"synth {preset} {split} {target // 1000}k", unit="history", disable=not progress)
    results: list[_Result] = []
    if workers == 1:
        for job in jobs:
            results.append(_job(job))
            bar.update(1)
    else:
        # spawn, not fork: callers may hold threads (torch, tqdm) that fork would copy mid-state.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, episodes), mp_context=context) as pool:
            for result in pool.map(_job, jobs):
                results.append(result)
                bar.update(1)
    bar.close()

    for r in results:
        if abs(r.tokens - target) > TOLERANCE * target:
            raise RuntimeError(f"{r.history.id}: {r.tokens} tokens is outside ±10% of {target}")
    write_dataset([r.history for r in results], out)
    hidden = out / HIDDEN
    _write_jsonl(hidden / "scenes.jsonl", (s for r in results for s in r.scenes))
    _write_jsonl(hidden / "relations.jsonl", (x for r in results for x in r.relations))
    _write_jsonl(hidden / "world.jsonl", (r.world for r in results))
    _write_jsonl(hidden / "questions.jsonl", (q for r in results for q in r.questions))
    manifest = _manifest(results, target, length, episodes, seed, split, per_category)
    if preset != "easy":  # easy manifests stay byte-identical to earlier versions
        manifest["preset"] = preset
    _write(out / "manifest.json", json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    return out


def _stats(values: list[int]) -> dict:
    return {"min": min(values), "max": max(values), "mean": round(sum(values) / len(values), 1), "total": sum(values)}


def _manifest(results: list[_Result], target: int, length, episodes: int, seed: int, split: str,
              per_category: int) -> dict:
    counts = {c: 0 for c in CATEGORIES}
    for r in results:
        for q in r.history.questions:
            counts[q.category] += 1
    labels: dict[str, int] = {}
    for r in results:
        for x in r.relations:
            labels[x["label"]] = labels.get(x["label"], 0) + 1
    return {
        "generator": GENERATOR, "version": VERSION, "seed": seed, "length": target, "length_arg": str(length),
        "episodes": episodes, "split": split, "per_category": per_category, "counts": counts,
        "questions": sum(counts.values()),
        "visual_only_questions": sum(q["visual_only"] for r in results for q in r.questions),
        "token_counter": "approx",
        "tokens": {"target": target, "tolerance": TOLERANCE, **_stats([r.tokens for r in results])},
        "sessions": _stats([len(r.history.sessions) for r in results]),
        "turns": _stats([sum(len(s.turns) for s in r.history.sessions) for r in results]),
        "images": _stats([r.images for r in results]), "relation_labels": dict(sorted(labels.items())),
        "hidden": {"folder": HIDDEN, "files": ["questions.jsonl", "relations.jsonl", "scenes.jsonl", "world.jsonl"],
                   "readers": "evaluation and the explicitly named `oracle` perception backend only"},
    }


def load_hidden(out: str | Path) -> dict[str, Any]:
    """The hidden sidecars of a generated dataset, for the evaluator and the ``oracle`` backend only:
    ``{"scenes": [...], "relations": [...], "world": {history id: record}, "questions": {(history, qid): record},
    "manifest": {...}}``."""
    out = Path(out)
    hidden = out / HIDDEN
    if not hidden.is_dir():
        raise InvalidInput("out", f"{out} has no {HIDDEN}/ folder", fix="pass a folder written by `c3m synth`")

    def read(name: str) -> list[dict]:
        path = hidden / name
        if not path.is_file():
            return []
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    manifest = out / "manifest.json"
    return {"scenes": read("scenes.jsonl"), "relations": read("relations.jsonl"),
            "world": {w["history"]: w for w in read("world.jsonl")},
            "questions": {(q["history"], q["id"]): q for q in read("questions.jsonl")},
            "manifest": json.loads(manifest.read_text(encoding="utf-8")) if manifest.is_file() else {}}
