"""Turn texts: the user's fact turns, the assistant's neutral acknowledgements, and chit-chat filler.

The assistant never restates a value (it says "Noted!", not "nice red mug"), so the gold evidence of a
fact is exactly the user turn that states or shows it, and visual-only details stay visual-only.
Filler pads each history to its token target without naming any entity, colour or pool word.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ...models.tokens import ApproxTokenCounter
from .vocab import FILLER, TEMPLATES
from .world import Entity, Event, World

_COUNTER = ApproxTokenCounter()


def count_tokens(text: str) -> int:
    return _COUNTER.count(text)


def ref(world: World, entity: Entity) -> str:
    """How the user and the questions name an entity; look-alike twins are told apart by their room."""
    if entity.type == "object":
        if entity.twin_group is not None:
            return f"the {entity.kind} in the {entity.initial['room']}"
        return f"my {entity.kind}"
    if entity.type == "room":
        return f"my {entity.name}"
    if entity.type == "vehicle":
        return f"my {entity.kind}"
    return entity.name


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] if text else text


def user_text(world: World, event: Event, rng: random.Random) -> str:
    """The user's words for one event, from the split's templates."""
    ent = world.entities[event.entity]
    state = world.state_at(event.entity, world.events.index(event))
    values = {"ref": ref(world, ent), "kind": ent.kind, "room": state.get("room", ent.name),
              "colour": state.get("colour", ""), "brand": state.get("brand", ""), "vehicle": ent.kind,
              "name": ent.name, "pet": ent.name, "species": ent.kind, "street": ent.static.get("street", ""),
              "shop": state.get("name", ""), "old": event.extra.get("old", "")}
    if ent.type == "room":
        values["room"] = ent.name
    if event.kind == "pet_owner":
        person = world.entities[event.extra["person"]]
        values.update(name=person.name, relation=person.static["relation"])
    elif ent.type == "person":
        values.update(relation=ent.static["relation"], job=ent.static["job"])
    template = rng.choice(TEMPLATES[world.split][event.kind])
    return _sentence(template.format(**values))


def ack(split: str, rng: random.Random) -> str:
    return rng.choice(TEMPLATES[split]["ack"])


def filler_pair(split: str, rng: random.Random) -> tuple[str, str]:
    """A chit-chat exchange (user, assistant) that mentions nothing from the world."""
    f = FILLER[split]
    user = f"{rng.choice(f['open'])} {rng.choice(f['when'])} {rng.choice(f['topic'])}, {rng.choice(f['tail'])}"
    return user, f"{rng.choice(f['reply'])} {rng.choice(f['reply_tail'])}"


@dataclass
class Pair:
    """A user turn and the assistant's reply; ``event`` is set for fact turns."""

    user: str
    assistant: str
    event: Event | None = None
    tokens: int = 0


def assemble(world: World, rng: random.Random, n_sessions: int, target_tokens: int) -> list[list[Pair]]:
    """Sessions of (user, assistant) pairs: one fact pair per scheduled event, then filler pairs placed at
    random until the text reaches ``target_tokens`` (it overshoots by less than one pair)."""
    sessions: list[list[Pair]] = [[] for _ in range(n_sessions)]
    total = 0
    for event in world.events:
        u, a = user_text(world, event, rng), ack(world.split, rng)
        pair = Pair(u, a, event, count_tokens(u) + count_tokens(a))
        sessions[event.session].append(pair)
        total += pair.tokens
    total += _add_mentions(world, sessions, rng)
    for s in sessions:  # every session holds at least one exchange
        if not s:
            total += _add_filler(s, world.split, rng)
    while total < target_tokens:
        total += _add_filler(sessions[rng.randrange(n_sessions)], world.split, rng)
    for s in sessions:
        for j, pair in enumerate(s):
            if pair.event is not None:
                pair.event.turn = 2 * j  # the user turn of the pair
    return sessions


def _add_filler(session: list[Pair], split: str, rng: random.Random) -> int:
    u, a = filler_pair(split, rng)
    pair = Pair(u, a, None, count_tokens(u) + count_tokens(a))
    session.insert(rng.randint(0, len(session)), pair)
    return pair.tokens


def _add_mentions(world: World, sessions: list[list[Pair]], rng: random.Random) -> int:
    """Passing mentions of known entities that carry no fact ("I used my kettle again today"): they make
    an entity's name a weak cue, so retrieval must find the turn that holds the answer, not any turn
    naming the entity. Only entities already introduced and not sold are mentioned."""
    templates = TEMPLATES[world.split]
    first: dict[str, int] = {}
    gone: dict[str, int] = {}
    for e in world.events:
        first.setdefault(e.entity, e.session)
        if e.kind == "obj_sell":
            gone[e.entity] = e.session
    key = {"object": "mention_object", "vehicle": "mention_object", "pet": "mention_pet", "person": "mention_person"}
    candidates = [eid for eid in first if world.entities[eid].type in key]
    added = 0
    for _ in range(len(world.events) // 2):
        eid = rng.choice(candidates)
        ent = world.entities[eid]
        lo, hi = first[eid] + 1, gone.get(eid, len(sessions)) - 1
        if lo > hi:
            continue
        text = _sentence(rng.choice(templates[key[ent.type]]).format(ref=ref(world, ent), pet=ent.name, name=ent.name))
        reply = ack(world.split, rng)
        session = sessions[rng.randint(lo, hi)]
        pair = Pair(text, reply, None, count_tokens(text) + count_tokens(reply))
        session.insert(rng.randint(0, len(session)), pair)
        added += pair.tokens
    return added
