"""Exact match, token F1 (SQuAD normalisation) and the refusal rule for AR questions."""
from __future__ import annotations

import pytest

from c3m.eval.loaders.locomo import REFUSAL as LOCOMO_REFUSAL
from c3m.models.answer import REFUSAL
from c3m.models.judge import (ExactMatchJudge, F1Judge, Judge, JudgeResult, exact_match, is_refusal,
                              normalize_answer, token_f1)


@pytest.mark.parametrize("raw, norm", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  a   cat,  an owl and THE dog. ", "cat owl and dog"),
    ("Theatre", "theatre"),                       # articles only as whole words
    ("7 May 2023", "7 may 2023"),
    ("don't", "dont"),
    ("", ""),
    ("the", ""),
])
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match():
    assert exact_match("The blue mug", "blue mug.")
    assert exact_match("Paris", "  paris ")
    assert not exact_match("blue mug", "a blue cup")


@pytest.mark.parametrize("gold, pred, f1", [
    ("blue mug", "blue mug", 1.0),
    ("the blue mug", "A blue cup", 0.5),         # p=1/2, r=1/2
    ("on the top shelf", "top shelf", 0.8),      # p=1, r=2/3
    ("red red car", "red car car", 2 / 3),       # multiset overlap: 2 of 3 each way
    ("Paris", "London", 0.0),
    ("", "", 1.0),
    ("the", "something", 0.0),                   # gold normalises to nothing
])
def test_token_f1(gold, pred, f1):
    assert token_f1(gold, pred) == pytest.approx(f1)


@pytest.mark.parametrize("text", [
    REFUSAL, LOCOMO_REFUSAL, "I don't know.", "I do not know", "I\u2019m not sure.", "unknown",
    "You did not mention this information.", "There is no information about your sister's opera.",
    "The conversation doesn't mention a dog.", "I cannot answer that from memory.", "It isn't mentioned.",
    "Not enough information to say.", "",
])
def test_refusals_are_detected(text):
    assert is_refusal(text)


@pytest.mark.parametrize("text", [
    "On the top shelf.", "Your dog is named Rex.", "7 May 2023", "Known as the blue mug.", "Nothing.",
])
def test_answers_are_not_refusals(text):
    assert not is_refusal(text)


def test_exact_match_judge():
    judge = ExactMatchJudge()
    assert isinstance(judge, Judge)
    hit = judge.judge("Where is the mug?", "the top shelf", "Top shelf.", "IE")
    assert hit == JudgeResult(True, 1.0, "exact-match", {"rule": "em"})
    assert not judge.judge("Where is the mug?", "the top shelf", "on the top shelf", "IE").correct


def test_f1_judge_threshold_and_score():
    judge = F1Judge(0.5)
    assert isinstance(judge, Judge) and judge.name == "token-f1@0.5"
    r = judge.judge("Where is the mug?", "on the top shelf", "top shelf", "IE")
    assert r.correct and r.score == pytest.approx(0.8) and r.detail == {"rule": "f1", "em": False}
    assert not judge.judge("q", "blue mug", "red cup", "IE").correct
    assert F1Judge(1.0).judge("q", "blue mug", "the blue mug", "IE").correct
    with pytest.raises(ValueError):
        F1Judge(0)


@pytest.mark.parametrize("judge", [ExactMatchJudge(), F1Judge()])
def test_ar_correct_iff_prediction_refuses(judge):
    gold = LOCOMO_REFUSAL
    refused = judge.judge("What is my dog's name?", gold, "I don't know: nothing in my memory supports it.", "AR")
    answered = judge.judge("What is my dog's name?", gold, "Rex.", "AR")
    assert refused.correct and refused.score == 1.0 and refused.detail["rule"] == "refusal"
    assert not answered.correct and answered.score == 0.0
    # without a category, a refusing gold switches the rule on; a non-AR question is never judged by it
    assert judge.judge("q", gold, "Not mentioned anywhere.").correct
    assert not judge.judge("q", "Rex", "I don't know.", "IE").correct


def test_contains_judge_accepts_verbose_correct_answers_only():
    from c3m.models.judge import ContainsJudge

    j = ContainsJudge()
    assert j.judge("q", "blue", "The mug is blue now.", "KU").correct
    assert j.judge("q", "two water bottles", "I see two water bottles on the right.", "IE").correct
    assert not j.judge("q", "blue", "It was bluish.", "KU").correct  # whole tokens only
    assert not j.judge("q", "red", "I don't know whether it is red.", "KU").correct  # a refusal is not an answer
    assert j.judge("q", "You never mentioned a dog.", "I don't know.", "AR").correct
    assert not j.judge("q", "You never mentioned a dog.", "Biscuit.", "AR").correct
