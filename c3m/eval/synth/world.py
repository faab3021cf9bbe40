"""The hidden world of one synthetic history: entities, their attribute timelines, and the events that
reveal them.

A history is planned here before any text or pixel exists, so every later artefact (dialogue, images,
questions, gold evidence, relation labels) is derived from one source of truth and can be checked
against it. Each event reveals one entity in one user turn; events get distinct sessions (so "before
<date>" questions always have a clean boundary) and are ordered by a random ``slot`` in [0, 1].

The plan deliberately contains the hard cases of C3M §1 / MemLens: look-alike twins in different rooms,
entities updated several times (repainted, moved, replaced, sold, renamed), details visible only in the
picture (accessories, plates, neighbouring signs, collars), and updates whose new value is shown but
not said.

The ``photo`` preset plans every mutable entity (three rooms less one, the vehicle, a shop, half the
single objects) with 2-4 changes, each said in words or shown only in a photo (about half each), so "what
is X now?" has older values competing and the newest is often only in a picture (``PHOTO_UPDATES``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .vocab import POOLS, RELATIONS, ROOMS, SHAPES, SIDES, SPECIES, VEHICLES

#: Event kinds whose new value is only in the picture; in the ``photo`` preset their text is a short generic
#: caption that names the entity and nothing else (``photo_vocab.PHOTO_TEMPLATES["photo_state"]``).
PHOTO_UPDATES = ("obj_repaint_image", "room_repaint_image", "vehicle_repaint_image", "shop_rename")

#: Attributes that change over time, per entity type (everything else of an entity is static).
MUTABLE = {"object": ("colour", "room", "brand", "status"), "room": ("colour",), "vehicle": ("colour",),
           "shop": ("name",), "pet": (), "person": ()}


@dataclass
class Entity:
    id: str
    type: str                 # object | room | person | pet | vehicle | shop
    kind: str                 # object kind, species, vehicle kind, "room", "person", "shop"
    name: str                 # person/pet name, room name, street of a shop, else the kind
    static: dict[str, Any]    # never changes (shape, material, accessory, plate, relation, job, ...)
    initial: dict[str, Any]   # first value of each mutable attribute
    twin_group: int | None = None  # look-alike objects share a group (hard distractors)


@dataclass
class Event:
    kind: str                           # see dialogue.USER_TEMPLATES keys
    entity: str
    changes: dict[str, Any]             # new values of mutable attributes (intro: the initial values)
    text_attrs: tuple[str, ...]         # attributes whose value the user's text states
    image: bool
    slot: float
    extra: dict[str, Any] = field(default_factory=dict)
    session: int = -1                   # filled by schedule()
    turn: int = -1                      # filled by the dialogue assembly


@dataclass
class World:
    split: str
    entities: dict[str, Entity]
    events: list[Event]                 # chronological after schedule()

    def timeline(self, entity: str, attr: str) -> list[tuple[Any, Event]]:
        """(value, event) for every change of ``attr`` in event order, the introduction first."""
        return [(e.changes[attr], e) for e in self.events if e.entity == entity and attr in e.changes]

    def state_at(self, entity: str, upto: int) -> dict[str, Any]:
        """Static plus mutable attributes after the first ``upto + 1`` events."""
        ent = self.entities[entity]
        state = {**ent.static, **ent.initial}
        for e in self.events[: upto + 1]:
            if e.entity == entity:
                state.update(e.changes)
        return state

    def observations(self, entity: str) -> list[Event]:
        return [e for e in self.events if e.entity == entity]

    def revealing(self, entity: str, attr: str) -> list[Event]:
        """The events whose turn states or shows ``attr`` of ``entity`` (text or picture)."""
        return [e for e in self.observations(entity)
                if attr in e.text_attrs or attr in visible_attrs(e, self.entities[entity])]


def visible_attrs(event: Event, entity: Entity) -> tuple[str, ...]:
    """What the picture of ``event`` shows about its entity (the renderer draws exactly these)."""
    if not event.image:
        return ()
    if entity.type == "object":
        base = ("colour", "shape", "material", "brand")
        return base + ("accessory",) if event.kind in ("obj_intro", "obj_intro_colour", "obj_twin") else base
    if entity.type == "vehicle":  # the plate is only legible in the first, rear-view photo
        return ("colour", "brand", "plate") if event.kind == "vehicle_intro" else ("colour", "brand")
    return {"room": ("colour",), "pet": ("colour", "collar"),
            "shop": ("name", "sign_colour", "neighbour", "position")}.get(entity.type, ())


class _Builder:
    def __init__(self, rng: random.Random, split: str):
        self.rng, self.pool = rng, POOLS[split]
        self.split = split
        self.entities: dict[str, Entity] = {}
        self.events: list[Event] = []
        self.colours = list(self.pool.colours)

    def entity(self, type_: str, kind: str, name: str, static: dict, initial: dict, twin: int | None = None) -> Entity:
        ent = Entity(f"e{len(self.entities):02d}", type_, kind, name, static, initial, twin)
        self.entities[ent.id] = ent
        return ent

    def event(self, kind: str, ent: Entity, changes: dict, text_attrs=(), image=True, slot=0.0, **extra) -> Event:
        ev = Event(kind, ent.id, dict(changes), tuple(text_attrs), image, slot, extra)
        self.events.append(ev)
        return ev

    def other_colour(self, current: str) -> str:
        return self.rng.choice([c for c in self.colours if c != current])

    def later_slots(self, after: float, n: int) -> list[float]:
        return sorted(self.rng.uniform(after + 0.01, 1.0) for _ in range(n))


def build_world(rng: random.Random, split: str, *, n_images: int, per_category: int, preset: str = "easy") -> World:
    """Plan one history's world with about ``n_images`` pictured events and enough material for
    ``per_category`` questions of every category. ``hard`` adds more updates and re-shots per object and
    one changed look-alike (so "latest" competes with older states and twins can be confused); ``photo``
    does too, and gives every changing entity 2-4 changes, about half of them shown only in a photo."""
    b, r = _Builder(rng, split), rng
    photo = preset == "photo"
    rooms = r.sample(ROOMS, 4)
    room_ents = [b.entity("room", "room", name, {}, {"colour": r.choice(b.colours)}) for name in rooms]
    fixed = _rooms(b, room_ents, photo) + _people_and_pets(b, per_category) + _vehicle(b, photo) + _shops(b, photo)
    _objects(b, rooms, max(8, n_images - fixed), hard=preset in ("hard", "photo"), photo=photo)
    return World(split, b.entities, b.events)


def _rooms(b: _Builder, rooms: list[Entity], photo: bool = False) -> int:
    """Three rooms are shown; one is repainted twice and one once (KU / TR material); ``photo``: 2-4 and
    2-3 times."""
    r = b.rng
    shown = rooms[:3]
    images = 0
    for i, room in enumerate(shown):
        slot = r.uniform(0.0, 0.35)
        b.event("room_intro", room, dict(room.initial), (), True, slot)
        colour, n_updates = room.initial["colour"], (2, 1, 0)[i]
        if photo and i < 2:
            n_updates = r.randint(2, 4 - i)
        for s in b.later_slots(slot, n_updates):
            colour = b.other_colour(colour)
            said = r.random() < 0.5
            b.event("room_repaint" if said else "room_repaint_image", room, {"colour": colour},
                    ("colour",) if said else (), True, s)
        images += 1 + n_updates
    return images


def _people_and_pets(b: _Builder, per_category: int) -> int:
    """Pet owners (text) and pet photos (image only) in separate sessions: the MSR join material; plus
    people whose job is said once (text-only IE)."""
    r, pool = b.rng, b.pool
    names = r.sample(pool.people, per_category + 2)
    pet_names = r.sample(pool.pets, per_category)
    species = r.sample(SPECIES, per_category)
    for i in range(per_category):
        person = b.entity("person", "person", names[i], {"relation": r.choice(RELATIONS)}, {})
        fur, collar = r.sample(b.colours, 2)
        pet = b.entity("pet", species[i], pet_names[i],
                       {"colour": fur, "collar": collar, "owner": person.id}, {})
        slot = r.uniform(0.0, 0.6)
        b.event("pet_owner", pet, {}, ("owner",), False, slot, person=person.id)
        b.event("pet_photo", pet, {}, (), True, b.later_slots(slot, 1)[0])
    for name in names[per_category:]:
        person = b.entity("person", "person", name,
                          {"relation": r.choice(RELATIONS), "job": r.choice(pool.jobs)}, {})
        b.event("person_intro", person, {}, ("job",), False, r.uniform(0.0, 1.0))
    return per_category


def _vehicle(b: _Builder, photo: bool = False) -> int:
    """One vehicle, resprayed twice (once said, once only shown); its plate is visible only. ``photo``:
    resprayed 2-4 times, each said or only shown at random."""
    r, pool = b.rng, b.pool
    letters = "ABCDEFGHJKLMNPRSTUVWXYZ"
    plate = f"{r.choice(letters)}{r.choice(letters)} {r.randint(1000, 9999)}"
    v = b.entity("vehicle", r.choice(VEHICLES), "", {"brand": r.choice(pool.brands), "plate": plate},
                 {"colour": r.choice(b.colours)})
    v.name = v.kind
    slot = r.uniform(0.0, 0.4)
    b.event("vehicle_intro", v, dict(v.initial), (), True, slot)
    colour = v.initial["colour"]
    if photo:
        n = r.randint(2, 4)
        for s in b.later_slots(slot, n):
            colour = b.other_colour(colour)
            said = r.random() < 0.5
            b.event("vehicle_repaint_text" if said else "vehicle_repaint_image", v, {"colour": colour},
                    ("colour",) if said else (), True, s)
        return 1 + n
    said_at = r.randrange(2)
    for i, s in enumerate(b.later_slots(slot, 2)):
        colour = b.other_colour(colour)
        said = i == said_at
        b.event("vehicle_repaint_text" if said else "vehicle_repaint_image", v, {"colour": colour},
                ("colour",) if said else (), True, s)
    return 3


def _shops(b: _Builder, photo: bool = False) -> int:
    """Two shops on two streets: one never changes (its neighbouring sign is a visual-only IE detail),
    one is renamed twice (the new names are shown on the sign, not said). ``photo``: 2-4 renames, each
    said (``shop_rename_text``) or only shown at random."""
    r, pool = b.rng, b.pool
    names = r.sample(pool.shops, 6)
    streets = r.sample(pool.streets, 2)
    images = 0
    for i in range(2):
        shop = b.entity("shop", "shop", streets[i],
                        {"street": streets[i], "neighbour": names[2 + i], "position": r.choice(("above", "below")),
                         "sign_colour": r.choice(b.colours)}, {"name": names[i]})
        slot = r.uniform(0.0, 0.4)
        b.event("shop_intro", shop, dict(shop.initial), ("name",), True, slot)
        old = names[i]
        n = 2 * i if not photo else i * r.randint(2, 4)
        fresh = names[4:] if not photo else names[4:] + [x for x in b.pool.shops if x not in names]
        for k, s in enumerate(b.later_slots(slot, n)):
            new = fresh[k]
            said = photo and r.random() < 0.5
            b.event("shop_rename_text" if said else "shop_rename", shop, {"name": new}, ("name",) if said else (),
                    True, s, old=old)
            old = new
        images += 1 + n
    return images


def _objects(b: _Builder, rooms: list[str], budget: int, hard: bool = False, photo: bool = False) -> None:
    """Objects fill the rest of the image budget: intros (one twin group), then updates and re-shots.
    ``hard``: the whole remaining budget goes to updates, half as many again to re-shots, and one
    look-alike (never the original) is moved or repainted, which the AR twin questions ask about.
    ``photo`` (with ``hard``): each changing object gets 2-4 updates instead (``_photo_updates``)."""
    r, pool = b.rng, b.pool
    max_kinds = len(pool.kinds) - 3  # keep unused kinds for answer-refusal questions
    n_kinds = max(4, min(max_kinds, budget // 2 - 1))
    kinds = r.sample(pool.kinds, n_kinds)
    accessories = list(pool.accessories)
    objects: list[Entity] = []

    def make(kind: str, room: str, twin: int | None, like: Entity | None = None, nth: int = 0) -> Entity:
        item, glyph = r.choice(accessories)
        acc = {"item": item, "glyph": glyph, "count": r.randint(2, 4), "side": r.choice(SIDES)}
        if like is not None:  # a near-duplicate: same look, another room, another accessory count
            static = {**like.static, "accessory": {**like.static["accessory"]}}
            static["accessory"]["count"] = 2 + (like.static["accessory"]["count"] - 2 + nth) % 3
            return b.entity("object", kind, kind, static,
                            {"colour": like.initial["colour"], "room": room, "brand": like.initial["brand"],
                             "status": "owned"}, twin)
        static = {"shape": r.choice(SHAPES), "material": r.choice(pool.materials), "accessory": acc}
        return b.entity("object", kind, kind, static,
                        {"colour": r.choice(b.colours), "room": room, "brand": r.choice(pool.brands),
                         "status": "owned"}, twin)

    n_twins = 3 if budget >= 30 else 2
    twin_rooms = r.sample(rooms, n_twins)
    first = make(kinds[0], twin_rooms[0], 0)
    objects.append(first)
    for nth, room in enumerate(twin_rooms[1:], 1):
        objects.append(make(kinds[0], room, 0, like=first, nth=nth))
    for kind in kinds[1:]:
        objects.append(make(kind, r.choice(rooms), None))

    slots = [r.uniform(0.0, 0.6) for _ in objects]
    twins = sorted(slots[:n_twins])  # the original is introduced before its look-alikes ("another mug")
    slots[:n_twins] = twins
    intro_slot = {}
    for obj, s in zip(objects, slots):
        intro_slot[obj.id] = s
        said_colour = obj.twin_group is None and r.random() < 0.3
        b.event("obj_twin" if (obj.twin_group is not None and obj is not first) else
                ("obj_intro_colour" if said_colour else "obj_intro"), obj, dict(obj.initial),
                ("room", "colour") if said_colour else ("room",), True, s)

    left = max(0, budget - len(objects))
    singles = [o for o in objects if o.twin_group is None]
    r.shuffle(singles)
    # Half the singles stay observed once (clean IE targets); the rest change, some several times.
    changing = singles[: max(2, len(singles) // 2)]
    n_updates = max(len(changing) + 2, left if hard else (left * 2) // 3)
    if photo:
        for obj in changing:
            _photo_updates(b, obj, rooms, intro_slot[obj.id], r.randint(2, 4))
    else:
        plan = {o.id: 1 for o in changing}
        for _ in range(n_updates - len(changing)):
            plan[r.choice(changing).id] += 1
        for obj in changing:
            _object_updates(b, obj, rooms, intro_slot[obj.id], plan[obj.id])
    # Re-shots of the same state ("same" relations) go to twins and changing objects only.
    reshoot = [o for o in objects if o.twin_group is not None] + changing
    if hard:
        twin = r.choice(objects[1:n_twins])
        slot = b.later_slots(intro_slot[twin.id], 1)[0]
        if r.random() < 0.5:
            room = r.choice([x for x in rooms if x != twin.initial["room"]])
            b.event("obj_move", twin, {"room": room}, ("room",), True, slot)
        else:
            b.event("obj_repaint_text", twin, {"colour": b.other_colour(twin.initial["colour"])}, ("colour",), True,
                    slot)
        if photo:  # every changed entity changes at least twice: a later repaint shown only in a photo
            b.event("obj_repaint_image", twin, {"colour": b.other_colour(b.events[-1].changes.get(
                "colour", twin.initial["colour"]))}, (), True, b.later_slots(slot, 1)[0])
    for _ in range(max(2, left // 2) if hard else max(1, left - n_updates)):
        obj = r.choice(reshoot)
        last = max(e.slot for e in b.events if e.entity == obj.id)
        if any(e.kind == "obj_sell" for e in b.events if e.entity == obj.id):
            continue
        high = max(last, 0.99)
        if photo:  # re-shots come before the newest change, so only its own turn shows the newest state
            changed = [e.slot for e in b.events if e.entity == obj.id and e.changes and e.slot > intro_slot[obj.id]]
            high = max(changed) - 0.001 if changed else high
        b.event("obj_same", obj, {}, (), True, r.uniform(intro_slot[obj.id] + 0.005, high))


def _object_updates(b: _Builder, obj: Entity, rooms: list[str], after: float, n: int) -> None:
    state = dict(obj.initial)
    slots = b.later_slots(after, n)
    for i, s in enumerate(slots):
        choice = b.rng.random()
        if i == n - 1 and n >= 2 and choice < 0.15:
            b.event("obj_sell", obj, {"status": "sold"}, ("status",), False, s)
        else:
            _object_change(b, obj, rooms, s, choice, (0.35, 0.65, 0.85), state)


def _photo_updates(b: _Builder, obj: Entity, rooms: list[str], after: float, n: int) -> None:
    """``photo``: ``n`` changes of one object, colour-heavy so the newest colour is about half the time only
    in a photo: 25% repaint said, 50% repaint only shown, 15% move (said: the room is not legible in the
    picture), 10% replaced by another brand; the last one is a sale 8% of the time."""
    state = dict(obj.initial)
    for i, s in enumerate(b.later_slots(after, n)):
        choice = b.rng.random()
        if i == n - 1 and b.rng.random() < 0.08:
            b.event("obj_sell", obj, {"status": "sold"}, ("status",), False, s)
        else:
            _object_change(b, obj, rooms, s, choice, (0.25, 0.75, 0.9), state)


def _object_change(b: _Builder, obj: Entity, rooms: list[str], slot: float, choice: float,
                   cuts: tuple[float, float, float], state: dict) -> None:
    """One change of ``obj`` picked by ``choice`` against the cumulative ``cuts`` (repaint said, repaint only
    shown, move; above the last: replaced by another brand); ``state`` carries colour/room/brand forward."""
    r = b.rng
    said, shown, moved = cuts
    if choice < said:
        state["colour"] = b.other_colour(state["colour"])
        b.event("obj_repaint_text", obj, {"colour": state["colour"]}, ("colour",), True, slot)
    elif choice < shown:
        state["colour"] = b.other_colour(state["colour"])
        b.event("obj_repaint_image", obj, {"colour": state["colour"]}, (), True, slot)
    elif choice < moved:
        state["room"] = r.choice([x for x in rooms if x != state["room"]])
        b.event("obj_move", obj, {"room": state["room"]}, ("room",), True, slot)
    else:
        state["brand"] = r.choice([x for x in b.pool.brands if x != state["brand"]])
        state["colour"] = b.other_colour(state["colour"])
        b.event("obj_replace", obj, {"brand": state["brand"], "colour": state["colour"]}, ("brand",), True, slot)


def schedule(world: World, rng: random.Random, n_sessions: int) -> None:
    """Order events by slot and give each its own session, spread over ``n_sessions`` sessions."""
    world.events.sort(key=lambda e: (e.slot, e.entity, e.kind))
    picks = sorted(rng.sample(range(n_sessions), len(world.events)))
    for event, session in zip(world.events, picks):
        event.session = session


def add_bursts(world: World, rng: random.Random, n_bursts: int, size: int = 9) -> list[int]:
    """``hard`` only: sessions with at least ``size`` pictures (more than the reader's 8-image budget), a
    burst of re-shared photos of unchanged objects. Called after ``schedule``; the re-shots change no
    attribute, so every timeline keeps one change per session. Returns the burst sessions."""
    n_sessions = max(e.session for e in world.events) + 1
    owned = [eid for eid, ent in world.entities.items() if ent.type == "object"]
    picked: list[int] = []
    for s in sorted(rng.sample(range(n_sessions // 2, n_sessions), min(n_bursts, n_sessions - n_sessions // 2))):
        sold = {e.entity for e in world.events if e.kind == "obj_sell" and e.session <= s}
        shown = {e.entity for e in world.events if e.session < s}
        candidates = [eid for eid in owned if eid in shown and eid not in sold]
        if not candidates:
            continue
        have = sum(e.image for e in world.events if e.session == s)
        at = max(i for i, e in enumerate(world.events) if e.session <= s) + 1
        for _ in range(max(0, size + rng.randrange(2) - have)):
            ent = world.entities[rng.choice(candidates)]
            ev = Event("obj_same", ent.id, {}, (), True, world.events[at - 1].slot, {"burst": True}, s)
            world.events.insert(at, ev)
            at += 1
        picked.append(s)
    return picked
