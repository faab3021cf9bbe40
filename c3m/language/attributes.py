"""Attribute values a sentence states about one subject: the one definition the update chains and the offline
answerer share.

``values(text, subject, attribute, aliases)`` returns, in text order, the values of ``attribute`` (colour,
material, shape, size, pattern, name, count, place, job, brand, plate) that ``text`` states **about** ``subject``:

- the text is cut into clauses (at sentence ends, ``;``, and before "but / so / while / although" and "and my /
  and the / and I ..."), and only clauses that name the subject (its head noun, singular or plural, or one of its
  names) count; a clause that starts with "it / its / she / he / they" continues the subject of the clause before it
  (cheap coreference, inside one text only);
- a value word belongs to the subject when it stands before the subject's noun ("my *red* bike"), before a word
  for the attribute itself ("a fresh *grey* finish", "a new colour: *pink*") or at the end of the clause as a
  predicate ("I painted my bike *red* this weekend"); a value word before **another** noun describes that noun
  ("the *green* fence") and is never a state of the subject — adjectives of other entities never become states;
- names: "called / named / renamed (it) (to) *X*", "*X* is now called ...", "my cat *X*"; counts: "*three* bikes",
  "a *second* bike" (2), "I now have *4*"; places: "in / into / to / at the *hallway*" (a room or place word) and
  "moved to *Lisbon*" (a capitalised place after a move verb); jobs: "works as a *nurse*", "is a *chef*".

A named lexicon heuristic with no model: what it misses, it misses silently (no chain, and the answerer says it is
not sure), which is the safe side.
"""
from __future__ import annotations

import re
from functools import lru_cache

COLOURS = frozenset("""
red orange yellow green blue purple pink brown black white grey gray silver gold golden beige teal navy turquoise
cream maroon olive violet ivory lilac lavender magenta crimson scarlet burgundy khaki mustard tan coral mint
charcoal indigo amber peach rust emerald cyan
""".split())
MATERIALS = frozenset("""
wooden wood metal metallic plastic glass ceramic leather cotton wool stone marble steel iron copper brass bamboo
rattan linen silk velvet concrete paper cardboard porcelain oak pine walnut aluminium aluminum wicker denim
""".split())
PATTERNS = frozenset("striped spotted dotted checked plain floral patterned polka tartan plaid".split())
SHAPES = frozenset("round square rectangular oval triangular arched curved hexagonal circular tall flat slim wide "
                   "narrow".split())
SIZES = frozenset("big small large tiny huge little giant massive compact".split())
LEXICON = {"colour": COLOURS, "material": MATERIALS, "pattern": PATTERNS, "shape": SHAPES, "size": SIZES}
#: words that name an attribute itself: a value word right before one still describes the clause's subject
ATTRIBUTE_NOUNS = frozenset("""
colour color colours colors shade hue paint paintwork finish coat coating tone material shape size pattern name
names job occupation profession place location spot home
""".split())
PLACE_WORDS = frozenset("""
kitchen hallway hall attic garage balcony bedroom bathroom study office garden shed basement loft porch cellar
closet wardrobe shelf shelves desk lounge patio terrace yard backyard corridor nursery pantry workshop studio
veranda conservatory playroom den library
""".split())
JOBS = frozenset("""
chef cook nurse teacher engineer doctor lawyer pilot baker plumber electrician architect designer programmer
developer accountant dentist pharmacist librarian journalist photographer carpenter mechanic firefighter
farmer writer artist musician student professor scientist vet veterinarian barista waiter waitress cashier
manager translator paramedic gardener tailor painter
""".split())
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "eleven": 11, "twelve": 12, "dozen": 12, "twenty": 20}
_WORDS_OF = {v: k for k, v in NUMBER_WORDS.items() if k != "dozen"}
ORDINALS = {"second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6}
#: words after a value word that do not make it describe a following noun (adverbs, time words, function words)
_NOT_NOUN = frozenset("""
a an the and or but so now today yesterday again too as well this that these those last next after before since
then when while because though although with without for from to in on at by of it its is was are were be been
again already still instead just really very quite all both this weekend week month year day night morning
evening afternoon recently lately finally also either anyway though i we you he she they me him her us them my our
your their his one ones ish
""".split())
_CLAUSE = re.compile(r"(?<=[.!?])\s+|;\s*|\s+[-\u2013\u2014]\s+|,?\s+(?=(?:but|so|while|whereas|although|though|"
                     r"because)\s)|,?\s+and\s+(?=(?:my|the|our|his|her|their|i|we|it)\s)|\n+", re.I)
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+(?:[.,:]\d+)*|[.,!?:;()\"]")
_PRONOUN_START = frozenset("it its it's she her he his they their them".split())
_NAME_AFTER = re.compile(r"\b(?:(?:called|named)(?:\s+(?:it|him|her|them))?|renamed(?:\s+(?:it|him|her|them|\w+))?\s+to|renamed|name\s+is|"
                         r"name's|rename(?:d)?\s+(?:it|him|her)|call\s+(?:it|him|her|them)|calls?\s+(?:it|him|her))"
                         r"\s+\"?((?:[A-Z][\w'&-]*)(?:\s+(?:[A-Z][\w'&-]*|of|the|&))*)")
_MOVE_PLACE = re.compile(r"\b(?:moved|moving|move|relocated|relocating|relocate|live|living|lives)\s+"
                         r"(?:back\s+)?(?:to|in|into)\s+(?:a\s+new\s+\w+\s+in\s+)?((?:[A-Z][\w'-]*)(?:\s+[A-Z][\w'-]*)*)")


def fold(word: str) -> str:
    """Plural folding only ("windows" -> "window", "boxes" stays "boxe" -> "box" rules are not needed here)."""
    w = word.lower()
    if len(w) > 3 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def clauses(text: str) -> list[str]:
    return [c for c in _CLAUSE.split(text) if c and c.strip()]


def _tokens(clause: str) -> list[str]:
    return _TOKEN.findall(clause)


@lru_cache(maxsize=1 << 16)
def _subject_positions(clause: str, terms: tuple[str, ...]) -> tuple[int, ...]:
    toks = [t.lower() for t in _tokens(clause)]
    out = []
    single = {t for t in terms if " " not in t}
    multi = [t.split() for t in terms if " " in t]
    for k, t in enumerate(toks):
        if fold(t) in single or t in single or (t.endswith("'s") and fold(t[:-2]) in single):
            out.append(k)
        for m in multi:
            if toks[k:k + len(m)] == m:
                out.append(k + len(m) - 1)
    return tuple(out)


def mentions(text: str, subject: str, aliases: tuple[str, ...] = ()) -> bool:
    """Whether ``text`` names the subject (its head noun or one of its names)."""
    terms = tuple(t.lower() for t in (subject, *aliases) if t)
    return any(_subject_positions(c, terms) for c in clauses(text))


_NOT_POSSESSIVE = frozenset("it's that's there's what's let's he's she's here's who's where's one's".split())


PERSON_WORDS = frozenset("""sister brother mother father mum mom dad friend neighbour neighbor cousin aunt uncle
wife husband partner son daughter colleague boss grandma grandpa grandmother grandfather niece nephew roommate
flatmate housemate kid kids child children""".split())


def _owned_elsewhere(toks: list[str], p: int, raw: list[str] | None = None) -> bool:
    """The mention at ``p`` is someone else's thing: "Anna's bike", "my sister's bike", "her bike", "my
    neighbour Tomás has a bike" (a person before it in the clause, and no "my" right before the thing)."""
    if raw is not None and p and raw[p][:1].isupper():
        return False  # a name ("my sister Ana") is the person or thing itself, nobody's possession
    if p and toks[p - 1] not in ("my", "our") and any(t in PERSON_WORDS for t in toks[:p]):
        return True
    if raw is not None and p and toks[p - 1] not in ("my", "our") and any(
            w[:1].isupper() and k > 0 and w not in ("I", "I'm", "I've") for k, w in enumerate(raw[:p])):
        return True
    j = p - 1
    while j >= 0 and (toks[j] in COLOURS or toks[j] in MATERIALS or toks[j] in SIZES or toks[j] in ("old", "new")):
        j -= 1
    if j < 0:
        return False
    prev = toks[j]
    return prev in ("his", "her", "their") or (prev.endswith("'s") and prev not in _NOT_POSSESSIVE)


_LOC_PREPS = frozenset("in on into from near under behind beside inside onto".split())  # not "at": "look at my bike"
_DETS = frozenset("the my our a an his her their".split())


def _locative(toks: list[str], p: int) -> bool:
    """The mention at ``p`` only says where another thing is: "the fan *in the kitchen*" is not about the kitchen."""
    j = p - 1
    while j >= 0 and toks[j] in _DETS | {"living", "dining", "spare"}:
        j -= 1
    if j < 1 or toks[j] not in _LOC_PREPS or j == p - 1:
        return False
    before = toks[j - 1]
    return before.isalpha() and before not in _NOT_NOUN and before not in ATTRIBUTE_NOUNS


def _elsewhere(toks: list[str], p: int, qualifier: str | None) -> bool:
    """A question about "the violin in the living room": a mention placed somewhere else is another violin."""
    if not qualifier:
        return False
    rest = toks[p + 1:p + 5]
    if len(rest) >= 2 and rest[0] in ("in", "on", "at", "from"):
        place = " ".join(w for w in rest[1:] if w not in _DETS)
        return qualifier.split()[-1] not in place.split()
    return False


def about_clauses(text: str, subject: str | None, aliases: tuple[str, ...] = (), owner: str | None = None,
                  qualifier: str | None = None, locative_ok: bool = False) -> list[str]:
    """The clauses of ``text`` about the subject, a pronoun-led clause continuing the one before it. With an
    ``owner``, only clauses naming the owner (or one of the subject's own names); without one, a mention of
    someone else's thing ("Anna's bike") does not count. A mention that only locates another thing ("the fan in
    the kitchen") does not count unless ``locative_ok``; with a ``qualifier`` ("the violin in the living room"), a
    mention placed elsewhere ("the violin in the attic") does not count."""
    terms = tuple(t.lower() for t in (subject, *aliases) if t and t != "i")
    names = tuple(a.lower() for a in aliases)
    out, last_about = [], False
    for c in clauses(text):
        toks = [t.lower() for t in _tokens(c)]
        if subject == "i":
            hit = bool({"i", "we", "my", "our"} & set(toks))
        else:
            pos = _subject_positions(c, terms) if terms else ()
            if not locative_ok:
                pos = [p for p in pos if not _locative(toks, p)]
            pos = [p for p in pos if not _elsewhere(toks, p, qualifier)]
            if owner is None:
                raw = _tokens(c)
                pos = [p for p in pos if toks[p] in names or not _owned_elsewhere(toks, p, raw)]
            elif not (set(toks) & {owner, owner + "'s"}):
                pos = [p for p in pos if toks[p] in names]
            hit = bool(pos)
        continued = last_about and bool(toks) and (toks[0] in _PRONOUN_START or toks[0] in ("so", "and", "but")
                                                   and (not (set(toks) & _DETS - {"a", "an"})
                                                        or bool(set(toks) & {"it", "her", "him", "them"})))
        if hit or continued:
            out.append(c)
            last_about = True
        else:
            last_about = False
    return out


def _lexicon_values(clause: str, terms: tuple[str, ...], lexicon: frozenset) -> list[str]:
    toks = _tokens(clause)
    low = [t.lower() for t in toks]
    subj = set(_subject_positions(clause, terms)) if terms else set()
    out = []
    for k, t in enumerate(low):
        if t not in lexicon:
            continue
        # the next word that is not another value word, a hyphen-ish or "and"
        j = k + 1
        while j < len(low) and (low[j] in lexicon or low[j] in ("light", "dark", "pale", "bright", "matte", "glossy")
                                or low[j].endswith("ish") or low[j] in ("and", ",", "-", "or")
                                and j + 1 < len(low) and low[j + 1] in lexicon):
            j += 1  # "red, white and blue stripes": the list describes what follows it
        nxt = low[j] if j < len(low) else "."
        if j in subj or fold(nxt) in ATTRIBUTE_NOUNS or nxt in ATTRIBUTE_NOUNS:
            out.append(t)
        elif not nxt[0].isalpha() or nxt in _NOT_NOUN:
            # a predicate ("... my bike red this weekend"): the clause's subject must come before it
            if any(p < k for p in subj):
                out.append(t)
        # else: the word describes another noun ("the green fence") -> not a state of the subject
    return out


def _name_values(clause: str, terms: tuple[str, ...]) -> list[str]:
    out = [m.group(1).strip() for m in _NAME_AFTER.finditer(clause)]
    toks = _tokens(clause)
    low = [t.lower() for t in toks]
    for p in _subject_positions(clause, terms):  # "my cat Biscuit", "my cat, Biscuit,"
        j = p + 1 + (p + 1 < len(toks) and toks[p + 1] == ",")
        if j < len(toks) and toks[j][:1].isupper() and low[j] not in _NOT_NOUN and low[p] not in _PRONOUN_START:
            out.append(toks[j])
    return [o for o in dict.fromkeys(out) if o.lower() != terms[0]]  # a name the subject already has is a value too


def _count_values(clause: str, terms: tuple[str, ...], continued: bool = False) -> list[str]:
    toks = [t.lower() for t in _tokens(clause)]
    subj = _subject_positions(clause, terms)
    out = []
    for p in subj:
        for k in range(max(0, p - 3), p):
            t = toks[k]
            if t.isdigit() or t in NUMBER_WORDS:
                out.append(t)
                break
            if t in ORDINALS and k and toks[k - 1] == "a":
                out.append(_WORDS_OF[ORDINALS[t]])  # "a second bike": two bikes ("the second kimono" is not)
                break
    m = re.search(r"\b(?:have|has|own|got|are|is)\s+(?:just\s+|only\s+|now\s+)?(\d+|" + "|".join(NUMBER_WORDS)
                  + r")\b(?:\s+(?:left|now|of them)|\s*[.,!;]|$)", clause.lower())
    if m and (subj or continued) and not out:
        out.append(m.group(1))
    return out


_RELATIVE = re.compile(r"\b(left of|right of|next to|behind|in front of|on top of|under|above|below|beside|"
                       r"underneath)\s+(?:the|my|a)\s+([a-z]+)\b")


#: a place value that only says where a thing sat beside another ("left of the shelf")
RELATIVE_PLACE = re.compile(r"^(left of|right of|next to|behind|in front of|on top of|under|above|below|beside|"
                            r"underneath) ")


def _place_values(clause: str, terms: tuple[str, ...], subject: str | None, qualifier: str | None = None) -> list[str]:
    out = [m.group(1) for m in _MOVE_PLACE.finditer(clause)]
    if subject == "i":  # where the user lives: only a move or a home names a place ("I was in the kitchen" does not)
        return out
    low = [t.lower() for t in _tokens(clause)]
    subj = set(_subject_positions(clause, terms)) if terms else set()
    # "the fan in the kitchen" is told apart from its twins by where it is: a clause that places a fan elsewhere
    # without saying it moved ("there's a second fan ..., kept in the attic") is about another fan
    moved = bool(out) or bool(STATED_CHANGE["place"].search(clause))
    for k, t in enumerate(low):
        if t in PLACE_WORDS and k >= 1 and (low[k - 1] in ("the", "my", "our") or low[k - 1] in ("living", "dining")):
            j = k - 1
            while j >= 0 and low[j] in ("the", "my", "our", "living", "dining", "spare"):
                j -= 1
            if j >= 0 and low[j] in ("in", "into", "to", "at", "on", "is", "for", "from", "inside", "under", "near"):
                word = " ".join(w for w in low[j + 1:k + 1] if w not in ("the", "my", "our"))
                if terms and fold(t) in terms:
                    continue
                attached = any(p < j and all(w in _DETS for w in low[p + 1:j]) for p in subj)
                if qualifier and (qualifier.split()[-1] == t or attached):
                    continue  # "the fan in the kitchen" names which fan, not where the asked one went
                if qualifier and not moved:
                    continue  # another fan: placed elsewhere, never moved there
                out.append(word)
    if terms and _subject_positions(clause, terms):  # "the jar is left of the shelf" (a picture's caption)
        for m in _RELATIVE.finditer(clause.lower()):
            if fold(m.group(2)) not in terms:
                out.append(f"{m.group(1)} the {m.group(2)}")
    return list(dict.fromkeys(out))


_BRAND = re.compile(r"\b(?:brand|made by|make)\s+(?:is\s+)?\"?([A-Z][\w'&-]*(?:\s+[A-Z][\w'&-]*)?)")
_PLATE = re.compile(r"\b(?:plate|plate number|number plate|licence plate|license plate)\s+(?:reading\s+|is\s+)?\"?"
                    r"([A-Z]{1,3}[\s-]?\d{1,5}[A-Z]{0,3})\b")


def _job_values(clause: str) -> list[str]:
    out = []
    for m in re.finditer(r"\b(?:works?|working|job)\s+as\s+(?:an?\s+)?([a-z]+)", clause.lower()):
        out.append(m.group(1))
    for m in re.finditer(r"\b(?:is|was|as|became|becoming)\s+(?:an?\s+)?([a-z]+)\b", clause.lower()):
        if m.group(1) in JOBS:
            out.append(m.group(1))
    return list(dict.fromkeys(out))


def values(text: str, subject: str | None, attribute: str | None, aliases: tuple[str, ...] = (),
           owner: str | None = None, qualifier: str | None = None) -> list[str]:
    """The values of ``attribute`` that ``text`` states about ``subject`` (module docstring), in text order."""
    if attribute is None or subject is None:
        return []
    terms = tuple(dict.fromkeys(t.lower() for t in (subject, *aliases) if t and t != "i"))
    out: list[str] = []
    for c in about_clauses(text, subject, aliases, owner, qualifier):
        if hypothetical(c):
            continue
        if attribute in LEXICON:
            # a pronoun-led clause ("it is blue now") stands for the subject: read it as if named
            cl = c
            toks = [t.lower() for t in _tokens(c)]
            if toks and toks[0] in _PRONOUN_START and not _subject_positions(c, terms) and terms:
                cl = f"{terms[0]} {c.split(None, 1)[1] if len(c.split()) > 1 else ''}"
            out += _lexicon_values(cl, terms, LEXICON[attribute])
        elif attribute == "name":
            out += _name_values(c, terms)
        elif attribute == "count":
            out += _count_values(c, terms, continued=not _subject_positions(c, terms))
        elif attribute == "place":
            out += _place_values(c, terms, subject, qualifier)
        elif attribute == "job":
            out += _job_values(c)

    if attribute in ("brand", "plate"):  # identifiers: the whole sentence that names the subject ("a van with the
        pattern = _BRAND if attribute == "brand" else _PLATE  # brand Maribo and the plate XE 6404")
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if about_clauses(sentence.split(";")[0], subject, aliases, owner, qualifier) and not hypothetical(sentence):
                out += [m.group(1) for m in pattern.finditer(sentence)]
    return list(dict.fromkeys(out))


_HYPOTHETICAL = re.compile(r"\b((?:almost|nearly)\s+(?:\w+ed|gave|give|bought|buy|sold|paint|moved|move|made|did|went|had)|was going to|were going to|going to|planning to|plan to|thinking of|"
                           r"thinking about|considering|consider|might|maybe|perhaps|would|wish|hope to|want to|"
                           r"decided against|didn't|did not|never|not yet|if i|next year|someday|one day)\b", re.I)
#: words that say the attribute changed, even when the new value is not in words (only in a photo)
CHANGE_CUES = {
    "colour": re.compile(r"\b(redid|redone|new colou?r|colou?r|repaint\w*|painted|paint job|paint|respray\w*|fresh coat|new coat|"
                         r"coat of paint|finish|dyed|recolou?r\w*)\b", re.I),
    "name": re.compile(r"\b(renam\w*|new name|different name|changed its name|name change|rebrand\w*)\b", re.I),
    "place": re.compile(r"\b(moved|shifted|relocated|moved it|new spot|new place|now sits|now lives|put it in)\b", re.I),
    "count": re.compile(r"\b(another|second|third|more|gave away|sold|lost|got rid)\b", re.I),
}
for _a in ("material", "shape", "size", "pattern"):
    CHANGE_CUES[_a] = re.compile(r"\b(replac\w*|swapp\w*|switched|new)\b", re.I)


#: the thing itself was replaced by another ("swapped my violin for a new model"): every attribute may differ now
_REPLACED = re.compile(r"\b(swapped|swapping|replaced|replacing|traded|exchanged)\b.*\bfor\b", re.I)


#: words that say a change happened (stricter than ``CHANGE_CUES``: "the colour of my teapot" is no change)
STATED_CHANGE = {
    "colour": re.compile(r"\b(new colou?r|repaint\w*|painted|paint job|respray\w*|fresh coat|new coat|fresh \w+ finish|"
                         r"recolou?r\w*|dyed|redid|redone)\b", re.I),
    "place": re.compile(r"\b(moved|shifted|relocated|now sits|now lives|put it in|new spot|new place)\b", re.I),
    "name": re.compile(r"\b(renam\w*|new name|different name|changed its name|rebrand\w*)\b", re.I),
}
#: words for an attribute itself: a turn about the subject that uses one may state a value this reader missed
ATTRIBUTE_HINTS = {
    "colour": re.compile(r"\b(colou?rs?|shade|hue|paint\w*)\b", re.I),
    "material": re.compile(r"\b(material|made of|made from)\b", re.I),
    "shape": re.compile(r"\bshaped?\b", re.I), "size": re.compile(r"\bsize\b", re.I),
    "pattern": re.compile(r"\bpattern\w*\b", re.I),
    "name": re.compile(r"\b(name[ds]?|called)\b", re.I),
    "count": re.compile(r"\b(how many|number of|\d+|one|two|three|four|five|six|several)\b", re.I),
    "place": re.compile(r"\b(moved|kept|keep|lives?|sits|placed|put)\b", re.I),
    "job": re.compile(r"\b(job|works?|working|occupation|profession|career|employed)\b", re.I),
    "brand": re.compile(r"\b(brand|make|made by|model)\b", re.I),
    "plate": re.compile(r"\b(plate|registration)\b", re.I),
}
#: attributes a photo may show when no word states them
VISUAL = frozenset("colour material shape size pattern place count brand plate".split())


def hypothetical(clause: str) -> bool:
    """A clause that says a thing did not (or not yet) happen: "I almost gave my car a new colour"."""
    return bool(_HYPOTHETICAL.search(clause))


def changed_without_value(text: str, subject: str, attribute: str, aliases: tuple[str, ...] = (),
                          owner: str | None = None, qualifier: str | None = None) -> bool:
    """``text`` says the subject's attribute changed (not hypothetically) but states no value in words."""
    cue = CHANGE_CUES.get(attribute)
    if cue is None:
        return False
    for c in about_clauses(text, subject, aliases, owner, qualifier):
        if (cue.search(c) or _REPLACED.search(c)) and not hypothetical(c):
            return not values(c, subject, attribute, aliases, owner, qualifier)
    return False
