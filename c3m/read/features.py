"""What the reranker sees of each candidate turn: one row of ``FEATURES`` per (question, Raw Node).

The channels (``c3m.read.pipeline``) say how each turn was found — its cosine to the question, its full-text rank in
the Cold Store, the index's route (page, entry, expansion, update chain) — and this module adds what a single
similarity cannot see: whether the turn holds the question's rare words, names and numbers; whether its session falls
in a period the question names (``c3m.language.when``); where it sits in the history; who spoke; and how its round
partner and its session scored. A missing signal is NaN (a channel that did not find the turn, a question with no
number), which the tree model routes on its own.

Photo turns and repeated lines (issue #43): a user's photo often says little in words ("one more photo of the shop
sign") while the new state is in the image, so a model that sees only ``text_len`` learns "short turns are rarely
evidence" from dialogs whose evidence is long. ``has_image`` tells it the turn carries an image, ``q_visual`` that the
question asks something an image shows (a colour, a pattern, a look), ``newest_mention`` which turn is the latest to
name the question's subject (a "... now?" question's answer is usually there), and ``dup_count`` / ``near_dup`` how
many candidates repeat this turn's words (small talk repeated word for word is rarely the evidence, and twelve copies
of it crowd the reader's budget).

Lexical signals are computed over the candidate pool itself (``pool_bm25``: Okapi BM25 with the pool as the
collection), so they mean the same in the strictly bounded reader, which never touches the Cold-Store search, as in
the full one. Terms are lower-cased words without stop words, lightly stemmed (``stem``: plural and -ing/-ed
endings), so "paintings" meets "painting".
"""
from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

import numpy as np

from ..language.attributes import COLOURS, MATERIALS, PATTERNS, SHAPES
from ..language.question import analyse
from ..language.when import TimeWindow

#: the feature columns, in order (a model file names them; ``c3m.read.rerank`` refuses a model with others)
FEATURES = (
    "dense_cos", "dense_gap", "dense_rank",                       # cosine to the question (shared node vectors)
    "fts_score", "fts_rank",                                      # Cold-Store FTS5 BM25 (NaN: not found / bounded)
    "pool_bm25", "pool_bm25_rank", "term_share", "rare_term",     # lexical, over the pool
    "number_share", "key_share",                                  # the question's numbers and entity/state keys
    "idx_rel", "idx_rank", "entry_score", "page_rank", "expanded",  # the bounded index's route (NaN: not routed)
    "superseded", "chain_len",                                    # update chain: an old state, chain length
    "in_window", "window_days",                                   # a period the question names
    "recency", "age_days", "role_user", "text_len",
    "partner_cos", "partner_bm25", "prev_cos", "next_cos",         # the round partner and the turns around
    "session_best_cos", "session_hits", "via_round", "channels",
    "q_terms", "q_now", "q_before", "q_window", "cold",
    "has_image", "q_visual", "newest_mention", "dup_count", "near_dup",  # photos, the subject's latest, repeats
)

#: the columns in groups, for the trainer's drop-column table (``training/train_reranker.py --drop-groups``): each
#: group is the columns one signal family gives, so dropping it shows what the model leans on (a prior such as
#: "short turns are rarely evidence" shows as a group whose loss helps some kind of turn)
FEATURE_GROUPS = {
    "dense": ("dense_cos", "dense_gap", "dense_rank"),
    "fts": ("fts_score", "fts_rank"),
    "lexical": ("pool_bm25", "pool_bm25_rank", "term_share", "rare_term"),
    "numbers/keys": ("number_share", "key_share"),
    "index route": ("idx_rel", "idx_rank", "entry_score", "page_rank", "expanded", "channels"),
    "chain": ("superseded", "chain_len"),
    "time window": ("in_window", "window_days"),
    "position/recency": ("recency", "age_days"),
    "role": ("role_user",),
    "length": ("text_len",),
    "neighbours": ("partner_cos", "partner_bm25", "prev_cos", "next_cos", "via_round"),
    "session": ("session_best_cos", "session_hits"),
    "question cues": ("q_terms", "q_now", "q_before", "q_window", "cold"),
    "image/subject/duplicate": ("has_image", "q_visual", "newest_mention", "dup_count", "near_dup"),
}

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers herself him
himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or other
our ours ourselves out over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which while who whom why will
with would you your yours yourself yourselves also ever yet get got tell told say said one ones thing things anything
something much many did does done doing let lets like us s t don didn doesn isn wasn weren ve ll re d m o
""".split())
#: words that ask for the present state / an earlier one ("now" vs "before" questions)
NOW_CUES = frozenset("current currently now latest recent recently lately today still anymore presently".split())
BEFORE_CUES = frozenset("before originally original previous previously earlier first initially former formerly "
                        "used old older prior".split())
#: a question about what an image shows: the attributes a photo carries (``c3m.language.question``'s colour, pattern,
#: shape, material, size), words for looking and pictures, a value word itself ("was it red?"), a layout ("left of")
VISUAL_ATTRIBUTES = frozenset("colour pattern shape material size".split())
VISUAL_WORDS = frozenset("""
look looks looked looking appearance appear appears appeared shown show shows showed showing photo photos picture
pictures image images pic pics photograph photographs snapshot snap visible see seen saw depicted depict depicts
wearing logo drawn printed
""".split()) | COLOURS | PATTERNS | SHAPES | MATERIALS
_LAYOUT = re.compile(r"\b(left|right) of\b|\b(below|above|beside|behind|underneath)\b|\bin front of\b|\bon top of\b")


_SUFFIXES = (("ies", "y"), ("sses", "ss"), ("ing", ""), ("edly", ""), ("ed", ""), ("ly", ""), ("s", ""))


@functools.lru_cache(maxsize=1 << 17)
def stem(word: str) -> str:
    """A light English stemmer, enough to meet "paintings" with "painting" and "moved" with "move": one suffix
    (plural, -ing, -ed, -ly) off a stem of 3+ letters, twice ("paintings"), then a final "e" off. Not Porter; the
    question and the turns use the same one. Cached by word: a read stems ~1,000 words per question from a
    vocabulary of a few thousand (18 % of a c3m read on 48K photo histories before the cache)."""
    for _ in range(2):
        for suffix, keep in _SUFFIXES:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not (suffix == "s" and word.endswith("ss")):
                word = word[: len(word) - len(suffix)] + keep
                break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def terms(text: str) -> list[str]:
    """Content terms of a text: lower-cased words, stop words dropped, stemmed (order and repeats kept)."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


@dataclass
class QueryInfo:
    """What the features need of the question."""

    text: str
    vec: np.ndarray
    now: datetime
    keys: frozenset[str] = frozenset()           # the index's lexical keys (entities, attribute values)
    windows: tuple[TimeWindow, ...] = ()
    terms: tuple[str, ...] = field(init=False)
    numbers: frozenset[str] = field(init=False)
    cue_now: bool = field(init=False)
    cue_before: bool = field(init=False)
    #: the question asks what an image shows (``VISUAL_WORDS``, a visual attribute, a layout)
    visual: bool = field(init=False)
    #: the question's subject as groups of terms (its head noun; each capitalised name): a turn names the subject
    #: when it holds every term of one group (``c3m.language.question.analyse``; empty: no subject found)
    subject: tuple[frozenset[str], ...] = field(init=False)

    def __post_init__(self):
        self.terms = tuple(dict.fromkeys(terms(self.text)))
        self.numbers = frozenset(numbers(_undated(self.text, self.windows)))
        lower = self.text.lower()
        words = set(_WORD.findall(lower))
        self.cue_now, self.cue_before = bool(words & NOW_CUES), bool(words & BEFORE_CUES)
        asked = analyse(self.text)
        self.visual = bool(asked.attribute in VISUAL_ATTRIBUTES or words & VISUAL_WORDS or _LAYOUT.search(lower))
        groups = [frozenset(terms(name)) for name in asked.names]
        if asked.subject and asked.subject != "i":
            groups.insert(0, frozenset(terms(asked.subject)))
        self.subject = tuple(dict.fromkeys(g for g in groups if g))


def _undated(text: str, windows: Sequence[TimeWindow]) -> str:
    """The text without the date phrases its windows were read from: a date's digits are the window's business, not
    numbers to find in a turn."""
    for w in windows:
        phrase = w.phrase
        side = phrase.split(" ", 1)[0].lower()
        if side in ("before", "after", "since", "until", "till", "by") and " " in phrase:  # "before X": X is the date
            phrase = phrase.split(" ", 1)[1]
        text = text.replace(phrase, " ")
    return text


@dataclass
class Signals:
    """How the channels found one candidate turn (NaN: this channel did not)."""

    node: object                  # RawNode
    cos: float
    fts: float = math.nan
    fts_rank: float = math.nan
    idx_rel: float = math.nan
    idx_rank: float = math.nan
    entry_score: float = math.nan
    page_rank: float = math.nan
    expanded: float = math.nan
    superseded: float = math.nan
    chain_len: float = math.nan
    via_round: bool = False
    channels: int = 0
    #: signals of channels beyond the built-in ones (``c3m.read.channels``): each is a feature column of its name
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, cos: float, signals: dict) -> "Signals":
        """A candidate from the fused signals of its channels: the built-in ones as fields, any other in ``extra``."""
        known = {k: v for k, v in signals.items() if k in _SIGNAL_FIELDS}
        extra = {k: v for k, v in signals.items() if k not in _SIGNAL_FIELDS}
        return cls(cos=cos, **known, extra=extra) if extra else cls(cos=cos, **known)


_SIGNAL_FIELDS = frozenset(("node", "fts", "fts_rank", "idx_rel", "idx_rank", "entry_score", "page_rank", "expanded",
                            "superseded", "chain_len", "via_round", "channels"))

#: registered extra feature columns: name -> fn(query, candidates) -> one value per candidate (``register_feature``)
EXTRA_FEATURES: dict = {}


def register_feature(name: str):
    """Decorator: a feature column ``name`` computed by ``fn(query: QueryInfo, cands: [Signals]) -> [float]``, added
    to the rows of a reader whose ``features`` option names it (after ``FEATURES`` and the channels' own signals).
    A reranker model trained with it reads it by name; the shipped model ignores it."""
    if name in FEATURES:
        raise ValueError(f"{name!r} is a built-in feature")

    def put(fn):
        EXTRA_FEATURES[name] = fn
        return fn
    return put


def extra_columns(channels, features: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns after ``FEATURES``: the channels' signals that are not built in, then the named extra features."""
    from ..errors import InvalidInput

    out = [f for ch in channels for f in ch.features if f not in FEATURES]
    for name in features:
        if name not in EXTRA_FEATURES:
            raise InvalidInput("method_options.features", f"unknown feature {name!r}",
                               fix=f"register it with c3m.read.features.register_feature (known: {sorted(EXTRA_FEATURES)})")
        out.append(name)
    return tuple(dict.fromkeys(out))


def _ranks(x: np.ndarray) -> np.ndarray:
    """0-based rank of each value, best (largest) first; NaN stays NaN."""
    out = np.full(len(x), np.nan)
    ok = np.flatnonzero(~np.isnan(x))
    out[ok[np.argsort(-x[ok], kind="stable")]] = np.arange(len(ok))
    return out


def pool_bm25(query: Sequence[str], docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Okapi BM25 of each doc for the query terms, the docs themselves as the collection (IDF with +1 inside the
    log, so a term in every doc still counts a little)."""
    n = len(docs)
    if not n or not query:
        return np.zeros(n)
    q = set(query)
    lengths = np.array([len(d) for d in docs], float)
    avg = max(1.0, lengths.mean())
    tf = [{} for _ in docs]
    df: dict[str, int] = {}
    for i, d in enumerate(docs):
        for t in d:
            if t in q:
                tf[i][t] = tf[i].get(t, 0) + 1
        for t in tf[i]:
            df[t] = df.get(t, 0) + 1
    idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
    out = np.zeros(n)
    for i in range(n):
        norm = k1 * (1 - b + b * lengths[i] / avg)
        out[i] = sum(idf[t] * f * (k1 + 1) / (f + norm) for t, f in tf[i].items())
    return out


def feature_matrix(query: QueryInfo, cands: Sequence[Signals], *, first: datetime, tokens, cold: bool,
                   columns: Sequence[str] = FEATURES) -> np.ndarray:
    """[len(cands), len(columns)] float32 (module docstring). ``first``: the history's first session time (recency
    runs from it to ``query.now``); ``tokens(node) -> list[str]`` gives a node's ``terms`` (memoised by the
    caller). ``columns``: ``FEATURES`` then extra columns (``extra_columns``): a channel's own signal (NaN where it
    did not find the turn) or a registered feature."""
    n = len(cands)
    X = np.full((n, len(columns)), np.nan, np.float32)
    if not n:
        return X
    for j, name in enumerate(columns[len(FEATURES):], len(FEATURES)):
        fn = EXTRA_FEATURES.get(name)
        X[:, j] = fn(query, cands) if fn is not None else [c.extra.get(name, math.nan) for c in cands]
    col = {name: i for i, name in enumerate(FEATURES)}
    nodes = [c.node for c in cands]
    docs = [tokens(nd) for nd in nodes]
    cos = np.array([c.cos for c in cands], float)
    bm = pool_bm25(query.terms, docs)
    q_terms = set(query.terms)
    held_sets = [set(d) for d in docs]
    df = {t: sum(t in h for h in held_sets) for t in q_terms}
    rare = {t for t, c in df.items() if 0 < c <= max(1, n // 20)}
    where = {(nd.session_id, nd.turn_index): i for i, nd in enumerate(nodes)}
    span = max(1.0, (query.now - first).total_seconds())
    best_in_session: dict[str, float] = {}
    hits: dict[str, int] = {}
    for nd, c in zip(nodes, cos):
        best_in_session[nd.session_id] = max(best_in_session.get(nd.session_id, -1.0), c)
        hits[nd.session_id] = hits.get(nd.session_id, 0) + 1
    X[:, col["dense_cos"]] = cos
    X[:, col["dense_gap"]] = cos.max() - cos
    X[:, col["dense_rank"]] = np.log1p(_ranks(cos))
    fts = np.array([c.fts for c in cands], float)
    X[:, col["fts_score"]] = fts
    X[:, col["fts_rank"]] = np.log1p([c.fts_rank for c in cands])
    X[:, col["pool_bm25"]] = bm
    X[:, col["pool_bm25_rank"]] = np.log1p(_ranks(np.where(bm > 0, bm, np.nan)))
    for name in ("idx_rel", "idx_rank", "entry_score", "page_rank", "expanded", "superseded", "chain_len"):
        X[:, col[name]] = [getattr(c, name) for c in cands]
    X[:, col["idx_rank"]] = np.log1p(X[:, col["idx_rank"]])
    X[:, col["q_terms"]] = len(q_terms)
    X[:, col["q_now"]] = float(query.cue_now)
    X[:, col["q_before"]] = float(query.cue_before)
    X[:, col["q_window"]] = float(bool(query.windows))
    X[:, col["cold"]] = float(cold)
    key_words = {w for k in query.keys for w in k.split() if w not in STOP_WORDS}
    key_words = {stem(w) for w in key_words}
    # the per-turn columns, built as lists and written once per column (a float32 cell gets the same value either way)
    nan = math.nan
    if q_terms:
        X[:, col["term_share"]] = [len(q_terms & held) / len(q_terms) for held in held_sets]
        X[:, col["rare_term"]] = [float(bool(rare & held)) for held in held_sets]
    if query.numbers:
        X[:, col["number_share"]] = [len(query.numbers & numbers(nd.text)) / len(query.numbers) for nd in nodes]
    if key_words:
        X[:, col["key_share"]] = [len(key_words & held) / len(key_words) for held in held_sets]
    if query.windows:
        days = [min(w.days_outside(nd.time) for w in query.windows) for nd in nodes]
        X[:, col["in_window"]] = [float(d == 0) for d in days]
        X[:, col["window_days"]] = [math.log1p(d) for d in days]
    X[:, col["recency"]] = [(nd.time - first).total_seconds() / span for nd in nodes]
    X[:, col["age_days"]] = [math.log1p(max(0.0, (query.now - nd.time).total_seconds() / 86400)) for nd in nodes]
    X[:, col["role_user"]] = [float(nd.role == "user") for nd in nodes]
    X[:, col["text_len"]] = [math.log1p(len(nd.text)) for nd in nodes]
    partner = [where.get((nd.session_id, (nd.turn_index + 1) if nd.role == "user" else (nd.turn_index - 1)))
               for nd in nodes]
    X[:, col["partner_cos"]] = [cos[p] if p is not None else nan for p in partner]
    X[:, col["partner_bm25"]] = [bm[p] if p is not None else nan for p in partner]
    for name, step in (("prev_cos", -1), ("next_cos", 1)):
        near = (where.get((nd.session_id, nd.turn_index + step)) for nd in nodes)
        X[:, col[name]] = [cos[j] if j is not None else nan for j in near]
    X[:, col["session_best_cos"]] = [best_in_session[nd.session_id] for nd in nodes]
    X[:, col["session_hits"]] = [hits[nd.session_id] for nd in nodes]
    X[:, col["via_round"]] = [float(c.via_round) for c in cands]
    X[:, col["channels"]] = [c.channels for c in cands]
    X[:, col["has_image"]] = [float(bool(getattr(nd, "images", ()))) for nd in nodes]
    X[:, col["q_visual"]] = float(query.visual)
    dup, near = duplicate_counts(nodes, docs)
    X[:, col["dup_count"]] = dup
    X[:, col["near_dup"]] = near
    X[:, col["newest_mention"]] = newest_mentions(query.subject, nodes, held_sets, dup)
    return X


@functools.lru_cache(maxsize=1 << 16)
def _words_key(text: str) -> str:
    """A text's normalised words (``duplicate_counts``), cached by text: the same turns come back question after
    question, and repeated small talk is one entry."""
    return " ".join(_WORD.findall(text.lower()))


def _images(node) -> tuple[str, ...]:
    return tuple(im.sha256 for im in getattr(node, "images", ()))


def duplicate_counts(nodes: Sequence, docs: Sequence[Sequence[str]] | None = None) -> tuple[list[int], list[int]]:
    """Per candidate: how many candidates of the pool (itself included) have the same normalised text (lower-cased
    words, punctuation and spacing ignored), and how many the same set of content terms without numbers (a near
    duplicate: a template line with another number, word order or stop words). Images count as content: photo
    turns with the same short caption and different photos are not repeats (the state is in the image)."""
    exact, loose = [], []
    for i, nd in enumerate(nodes):
        words = _words_key(nd.text)
        content = frozenset(t for t in (docs[i] if docs is not None else terms(nd.text)) if not t.isdigit())
        shas = _images(nd)
        exact.append((words, shas))
        loose.append((content, shas))
    n_exact: dict = {}
    n_loose: dict = {}
    for a, b in zip(exact, loose):
        n_exact[a] = n_exact.get(a, 0) + 1
        n_loose[b] = n_loose.get(b, 0) + 1
    return [n_exact[a] for a in exact], [n_loose[b] for b in loose]


def newest_mentions(subject: Sequence[frozenset], nodes: Sequence, held_sets: Sequence[set],
                    dup: Sequence[int]) -> list[float]:
    """Per candidate that names the question's subject (``QueryInfo.subject``): how many later sessions hold a
    candidate naming it, counting only texts that are not repeated in the pool (``dup`` 1), so small talk repeated
    word for word does not push the latest real mention down. 0: the newest session naming the subject (both turns
    of a photo and its reply); NaN: the turn does not name it, or the question has no subject. Sessions, not turns,
    are the unit because a state changes between sessions, and the reply to a photo comes after it."""
    if not subject:
        return [math.nan] * len(nodes)
    named = [any(g <= held for g in subject) for held in held_sets]
    times = sorted({nd.time for nd, m, d in zip(nodes, named, dup) if m and d == 1})
    out = []
    for nd, m in zip(nodes, named):
        if not m:
            out.append(math.nan)
            continue
        out.append(float(len(times) - bisect.bisect_right(times, nd.time)))
    return out
