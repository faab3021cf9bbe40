"""Update chains and current/superseded marks over a context: the answer path's sense of time (``timeline-v2``).

Retrieval ranks by relevance, so "I painted my bike red" and "I repainted my bike blue" arrive side by side and an
answerer may answer *now* with the old state. This module says which items are the latest state of the thing the
question asks about, which were superseded, and when. One definition (``subject_chain``) for every source:

- a chain is about **one subject** — the question's (``c3m.language.question.analyse``: "my bike" -> ``bike``),
  followed through its names ("my cat" = Biscuit = Nebula after "I renamed Biscuit to Nebula": every name the
  context states for the subject becomes one of its names) and a pronoun that starts the next clause — and **one
  attribute**: the one the question asks (colour, material, shape, size, pattern, name, count, place, job); a
  question that asks none ("Tell me about my bike") gets no chain;
- a step's values are those ``c3m.language.attributes.values`` finds stated **about the subject** (adjectives of other
  entities never become states); only the user's own things get a chain (``owned``); a value different from the latest one opens a step, a restated one joins it;
- a step's time is its turn's session time, or a date the text names ("last Tuesday", "on 3 May") resolved
  against it (``c3m.language.when``);
- **a photo is a turn like any other** (#43): where its words state no value of the attribute ("another shot of
  the bike"), its caption from the write-time perception backend (a CAPTION item, which ``read.answer_view`` puts
  in the context before the chains are built) states it — only when the caption names the subject and states a
  value of that attribute, the turn's words (when shown) are about the subject and do not say it is unchanged,
  and no turn of the context shows the backend naming the attribute otherwise than the user's words
  (``perception_disagrees``). Then a value that differs from the latest step opens a step, and the older turns
  are superseded; the same value joins the step. Where the words state a value they win over the caption;
  without perception there is no caption and nothing changes;
- **index chains** (c3m's RAMU Update versions, ``C3M.update_chains``) are held to the same definition: an index
  chain lends its ``source`` and ``entry_id`` only when it records the question's chain as it is, step for step
  (``agrees``: a photo step RAMU merged into the old state does not); an index chain about another subject, or one
  the definition cannot read, is dropped — no chain is better than a wrong one.

Measured (``benchmarks/answer_calibration.py score``, synthetic dev): 0 mark errors on KU (no gold turn of a
"current" question marked superseded) and no chain step naming a turn that does not name its subject; see
``benchmarks/results/answerer-calibration-cpu.md``.

A chain names only turns that are in the context, so it adds order, not content the reader budget did not pay
for. Marks select nothing and charge nothing; the harness's measurement is unchanged.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable, Iterable, Sequence

from ..types import ChainStep, Context, ContextItem, EvidenceForm, UpdateChain
from .attributes import LEXICON, RELATIVE_PLACE, about_clauses, clauses, hypothetical, mentions, values
from .question import Query, analyse

#: (entity keys, state values) of each text: ``write.units.DescriptionMemo.describe`` (accepted for the callers
#: that pass it; the chain definition reads the text itself)
Describe = Callable[[Sequence[str]], Sequence[tuple]]
_CAPTION_MARK = re.compile(r"\[image: |\]")
_CHANGE = re.compile(r"\b(re\w+ed|changed|now|switched|swapped|moved|became|new|no longer|anymore|from \w+ to|"
                     r"instead|these days|renamed|turned)\b", re.I)


_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY = re.compile(r"\b(?:(last|this past)\s+|on\s+)(monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
                      r"weekend)\b", re.I)


def _turn(item: ContextItem) -> str:
    return f"{item.provenance.session_id}#{item.provenance.turn_index}"


def item_text(item: ContextItem) -> str:
    """What an item says in words (a caption without its ``[image: ...]`` marks); "" for a crop marker."""
    if item.form == EvidenceForm.GROUNDED_CROP:
        return ""
    return _CAPTION_MARK.sub("", item.text) if item.form == EvidenceForm.CAPTION else item.text


def event_time(item: ContextItem, text: str | None = None) -> datetime:
    """The time a turn's event happened: a day the text names ("yesterday", "on 3 May", "last Saturday"),
    resolved against the session time, else the session time."""
    from .when import question_windows

    t = item.provenance.time
    text = text if text is not None else item_text(item)
    for w in question_windows(text, t):
        if w.start is not None and w.end is not None and (w.end - w.start).days <= 1 and w.start <= t:
            return w.start
    m = _WEEKDAY.search(text)
    if m:  # "last Saturday", "on Tuesday", "last weekend": the latest such day before the session
        day = 5 if m.group(2).lower() == "weekend" else _DAYS.index(m.group(2).lower())
        back = (t.weekday() - day) % 7 or (7 if m.group(1) else 0)
        return (t - timedelta(days=back)).replace(hour=0, minute=0, second=0, microsecond=0)
    return t


@dataclass
class Found:
    """One turn's values for the chain: what it states, and when. ``photo``: the values are its photo's caption's
    only (its words state none: "another shot of the bike" under "[image: a blue bike]")."""

    item: ContextItem
    values: tuple[str, ...]
    time: datetime
    photo: bool = False


def subject_names(q: Query, items: Sequence[ContextItem]) -> tuple[str, ...]:
    """The subject's names the context states ("my cat Biscuit", "renamed Biscuit to Nebula"), oldest first."""
    if not q.subject or q.subject == "i":
        return ()
    names: list[str] = [n for n in q.names if n.lower() not in (q.subject, q.owner)]
    for _ in range(2):  # a rename names the new name through the old one
        for item in sorted(items, key=_order):
            for v in values(item_text(item), q.subject, "name", tuple(names), q.owner, q.qualifier):
                if v not in names and v.lower() != q.subject:
                    names.append(v)
    return tuple(names)


def _order(item: ContextItem):
    return (item.provenance.time, item.provenance.session_id, item.provenance.turn_index)


#: a photo turn whose words say the thing did not change: its caption restates, it never opens a step
_UNCHANGED = re.compile(r"\b(unchanged|still|same as|the same|no change|no difference|not changed|hasn't changed|"
                        r"has not changed|as it was|as before|as ever|as always|nothing new|nothing to report)\b", re.I)


def _stated(q: Query, subject: str, aliases: tuple[str, ...], text: str) -> list[str]:
    """The values of the asked attribute ``text`` states about the subject."""
    vals = values(text, subject, q.attribute, aliases, q.owner, q.qualifier)
    if q.attribute == "name":
        vals = [v for v in vals if v.lower() not in {n.lower() for n in q.names}] or vals
    if q.attribute == "place" and q.change:  # "where did I move it to?": a room, not where it sat in a photo
        vals = [v for v in vals if not RELATIVE_PLACE.match(v)]
    return vals


def caption_phrase(caption: str, attribute: str | None) -> str:
    """A caption as the chain reads it: a perception backend stacks a thing's attributes in one noun phrase ("a
    pink triangular leather blender"), where a value is read only next to its noun, so the words of the *other*
    attributes (shape, material, size, pattern for a colour) are taken out: "a pink blender"."""
    keep = LEXICON.get(attribute or "", frozenset())
    others = frozenset().union(*(w for a, w in LEXICON.items() if a != attribute)) - keep
    plain = re.sub(r"[A-Za-z]+", lambda m: "" if m.group().lower() in others else m.group(), caption)
    return re.sub(r"\s{2,}", " ", plain)


def perception_disagrees(attribute: str | None, items: Sequence[ContextItem]) -> bool:
    """Whether some user turn of the context states values of ``attribute`` in its words and its photo's caption
    states others, none the same ("I painted it olive" under "[image: a gold trunk]"): the perception backend does
    not name that attribute as this user does, so a caption's value is not compared with the user's words.
    Read over every subject (the backend's naming, not one thing's), by the attribute's lexicon."""
    lexicon = LEXICON.get(attribute or "")
    if lexicon is None:
        return False
    words: dict[str, set[str]] = {}
    seen: dict[str, set[str]] = {}
    for i in items:
        if i.role != "user":
            continue
        got = {t for t in re.findall(r"[a-z]+", item_text(i).lower()) if t in lexicon}
        (seen if i.form == EvidenceForm.CAPTION else words).setdefault(i.node_id, set()).update(got)
    return any(words.get(n) and got and not (words[n] & got) for n, got in seen.items())


def found_values(q: Query, items: Sequence[ContextItem]) -> tuple[list[Found], tuple[str, ...]]:
    """Every turn that states the asked attribute of the asked subject, in time order, and the subject's names.

    A turn's words state its values; its photo's caption (a CAPTION item, ``read.answer_view.with_captions``) speaks
    for it only when its words state none of the attribute — the user's word wins over a perception backend's —
    and then only when the caption names the subject and states a value, the turn's words (when shown) are about
    the subject and do not say it is unchanged, and the context shows no turn whose words and caption disagree on
    the attribute (``perception_disagrees``). Such a turn is ``Found.photo``."""
    subject = q.subject or (q.names[0].lower() if q.names else None)
    if subject is None or q.attribute is None:
        return [], ()
    aliases = subject_names(replace(q, subject=subject), items) if subject != "i" else ()
    by_turn: dict[str, list[ContextItem]] = {}
    for item in sorted(items, key=_order):
        by_turn.setdefault(item.node_id, []).append(item)
    trust = None  # perception_disagrees, computed once when a photo needs it
    out = []
    for node, its in by_turn.items():
        said = [(i, item_text(i)) for i in its if i.form != EvidenceForm.CAPTION and item_text(i)]
        stated = False
        for item, text in said:
            vals = _stated(q, subject, aliases, text)
            if vals:
                stated = True
                out.append(Found(item, tuple(vals), event_time(item, text)))
        if stated:
            continue
        for item in its:
            if item.form != EvidenceForm.CAPTION:
                continue
            vals = _stated(q, subject, aliases, caption_phrase(item_text(item), q.attribute))
            words = " ".join(t for _, t in said)
            # a caption whose turn's words are not in the context cannot tell "the fan in the study" from its twin
            if not vals or (not words and q.qualifier) or words and (_UNCHANGED.search(words) or hypothetical(words)
                                      or not about_clauses(words, subject, aliases, q.owner, q.qualifier)):
                continue
            if trust is None:
                trust = not perception_disagrees(q.attribute, items)
            if trust:
                out.append(Found(item, tuple(vals), event_time(item, words), photo=True))
            break
    return out, aliases


def owned(q: Query, subject: str | None, items: Sequence[ContextItem]) -> bool:
    """The asked thing is the user's own: "my X" in the question, a named person or thing, or "the X" where the
    user's own turns say "my X" or that they got one ("I bought a red mug"). Only then is a chain shown: over
    "the X" nobody owns, the states of several X's (a shop's sweaters) interleave (measured on the real dev
    dialogs: both such chains were wrong; the user's own things' chains were right 8 of 8 on synthetic KU)."""
    if subject is None:
        return False
    if q.possessed or subject == "i" or bool(q.names) and subject == q.names[0].lower():
        return True
    pattern = re.compile(rf"\b(my|our)\s+(?:[\w-]+\s+){{0,2}}{re.escape(subject)}s?\b|\b(bought|got|picked up|"
                         rf"brought home|adopted|have|own)\s+(?:a|an|two|three|some)\s+(?:[\w-]+\s+){{0,2}}"
                         rf"{re.escape(subject)}s?\b", re.I)
    return any(i.role == "user" and pattern.search(item_text(i)) for i in items)


def subject_chain(q: Query, items: Sequence[ContextItem]) -> tuple[UpdateChain | None, list[Found]]:
    """``timeline-v2``: the chain of the question's subject and attribute over ``items`` (module docstring); None
    when fewer than two distinct states are stated, or when the subject is not the user's own (``owned``)."""
    found, aliases = found_values(q, items)
    if not owned(q, q.subject or (q.names[0].lower() if q.names else None), items):
        return None, found
    steps: list[tuple[datetime, list[ContextItem], tuple[str, ...]]] = []
    current: tuple[str, ...] = ()
    for f in found:
        vals = f.values
        if current and set(vals) <= set(current) | set(_all(steps)) and current[0] in vals:
            steps[-1][1].append(f.item)  # restates the current state (perhaps naming the old one too)
            continue
        new = tuple(v for v in vals if v not in current)
        if len(new) > 1 and _CHANGE.search(item_text(f.item)):
            new = new[-1:]  # "I repainted my red bike blue": the last value named is the new one
        if current and set(new) <= set(current):
            steps[-1][1].append(f.item)
            continue
        steps.append((f.time, [f.item], new))
        current = new
    if len(steps) < 2:
        return None, found
    subject = q.subject if q.subject and q.subject != "i" else (q.names[0].lower() if q.names else "you")
    chain = UpdateChain(subject, tuple(ChainStep(t, tuple(dict.fromkeys(i.node_id for i in its)),
                                                 tuple(dict.fromkeys(_turn(i) for i in its)), new)
                                       for t, its, new in steps), "read")
    return chain, found


def _all(steps) -> list[str]:
    return [v for _, _, new in steps for v in new]


def index_chain(subject: str, entry_id: str, steps: Iterable[tuple[datetime, dict, Sequence[str]]],
                items: Sequence[ContextItem]) -> UpdateChain | None:
    """A chain from a write-time version list ``[(time, {session: turns}, states), ...]`` (oldest first, the
    current state last) over the context's items; None when no step is in the context. ``annotate`` keeps it only
    where the question's own chain (``subject_chain``) agrees."""
    where = {(i.provenance.session_id, i.provenance.turn_index): i for i in items}
    out, seen = [], set()
    for time, pointers, states in steps:
        hit = [where[(s, t)] for s in sorted(pointers) for t in sorted(pointers[s]) if (s, t) in where]
        new = tuple(v for v in states if v not in seen)
        seen.update(states)
        out.append(ChainStep(time, tuple(i.node_id for i in hit), tuple(_turn(i) for i in hit),
                             new if hit else ()))
    if len(out) < 2 or not any(step.node_ids for step in out):
        return None
    return UpdateChain(subject, tuple(out), "index", entry_id)


def agrees(chain: UpdateChain, index: UpdateChain) -> bool:
    """Whether an index chain records the question's chain (``subject_chain``) as it is: every turn of the chain is
    in one of the index chain's steps, the turns of one step in one index step, and each later step in a later index
    step. An index chain that merged a photo's new colour into the old state (no Update at write time), or that
    misses a step, does not lend its source: the chain is then the read path's own."""
    step_of = {n: k for k, s in enumerate(index.steps) for n in s.node_ids}
    order = []
    for step in chain.steps:
        ks = {step_of.get(n) for n in step.node_ids}
        if None in ks or len(ks) != 1:
            return False
        order.append(ks.pop())
    return len(order) >= 2 and all(a < b for a, b in zip(order, order[1:]))


def read_time_chains(question: str, items: Sequence[ContextItem], describe: Describe | None = None) -> list[UpdateChain]:
    """The question's chain over ``items`` (``subject_chain``), as a list (empty or one chain)."""
    chain, _ = subject_chain(analyse(question), items)
    return [chain] if chain is not None else []


def annotate(context: Context, *, index_chains: Sequence[UpdateChain] = (),
             describe: Describe | None = None) -> Context:
    """The context with the question's chain and each chained item marked ``current`` or ``superseded``. Index
    chains only lend their source to the read-time chain over the same turns (module docstring)."""
    chains = read_time_chains(context.question, context.items)
    if not chains:
        return replace(context, chains=()) if context.chains else context
    chain = chains[0]
    for c in index_chains:
        if agrees(chain, c):
            chain = replace(chain, source="index", entry_id=c.entry_id)
            break
    status: dict[str, tuple[str, datetime | None]] = {}
    for k, step in enumerate(chain.steps):
        mark = ("current", None) if k == len(chain.steps) - 1 else ("superseded", chain.steps[k + 1].time)
        for n in step.node_ids:
            status[n] = mark  # a later step wins: a turn restating the current state is current
    items = tuple(replace(i, status=status[i.node_id][0], superseded_at=status[i.node_id][1])
                  if i.node_id in status else replace(i, status="", superseded_at=None) if i.status else i
                  for i in context.items)
    return replace(context, items=items, chains=(chain,))


__all__ = ["Found", "agrees", "annotate", "caption_phrase", "clauses", "event_time", "found_values", "index_chain", "item_text", "mentions",
           "perception_disagrees", "read_time_chains", "subject_chain", "subject_names"]
