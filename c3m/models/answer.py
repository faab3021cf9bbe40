"""``extractive`` answerer (``extractive-v4``): an offline, model-free answerer that is honest by design.

It answers only what it can read off the evidence, and says so when it cannot:

- **an answer** is a short span of the type the question asks (``c3m.language.question``): a value (colour, material,
  shape, size, pattern, job, brand, number plate), a count, a name, a place, a date, what stands left / right / above / below a thing
  (``c3m.language.spatial``, mostly from captions), or one of the choices the question offers ("which came first, my
  violin or my teapot?", "before or after ...?"). The span is taken from the evidence and
  cited; the text leads with it ("blue (since 2026-04-02): <the sentence that states it>") and ``Answer.span``
  holds it alone. A value comes from the one chain definition (``c3m.language.timeline``): the value stated **about
  the asked subject**, the latest one for "now / currently" (and no cue), the first one for "originally / first /
  used to / before", the latest one before a date the question bounds ("Before 17 June 2024, ...");
- **"Not sure; the closest evidence: ..."** (``declined``) when the evidence is there but no span of the asked
  type can be read from it (a description, a list, a reason, a yes/no it cannot verify, an attribute only a
  picture shows), or when its calibrated confidence in the span is below ``ANSWER_AT``: the closest sentence is
  returned as evidence, never dressed as an answer;
- **"Not in memory"** (``declined`` and ``refused``) when no item states the asked attribute of the asked subject: no item of
  the context is about the user's thing the question names ("my dog", "my sister's car"; an item that only
  mentions it with no word for the attribute and no picture counts as not stating it), or a question asks about
  a change ("Which new colour did I give my bucket?") when no item about the thing says it changed (only its
  first state was stated; "I almost painted it" is no change). A change the user says *they* made counts as the
  user's own thing even when the question calls it "the X" ("Where did I shift the toolbox in the attic to?",
  ``Query.by_user``): had they done it, their turns would say so; a twin that was changed ("the toolbox in the
  hallway") is not it (``Query.qualifier``). Or a detail
  question ("Did Julian mention attending an art school in Japan?", "Which exact brand of sofa did Lin buy?",
  ``c3m.language.question.detail_question``) whose focus words no round of the context states together
  (``_absent``). Other questions about "the X" or with no subject never get "Not in memory": this reader cannot
  tell absence there (which of several X's is meant, or who else might have said it).

Which photo of the conversation shows a thing (``_image``) and on which day an event happened (``_date``) are
read from the round (a user turn and the reply to it) that best covers the question's focus, IDF-weighted over the
context. "Which picture showed the paint brush?" is answered with the photo itself when one photo clearly fits
best: the turn that shared it is cited, ``span`` names it (a stored image's ``sha256:<hex>``; in a converted chat
that kept only a ``[shared a photo: <caption>]`` mark, its ``<session>:IMG_<k>`` id when its number is known, else
``the photo of <session> turn <t>``) and the text says when it was shared and what it shows.

Each answer carries ``confidence``: P(correct) for the route that produced it (``CALIBRATION``), fitted on dev
data (the real Mem-Gallery dev dialogs and the synthetic dev split) with ``benchmarks/answer_calibration.py
score``; a decline carries the counted P(the decline was right). It reads text only: an image reaches it as the
perception backend's caption (``Memory.ask``); only the model backends (``--answerer api|local``) see the
pixels, and they are the way to full answers (descriptions, lists, reasons, yes/no judgements).
"""
from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Sequence

from ..language.attributes import (_WORDS_OF, ATTRIBUTE_HINTS, CHANGE_CUES, NUMBER_WORDS, STATED_CHANGE, VISUAL,
                               about_clauses, changed_without_value, fold, hypothetical, mentions, values)
from ..language import spatial
from ..language.question import Query, analyse, asks_for_image, asks_for_images, detail_question, speaker_names
from ..language.when import question_windows
from ..language.timeline import Found, event_time, item_text, owned, subject_chain
from ..types import Answer, Context, ContextItem, EvidenceForm

VERSION = "extractive-v4"  # v4: "which photo" answered with the photo (cited), not declined
_WORD = re.compile(r"[a-z0-9]+")
#: the stating turn itself says it changed ("I moved my bowl to the kitchen", "a new colour: pink")
_CHANGED = re.compile(r"\b(re\w+ed|changed|now|switched|swapped|moved|shifted|became|new colou?r|new coat|"
                      r"new \w+ paint|paint job|no longer|anymore|from \w+ to|instead|these days|renamed|turned)\b", re.I)
_SENT = re.compile(r"(?<=[.!?])\s+")
STOPWORDS = frozenset(
    "a an the is are was were be been being do does did what which who whom whose when where why how of in on at "
    "to for from by with about as into my your our their his her its it this that these those i you we they me "
    "and or but not no so than then there here have has had can could would should will shall may might must "
    "any some all up down out over under again more most very just also now".split())
#: the old answerer's refusal, kept for the model backends (SmolLM2, local) that still return it
REFUSAL = "I don't know: nothing in my memory supports an answer."
#: words that ask where something is in a picture: such a question prefers, on equal overlap, what an image
#: shows (a caption item) over the words said about it
PICTURE_CUES = frozenset("left right above below under beneath behind beside next front top bottom side "
                         "photo picture image".split())
#: question words that say nothing about *what* is asked (a yes/no question's focus is the rest)
_GENERIC = STOPWORDS | frozenset("""
mention mentioned discuss discussed talk talked say said ask asked tell told conversation conversations chat chats
dialogue dialog user assistant specific any ever share shared based consider would whether there exact exactly
kind type sort example examples detail details information info particular please determine following during
also other else one ones thing things someone something people person
""".split())
#: P(correct) of each route: (right + 1) / (n + 2) on the dev sets, counted by ``python
#: benchmarks/answer_calibration.py score real10.pkl syn2.pkl syn.pkl syne.pkl`` (the route table; the command lines
#: that build those contexts are in benchmarks/results/answerer-calibration-cpu.md). Tuned on dev only.
CALIBRATION = {
    "prior": 0.5,                # a route dev data never reached
    # the asked attribute of the user's own thing ("my bike", "the mug" I bought, "my sister Meera's cat"), from a
    # chain or a single statement: colour 16/16, job 13/13, plate 3/3, material 2/2, count 1/1, brand 1/1 ->
    # (36 + 1) / (36 + 2); a value route of another kind (name, place, ...) falls back to this pooled rate
    "value-own": 0.97,
    # ... of "the X" no user turn calls theirs (which X is meant is unsure: a shop's many sweaters): 4/18
    "value-other": 0.25,
    "date-change": 0.97,         # when a chain's state changed: the same value reading, then its turn's date
    # when an event happened: the date of the round that best states it (IDF-weighted, DATE_MARGIN ahead of other
    # days' rounds): 13/20 on the real dev dialogs (a day off where the gold date is the day before the session)
    "date-event": 0.64,
    "choice-first": 0.97,        # which of two things came up first: 27/27
    "beside": 0.92,              # what stands left / right / above / below a thing (captions): 10/10
    "order": 0.67,               # before or after: times of the two best-matching turns, 7/10
    "count-events": 0.60,        # how often a change was stated ("almost" left out): 11/18
    # P(the question is unanswerable | declined as not in memory): nothing in the context is about the user's thing,
    # or none of the items about it states the asked attribute: 36/42 (the 6 wrong: 3 real dev questions, and 3
    # synthetic "which came up first, my X or my Y?" whose X no item of the context names, its turn not retrieved)
    "not-in-memory": 0.84,
    # ... a change of the user's thing is asked ("Which new colour did I give the speaker in the balcony?", "Where
    # did I shift my fan to?") and no item about it says it changed (``_missing``, ``_value``): 27/27, synthetic only
    # (no real dev question asks one). Counted on real10, syn2, syn2o, syn, syne; the check set (synchk) is not
    "not-in-memory-no-change": 0.97,
    # a detail question whose focus no round of the context states (``_absent``): P(unanswerable), real dev 84/85
    "not-in-memory-absent-yesno": 0.98,
    "not-in-memory-absent-detail": 0.83,  # "which exact / specific ...": 4/4
    # which photo of the conversation shows X (``_image``: the best photo beats the runner-up by IMAGE_MARGIN; the
    # answer cites its turn): 72/80 on the real dev dialogs, right by the harness's rule
    # (``c3m.eval.metrics.image_verdict``: the cited turn is a gold evidence turn of the gold id's session). Its
    # number in the session (``D6:IMG_001``) is named only when known: 2 of the 4 named were the right photo
    "image": 0.89,
    "not-sure": 0.44,            # P(the answer's evidence is in the context | not sure): 287/655
}

#: a turn that shows a photo ("Here's my van", "see the picture") though the photo is not in the context
_SHOWN = re.compile(r"\b(here's|here is|look at|have a look|see the (?:photo|picture|pic)|photo|picture|pic|snapped|"
                    r"snap|shot)\b", re.I)


def confidence(route: str) -> float:
    """P(correct) of a route (``CALIBRATION``): ``value-chain-colour-own`` is read as ``value-own``."""
    if route in CALIBRATION:
        return CALIBRATION[route]
    if route.startswith("value-"):
        return CALIBRATION["value-own" if route.endswith("-own") else "value-other"]
    return CALIBRATION["prior"]


#: below this calibrated confidence the answerer returns its evidence as "Not sure" instead of a span
ANSWER_AT = 0.7


def _stem(word: str) -> str:
    """Plural folding only ("windows" -> "window"), enough for overlap matching."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


def _shown(item: ContextItem, sentence: str) -> str:
    if item.form == EvidenceForm.CAPTION:
        p = item.provenance
        return f"the photo of {p.session_id}#{p.turn_index} shows: {sentence.strip()}"
    return sentence.strip()


def _sentences(items) -> list[tuple[ContextItem, str]]:
    out = []
    for item in items:
        text = item_text(item)
        for s in _SENT.split(text):
            if s.strip():
                out.append((item, s.strip()))
    return out


def _cite(item: ContextItem) -> str:
    p = item.provenance
    return f"{p.session_id}#{p.turn_index}, {p.time:%Y-%m-%d}"


class ExtractiveAnswerer:
    """``extractive-v4`` (module docstring). ``last_route`` / ``last_span`` name how the latest answer was made
    (for ``benchmarks/answer_calibration.py``; not part of the answer)."""

    name = "extractive"
    version = VERSION
    #: reads text only: images come to it as captions
    sees_images = False

    def answer(self, question: str, context: Context, *, image_loader=None) -> Answer:
        items = [i for i in context.items if item_text(i).strip()]
        now = max((i.provenance.time for i in context.items), default=None)
        q = analyse(question, now)
        if not items:
            return self._not_in_memory(q, context, "nothing in my memory was found for this question")
        absent = self._absent(q, items, context)
        if absent is not None:
            return absent
        for route in (self._image, self._beside, self._value, self._choice, self._order, self._date):
            got = route(q, items, context)
            if got is not None:
                return got
        return self._fallback(q, items, context)

    # -- answers -----------------------------------------------------------------------------------------
    def _answered(self, route: str, span: str, item: ContextItem, sentence: str, context: Context, q: Query,
                  lead: str | None = None) -> Answer:
        conf = confidence(route)
        if conf < ANSWER_AT:  # below the bar: the evidence, not the span (the span is kept for calibration)
            answer = self._not_sure(q, context, item, sentence, conf)
            self.last_route, self.last_span = f"{route} (declined)", span
            return answer
        self.last_route, self.last_span = route, span
        text = f"{lead or span}: {_shown(item, sentence)}"
        return Answer(text, context, self.name, cited=(item.node_id,), confidence=conf, span=span)

    def _value(self, q: Query, items, context) -> Answer | None:
        """The asked attribute of the asked subject (a chain's first / latest state, or its one stated value)."""
        if q.attribute is None or q.kind in ("yesno", "choice"):
            return None
        if q.kind == "date" and q.attribute is None:
            return None
        subject = q.subject or (q.names[0].lower() if q.names else None)
        if subject is None:
            return None
        if q.kind == "count" and "how often" in q.question.lower():
            return self._how_often(q, subject, items, context)
        chain, found = subject_chain(q, items)
        if not found:
            return self._missing(q, subject, items, context)
        if q.change and chain is None and q.intent != "past" and not _CHANGED.search(item_text(found[-1].item)) \
                and not any(i.provenance.time > found[-1].time and _says_changed(item_text(i), subject, q)
                            for i in items):
            # "Which new colour did I give my bucket?" when only its first colour was ever stated (a later "Gave my
            # bucket a new colour, see the photo" states the change, only not its value: not sure, below)
            return self._not_in_memory(q, context, f"nothing in my memory says {_your(q)} "
                                       + ("was moved" if q.attribute == "place" else f"got a new {q.attribute}"),
                                       route="not-in-memory-no-change")
        pick = self._pick(q, found)
        if not pick:  # "Before <date>, ...": no state before that date is in the context
            return self._missing(q, subject, items, context, found=found)
        f = pick[-1]
        # a later turn says it changed again, but only a picture shows to what: the latest state is not in words
        if q.intent != "past" and q.before is None:
            for item in sorted(items, key=lambda i: i.provenance.time):
                if item.provenance.time > f.time and changed_without_value(
                        item_text(item), subject, q.attribute, (), q.owner, q.qualifier):
                    return self._not_sure(q, context, item, item_text(item), CALIBRATION["not-sure"])
        sentence = self._stating_sentence(f, q, subject)
        if q.kind == "date":  # "When did I move?": the date of the change asked about (the step's first turn)
            target = found[-1] if q.intent != "past" else found[0]
            if chain is not None:
                step = chain.steps[0 if "first" in q.words or "originally" in q.words else -1]
                target = next(g for g in found if g.item.node_id in step.node_ids)
            span = _date_span(target.time, q.question)
            return self._answered("date-change", span, target.item, self._stating_sentence(target, q, subject),
                                  context, q, lead=f"{span} ({target.values[-1]})")
        vals = list(f.values)
        if chain is not None:  # the chain's state at that step (what the step introduced, not what it restated)
            for step in chain.steps:
                if f.item.node_id in step.node_ids and step.states:
                    vals = list(step.states)
        span = ", ".join(vals) if q.attribute != "count" else vals[-1]
        if q.attribute == "count" and "arabic" in q.question.lower():
            span = str(NUMBER_WORDS.get(span, span))
        own = owned(q, subject, items)
        route = f"value-{'chain' if chain is not None else 'single'}-{q.attribute}-{'own' if own else 'other'}"
        later = [g for g in found if g.time > f.time and set(g.values) - set(f.values)]
        when = f"until {later[0].time:%Y-%m-%d}" if later else f"since {f.time:%Y-%m-%d}"
        return self._answered(route, span, f.item, sentence, context, q, lead=f"{span} ({when})")

    def _image(self, q: Query, items, context) -> Answer | None:
        """"Which image shows a paint brush?", "Which of the pictures shared on 2024-07-07 is about the oil
        painting?": the photo of the context whose round (the turn that shared it, its description, the reply to
        it) best covers the question's focus, IDF-weighted over the context's rounds, inside the day or period the
        question names, when it beats the runner-up photo by ``IMAGE_MARGIN``. The answer is the photo itself:
        its turn is cited and ``span`` is a reference to it (``_photo_ref``: the stored image's sha256, the
        ``<session>:IMG_<k>`` id when its number is known, else its session and turn), the text says when it was
        shared and what it shows. A question that asks for several photos ("Which images ...", "What two
        pictures ...", ``asks_for_images``) is declined with the best one as evidence: one photo would be part of
        the answer."""
        if not asks_for_image(q.question):
            return None
        now = max(i.provenance.time for i in items)
        windows = [w for w in question_windows(q.question, now) if w.start is not None or w.end is not None]
        focus = [w for w in focus_words(q.question, speaker_names(q.question)) if w not in _PICTURE_WORDS]
        if not focus:
            return None
        best = []
        for score, r in _round_scores(items, focus):
            photos = [i for i in r if _photos_in(i)]
            if not photos or (windows and not any(w.contains(photos[0].provenance.time) for w in windows)):
                continue
            best.append((score, photos[0], r))
        if not best:
            return None
        best.sort(key=lambda x: -x[0])
        score, item, rnd = best[0]
        runner = best[1][0] if len(best) > 1 else 0.0
        if score <= 0:
            return None
        ref, shown = _photo_ref(item, items, rnd, focus)
        self.last_margin = score / runner if runner else float("inf")
        if score < IMAGE_MARGIN * runner:  # two photos fit about as well: which one is unsure
            answer = self._not_sure(q, context, item, shown, CALIBRATION["not-sure"])
            self.last_route, self.last_span = "image-close (declined)", ref
            return answer
        if asks_for_images(q.question):  # several photos asked for: this one is at most part of the answer
            answer = self._not_sure(q, context, item, f"one of the photos asked for ({ref}): {shown}",
                                    CALIBRATION["not-sure"])
            self.last_route, self.last_span = "image-several (declined)", ref
            return answer
        p = item.provenance
        who = "you shared" if item.role == "user" else "shown"
        where = (ref if ref.startswith(f"{p.session_id}:") else f"session {p.session_id}, turn {p.turn_index}"
                 + (f"; image {ref[:19]}…" if ref.startswith("sha256:") else ""))
        lead = f"The photo {who} on {p.time:%Y-%m-%d} ({where})"
        return self._answered("image", ref, item, shown, context, q, lead=lead)

    def _beside(self, q: Query, items, context) -> Answer | None:
        """"What is on the right side of my cooler?", "Which shop is under the McDonald's sign?": a relation a
        sentence (most often a photo's caption) states (``c3m.language.spatial``); the first showing for "first"."""
        got = spatial.asked(q.question, q.subject)
        if got is None:
            return None
        rel, target, noun = got
        hits = []
        for item, sentence in _sentences(sorted(items, key=lambda i: (i.provenance.time, i.provenance.turn_index))):
            span = spatial.answer(rel, target, noun, sentence)
            if span:
                hits.append((item, sentence, span))
        if not hits:
            return None
        item, sentence, span = hits[0] if ("first" in q.words or "originally" in q.words) else hits[-1]
        return self._answered("beside", span, item, sentence, context, q)

    def _how_often(self, q: Query, subject: str, items, context) -> Answer | None:
        """"How often did my van get a new coat of paint?": the turns that say it changed (not "almost")."""
        attribute = "colour" if re.search(r"\b(paint|colou?r|coat|finish|respray)", q.question.lower()) else None
        if attribute is None:
            return None
        cue = CHANGE_CUES[attribute]
        hits = {}
        for item in items:
            if item.role != "user" or item.form not in (EvidenceForm.RAW_TEXT, EvidenceForm.CAPTION):
                continue
            for c in about_clauses(item_text(item), subject, (), q.owner, q.qualifier):
                bought = re.search(r"\b(bought|picked up|brought home|got|new)\s+(a|an)\s+(\w+\s+){0,2}"
                                   + re.escape(subject), c.lower())
                restated = values(c, subject, attribute) and re.search(r"\b(now|became|turned|these days)\b", c, re.I)
                if (cue.search(c) or restated) and not hypothetical(c) and not bought:
                    hits[item.node_id] = (item, c)  # "... got a fresh coat", "the attic walls are teal now"
        if not hits:
            return self._missing(q, subject, items, context)
        n = len(hits)
        span = str(n) if "arabic" in q.question.lower() else _WORDS_OF.get(n, str(n))
        item, c = max(hits.values(), key=lambda x: x[0].provenance.time)
        return self._answered("count-events", span, item, c, context, q, lead=f"{span} ({n} turns)")

    @staticmethod
    def _pick(q: Query, found: list[Found]) -> list[Found]:
        """The first state for "originally / before", the states before a bounding date (none: []), else all (the
        latest last)."""
        if q.before is not None:
            return [f for f in found if f.time < q.before]
        if q.intent == "past":
            return found[:1]
        return found

    @staticmethod
    def _stating_sentence(f: Found, q: Query, subject: str) -> str:
        text = item_text(f.item)
        for s in _SENT.split(text):
            if any(v.lower() in s.lower() for v in f.values):
                return s.strip()
        return text.strip()

    def _choice(self, q: Query, items, context) -> Answer | None:
        """"Which came first, my violin or my teapot?": the one an earlier turn names."""
        if q.kind != "choice" or q.choices == ("before", "after") or len(q.choices) != 2:
            return None
        firsts = []
        for choice in q.choices:
            head = fold(choice.split()[-1])
            hit = [i for i in sorted(items, key=lambda i: i.provenance.time) if mentions(item_text(i), head)]
            if not hit:
                return None
            firsts.append((hit[0].provenance.time, choice, hit[0]))
        if firsts[0][0] == firsts[1][0]:
            return None
        asks_last = bool(re.search(r"\b(last|later|most recent|latest|second)\b", q.question.lower()))
        t, choice, item = (max if asks_last else min)(firsts, key=lambda x: x[0])
        span = re.sub(r"^(my|our|the)\s+", "the ", choice)
        return self._answered("choice-first", span, item, item_text(item).split(".")[0], context, q)

    def _order(self, q: Query, items, context) -> Answer | None:
        """"Did X before or after Y?" / "Did X before Y?": the times of the turns that best match each event."""
        lower = q.question.lower().rstrip("?")
        m = re.search(r"^(?:did|was|were|had|has)\s+(.+?)\s+(before or after|after or before|before|after)\s+(.+)$",
                      lower)
        if not m:
            return None
        e1, rel, e2 = m.group(1), m.group(2), re.sub(r"\.\s*use .*$", "", m.group(3))
        a, b = self._best_item(e1, items), self._best_item(e2, items)
        if a is None or b is None or a[0].node_id == b[0].node_id:
            return None
        ta, tb = (a[0].provenance.time, a[0].provenance.turn_index), (b[0].provenance.time, b[0].provenance.turn_index)
        if ta == tb:
            return None
        first = "before" if ta < tb else "after"
        if rel in ("before or after", "after or before"):
            span = first.capitalize()
        else:
            span = "Yes" if first == rel else "No"
        return self._answered("order", span, a[0], a[1], context, q,
                              lead=f"{span} ({_cite(a[0])} vs {_cite(b[0])})")

    def _best_item(self, phrase: str, items, need: int = 2):
        want = content_words(phrase) - _GENERIC
        best, score = None, 0
        for item, s in _sentences(items):
            k = len(want & content_words(s))
            if k > score:
                best, score = (item, s), k
        return best if score >= min(need, len(want)) and score else None

    def _date(self, q: Query, items, context) -> Answer | None:
        """"When did I ...?" / "On which date did Maya ...?": the date of the round that best states the event —
        the question's focus words, IDF-weighted over the context's rounds — when it beats the best round of any
        other day by ``DATE_MARGIN``; a day the turn names ("yesterday") is resolved against its session's time."""
        lower = q.question.lower()
        if q.kind != "date" and not re.match(r"^(?:on |at )?(?:which|what) (?:date|day)\b", lower):
            return None
        event = re.sub(r"^(when|on which day|which day|what date|on what date|on which date|which date|what day)\s+",
                       "", lower)
        event = re.sub(r"(please |only )?return .*$|in the format.*$", "", event)
        focus = focus_words(event, speaker_names(q.question))
        if not focus:
            return None
        scored = [(score, r) for score, r in _round_scores(items, focus) if score > 0]
        if not scored:
            return None
        scored.sort(key=lambda x: -x[0])
        score, best = scored[0]
        item = next((i for i in best if i.role == "user"), best[0])
        sentences = [s for s in _SENT.split(item_text(item)) if s.strip()] or [item_text(item)]
        sentence = max(sentences, key=lambda s: sum(_stated(w, _words_of(s)) for w in focus))
        t = event_time(item, sentence)
        rival = max((sc for sc, r in scored[1:] if r[0].provenance.time.date() != best[0].provenance.time.date()),
                    default=0.0)
        span = _date_span(t, q.question)
        if score < DATE_MARGIN * rival:  # another day's round states it about as well
            answer = self._not_sure(q, context, item, sentence, CALIBRATION["not-sure"])
            self.last_route, self.last_span = "date-event-close (declined)", span
            return answer
        return self._answered("date-event", span, item, sentence, context, q)

    # -- declines ----------------------------------------------------------------------------------------
    def _absent(self, q: Query, items, context) -> Answer | None:
        """"Did Julian mention attending an art school in Japan?", "Was sesame used when making candied fruit?",
        "Which exact brand of sofa did Lin buy?": a question that asks whether one detail was stated
        (``detail_question``) is not in memory when a word of its focus appears in no item of the context, or
        when no single round (a user turn and the reply to it) states at least ``ABSENT_COVER`` of its focus words together (the words are there, but
        about other things). The focus is the question's content words less its frame ("did ... mention any
        specific ..."), less the name of the person it is about (the user's chat says "I")."""
        got = detail_question(q.question)
        if got is None:
            return None
        shape, core = got
        focus = focus_words(core, speaker_names(q.question))
        if not focus:
            return None
        texts = [_words_of(" ".join(item_text(i) for i in r)) for r in _rounds(items)]
        every = set().union(*texts) if texts else set()
        missing = [w for w in focus if not _stated(w, every)]
        cover = max((sum(_stated(w, t) for w in focus) / len(focus) for t in texts), default=0.0)
        if missing:
            why = f"no item of my memory mentions {', '.join(repr(w) for w in missing[:3])}"
        elif cover < ABSENT_COVER:
            why = f"no item of my memory states {', '.join(focus)} together"
        else:
            return None
        return self._not_in_memory(q, context, why, route=f"not-in-memory-absent-{shape}")

    def _missing(self, q: Query, subject: str, items, context, found=()) -> Answer:
        """No value of the asked attribute was read for the subject: "not in memory" when no item is about the
        subject, or when the items about it neither carry a picture (which may show it) nor use a word for the
        attribute that this reader failed to read; else "not sure" with the closest of them."""
        about = [(i, s) for i, s in _sentences(items)
                 if subject == "i" or about_clauses(s, subject, q.names, q.owner, q.qualifier, locative_ok=True)]
        what = (f"how often that happened to {_your(q)}" if "how often" in q.question.lower() else
                f"how many {subject}s" if q.attribute == "count" else f"the {q.attribute} of {_your(q)}")
        # the user's own thing: "my X", a name, or "the X" the user says they changed ("Which new colour did I give
        # the speaker in the balcony?": had the user done it, their turns would say so, as for "my X")
        own = q.possessed or q.by_user or subject == "i" or bool(q.names) and subject == q.names[0].lower()
        if not own:  # "the temple", "the product": this reader cannot tell which one is meant
            about = about or [(i, s) for i, s in _sentences(items)]
            item, sentence = max(about, key=lambda x: (len(content_words(q.question) & content_words(x[1])),
                                                       x[0].provenance.time))
            return self._not_sure(q, context, item, sentence, CALIBRATION["not-sure"])
        if not about:
            return self._not_in_memory(q, context, f"nothing in my memory states {what}")
        if q.change and q.attribute in STATED_CHANGE and not any(
                STATED_CHANGE[q.attribute].search(s) and not hypothetical(s) for _, s in about):
            # "Where did I shift my fan to?" when no turn says it was moved ("I almost painted it" is no change)
            return self._not_in_memory(q, context, f"nothing in my memory says {_your(q)} "
                                       + ("was moved" if q.attribute == "place" else f"got a new {q.attribute}"),
                                       route="not-in-memory-no-change")
        hint = ATTRIBUTE_HINTS.get(q.attribute)
        pictured = {i.node_id for i in context.items
                    if i.images or i.form in (EvidenceForm.CAPTION, EvidenceForm.RAW_IMAGE, EvidenceForm.GROUNDED_CROP)}
        hinted = any((q.attribute in VISUAL and (i.node_id in pictured or _SHOWN.search(s)))
                     or (hint is not None and hint.search(s)) for i, s in about)
        if not hinted and not found and q.before is None:
            return self._not_in_memory(q, context, f"nothing in my memory states {what}")
        item, sentence = max(about, key=lambda x: (len(content_words(q.question) & content_words(x[1])),
                                                   x[0].provenance.time))
        return self._not_sure(q, context, item, sentence, CALIBRATION["not-sure"])

    def _fallback(self, q: Query, items, context) -> Answer:
        """No span of the asked type: not in memory when the question's own thing ("my dog") is named by no item,
        else the closest evidence. Word overlap does not tell a question about a detail never stated from one about
        a detail that was (measured on the real dev dialogs: the best sentence covers a median 0.44 of an
        unanswerable yes/no question's words and 0.36 of an answerable one's), so that alone never declines."""
        sents = _sentences(items)
        if q.possessed and not any(about_clauses(s, q.subject, (), q.owner, q.qualifier, locative_ok=True)
                                   for _, s in sents):
            return self._not_in_memory(q, context, f"nothing in my memory is about {_your(q)}")
        focus = content_words(q.question) - _GENERIC
        best, best_key = None, (-1.0, 0.0)
        pictured = bool(set(_WORD.findall(q.question.lower())) & PICTURE_CUES)
        for item, s in sents:
            overlap = len(focus & content_words(s))
            key = (overlap + (0.5 if pictured and item.form == EvidenceForm.CAPTION else 0)
                   + _time_bonus(item, q.intent), 0.01 * item.score)
            if key > best_key:
                best, best_key = (item, s), key
        if best is None:
            return self._not_in_memory(q, context, "nothing in my memory mentions that")
        return self._not_sure(q, context, best[0], best[1], CALIBRATION["not-sure"])

    def _not_in_memory(self, q: Query, context, why: str, route: str = "not-in-memory") -> Answer:
        self.last_route, self.last_span = route, None
        return Answer(f"Not in memory: {why}.", context, self.name, declined=True, refused=True,
                      confidence=confidence(route))

    def _not_sure(self, q: Query, context, item: ContextItem, sentence: str, conf: float) -> Answer:
        self.last_route, self.last_span = "not-sure", None
        return Answer(f"Not sure; the closest evidence: {_shown(item, sentence)} [{_cite(item)}]", context,
                      self.name, cited=(item.node_id,), declined=True, confidence=conf)


#: words that frame a detail question without naming its detail ("Based on the conversation, did Julian ever
#: mention any specific ...?"): never evidence of absence
_FRAME = _GENERIC | frozenset("""
based considering consider considered considering mention mentions mentioning discuss discussing talk
talked ask asking say says state stated ever specific specifically regarding related relate use used using user
users someone somebody interested answer think thinks thought expect expected happen happened describe described
describing express expressed explain explained plan planned decide decided want wanted like liked likes let know
knew make made get got go went come came take took give gave see saw look looked during while since already still
even really actually each every another such same different well good much many few lot lots time times way ways
year years day days week weeks month months include includes included including involve involved share tell try
tried exact
""".split())
_TOKEN = re.compile(r"[a-z][a-z'-]*[a-z]|[a-z]")
#: below this share of a detail question's focus words stated together in one item, the detail is not in memory
ABSENT_COVER = 0.8


#: the words that say "a picture", not what it shows
_PICTURE_WORDS = frozenset("image images picture pictures photo photos pic pics img shown show shows upload uploaded "
                           "shared share represent represents representing related relate focus focuses which".split())
_PHOTO_MARK = re.compile(r"\[(?:shared |sent |uploaded )?(?:a |an )?(?:photo|picture|image)\b", re.I)
_PHOTO_ID = re.compile(r"\[(?:shared |sent |uploaded )?(?:a |an )?(?:photo|picture|image)\s+([A-Za-z0-9]+:IMG_\d+)\b")
#: the caption a converted chat's photo mark carries ("[shared a photo: <caption>]")
_PHOTO_CAPTION = re.compile(r"\[(?:shared |sent |uploaded )?(?:a |an )?(?:photo|picture|image)"
                            r"(?:\s+[A-Za-z0-9]+:IMG_\d+)?:\s*([^\]]*)\]", re.I)
#: one image's caption in a caption item ("[image: <caption>]", ``c3m.read.answer_view``)
_CAPTION_PART = re.compile(r"\[image:\s*([^\]]*)\]")
#: the best round must score this many times the best round of another day for its date to be the answer
DATE_MARGIN = 1.5
#: the best photo must score this many times the runner-up's IDF-weighted overlap to be named
IMAGE_MARGIN = 1.5


def _photos_in(item: ContextItem) -> int:
    """How many photos a turn shared: stored images, else the marks a converted chat left in the words
    ("[shared a photo: ...]"); a caption item is the description of its turn's photo, not another one."""
    if item.form not in (EvidenceForm.RAW_TEXT, EvidenceForm.RAW_IMAGE):
        return 0
    return len(item.images) or len(_PHOTO_MARK.findall(item.text))


def _image_number(item: ContextItem, items, j: int = 0) -> str | None:
    """``<session>:IMG_<k>``: the turn's ``j``-th photo's place among its session's photos, when the chat names it
    or every earlier turn of the session is in the context (else ``k`` is unknown: None)."""
    named = _PHOTO_ID.findall(item.text)
    if named:  # the chat names its photos ("[shared a photo D6:IMG_001: ...]")
        return named[j] if j < len(named) else None
    p = item.provenance
    earlier = {i.provenance.turn_index: i for i in items
               if i.provenance.session_id == p.session_id and i.provenance.turn_index < p.turn_index
               and i.form == EvidenceForm.RAW_TEXT}
    if set(earlier) != set(range(p.turn_index)):
        return None
    k = 1 + j + sum(_photos_in(i) for i in earlier.values())
    return f"{p.session_id}:IMG_{k:03d}"


def _image_id(item: ContextItem, items) -> str | None:
    """The turn's first photo's ``<session>:IMG_<k>`` (``_image_number``)."""
    return _image_number(item, items)


def _photo_ref(item: ContextItem, items, rnd, focus) -> tuple[str, str]:
    """(a reference to the photo of ``item`` the question's ``focus`` is about, what it shows). The photo is the
    turn's one image, or, of several, the one whose description covers most of the focus. The reference is what
    names it best: a stored image's ``sha256:<hex>`` (the store serves its bytes by it); for a chat that left only
    a mark ("[shared a photo: <caption>]"), its ``<session>:IMG_<k>`` id when the number is known
    (``_image_number``), else ``the photo of <session> turn <t>``. What it shows: the photo's caption (the
    round's caption item, or the mark's words), else the turn's text."""
    p = item.provenance

    def best(parts: list[str]) -> int:
        return max(range(len(parts)), key=lambda k: (sum(_stated(w, _words_of(parts[k])) for w in focus), -k))

    if item.images:
        caption = next((i for i in rnd if i.form == EvidenceForm.CAPTION and i.node_id == item.node_id), None)
        parts = _CAPTION_PART.findall(caption.text) if caption is not None else []
        if len(item.images) == 1 or len(parts) == len(item.images):
            k = best(parts) if len(parts) > 1 else 0
            shown = parts[k] if parts else (caption.text if caption is not None else item_text(item))
            return f"sha256:{item.images[k].sha256}", shown.strip()
        return f"the photo of {p.session_id} turn {p.turn_index}", item_text(item).strip()
    captions = _PHOTO_CAPTION.findall(item.text)
    j = best(captions) if len(captions) > 1 else 0
    ident = _image_number(item, items, j)
    shown = captions[j] if captions else item_text(item)
    return ident or f"the photo of {p.session_id} turn {p.turn_index}", shown.strip()


def _round_scores(items, focus: Sequence[str]) -> list[tuple[float, list[ContextItem]]]:
    """Every round of the context (``_rounds``) with how well it states the focus words: Σ log(1 + rounds / rounds
    stating the word) over the focus words it states, so a word few rounds share counts most (the photo and date
    routes pick the best round by it)."""
    rounds = _rounds(items)
    words = [_words_of(" ".join(item_text(i) for i in r)) for r in rounds]
    df: dict[str, int] = {}
    for ws in words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    n = len(rounds)
    return [(sum(math.log(1 + n / _df(w, df)) for w in focus if _stated(w, ws)), r) for r, ws in zip(rounds, words)]


def _df(word: str, df: dict[str, int]) -> int:
    """In how many rounds ``word`` (up to its ending) is stated."""
    return max((c for w, c in df.items() if _stated(word, {w})), default=0)


def _rounds(items) -> list[list[ContextItem]]:
    """The context's items grouped into rounds: a user turn with the assistant turn that answers it (the next turn
    of the same session), so a fact split between a question and its reply is read as stated together; a caption
    item joins the round of the turn whose photo it describes."""
    out: list[list[ContextItem]] = []
    last = None
    for item in sorted(items, key=lambda i: (i.provenance.session_id, i.provenance.time, i.provenance.turn_index)):
        p = item.provenance
        if item.form == EvidenceForm.CAPTION and out and any(i.node_id == item.node_id for i in out[-1]):
            out[-1].append(item)  # a photo's caption belongs to the round of the turn that shared it
            continue
        if (last is not None and item.role != "user" and last.role == "user" and p.session_id ==
                last.provenance.session_id and p.turn_index == last.provenance.turn_index + 1):
            out[-1].append(item)
        else:
            out.append([item])
        last = item
    return out


def _words_of(text: str) -> set[str]:
    words = set()
    for w in _TOKEN.findall(text.lower().replace("\u2019", "'")):
        words.add(w[:-2] if w.endswith("'s") else w)
        if "-" in w:
            words.update(w.split("-"))
    return words


def focus_words(question: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """The words that name what a detail question asks about (``_absent``), in order, without repeats; ``skip``:
    the names of the person it is about."""
    out = []
    for w in _TOKEN.findall(question.lower().replace("\u2019", "'")):
        w = w[:-2] if w.endswith("'s") else w
        for part in (w.split("-") if "-" in w else [w]):
            if len(part) >= 3 and part not in _FRAME and part not in skip and part not in out:
                out.append(part)
    return out


def _stated(word: str, words: set[str]) -> bool:
    """Whether ``word`` appears among ``words`` up to its ending ("purchasing" ~ "purchase", "dislikes" ~
    "disliked"); a short word must match whole or with a plural ending."""
    if len(word) <= 4:
        return word in words or word + "s" in words or word + "es" in words
    stem = word[:max(4, len(word) - 3)]
    return any(w.startswith(stem) for w in words)


def _says_changed(text: str, subject: str, q: Query) -> bool:
    """A clause of ``text`` about the asked thing says its asked attribute changed ("Gave my bucket a new colour,
    see the photo"; ``STATED_CHANGE``, not "I almost painted it"), whether or not it says to what."""
    cue = STATED_CHANGE.get(q.attribute)
    return cue is not None and any(cue.search(c) and not hypothetical(c) for c in about_clauses(
        text, subject, q.names, q.owner, q.qualifier, locative_ok=True))


def _your(q: Query) -> str:
    """The asked thing as the question named it: "Meera's cat", "your bike", "the fan in the study"."""
    if q.owner:
        return f"{q.owner}'s {q.subject}"
    if q.subject and q.subject != "i" and not q.possessed:
        return f"the {q.subject}" + (f" in the {q.qualifier}" if q.qualifier else "")
    if q.subject and q.subject != "i":
        return f"your {q.subject}"
    return "that"


def _date_span(t: datetime, question: str) -> str:
    if "yyyy" in question.lower():
        return f"{t:%Y-%m-%d}"
    return f"{t.day} {t:%B %Y}"


def _time_bonus(item: ContextItem, intent: str) -> float:
    """+1 for the state the question asks about (current for now/when/no cue, superseded for past), -1 for
    the other one; 0 for items in no update chain."""
    if not item.status:
        return 0.0
    want = "superseded" if intent == "past" else "current"
    return 1.0 if item.status == want else -1.0
