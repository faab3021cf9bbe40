"""Questions in the five MemLens categories, each with its gold answer, gold evidence and a support record.

Every question is derived from the world plan, and its evidence is computed from which turns state or
show the needed facts (``World.revealing``), not written by hand. The support record (entity, attribute,
value, turn, modality) goes to ``_hidden/questions.jsonl`` so tests and the evaluator can check that the
evidence really carries the answer.

- IE: one detail observed in exactly one turn, mostly visual-only (accessories, shape, material, brand,
  plate, neighbouring sign), sometimes a job said once.
- MSR: needs two or more sessions (how many look-alike objects; how often something was repainted; a
  pet's collar joined to its owner).
- TR: the value before a date (evidence: the turn that set it and the turn that changed it), or which of
  two things came first; the ``photo`` preset adds the colour just before the latest repaint (evidence: the
  last two colour changes, often a photo-only one), so the order of changes matters.
- KU: the latest value after updates (evidence: the last change), or that an object was sold.
- AR: a subject that no turn of the history ever names, or the never-given job of a known person; the
  gold answer is a refusal and evidence is empty. The ``hard`` preset adds AR questions that can fail:
  a move or repaint asked of an object it never happened to (evidence: its introduction) or of the
  look-alike twin of the one it happened to (evidence: the asked twin's introduction and the other
  twin's change), and at least half its AR questions are of these kinds.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .dialogue import ref, templates
from .vocab import POOLS, RELATIONS, TEMPLATES, number_word
from .world import Event, World

_REPAINTS = ("obj_repaint_text", "obj_repaint_image", "room_repaint", "room_repaint_image", "vehicle_repaint_text",
             "vehicle_repaint_image")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")


@dataclass
class QSpec:
    category: str
    type: str
    question: str
    answer: str
    support: list[tuple[Event, str, str, Any]] = field(default_factory=list)  # (event, entity, attr, value)
    visual_only: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def entities(self) -> frozenset[str]:
        return frozenset(entity for _, entity, _, _ in self.support)


def date_text(when: datetime) -> str:
    return f"{when.day} {_MONTHS[when.month - 1]} {when.year}"


def _mentions(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word.lower())}(?![\w-])", text.lower()) is not None


class _Asker:
    def __init__(self, world: World, rng: random.Random, times: list[datetime], texts: list[str],
                 hard: bool = False, photo: bool = False):
        self.w, self.rng, self.times = world, rng, times
        self.photo = photo
        self.t = templates(world.split, hard, photo) if hard else TEMPLATES[world.split]
        self.pool = POOLS[world.split]
        self.all_text = "\n".join(texts)

    def say(self, key: str, **values) -> str:
        text = self.rng.choice(self.t[key]).format(**values)
        return text[0].upper() + text[1:]

    def ref(self, entity_id: str) -> str:
        return ref(self.w, self.w.entities[entity_id])

    def single(self, entity: str, attr: str) -> Event | None:
        """The one event revealing ``attr`` of ``entity``, if exactly one does."""
        found = self.w.revealing(entity, attr)
        return found[0] if len(found) == 1 else None

    @staticmethod
    def said(event: Event, attr: str) -> bool:
        return attr in event.text_attrs

    # --- IE -----------------------------------------------------------------------------------------
    def ie(self) -> list[QSpec]:
        out = []
        for ent in self.w.entities.values():
            if ent.type == "object":
                ev = self.single(ent.id, "accessory")
                if ev is not None:
                    acc = ent.static["accessory"]
                    out.append(QSpec("IE", "ie_accessory",
                                     self.say("q_ie_accessory", ref=self.ref(ent.id), side=acc["side"]),
                                     f"{number_word(acc['count'])} {acc['item']}",
                                     [(ev, ent.id, "accessory", acc)], True))
                for attr in ("shape", "material"):
                    ev = self.single(ent.id, attr)
                    if ev is not None and not self.said(ev, attr):
                        out.append(QSpec("IE", f"ie_{attr}", self.say("q_ie_attr", attr=attr, ref=self.ref(ent.id)),
                                         ent.static[attr], [(ev, ent.id, attr, ent.static[attr])], True))
                ev = self.single(ent.id, "brand")
                if ev is not None and not self.said(ev, "brand"):
                    brand = ev.changes.get("brand", ent.initial["brand"])
                    out.append(QSpec("IE", "ie_brand", self.say("q_ie_brand", ref=self.ref(ent.id)), brand,
                                     [(ev, ent.id, "brand", brand)], True))
            elif ent.type == "vehicle":
                ev = self.single(ent.id, "plate")
                if ev is not None:
                    out.append(QSpec("IE", "ie_plate", self.say("q_ie_plate", vehicle=ent.kind), ent.static["plate"],
                                     [(ev, ent.id, "plate", ent.static["plate"])], True))
            elif ent.type == "shop":
                ev = self.single(ent.id, "neighbour")
                if ev is not None:
                    out.append(QSpec("IE", "ie_sign", self.say(
                        "q_ie_sign", position=ent.static["position"], shop=ent.initial["name"], street=ent.name),
                        ent.static["neighbour"], [(ev, ent.id, "neighbour", ent.static["neighbour"])], True))
            elif ent.type == "person" and "job" in ent.static:
                ev = self.single(ent.id, "job")
                if ev is not None:
                    out.append(QSpec("IE", "ie_job", self.say("q_ie_job", relation=ent.static["relation"],
                                                              name=ent.name), ent.static["job"],
                                     [(ev, ent.id, "job", ent.static["job"])], False))
        return out

    # --- MSR ----------------------------------------------------------------------------------------
    def msr(self) -> list[QSpec]:
        out = []
        groups: dict[int, list] = {}
        for ent in self.w.entities.values():
            if ent.twin_group is not None:
                groups.setdefault(ent.twin_group, []).append(ent)
        for members in groups.values():
            kind = members[0].kind
            intros = [(self.w.observations(m.id)[0], m.id, "kind", kind) for m in members]
            if len({ev.session for ev, *_ in intros}) < 2:
                continue
            out.append(QSpec("MSR", "msr_count", self.say("q_msr_count", plural=self.pool.kind_plurals[kind]),
                             number_word(len(members)), intros, False, {"kind": kind}))
        for ent in self.w.entities.values():  # how often something was repainted: every repaint turn counts
            changes = self.w.timeline(ent.id, "colour")[1:]
            if len(changes) >= 2 and all(ev.kind in _REPAINTS for _, ev in changes):
                out.append(QSpec("MSR", "msr_repaints", self.say("q_msr_repaints", ref=self.ref(ent.id)),
                                 number_word(len(changes)), [(ev, ent.id, "colour", v) for v, ev in changes],
                                 not any(self.said(ev, "colour") for _, ev in changes)))
        for pet in (e for e in self.w.entities.values() if e.type == "pet"):
            owner_ev = next(e for e in self.w.observations(pet.id) if e.kind == "pet_owner")
            photo = self.single(pet.id, "collar")
            person = self.w.entities[pet.static["owner"]]
            if photo is None or photo.session == owner_ev.session:
                continue
            out.append(QSpec("MSR", "msr_collar", self.say(
                "q_msr_collar", relation=person.static["relation"], name=person.name, species=pet.kind),
                pet.static["collar"], [(owner_ev, pet.id, "owner", person.name),
                                       (photo, pet.id, "collar", pet.static["collar"])], True))
        return out

    # --- TR -----------------------------------------------------------------------------------------
    def _changing(self):
        """(entity, attr, timeline) for every attribute that changed at least once."""
        for ent in self.w.entities.values():
            for attr in ("colour", "room"):
                line = self.w.timeline(ent.id, attr)
                if len(line) >= 2 and ent.type in ("object", "room", "vehicle"):
                    yield ent, attr, line

    def tr(self) -> list[QSpec]:
        out = []
        for ent, attr, line in self._changing():
            for k in range(1, len(line)):
                (before, ev0), (after, ev1) = line[k - 1], line[k]
                when = self.times[ev1.session]
                date = datetime(when.year, when.month, when.day)
                if self.times[ev0.session] >= date:
                    continue
                support = [(ev0, ent.id, attr, before), (ev1, ent.id, attr, after)]
                if attr == "room":
                    q = self.say("q_tr_room", ref=self.ref(ent.id), date=date_text(date))
                    answer = f"the {before}"
                else:
                    q = self.say("q_tr_before", attr="wall colour" if ent.type == "room" else "colour",
                                 ref=self.ref(ent.id), date=date_text(date))
                    answer = before
                out.append(QSpec("TR", "tr_before", q, answer, support, not self.said(ev0, attr),
                                 {"date": date.isoformat(), "attribute": attr}))
            if self.photo and attr == "colour" and len(line) >= 3 and line[-1][1].kind in _REPAINTS:
                (before, ev0), (after, ev1) = line[-2], line[-1]
                out.append(QSpec("TR", "tr_previous", self.say("q_tr_previous", ref=self.ref(ent.id)), before,
                                 [(ev0, ent.id, attr, before), (ev1, ent.id, attr, after)],
                                 not self.said(ev0, attr), {"attribute": attr, "updates": len(line) - 1}))
        singles = [e for e in self.w.entities.values() if e.type == "object" and e.twin_group is None]
        for i, a in enumerate(singles):
            for b in singles[i + 1:]:
                ea, eb = self.w.observations(a.id)[0], self.w.observations(b.id)[0]
                first = a if ea.session < eb.session else b
                pair = [a, b]
                self.rng.shuffle(pair)
                out.append(QSpec("TR", "tr_order", self.say("q_tr_order", ref_a=self.ref(pair[0].id),
                                                           ref_b=self.ref(pair[1].id)),
                                 f"the {first.kind}", [(ea, a.id, "kind", a.kind), (eb, b.id, "kind", b.kind)],
                                 False, {"first": first.id}))
        return out

    # --- KU -----------------------------------------------------------------------------------------
    def ku(self) -> list[QSpec]:
        out = []
        sold = {e.entity for e in self.w.events if e.kind == "obj_sell"}
        for ent, attr, line in self._changing():
            if ent.id in sold:
                continue
            value, ev = line[-1]
            if attr == "room":
                q, answer = self.say("q_ku_room", ref=self.ref(ent.id)), f"the {value}"
            else:
                q = self.say("q_ku_latest", attr="wall colour" if ent.type == "room" else "colour",
                             ref=self.ref(ent.id))
                answer = value
            out.append(QSpec("KU", "ku_latest", q, answer, [(ev, ent.id, attr, value)], not self.said(ev, attr),
                             {"attribute": attr, "updates": len(line) - 1}))
        for ent in self.w.entities.values():
            line = self.w.timeline(ent.id, "name") if ent.type == "shop" else []
            if len(line) >= 2:
                value, ev = line[-1]
                out.append(QSpec("KU", "ku_shop", self.say("q_ku_shop", street=ent.name), value,
                                 [(ev, ent.id, "name", value)], not self.said(ev, "name"),
                                 {"attribute": "name", "updates": len(line) - 1}))
        for eid in sorted(sold):
            ev = next(e for e in self.w.observations(eid) if e.kind == "obj_sell")
            out.append(QSpec("KU", "ku_owned", self.say("q_ku_owned", ref=self.ref(eid)), self.say("a_ku_sold"),
                             [(ev, eid, "status", "sold")], False, {"attribute": "status", "updates": 1}))
        return out

    # --- AR -----------------------------------------------------------------------------------------
    def ar(self) -> list[QSpec]:
        out = []
        used_kinds = {e.kind for e in self.w.entities.values() if e.type == "object"}
        for kind in self.pool.kinds:
            words = (kind, self.pool.kind_plurals[kind])
            if kind in used_kinds or any(_mentions(self.all_text, w) for w in words):
                continue
            out.append(QSpec("AR", "ar_kind", self.say("q_ar_kind", kind=kind), self.say("a_ar_kind", kind=kind),
                             [], False, {"subject": list(words)}))
        for person in (e for e in self.w.entities.values() if e.type == "person" and "job" not in e.static):
            # A near miss: the person is known (a pet owner), but their job was never given.
            out.append(QSpec("AR", "ar_job", self.say("q_ie_job", relation=person.static["relation"],
                                                     name=person.name), self.say("a_ar_job", name=person.name),
                             [], False, {"subject": [], "about": person.id, "attribute": "job"}))
        used_names = {e.name for e in self.w.entities.values()}
        for name in self.pool.people:
            if name in used_names or _mentions(self.all_text, name):
                continue
            out.append(QSpec("AR", "ar_person", self.say("q_ar_person", relation=self.rng.choice(RELATIONS),
                                                        name=name), self.say("a_ar_person", name=name),
                             [], False, {"subject": [name]}))
        return out


    def ar_hard(self) -> list[QSpec]:
        """AR questions with evidence: a move/repaint that never happened to the asked object."""
        out = []
        asks = {"room": "q_ar_move", "colour": "q_ar_repaint"}
        changes = {"room": ("obj_move",), "colour": ("obj_repaint_text", "obj_repaint_image", "obj_replace")}
        objects = [e for e in self.w.entities.values() if e.type == "object"]
        for ent in objects:
            obs = self.w.observations(ent.id)
            if any(e.kind == "obj_sell" for e in obs):
                continue
            intro = obs[0]
            for attr, key in asks.items():
                if len(self.w.timeline(ent.id, attr)) != 1:
                    continue
                twins = [t for t in objects if t.twin_group is not None and t.twin_group == ent.twin_group
                         and t.id != ent.id]
                other = next(((t, e) for t in twins for e in self.w.observations(t.id) if e.kind in changes[attr]
                              and attr in e.text_attrs), None)
                support = [(intro, ent.id, "kind", ent.kind)]
                if other is not None:
                    twin, ev = other
                    support.append((ev, twin.id, attr, ev.changes[attr]))
                    answer = self.say("a_ar_twin", other=self.ref(twin.id), ref=self.ref(ent.id))
                    kind = "ar_twin"
                elif ent.twin_group is None:
                    answer, kind = self.say("a_ar_never", ref=self.ref(ent.id)), "ar_never"
                else:
                    continue
                out.append(QSpec("AR", kind, self.say(key, ref=self.ref(ent.id)), answer, support, False,
                                 {"subject": [], "about": ent.id, "attribute": attr}))
        return out


def _pick(candidates: list[QSpec], n: int, rng: random.Random, category: str) -> list[QSpec]:
    """``n`` questions, round-robin over question types (varied), preferring distinct entities and, for
    KU, entities updated several times."""
    by_type: dict[str, list[QSpec]] = {}
    for q in candidates:
        by_type.setdefault(q.type, []).append(q)
    if sum(len(v) for v in by_type.values()) < n:
        raise RuntimeError(f"only {len(candidates)} {category} candidates for {n} questions; "
                           "the world plan is too small")
    for qs in by_type.values():
        rng.shuffle(qs)
        if category == "KU":
            qs.sort(key=lambda q: -min(q.extra.get("updates", 1), 2))
    types = sorted(by_type)
    rng.shuffle(types)
    picked: list[QSpec] = []
    used: set[str] = set()
    while len(picked) < n:
        progressed = False
        for t in types:
            if len(picked) == n:
                break
            queue = by_type[t]
            if not queue:
                continue
            fresh = next((q for q in queue if not (q.entities & used)), None)
            q = fresh or queue[0]
            queue.remove(q)
            picked.append(q)
            used |= q.entities
            progressed = True
        if not progressed:
            break
    return picked


def build_questions(world: World, rng: random.Random, times: list[datetime], texts: list[str],
                    per_category: int, hard: bool = False, photo: bool = False) -> list[QSpec]:
    """``per_category`` questions for each of IE, MSR, TR, KU, AR, in that order (``hard``: at least half
    the AR ones with evidence; ``photo``: also the colour before the latest repaint, a TR type)."""
    asker = _Asker(world, rng, times, texts, hard, photo)
    out: list[QSpec] = []
    for category, make in (("IE", asker.ie), ("MSR", asker.msr), ("TR", asker.tr), ("KU", asker.ku)):
        out += _pick(make(), per_category, rng, category)
    if hard:
        with_evidence = _pick(asker.ar_hard(), (per_category + 1) // 2, rng, "AR")
        out += with_evidence + _pick(asker.ar(), per_category - len(with_evidence), rng, "AR")
    else:
        out += _pick(asker.ar(), per_category, rng, "AR")
    return out
