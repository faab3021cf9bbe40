"""What a question asks: its subject, the attribute it asks about, the answer type, and its sense of time.

A small rule reader of English questions (no model), shared by the update chains (``c3m.language.timeline``) and the
offline answerer (``c3m.models.answer``), so the chain the prompt shows and the span the answerer extracts are
about the same thing:

- ``kind``: the type of the answer asked — ``yesno`` (starts with an auxiliary), ``choice`` ("X or Y?", "before or
  after"), ``count`` ("how many", "how often"), ``date`` ("when", "which day"), ``place`` ("where"), ``name``
  ("what is X called", "what's the name of"), ``person`` ("who"), ``attr`` (a colour, material, shape, size,
  pattern or job is asked), ``open`` (anything else: a description, a list, a reason);
- ``attribute``: colour | material | shape | size | pattern | name | count | place | job | brand | plate | None;
- ``subject``: the head noun of the thing asked about ("my old bike" -> ``bike``; "the colour of my car" ->
  ``car``; "the shop on Chapel Hill" -> ``shop``), ``i`` for questions about the user themself ("Where do I
  live?"), or None; ``names``: capitalised names in the question ("Chapel Hill", "Biscuit");
- ``owner``: whose the subject is when the question says so ("my sister's bike"); a subject with no owner is the
  user's, and a clause about someone else's ("Anna's bike", "her bike") is not about it;
- ``change``: a change is asked ("Which new colour did I give ...", "Where did I shift ... to?"); ``by_user``: the
  question says the user made it ("did I give / shift / repaint / change ..." before the subject,
  ``changed_by_user``), so the thing is one the user would have told about even when it is "the X";
- ``intent``: ``now`` | ``past`` | ``when`` | "" (``temporal_intent``); ``before``: a date the question bounds
  the answer by ("Before 17 June 2024, ..."), resolved against ``now`` by ``c3m.language.when``.

Generic English, written from the language (tuned on the dev splits only).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from .attributes import ATTRIBUTE_NOUNS, COLOURS, MATERIALS, PATTERNS, PERSON_WORDS, SHAPES, SIZES, fold

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")
NOW_CUES = frozenset("now currently current latest still anymore nowadays presently today".split())
PAST_CUES = frozenset("before originally original first initially previously earlier formerly former prior "
                      "used".split())
_AUX = frozenset("is are was were do does did has have had can could will would should am".split())
#: words that end a noun phrase after its determiner
_NP_STOP = frozenset("""
a an the is are was were be been do does did has have had can could will would should of in on at to for from by
with about as into onto over under how many much why called named after before since until when where which who what that this these those and or
but now currently originally first still ever right left above below behind beside near next get got go went
""".split())
_DETERMINERS = frozenset("my our your the his her their its".split())
#: a participle after the noun ends its phrase ("Which room was the fan relocated to?", "What colour was my bike
#: painted?"): the thing is the noun before it ("the painted fence" keeps its head, the participle comes first)
_PARTICIPLES = frozenset("""
moved shifted relocated painted repainted resprayed recoloured recolored dyed renamed kept stored placed put sold
bought given fixed repaired changed swapped replaced switched left taken found lost broken stolen made built
""".split())
#: nouns that are never the subject: the attribute words themselves and generic question nouns
_NOT_SUBJECT = frozenset(ATTRIBUTE_NOUNS | frozenset("""
time day date kind type sort thing things way one ones number amount lot conversation conversations chat chats
dialogue dialog user assistant photo picture image pic new old current latest original first last previous
""".split()))
_PERSON_WORDS = PERSON_WORDS


#: a when-question's change verb names the attribute that changed
_CHANGE_VERBS = ((r"\b(repaint|paint|respray|recolou?r|dye)\w*", "colour"), (r"\brenam\w*", "name"),
                 (r"\b(shift|relocat)\w*|\bmove[ds]?\b.*\bto\b", "place"))


def temporal_intent(question: str) -> str:
    """``now`` | ``past`` | ``when`` | "" (no cue: answer from the latest state, like ``now``)."""
    lower = question.lower()
    words = re.findall(r"[a-z]+", lower)
    if words[:1] == ["when"] or "what time" in lower or "what date" in lower or "which day" in lower:
        return "when"
    if any(w in PAST_CUES for w in words) or "used to" in lower:
        return "past"
    if any(w in NOW_CUES for w in words) or "these days" in lower:
        return "now"
    return ""


@dataclass(frozen=True)
class Query:
    question: str
    kind: str
    attribute: str | None
    subject: str | None
    names: tuple[str, ...] = ()
    intent: str = ""
    choices: tuple[str, ...] = ()
    before: datetime | None = None
    words: frozenset = field(default_factory=frozenset)
    #: whose subject it is when not the user's ("my sister's bike" -> ``sister``; "the cat of my sister Meera" ->
    #: ``meera``): only clauses naming the owner speak about it
    owner: str | None = None
    #: where the asked thing is, when the question says ("the violin in the living room" -> ``living room``)
    qualifier: str | None = None
    #: the question asks about a change ("Which new colour did I give ...", "Where did I move ... to?")
    change: bool = False
    #: the subject was named as someone's ("my bike", "your cat", "my sister's bike"), not just "the X"
    possessed: bool = False
    #: the question says the user made the asked change to the subject ("Which new colour did I give the speaker in
    #: the balcony?", "Where did I shift the fan to?"): what the user did to a thing, the user's own turns would
    #: have said, as for "my X" (``changed_by_user``)
    by_user: bool = False


def _attribute(lower: str, words: list[str]) -> str | None:
    ws = set(words)
    if ws & {"colour", "color", "colours", "colors", "shade", "hue"}:
        return "colour"
    if "made of" in lower or ws & {"material", "materials"}:
        return "material"
    if ws & {"shape"}:
        return "shape"
    if ws & {"size", "big", "large"} and "how" in ws:
        return "size"
    if ws & {"pattern", "patterned"}:
        return "pattern"
    if (ws & {"called", "named", "call", "name", "names", "renamed", "rename"}) and not lower.startswith("who"):
        return "name"
    if "how many" in lower or "how often" in lower or "number of" in lower or "how much" in lower:
        return "count"
    if re.search(r"\b(what|which) (job|occupation|profession|line of work)\b|\b(job|occupation|profession) "
                 r"(does|did|do)\b|'s (job|occupation|profession)\b|\bfor a living\b|\bwhat does \w+ do\b", lower):
        return "job"
    if re.search(r"\b(what|which) (brand|make)\b|\bbrand (is|of|does)\b", lower):
        return "brand"
    if re.search(r"\b(plate|registration) (number|does|is|of)\b|\bwhat plate\b", lower):
        return "plate"
    if words[:1] == ["where"] or ws & {"room", "city", "town", "country", "location", "kept", "keep"} \
            and words[:1] in (["which"], ["what"]):
        return "place"
    return None


#: "did I / have we <verb>": the user as the one who acted; the verbs that make a change to a thing (not the ones that
#: show, say or notice it: "Which new colour did I see on the bike?" is about what someone else may have done)
_USER_ACTED = re.compile(r"\b(?:did|do|have|had)\s+(?:i|we)\s+(?:\w+ly\s+)?(?:give|gave|shift\w*|move[ds]?|moving|"
                         r"relocat\w*|put|repaint\w*|paint\w*|recolou?r\w*|respray\w*|dye[ds]?|renam\w*|chang\w*|"
                         r"switch\w*|swap\w*|turn\w*|redo|redid|make|made)\b")


def changed_by_user(lower: str, subject: str | None, change: bool) -> bool:
    """Whether a change question says the user made the change to its subject: "Which new colour did I give the
    speaker in the balcony?", "Where did I shift the toolbox in the attic to?", "What did I change the colour of
    the kettle to?" (the subject named after the verb). Then the thing need not be called "my X" to be one the
    user would have told about: if no turn says it changed, the change is not in memory. A passive question
    ("Which room was the fan relocated to?") does not say who moved it, and is not one."""
    if not change or not subject or subject == "i":
        return False
    m = _USER_ACTED.search(lower)
    return bool(m) and re.search(rf"\b{re.escape(subject)}s?\b", lower[m.end():]) is not None


def _subject(words: list[str], lower_words: list[str]) -> tuple[str | None, str | None]:
    """The head noun of the first determiner phrase that is not an attribute word (module docstring)."""
    for k, w in enumerate(lower_words):
        if w == "many" and k and lower_words[k - 1] == "how" and k + 1 < len(lower_words):
            phrase = []
            for nxt in lower_words[k + 1:k + 4]:
                if nxt in _NP_STOP or nxt in _DETERMINERS or nxt in _AUX:
                    break
                phrase.append(nxt)
            if phrase:
                return fold(phrase[-1]), None  # "how many tomato plants ...": plants
        if w not in _DETERMINERS:
            continue
        phrase = []
        for w2, raw in zip(lower_words[k + 1:], words[k + 1:]):
            if w2 in _NP_STOP or w2 in _DETERMINERS or phrase and w2 in _PARTICIPLES:
                break
            if raw[:1].isupper() and phrase and phrase[-1] in _PERSON_WORDS:
                return fold(w2[:-2] if w2.endswith("'s") else w2), None  # "my sister Kwame('s)": the person
            if w2.endswith("'s"):
                rest = [x for x in lower_words[k + len(phrase) + 2:k + len(phrase) + 4] if x not in _NP_STOP]
                if rest and rest[0] not in ATTRIBUTE_NOUNS and rest[0] not in _NOT_SUBJECT:
                    return fold(rest[0]), w2[:-2]  # "my sister's bike": the bike, owned by the sister
                phrase.append(w2[:-2])  # "my dog's name": the owner is the subject
                break
            phrase.append(w2)
            if len(phrase) == 3:
                break
        if phrase and phrase[-1] in ATTRIBUTE_NOUNS:
            continue  # "the (current wall) colour of my bedroom": the owner comes after "of"
        heads = [p for p in phrase if p not in _NOT_SUBJECT and p not in COLOURS | MATERIALS | SIZES | SHAPES
                 | PATTERNS]
        if heads:
            head = heads[-1]
            if head in _PERSON_WORDS and k + len(phrase) + 1 < len(lower_words):
                continue  # "the cat of my sister": the thing comes first
            owner = None
            after = lower_words[k + 1 + len(phrase):]
            if after[:1] == ["of"] and len(after) > 2 and after[1] in _DETERMINERS and after[2] in _PERSON_WORDS:
                owner = after[2]  # "the cat of my sister (Meera)"
                if len(after) > 3 and words[k + 1 + len(phrase) + 3][:1].isupper():
                    owner = after[3]
            return fold(head), owner
    return None, None


_MONTHS_DAYS = frozenset("""january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday""".split())
_NAME = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][a-z'-]+(?:\s+[A-Z][a-z'-]+)*)")


def analyse(question: str, now: datetime | None = None) -> Query:
    lower = question.lower().replace("\u2019", "'")
    raw_words = _WORD.findall(question.replace("\u2019", "'"))
    main = re.match(r"^(?:when|before|after|if|once|since)\b[^,?]*,\s*((?:what|which|who|whose|where|how|is|are|was|"
                    r"were|did|does|do)\b.*)$", lower)
    if main:  # "When I first showed you my fan, what was on its left side?": the main clause says what is asked
        head_words = [w.lower() for w in _WORD.findall(main.group(1))]
    else:
        head_words = None
    words = [w.lower() for w in raw_words]
    intent = temporal_intent(question)
    attribute = _attribute(lower, words)
    names = tuple(dict.fromkeys(m.group(1) for m in _NAME.finditer(question)
                                if m.group(1) not in ("I", "I'm", "I've") and m.start() > 0
                                and m.group(1).split()[0].lower() not in _MONTHS_DAYS))
    names = tuple(n[:-2] if n.endswith("'s") else n for n in names)
    choices: tuple[str, ...] = ()
    first = head_words if head_words is not None else words
    if head_words is not None and intent == "when":  # "When I first showed you ..., what ...": not a date question
        intent = temporal_intent(main.group(1)) or temporal_intent(lower.split(" ", 1)[1])
    m = re.search(r"\b(before or after|after or before)\b", lower)
    if m:
        kind = "choice"
        choices = ("before", "after")
    elif re.search(r",\s*(?:my |the )?[\w' -]+ or (?:my |the )?[\w' -]+\?$", lower) and words[:1] in (["which"], ["who"]):
        kind = "choice"
        tail = lower.rsplit(",", 1)[1].rstrip("?")
        choices = tuple(c.strip() for c in tail.split(" or "))
    elif first[:1] and first[0] in _AUX:
        kind = "yesno"
    elif first[:1] == ["when"] or intent == "when":
        kind = "date"
    elif attribute == "count":
        kind = "count"
    elif first[:1] == ["where"]:
        kind = "place"
        attribute = "place"
    elif first[:1] in (["who"], ["whose"]):
        kind = "person"
    elif attribute == "name":
        kind = "name"
    elif attribute in ("colour", "material", "shape", "size", "pattern", "job", "place", "brand", "plate"):
        kind = "attr"
    else:
        kind = "open"
    subject, owner = _subject(raw_words, words)
    if subject is None and (words[:2] in (["where", "do"], ["where", "did"]) or re.search(
            r"\b(i|we) (move|moved|live|lived|relocate)", lower)):
        subject = "i"
    if kind == "date" and attribute is None and re.search(r"\b(i|we) (move|moved|relocat\w*)\b", lower):
        attribute = "place"
        subject = "i"
    elif kind == "date" and attribute is None:  # "When did I repaint my bike?": the date of that change
        for pattern, attr in _CHANGE_VERBS:
            if re.search(pattern, lower):
                attribute = attr
                break
    before = None
    if now is not None:
        from .when import question_windows

        for w in question_windows(question, now):
            if getattr(w, "end", None) is not None and "before" in lower:
                before = w.end
                break
    qualifier = None
    if subject and subject != "i":
        m = re.search(rf"\b{re.escape(subject)}s?\s+(?:in|on|at)\s+(?:the|my|our)\s+((?:living |dining |spare )?[a-z]+)",
                      lower)
        qualifier = m.group(1) if m else None
    change = bool(re.search(r"\b(new|shift|shifted|move|moved|relocat\w*|repaint\w*|renam\w*|change[ds]?|switch\w*|respray\w*)\b",
                            lower)) and kind in ("attr", "place", "name")
    if owner in ("user", "assistant", "i"):
        owner = None  # "the user's bike" is the user's own: the turns say "my bike"
    possessed = bool(subject) and subject != "i" and bool(re.search(
        rf"\b(my|your|our)\s+(?:[\w-]+'s\s+)?(?:[\w-]+\s+){{0,2}}{re.escape(subject)}", lower)
        or re.search(r"\b(do|did|does) (i|we) (have|own|keep)\b", lower))
    return Query(question, kind, attribute, subject, names, intent, choices, before,
                 frozenset(fold(w) for w in words), owner, qualifier, change, possessed,
                 changed_by_user(lower, subject, change))


#: lead-in clauses that frame a question without changing what it asks ("Based on the conversation, would ...")
_LEAD_IN = re.compile(r"^(?:based on (?:the |our |this )?(?:conversations?|dialogues?|chats?|discussion)(?: history)?|"
                      r"according to [^,]*|considering [^,]*|given [^,]*|since [^,]*|if [^,]*|in [^,]*),\s*")
_YESNO_AUX = re.compile(r"^(?:did|do|does|is|are|was|were|has|have|had|can|could|would|will|should|am)\b")
#: questions that judge a claim, test recall of a whole topic, order two events, offer a choice or ask how a state
#: stands now ("still", "finally", "resolved"): whether a detail is absent does not decide them
_NOT_A_DETAIL = re.compile(r"\b(?:contradict\w*|conflict\w*|consistent|inconsisten\w*|remember|recall|before|after|"
                           r"first|earlier|later|or not|positive or negative|still|finally|ultimately|eventually|"
                           r"chang\w*|resolved|anymore|recently|initially|originally|now|currently|yet|mine)\b|"
                           r"\bor (?:did|does|do|is|was|were|has|have|had|will|would|should|stay\w*|keep\w*)\b")
_PICTURE = re.compile(r"\b(?:image|images|picture|pictures|photo|photos|pic|shown|attached|provided|uploaded)\b")
_DETAIL_WH = re.compile(r"^(?:what|which|who|where|in which|at which|on which)\b.*(?<![-\w])(?:exact|exactly|specific|"
                        r"specifically)(?![-\w])")


def detail_question(question: str) -> tuple[str, str] | None:
    """Whether a question asks if one detail was stated, so that a detail the memory never states makes it
    unanswerable: ``yesno`` ("Did Julian mention attending an art school in Japan?", "Was sesame used ...?", "Based
    on the conversation, would the user ...?", "..., what would be the answer?"), ``detail`` (a wh-question for an
    exact or specific thing: "Which exact brand of sofa did Lin buy?"), with the question's core clause (its
    lead-in, "Based on the conversation,", cut off); else None — a claim to check against the
    conversation, a recall of a whole topic, the order of two events, a choice, or a question about a picture,
    where a missing word says nothing about absence."""
    lower = question.lower().replace("\u2019", "'").strip()
    if _NOT_A_DETAIL.search(lower) or _PICTURE.search(lower):
        return None
    core = lower
    for _ in range(2):
        core = _LEAD_IN.sub("", core)
    if re.search(r"\bwhat would (?:be )?the answer\b", lower):  # the lead-in is the question
        return "yesno", lower
    if _YESNO_AUX.match(core):
        return "yesno", core
    if _DETAIL_WH.search(core):
        return "detail", core
    return None


def speaker_names(question: str) -> frozenset[str]:
    """The person a question is about, named right after its auxiliary ("Did Julian ...", "Has Lin Wei ...",
    "Was Lin used to ..."): a user whose chat says "I" rarely writes their own name, so it is never evidence of
    absence."""
    text = question.replace("\u2019", "'")
    out = set()
    for m in re.finditer(r"\b(?i:did|do|does|is|are|was|were|has|have|had|can|could|would|will|should)\s+"
                         r"([A-Z][a-z]+(?:'s)?)(?:\s+([A-Z][a-z]+(?:'s)?))?", text):
        for g in m.groups():
            if g:
                out.add(g[:-2].lower() if g.endswith("'s") else g.lower())
    return frozenset(out)


_ASKS_IMAGE = re.compile(r"^(?:please\s+)?(?:help me find\s+|find\s+)?(?:which|what)\s+(?:(?:one|ones|two|three)\s+)?"
                         r"(?:of (?:the|my|these|those|all the)\s+)?(?:[\w-]+\s+){0,3}?"
                         r"(?:image|images|picture|pictures|photo|photos|pic|pics)\b(?!\s+(?:is|was|are)\s+(?:of|from)\b)")


#: a question that compares with a picture sent along with it, which a memory of the conversation does not hold
_SEES_QUESTION_IMAGE = re.compile(r"\b(?:this|the attached|my attached|attached|the provided|provided) "
                                  r"(?:image|picture|photo)\b")


def asks_for_image(question: str) -> bool:
    """Whether the answer is a picture of the conversation itself ("Which image shows a paint brush?", "Which of
    the pictures uploaded on 2024-07-07 is about the oil painting?", "What images did Julian upload about ...?",
    "Among the pictures in early September, which one is related to Chinese art?"),
    not what a picture shows ("What is the name of the product in the picture?")."""
    lower = question.lower().replace("\u2019", "'").strip()
    if _SEES_QUESTION_IMAGE.search(lower) or re.search(r"\b[a-z]?\d+:img_\d+", lower):
        return False  # needs the picture sent with the question, or names a picture already
    return bool(_ASKS_IMAGE.search(lower) or re.search(r"\bimage_?ids?\b", lower)
                or re.search(r"^in which (?:of the )?(?:image|picture|photo)s?\b", lower)
                or re.search(r"\bsearch for (?:all |the )?(?:image|picture|photo)s? of\b", lower)
                or re.search(r"^among the (?:image|picture|photo)s?\b[^?]*\bwhich one\b", lower))



#: a number of pictures, or "all", before the picture word: the answer is several of them
_SEVERAL_COUNT = re.compile(r"\b(?:two|three|four|five|six|seven|eight|nine|ten|several|all|both|\d+)\s+(?:[\w-]+\s+){0,2}?"
                            r"(?:images|pictures|photos|pics)\b")
#: "Which of the pictures ... is about ...": one picture among several (a singular verb after the partitive)
_ONE_OF = re.compile(r"\bwhich (?:one )?of (?:the|my|these|those|all the) (?:images|pictures|photos|pics)\b"
                     r".*?\b(?:is|was|has|shows|depicts|represents|corresponds|contains|features)\b")


def asks_for_images(question: str) -> bool:
    """Whether a question that asks for pictures of the conversation (``asks_for_image``) wants **several** of them
    ("Which images did Leo upload about Taylor Swift?", "What two images are related to the door lock?", "Which of
    the images from early January are related to the air conditioner?"), so that naming one photo would answer
    only part of it. "Which of the pictures shown is about the oil painting?" (a singular verb after the
    partitive), "Among the pictures ..., which one ...?" and "Which image shows ...?" ask for one. The plural noun is the cue; on the real dev dialogs every
    question it marks but one has a list of images as its gold answer."""
    lower = question.lower().replace("\u2019", "'").strip()
    if _SEVERAL_COUNT.search(lower):
        return True
    if not re.search(r"\b(?:images|pictures|photos|pics)\b", lower):
        return False
    return not (_ONE_OF.search(lower) or re.search(r"\bwhich one\b", lower))
