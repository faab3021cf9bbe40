"""Answer judges: exact match and token F1 with the official SQuAD normalisation, plus a refusal rule.

``normalize_answer`` is the SQuAD v1.1/v2.0 ``evaluate`` function (lowercase, drop ASCII punctuation,
drop the articles a/an/the, collapse whitespace), which LoCoMo's ``task_eval/evaluation.py`` also
builds on. LoCoMo additionally drops commas before punctuation removal (same result here), drops
"and", and Porter-stems tokens for F1; we do neither (no nltk dependency), so our F1 matches SQuAD's.

AR ("answer refusal") questions are about things never mentioned: the gold answer is a refusal, and a
prediction is correct iff it refuses too. Refusals are recognised by a small phrase lexicon
(``is_refusal``) — a named heuristic; the LLM judge in ``api.py`` does not depend on it.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower, strip punctuation, strip articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> bool:
    return normalize_answer(gold) == normalize_answer(prediction)


def token_f1(gold: str, prediction: str) -> float:
    """SQuAD token F1 over normalised tokens (multiset overlap); two empty answers score 1."""
    g, p = normalize_answer(gold).split(), normalize_answer(prediction).split()
    if not g or not p:
        return float(g == p)
    common = sum((Counter(g) & Counter(p)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


# Phrases that mark an answer as a refusal/abstention. Matched on lowercased text with curly quotes
# folded, so "I don't know", "Not mentioned in the conversation." and LongMemEval's explanations hit.
_REFUSAL = re.compile("|".join((
    r"\bi\s+(do\s+not|don't|dont)\s+know\b", r"\bnot\s+sure\b", r"\bunanswerable\b", r"\bunknown\b",
    r"\b(can\s*not|can't|cannot|unable\s+to)\s+(answer|tell|determine|say|find|recall)\b",
    r"(\bnot|n't|\bnever)\s+(been\s+)?(mentioned|stated|specified|provided|discussed|recorded|given)\b",
    r"\b(no|not\s+enough|insufficient)\s+(information|info|evidence|record|mention|data|memory|details?)\b",
    r"\b(does|do|did)\s*(not|n't)\s+(mention|say|specify|state|include|contain)\b",
    r"\bnothing\s+(in\s+my\s+memory|supports|mentions|about)\b", r"\bno\s+answer\b",
    r"\binformation\s+(is\s+)?(not\s+available|unavailable)\b")))


def is_refusal(text: str) -> bool:
    """True when ``text`` declines to answer (lexicon heuristic; see module docstring)."""
    folded = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    return bool(_REFUSAL.search(folded)) or not folded.strip()


@dataclass(frozen=True)
class JudgeResult:
    """One verdict: ``correct`` for accuracy, ``score`` in [0, 1] (EM, F1 or 0/1), ``judge`` names how."""

    correct: bool
    score: float
    judge: str
    detail: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Judge(Protocol):
    """Decides whether a prediction answers a question; ``name`` goes into reports."""

    name: str

    def judge(self, question: str, gold: str, prediction: str, category: str | None = None) -> JudgeResult: ...


def refusal_mode(gold: str, category: str | None) -> bool:
    """AR questions are judged by the refusal rule; without a category, a refusing gold implies it."""
    return category == "AR" if category is not None else is_refusal(gold)


def _refusal_result(name: str, prediction: str) -> JudgeResult:
    refused = is_refusal(prediction)
    return JudgeResult(refused, float(refused), name, {"rule": "refusal", "prediction_refused": refused})


class ExactMatchJudge:
    """Correct iff the normalised prediction equals the normalised gold (refusal rule for AR)."""

    name = "exact-match"

    def judge(self, question: str, gold: str, prediction: str, category: str | None = None) -> JudgeResult:
        if refusal_mode(gold, category):
            return _refusal_result(self.name, prediction)
        em = exact_match(gold, prediction)
        return JudgeResult(em, float(em), self.name, {"rule": "em"})


class F1Judge:
    """Score = token F1; correct iff F1 >= ``threshold`` (refusal rule for AR)."""

    def __init__(self, threshold: float = 0.5):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.name = f"token-f1@{threshold:g}"

    def judge(self, question: str, gold: str, prediction: str, category: str | None = None) -> JudgeResult:
        if refusal_mode(gold, category):
            return _refusal_result(self.name, prediction)
        f1 = token_f1(gold, prediction)
        return JudgeResult(f1 >= self.threshold, f1, self.name, {"rule": "f1", "em": exact_match(gold, prediction)})


class ContainsJudge:
    """Correct iff the normalised gold answer occurs as a whole-token run inside the normalised prediction
    and the prediction does not refuse (refusal rule for AR).

    Why: short gold answers ("blue", "two water bottles") against sentence-long predictions make token F1
    punish verbosity rather than wrongness; containment is the usual lenient check. It can be fooled by a
    prediction that lists several candidates, so token F1 is kept in ``detail`` as a second signal.
    """

    name = "contains"

    def judge(self, question: str, gold: str, prediction: str, category: str | None = None) -> JudgeResult:
        if refusal_mode(gold, category):
            return _refusal_result(self.name, prediction)
        g, p = normalize_answer(gold).split(), normalize_answer(prediction).split()
        hit = bool(g) and not is_refusal(prediction) and any(p[i:i + len(g)] == g for i in range(len(p) - len(g) + 1))
        return JudgeResult(hit, float(hit), self.name, {"rule": "contains", "f1": token_f1(gold, prediction)})


__all__ = ["ContainsJudge", "ExactMatchJudge", "F1Judge", "Judge", "JudgeResult", "exact_match", "is_refusal", "normalize_answer",
           "refusal_mode", "token_f1"]
