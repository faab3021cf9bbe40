"""``extractive`` answerer: a named, model-free heuristic that quotes the best-supported sentence.

It scores every sentence of the context by overlap with the question's content words (stopwords
removed, each question word counted once) and returns the best one with its citation; with no overlap
it refuses. It reads text only, so details that live only in images are out of its reach — the model
backends (SmolLM2, OpenAI-compatible VLMs) answer from images too.
"""
from __future__ import annotations

import re

from ..types import Answer, Context

_WORD = re.compile(r"[a-z0-9]+")
_SENT = re.compile(r"(?<=[.!?])\s+")
STOPWORDS = frozenset(
    "a an the is are was were be been being do does did what which who whom whose when where why how of in on at "
    "to for from by with about as into my your our their his her its it this that these those i you we they me "
    "and or but not no so than then there here have has had can could would should will shall may might must "
    "any some all up down out over under again more most very just also now".split())
REFUSAL = "I don't know: nothing in my memory supports an answer."


def _stem(word: str) -> str:
    """Plural folding only ("windows" -> "window"), enough for overlap matching."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


class ExtractiveAnswerer:
    name = "extractive"

    def answer(self, question: str, context: Context, *, image_loader=None) -> Answer:
        wanted = content_words(question)
        best, best_score, best_node = None, 0.0, None
        for rank, item in enumerate(context.items):
            for sentence in _SENT.split(item.text):
                overlap = len(wanted & content_words(sentence))
                score = overlap + 0.01 * item.score  # retrieval score breaks ties
                if overlap and score > best_score:
                    best, best_score, best_node = sentence.strip(), score, item.node_id
        if best is None:
            return Answer(REFUSAL, context, self.name)
        return Answer(best, context, self.name, cited=(best_node,))
