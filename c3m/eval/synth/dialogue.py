"""Turn texts: the user's fact turns, the assistant's neutral acknowledgements, and chit-chat filler.

The assistant never restates a value (it says "Noted!", not "nice red mug"), so the gold evidence of a
fact is exactly the user turn that states or shows it, and visual-only details stay visual-only.
Filler pads each history to its token target without naming any entity, colour or pool word.

The ``hard`` preset (``hard=True`` below) words facts from ``hard_vocab`` (several phrasings per kind),
pads with a multi-sentence filler grammar, and adds many statement-free mentions per entity (plain,
near-miss and look-alike pairs), so naming an entity is a weak cue and a change word is no proof of a change.

The ``photo`` preset (``photo=True``, with ``hard=True``) words changes shown only in a picture and re-shots
with one pool of short generic captions (``photo_vocab``: 25-60 characters, the entity and nothing else),
words other facts as ``hard`` does (wrapped in chat or, 20% of the time, alone), and instead of the hard
mentions repeats 8-11 small-talk lines per history word for word (``SMALL_TALK_SHARE`` of the length).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ...models.tokens import ApproxTokenCounter
from .hard_vocab import HARD_FILLER, HARD_TEMPLATES
from .photo_vocab import PHOTO_TEMPLATES
from .vocab import FILLER, TEMPLATES
from .world import PHOTO_UPDATES, Entity, Event, World

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


def templates(split: str, hard: bool, photo: bool = False) -> dict[str, tuple[str, ...]]:
    """The split's templates; ``hard`` overrides the fact, mention and AR phrasings, ``photo`` adds its own."""
    if photo:
        return {**TEMPLATES[split], **HARD_TEMPLATES[split], **PHOTO_TEMPLATES[split]}
    return {**TEMPLATES[split], **HARD_TEMPLATES[split]} if hard else TEMPLATES[split]


#: ``photo``: event kinds captioned with a short generic photo line (changes shown only in the picture, and
#: re-shots of an unchanged entity, so the words never tell the two apart)
PHOTO_CAPTIONED = (*PHOTO_UPDATES, "obj_same")
#: ``photo``: share of the other fact turns said alone, without chat around them (short stated updates)
PHOTO_BARE_FACTS = 0.2


def user_text(world: World, event: Event, rng: random.Random, hard: bool = False, photo: bool = False) -> str:
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
    if photo and event.kind in PHOTO_CAPTIONED:
        key = "photo_shop" if ent.type == "shop" else "photo_state"
        return _sentence(rng.choice(PHOTO_TEMPLATES[world.split][key]).format(**values))
    template = rng.choice(templates(world.split, hard, photo)[event.kind])
    text = _sentence(template.format(**values))
    if photo and rng.random() < PHOTO_BARE_FACTS:
        return text
    if photo:  # said changes mostly come in long chatty turns, as the evidence of real dialogs does
        return " ".join([text, *_extra_sentences(HARD_FILLER[world.split], rng, rng.randint(2, 3))])
    if hard:  # facts come wrapped in chat, as in real conversations (and not as the shortest turns)
        text = " ".join([text, *_extra_sentences(HARD_FILLER[world.split], rng, rng.randint(1, 2))])
    return text


def ack(split: str, rng: random.Random) -> str:
    return rng.choice(TEMPLATES[split]["ack"])


def filler_pair(split: str, rng: random.Random) -> tuple[str, str]:
    """A chit-chat exchange (user, assistant) that mentions nothing from the world."""
    f = FILLER[split]
    user = f"{rng.choice(f['open'])} {rng.choice(f['when'])} {rng.choice(f['topic'])}, {rng.choice(f['tail'])}"
    return user, f"{rng.choice(f['reply'])} {rng.choice(f['reply_tail'])}"


def hard_filler_pair(split: str, rng: random.Random) -> tuple[str, str]:
    """A 2-4 sentence chit-chat exchange from the split's phrase grammar (hard preset)."""
    f = HARD_FILLER[split]
    user = [f"{rng.choice(f['open'])} {rng.choice(f['when'])} {rng.choice(f['did'])}."]
    user += _extra_sentences(f, rng, rng.randint(1, 3))
    return " ".join(user), f"{rng.choice(f['reply'])} {rng.choice(f['reply_tail'])}"


def _extra_sentences(f: dict, rng: random.Random, n: int) -> list[str]:
    return [rng.choice(f[slot]) + "." for slot in rng.sample(("detail", "feel", "plan"), n)]


@dataclass
class Pair:
    """A user turn and the assistant's reply; ``event`` is set for fact turns, ``mention`` (kind, entity
    ids) for hard-preset mention turns and photo-preset small talk that state nothing."""

    user: str
    assistant: str
    event: Event | None = None
    tokens: int = 0
    mention: tuple[str, tuple[str, ...]] | None = None
    turn: int = -1


def assemble(world: World, rng: random.Random, n_sessions: int, target_tokens: int,
             hard: bool = False, photo: bool = False) -> list[list[Pair]]:
    """Sessions of (user, assistant) pairs: one fact pair per scheduled event, then filler pairs placed at
    random until the text reaches ``target_tokens`` (it overshoots by less than one pair)."""
    sessions: list[list[Pair]] = [[] for _ in range(n_sessions)]
    total = 0
    for event in world.events:
        u, a = user_text(world, event, rng, hard, photo), ack(world.split, rng)
        pair = Pair(u, a, event, count_tokens(u) + count_tokens(a))
        sessions[event.session].append(pair)
        total += pair.tokens
    if photo:
        total += _add_small_talk(world, sessions, rng, target_tokens)
    elif hard:
        total += _add_hard_mentions(world, sessions, rng, target_tokens)
    else:
        total += _add_mentions(world, sessions, rng)
    for s in sessions:  # every session holds at least one exchange
        if not s:
            total += _add_filler(s, world.split, rng, hard)
    while total < target_tokens:
        total += _add_filler(sessions[rng.randrange(n_sessions)], world.split, rng, hard)
    for s in sessions:
        for j, pair in enumerate(s):
            pair.turn = 2 * j  # the user turn of the pair
            if pair.event is not None:
                pair.event.turn = 2 * j
    return sessions


def _add_filler(session: list[Pair], split: str, rng: random.Random, hard: bool = False) -> int:
    u, a = (hard_filler_pair if hard else filler_pair)(split, rng)
    pair = Pair(u, a, None, count_tokens(u) + count_tokens(a))
    session.insert(rng.randint(0, len(session)), pair)
    return pair.tokens


def _lifetimes(world: World) -> tuple[dict[str, int], dict[str, int]]:
    """(entity -> session of its first event, entity -> session it was sold in): when it may be mentioned."""
    first: dict[str, int] = {}
    gone: dict[str, int] = {}
    for e in world.events:
        first.setdefault(e.entity, e.session)
        if e.kind == "obj_sell":
            gone[e.entity] = e.session
    return first, gone


def _add_mentions(world: World, sessions: list[list[Pair]], rng: random.Random) -> int:
    """Passing mentions of known entities that carry no fact ("I used my kettle again today"): they make
    an entity's name a weak cue, so retrieval must find the turn that holds the answer, not any turn
    naming the entity. Only entities already introduced and not sold are mentioned."""
    templates = TEMPLATES[world.split]
    first, gone = _lifetimes(world)
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


#: Share of a hard history's text tokens spent on mentions, and the most mentions per entity.
MENTION_SHARE, MAX_MENTIONS = 0.4, 16


def _add_hard_mentions(world: World, sessions: list[list[Pair]], rng: random.Random, target_tokens: int) -> int:
    """Hard preset: statement-free mentions of every object, room, vehicle, pet, person and shop, after
    its introduction and before any sale; as many per entity as ``MENTION_SHARE`` of the length allows
    (about 35 tokens each, at most ``MAX_MENTIONS``), so they scale with history length. About 30% of object/vehicle mentions (all room ones) are
    near misses (change words, no change), 35% of object mentions talk about an attribute without its
    value; look-alikes are also named side by side. Each mention sentence is padded
    with one or two filler sentences so mention turns read like the rest of the chat."""
    t, f = templates(world.split, True), HARD_FILLER[world.split]
    first, gone = _lifetimes(world)
    plain = {"object": "mention_object", "vehicle": "mention_object", "pet": "mention_pet",
             "person": "mention_person", "shop": "mention_shop"}
    near = {"object": "near_miss_object", "vehicle": "near_miss_paint", "room": "near_miss_paint"}
    added = 0

    def put(kind: str, text: str, ids: tuple[str, ...], lo: int, hi: int) -> None:
        nonlocal added
        if lo > hi:
            return
        text = " ".join([_sentence(text), *_extra_sentences(f, rng, rng.randint(0, 2))])
        reply = ack(world.split, rng)
        pair = Pair(text, reply, None, count_tokens(text) + count_tokens(reply), (kind, ids))
        session = sessions[rng.randint(lo, hi)]
        session.insert(rng.randint(0, len(session)), pair)
        added += pair.tokens

    named = [eid for eid in sorted(first) if world.entities[eid].type in plain or world.entities[eid].type in near]
    per_entity = max(1, min(MAX_MENTIONS, round(MENTION_SHARE * target_tokens / 35 / max(1, len(named)))))
    for eid in named:
        ent = world.entities[eid]
        lo, hi = first[eid] + 1, gone.get(eid, len(sessions)) - 1
        for _ in range(per_entity):
            roll = rng.random() if ent.type in plain else 0.0
            if ent.type in near and roll < 0.3:
                kind, key = "near_miss", near[ent.type]
            elif ent.type == "object" and roll < 0.65:
                kind, key = "attr", "mention_attr"
            else:
                kind, key = "mention", plain[ent.type]
            put(kind, rng.choice(t[key]).format(ref=ref(world, ent), pet=ent.name, name=ent.name,
                                                street=ent.static.get("street", "")), (eid,), lo, hi)
    groups: dict[int, list[str]] = {}
    for eid, ent in world.entities.items():
        if ent.twin_group is not None and eid in first:
            groups.setdefault(ent.twin_group, []).append(eid)
    for members in groups.values():
        for _ in range(per_entity):
            a, b = rng.sample(members, 2)
            put("twins", rng.choice(t["mention_twins"]).format(ref_a=ref(world, world.entities[a]),
                                                               ref_b=ref(world, world.entities[b])),
                (a, b), max(first[a], first[b]) + 1, len(sessions) - 1)
    return added


#: ``photo``: share of a history's text tokens spent on repeated small talk, and how many distinct lines
SMALL_TALK_SHARE, SMALL_TALK_LINES = 0.35, (8, 11)


def _add_small_talk(world: World, sessions: list[list[Pair]], rng: random.Random, target_tokens: int) -> int:
    """``photo``: 8-11 small-talk lines of two to four sentences, each naming two or three objects (or the
    vehicle) and stating nothing about them, every line repeated word for word (with the same reply) until
    ``SMALL_TALK_SHARE`` of the length is spent, each copy in a random session after the named entities' first
    events and before any sale. The entities named are those that change at least twice (others only when
    fewer than four do), so a subject of "what is X now?" is named in several distinct lines, each repeated
    many times, as in long real histories. Each copy is a ``Pair`` with ``mention = ("small_talk", entities)``,
    so the hidden world record can list it."""
    t = PHOTO_TEMPLATES[world.split]["small_talk"]
    first, gone = _lifetimes(world)
    changes: dict[str, int] = {}
    for e in world.events:
        if e.changes and e.kind not in ("room_intro", "vehicle_intro", "shop_intro", "obj_intro", "obj_intro_colour",
                                        "obj_twin"):
            changes[e.entity] = changes.get(e.entity, 0) + 1
    talkable = [eid for eid in sorted(first) if world.entities[eid].type in ("object", "vehicle")
                and gone.get(eid, len(sessions)) - 1 >= first[eid] + 1]
    changing = [eid for eid in talkable if changes.get(eid, 0) >= 2]
    rest = [eid for eid in talkable if eid not in changing]
    rng.shuffle(changing)
    rng.shuffle(rest)
    focus = changing if len(changing) >= 4 else changing + rest
    if not focus:
        return 0
    also = PHOTO_TEMPLATES[world.split]["small_talk_also"]
    n_lines = rng.randint(*SMALL_TALK_LINES)
    lines = []
    for i, template in enumerate(rng.sample(t, n_lines)):
        eid = focus[i % len(focus)]
        # one or two more entities of the focus set, alive over a common span, named in the same line
        named = [eid]
        for other in rng.sample([x for x in focus if x != eid], min(len(focus) - 1, rng.randint(1, 2))):
            span = [*named, other]
            if max(first[x] for x in span) + 1 <= min(gone.get(x, len(sessions)) for x in span) - 1:
                named.append(other)
        # a chatty line of two to four sentences, fixed once: every copy repeats it word for word
        text = " ".join([_sentence(template.format(ref=ref(world, world.entities[eid]))),
                         *(_sentence(a.format(ref=ref(world, world.entities[x])))
                           for x, a in zip(named[1:], rng.sample(also, len(named) - 1))),
                         *_extra_sentences(HARD_FILLER[world.split], rng, rng.randint(0, 1))])
        reply = ack(world.split, rng)
        lo = max(first[x] for x in named) + 1
        hi = min(gone.get(x, len(sessions)) for x in named) - 1
        lines.append((tuple(named), lo, hi, text, reply, count_tokens(text) + count_tokens(reply)))
    budget = SMALL_TALK_SHARE * target_tokens
    added = 0
    while added < budget:
        named, lo, hi, text, reply, tokens = lines[rng.randrange(len(lines))]
        session = sessions[rng.randint(lo, hi)]
        session.insert(rng.randint(0, len(session)), Pair(text, reply, None, tokens, ("small_talk", named)))
        added += tokens
    return added
