"""Where things are relative to each other: "What is on the right side of my cooler?", "Which shop is under the
McDonald's sign?", "When I first showed you my bowl, what was on its right side?".

``asked(question, subject)`` reads the relation a question asks about — (relation, target words) — and
``facts(sentence)`` the relations a sentence states, as (A, relation, B) triples: "the sign hangs right above the
WEGO shop" -> (sign, above, WEGO shop); "The bowl is left of the teacups" -> (bowl, left, teacups); "A blue cooler;
two water bottles on its right" -> (two water bottles, right, blue cooler). ``answer`` joins them: the thing that
stands in the asked relation to the target, or that the target stands in the inverse relation to.

The words are generic English spatial prepositions; captions of a perception backend ("[image: ...]") state most
of them, so a text-only answerer reads what a picture showed only through its caption.
"""
from __future__ import annotations

import re

_REL = {"left": "left", "left of": "left", "to the left of": "left", "right": "right", "right of": "right",
        "to the right of": "right", "above": "above", "over": "above", "on top of": "above", "below": "below",
        "under": "below", "beneath": "below", "underneath": "below", "next to": "beside", "beside": "beside"}
INVERSE = {"left": "right", "right": "left", "above": "below", "below": "above", "beside": "beside"}
_REL_WORDS = r"(to the left of|to the right of|left of|right of|on top of|underneath|beneath|above|below|under|over|" \
             r"next to|beside)"
_NP = r"((?:[\w'&-]+\s){0,4}?[\w'&\"-]+)"
_FACT = re.compile(rf"{_NP}\s+(?:is|are|was|were|hangs|hang|hung|sits|sit|sat|stands|stand|stood)\s+"
                   rf"(?:right\s+|just\s+|directly\s+|placed\s+)?{_REL_WORDS}\s+(?:the|a|an|my)\s+{_NP}(?=[.,;!?]|$)",
                   re.I)
_ON_ITS = re.compile(r"^\s*(?:an?|the|my)\s+((?:[\w'&-]+\s){0,8}?[\w'&\"-]+)\s*;\s*"
                     rf"{_NP}\s+on\s+its\s+(left|right)\b", re.I)
_DET = re.compile(r"^(?:the|a|an|my)\s+", re.I)
_GENERIC = frozenset("the a an my of on in its is was sign shop thing one side downtown street road".split())


def _clean(np: str) -> str:
    np = _DET.sub("", np.strip().strip('"'))
    return np.replace('"', "")


def facts(sentence: str) -> list[tuple[str, str, str]]:
    """(A, relation, B) triples a sentence states (module docstring)."""
    out = []
    for part in re.split(r"(?<=[.!?])\s+", sentence):
        for m in _FACT.finditer(part):
            a = re.split(r"\b(?:and|then|so|but|while|where|downtown:|:)\s+", m.group(1))[-1]
            out.append((_clean(a), _REL[m.group(2).lower()], _clean(m.group(3))))
        m = _ON_ITS.match(part)
        if m:
            out.append((_clean(m.group(2)), m.group(3).lower(), _clean(m.group(1))))
    return out


def asked(question: str, subject: str | None) -> tuple[str, tuple[str, ...], str] | None:
    """(relation, target words in order, asked noun) of a question about where something is relative to a
    target."""
    lower = question.lower().replace("\u2019", "'")
    m = re.search(r"on (?:the |its )?(left|right)(?: side| hand side)?(?: of (?:my|the|your) (.+?))?\??$", lower)
    if m and re.match(r"^(?:when [^,]*,\s*)?(?:what|which|who)\b", lower):
        target = m.group(2) or subject
        return (m.group(1), _words(target), "") if target else None
    m = re.search(rf"^(?:which|what|whose)\s+(\w+\s+)?(?:is|was|are|were|hangs|hung|sits|sat|stands|stood)\s+"
                  rf"{_REL_WORDS}\s+(?:the|my|your)\s+(.+?)\??$", lower)
    if m:
        return _REL[m.group(2)], _words(m.group(3)), (m.group(1) or "").strip()
    return None


def _words(phrase: str) -> tuple[str, ...]:
    phrase = re.split(r"\s+(?:on|in|at|downtown)\b", phrase)[0] if phrase else phrase
    words = re.findall(r"[a-z0-9'&]+", phrase.lower())
    return tuple(w for w in words if w not in _GENERIC) or tuple(words)


def _has(text: str, target: tuple[str, ...]) -> bool:
    """``text`` names the target: its head word (the last), and every other word when it is a name ("Lotus
    Leaf")."""
    words = set(re.findall(r"[a-z0-9'&]+", text.lower()))
    if not target or target[-1] not in words and target[-1].rstrip("s") not in words:
        return False
    return len(target) == 1 or all(w in words for w in target) or not any(
        w[:1].isupper() for w in re.findall(r"[A-Za-z][\w'&]*", text)[1:])


def answer(rel: str, target: tuple[str, ...], noun: str, sentence: str) -> str | None:
    """The thing in relation ``rel`` to the target that ``sentence`` states, or None."""
    for a, r, b in facts(sentence):
        for this, that, want in ((b, a, rel), (a, b, INVERSE[rel])):
            if r == want and _has(this, target) and not _has(that, target):
                span = that
                if noun and span.lower().endswith(" " + noun):
                    span = span[: -len(noun) - 1]  # "Whose sign ...?": "Rustic Loaf", not "Rustic Loaf sign"
                return span
    return None
