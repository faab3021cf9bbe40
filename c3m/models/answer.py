"""``extractive`` answerer: a named, model-free heuristic that quotes the best-supported sentence.

It scores every sentence of the context by overlap with the question's content words (stopwords
removed, each question word counted once) and returns the best one with its citation; with no overlap
it refuses. It reads text only: an image reaches it as the perception backend's caption (``Memory.ask``), and
only the model backends (OpenAI-compatible VLMs, local VLM folders) see the pixels.

Time (``extractive-v2``): when the context marks items ``current`` or ``superseded`` (``c3m.read.timeline``),
a question about *now* (or with no time cue) prefers the current state and one about *before* the superseded
one, by one point of overlap; the answer then leads with the state and its date ("blue (since 2026-04-02): ...").
A question about where something is in a picture (``PICTURE_CUES``) prefers a caption on equal overlap.
"""
from __future__ import annotations

import re

from ..types import Answer, Context, ContextItem, EvidenceForm

_WORD = re.compile(r"[a-z0-9]+")
_CAPTION_MARK = re.compile(r"\[image: |\]")
_SENT = re.compile(r"(?<=[.!?])\s+")
STOPWORDS = frozenset(
    "a an the is are was were be been being do does did what which who whom whose when where why how of in on at "
    "to for from by with about as into my your our their his her its it this that these those i you we they me "
    "and or but not no so than then there here have has had can could would should will shall may might must "
    "any some all up down out over under again more most very just also now".split())
REFUSAL = "I don't know: nothing in my memory supports an answer."
#: question words that ask for the latest state, an earlier one, or the time of a change
NOW_CUES = frozenset("now currently current latest still anymore nowadays presently today".split())
PAST_CUES = frozenset("before originally original first initially previously earlier formerly former prior "
                      "used".split())
#: words that ask where something is in a picture: such a question prefers, on equal overlap, what an image
#: shows (a caption item) over the words said about it. Colour and shape words are left out: a weak captioner
#: then overrides a turn that stated the colour (measured on hard/test 32K: "What wall colour was my study
#: before ...?" lost its right answer to a wrong caption). Generic English, not a benchmark's templates.
PICTURE_CUES = frozenset("left right above below under beneath behind beside next front top bottom side "
                         "photo picture image".split())


def temporal_intent(question: str) -> str:
    """``now`` | ``past`` | ``when`` | "" (no cue: answer from the latest state, like ``now``)."""
    lower = question.lower()
    words = re.findall(r"[a-z]+", lower)
    if words[:1] == ["when"] or "what time" in lower:
        return "when"
    if any(w in PAST_CUES for w in words):
        return "past"
    if any(w in NOW_CUES for w in words) or "these days" in lower:
        return "now"
    return ""


def _stem(word: str) -> str:
    """Plural folding only ("windows" -> "window"), enough for overlap matching."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


class ExtractiveAnswerer:
    name = "extractive"
    #: reads text only: images come to it as captions
    sees_images = False

    def answer(self, question: str, context: Context, *, image_loader=None) -> Answer:
        wanted = content_words(question)
        intent = temporal_intent(question)
        pictured = bool(set(_WORD.findall(question.lower())) & PICTURE_CUES)
        best, best_score, best_item = None, 0.0, None
        for item in context.items:
            if item.form == EvidenceForm.GROUNDED_CROP:  # a str enum: equal to "grounded_crop" too
                continue  # "[crop: jar]" names the crop; what it shows comes as its caption item
            caption = item.form == EvidenceForm.CAPTION
            text = _CAPTION_MARK.sub("", item.text) if caption else item.text
            for sentence in _SENT.split(text):
                overlap = len(wanted & content_words(sentence))
                score = (overlap + _time_bonus(item, intent) + 0.01 * item.score  # retrieval score breaks ties
                         + (0.5 if pictured and caption else 0.0))
                if overlap and score > best_score:
                    p = item.provenance
                    best = f"the photo of {p.session_id}#{p.turn_index} shows: {sentence.strip()}" if caption \
                        else sentence.strip()
                    best_score, best_item = score, item
        if best is None:
            return Answer(REFUSAL, context, self.name)
        return Answer(_lead(best, best_item, context, intent), context, self.name, cited=(best_item.node_id,))


def _time_bonus(item: ContextItem, intent: str) -> float:
    """+1 for the state the question asks about (current for now/when/no cue, superseded for past), -1 for
    the other one; 0 for items in no update chain."""
    if not item.status:
        return 0.0
    want = "superseded" if intent == "past" else "current"
    return 1.0 if item.status == want else -1.0


def _lead(sentence: str, item: ContextItem, context: Context, intent: str) -> str:
    """The quoted sentence, led by the state it stands for in its update chain, and when."""
    found = context.step_of(item.node_id) if item.status else None
    if found is None:
        return sentence
    chain, k = found
    step = chain.steps[k]
    states = ", ".join(step.states)
    if intent == "when":
        return f"{step.time:%Y-%m-%d}: {sentence}"
    if not states:
        return sentence
    if item.status == "superseded" and item.superseded_at is not None:
        return f"{states} (until {item.superseded_at:%Y-%m-%d}): {sentence}"
    return f"{states} (since {step.time:%Y-%m-%d}): {sentence}"
