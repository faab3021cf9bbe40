"""``LeadSummarizer``: a deterministic extractive summariser for when no LLM is configured.

Method ("lead + density", version 1): split the text into sentences; keep the first sentence (it usually
says what the turn is about), then add the remaining sentences with the highest content-word density
while the summary stays within ``max_tokens`` (counted with ``ApproxTokenCounter``), and emit the kept
sentences in their original order. Density is content words / (words + 3); the +3 prior keeps one-word
interjections ("Thanks!") from outranking informative sentences; sentences with no content word are never
added. Ties go to the earlier sentence.

It never invents text: every output sentence is a substring of the input. Only when not even the first
sentence fits the budget does it return that sentence's longest word prefix that fits (still a
substring), so a tiny budget yields something rather than nothing.
"""
from __future__ import annotations

import re

from .tokens import ApproxTokenCounter

# A sentence ends at . ! ? (plus closing quotes/brackets) followed by whitespace or the end, or at a newline;
# "3.5" and "e.g.x" do not end one.
_SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?![.!?\"')\]]*(?:\s|$)))+(?:[.!?]+[\"')\]]*)?")
_WORD = re.compile(r"\w+")
_PRIOR = 3

STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have having
he her here hers herself him himself his how i if in into is it its itself just let me more most my myself
no nor not now of off on once only or other our ours ourselves out over own same she should so some such
than that the their theirs them themselves then there these they this those through to too under until
up very was we were what when where which while who whom why will with would you your yours yourself
yourselves oh ok okay yes yeah yep no nope hi hello hey thanks thank please sure well really lol haha
great cool nice right got get like one thing things something anyway actually maybe
""".split())


def sentences(text: str) -> list[str]:
    """The text's sentences, each a stripped substring of ``text``, in order."""
    return [s for s in (m.group().strip() for m in _SENTENCE.finditer(text)) if s]


def density(sentence: str) -> float:
    words = [w.lower() for w in _WORD.findall(sentence)]
    content = sum(1 for w in words if w not in STOPWORDS)
    return content / (len(words) + _PRIOR)


class LeadSummarizer:
    """Extractive, deterministic and offline; see the module docstring for the method."""

    name = "lead"
    version = "1"

    def __init__(self):
        self.counter = ApproxTokenCounter()

    def summarize(self, text: str, max_tokens: int = 64) -> str:
        if max_tokens <= 0 or not text.strip():
            return ""
        if self.counter.count(text) <= max_tokens:
            return text.strip()
        sents = sentences(text)
        costs = [self.counter.count(s) for s in sents]
        if costs[0] > max_tokens:
            return self._prefix(sents[0], max_tokens)
        keep, used = {0}, costs[0]
        scores = [density(s) for s in sents]
        for i in sorted(range(1, len(sents)), key=lambda i: (-scores[i], i)):
            if scores[i] > 0 and used + costs[i] <= max_tokens:
                keep.add(i)
                used += costs[i]
        return " ".join(sents[i] for i in sorted(keep))

    def _prefix(self, sentence: str, max_tokens: int) -> str:
        """The longest prefix of ``sentence`` ending at a word boundary that fits ``max_tokens``."""
        best = ""
        for m in _WORD.finditer(sentence):
            candidate = sentence[:m.end()]
            if self.counter.count(candidate) > max_tokens:
                break
            best = candidate
        return best
