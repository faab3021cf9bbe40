"""``CompiledAttributeRuler``: spaCy's attribute ruler applied to a batch of docs with numpy, output for output.

The small English pipeline's ``attribute_ruler`` maps each fine-grained tag to its part of speech and
morphology and fixes ~120 word-level exceptions ("gonna" -> go + to). spaCy runs it as a ``Matcher`` over every
token against all 179 patterns, then sets each match through a ``Span``: ~10% of the pipeline's time on the
Mem-Gallery dev turns, more than the dependency parser. Every pattern there is a fixed-length run of token tests
(equality, ``IN``, ``NOT_IN``, ``REGEX`` on ``TAG`` / ``LOWER`` / ``DEP`` / ``IS_SPACE``), so a whole batch can be
matched column by column: one comparison per pattern over the batch's token array finds its few candidates, the
rest of the pattern is checked on those alone, and the attributes are written back with ``Doc.from_array``.

Same result as the ruler, by construction and by test (``tests/test_attribute_rules.py`` compares every token's
part of speech, tag, morphology, lemma and dependency on real dialog turns): patterns are applied in the order
they were added, so a later one overrides an earlier one attribute by attribute, as the ruler's sorted matches do.
A ruler with any other kind of pattern (quantifiers, other attributes) is not compiled (``compile_ruler`` returns
None) and spaCy's own ruler runs instead.

Why it may run after the parser and the NER: neither reads a part of speech or a morphology (the parser listens
to the shared token encoder, the NER has its own over lexical features), so moving the ruler to the end of the
pipeline changes nothing they produce.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

#: token attributes a compiled pattern may test (columns of ``Doc.to_array``)
_COLUMNS = ("TAG", "LOWER", "DEP", "IS_SPACE")
#: attributes the ruler may set that are written as columns; any other goes through spaCy's own setter
_WRITTEN = ("POS", "MORPH", "LEMMA")


@dataclass(frozen=True)
class _Test:
    """One token test: ``column`` compared with ``values`` (hashes) by ``op``, or a regex on its string."""

    column: int
    op: str  # "eq" | "in" | "not_in" | "regex"
    values: np.ndarray | None = None
    regex: Callable[[str], object] | None = None

    def mask(self, col: np.ndarray, strings) -> np.ndarray:
        if self.op == "eq":
            return col == self.values[0]
        if self.op == "in":
            return np.isin(col, self.values)
        if self.op == "not_in":
            return ~np.isin(col, self.values)
        return np.fromiter((self.regex(strings[int(h)]) is not None for h in col), bool, len(col))


@dataclass(frozen=True)
class _Pattern:
    tokens: tuple[tuple[_Test, ...], ...]  # one tuple of tests per token of the run


@dataclass(frozen=True)
class _Rule:
    alternatives: tuple[_Pattern, ...]
    index: int
    columns: tuple[tuple[int, int], ...]  # (written column, value) pairs, in the rule's order
    other: dict  # normalised attrs spaCy's setter applies (anything not in _WRITTEN)


def _test(key: str, value, strings) -> _Test | None:
    if key not in _COLUMNS:
        return None
    column = _COLUMNS.index(key)
    if key == "IS_SPACE":
        return _Test(column, "eq", np.array([int(bool(value))], np.uint64)) if isinstance(value, bool) else None
    if isinstance(value, str):
        return _Test(column, "eq", np.array([strings[value]], np.uint64))
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (op, arg), = value.items()
    if op in ("IN", "NOT_IN") and all(isinstance(v, str) for v in arg):
        return _Test(column, op.lower(), np.array([strings[v] for v in arg], np.uint64))
    if op == "REGEX" and isinstance(arg, str):
        return _Test(column, "regex", regex=re.compile(arg).search)
    return None


def compile_ruler(ruler) -> "CompiledAttributeRuler | None":
    """The compiled form of a spaCy ``AttributeRuler``, or None when a pattern is outside what it supports."""
    from spacy.attrs import IDS

    strings = ruler.vocab.strings
    written = {IDS[name]: i for i, name in enumerate(_WRITTEN)}
    rules = []
    for spec, attrs, index in zip(ruler.patterns, ruler.attrs, ruler.indices):
        alternatives = []
        for seq in spec["patterns"]:
            tokens = []
            for token in seq:
                tests = [_test(k, v, strings) for k, v in token.items()]
                if not tests or any(t is None for t in tests):
                    return None
                tokens.append(tuple(tests))
            if not tokens or not -len(tokens) <= index < len(tokens):
                return None
            alternatives.append(_Pattern(tuple(tokens)))
        columns = tuple((written[a], int(v)) for a, v in attrs.items() if a in written)
        other = {a: v for a, v in attrs.items() if a not in written}
        rules.append(_Rule(tuple(alternatives), index, columns, other))
    return CompiledAttributeRuler(ruler.vocab, rules)


class CompiledAttributeRuler:
    """Applies the compiled rules to a batch of docs (module docstring). Build it with ``compile_ruler``."""

    def __init__(self, vocab, rules: Sequence[_Rule]):
        from spacy.attrs import DEP, IS_SPACE, LEMMA, LOWER, MORPH, POS, TAG

        self.vocab, self.rules = vocab, list(rules)
        self._read = [TAG, LOWER, DEP, IS_SPACE]
        self._write = [POS, MORPH, LEMMA]
        # A rule can only match where each alternative finds the values its equality / IN tests ask for, so a rule
        # none of whose alternatives' needed values occur in the batch is skipped without a numpy call (a question
        # is ~10 tokens: most of the 179 rules are decided by a set lookup). Skipping a rule that cannot match
        # changes nothing; the rules that may match run as before, in order.
        self._needs = [[_needed(p) for p in rule.alternatives] for rule in self.rules]

    def __call__(self, docs: Sequence) -> None:
        from spacy.tokens._retokenize import set_token_attrs

        docs = [d for d in docs if len(d)]
        if not docs:
            return
        sizes = np.array([len(d) for d in docs])
        read = np.concatenate([d.to_array(self._read) for d in docs]).astype(np.uint64)
        out = np.concatenate([d.to_array(self._write) for d in docs]).astype(np.uint64)
        doc_of = np.repeat(np.arange(len(docs)), sizes)
        others: dict[int, dict] = {}
        strings = self.vocab.strings
        present = [set(read[:, c].tolist()) for c in range(read.shape[1])]
        for rule, needs in zip(self.rules, self._needs):
            if not any(all(present[c] & vals for c, vals in need) for need in needs):
                continue
            hits = np.unique(np.concatenate([self._matches(p, read, doc_of, strings) + (rule.index % len(p.tokens))
                                             for p in rule.alternatives]))
            if not len(hits):
                continue
            for column, value in rule.columns:
                out[hits, column] = value
            if rule.other:
                for i in hits.tolist():
                    others.setdefault(i, {}).update(rule.other)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        for k, doc in enumerate(docs):
            doc.from_array(self._write, out[starts[k]:starts[k + 1]])
        for i, attrs in sorted(others.items()):
            k = int(np.searchsorted(starts, i, side="right") - 1)
            set_token_attrs(docs[k][i - int(starts[k])], attrs)

    @staticmethod
    def _matches(pattern: _Pattern, read: np.ndarray, doc_of: np.ndarray, strings) -> np.ndarray:
        """Start positions of the runs that pass every test and lie within one doc."""
        span = len(pattern.tokens)
        starts = np.arange(max(0, len(read) - span + 1))
        if span > 1:
            starts = starts[doc_of[starts] == doc_of[starts + span - 1]]
        # cheap vectorised tests first, regexes last, so a regex sees only the few runs still standing
        tests = sorted(((j, t) for j, tests in enumerate(pattern.tokens) for t in tests),
                       key=lambda jt: jt[1].op == "regex")
        for j, test in tests:
            if not len(starts):
                break
            starts = starts[test.mask(read[starts + j, test.column], strings)]
        return starts


def _needed(pattern: _Pattern) -> list[tuple[int, set[int]]]:
    """(column, values) pairs a run matching ``pattern`` must find somewhere in the batch: one per equality or ``IN``
    test (the token it tests must hold one of the values)."""
    return [(t.column, {int(v) for v in t.values}) for tests in pattern.tokens for t in tests if t.op in ("eq", "in")]


__all__ = ["CompiledAttributeRuler", "compile_ruler"]
