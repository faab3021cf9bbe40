"""How the harness scores an answer to "which photo ...?" (#42, ``c3m.eval.metrics.image_verdict``).

Mem-Gallery's gold answer to "Which image shows the paint brush?" is an image id (``D6:IMG_001``), while the converted
chat carries only the photo's caption: an answer can point at the photo (cite its turn) without being able to spell
its id. The rule: an id the answer names decides; with none, its first cited node must be a gold evidence turn of
the gold id's session; a decline is wrong; any other gold answer keeps the token rule.
"""
from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace as NS

import pytest

from c3m.eval.metrics import QuestionResult, image_reference, image_verdict, score_answer
from c3m.types import (BudgetUse, Context, ContextItem, EvidenceForm, EvidenceRef, Provenance, Question, ReaderBudget,
                       RouteTrace, node_id_for)

NS_ = "hist"
#: the gold photo is shared in D6 turn 12; its round's reply is turn 13 (both are evidence, as the data marks them)
GOLD = node_id_for(NS_, "D6", 12)
REPLY = node_id_for(NS_, "D6", 13)
OTHER = node_id_for(NS_, "D6", 4)      # another photo of the same session
ELSEWHERE = node_id_for(NS_, "D2", 12)  # the same turn number in another session


def question(answer="D6:IMG_002", evidence=(("D6", 12), ("D6", 13)), category="IE"):
    return Question("q1", "Which image shows the paint brush?", answer, category, None,
                    tuple(EvidenceRef(s, t) for s, t in evidence))


def base(category="IE"):
    return QuestionResult(NS_, "q1", category, 1.0, 1.0, 1.0, 10, 0, 1, 1.0)


def said(text="The photo you shared on 2024-07-16 (session D6, turn 12): a paint brush on a palette", span=None,
         cited=(), declined=False, refused=False):
    return NS(text=text, span=span, cited=tuple(cited), declined=declined, refused=refused, confidence=0.89)


def test_image_reference_is_one_id_only():
    assert image_reference("D6:IMG_002") == ("D6", 2)
    assert image_reference(" D13:IMG_010. ") == ("D13", 10)
    for gold in ("D8:IMG_001, D8:IMG_002", "blue", "D10:IMG_001 is related to ballet", ""):
        assert image_reference(gold) is None, gold


def test_a_right_citation_is_right():
    got = score_answer(base(), question(), said(span="the photo of D6 turn 12", cited=(GOLD, OTHER)))
    assert got.answer_correct == 1.0 and got.answer_f1 == 1.0 and got.answer_em == 1.0
    assert got.answered == 1.0 and got.precision_answered == 1.0
    # the round's reply is gold evidence too (the data marks both turns of a round)
    assert score_answer(base(), question(), said(cited=(REPLY,))).answer_correct == 1.0


def test_a_wrong_citation_is_wrong():
    for cited in ((OTHER, GOLD), (ELSEWHERE,), ()):  # only the first cited node counts
        got = score_answer(base(), question(), said(span="the photo of D6 turn 4", cited=cited))
        assert got.answer_correct == 0.0 and got.answer_f1 == 0.0 and got.answer_em == 0.0, cited
        assert got.answered == 1.0 and got.precision_answered == 0.0


def test_a_gold_turn_of_another_session_is_not_the_photo():
    """The evidence names turns in two sessions, the id names D6: a cited D2 turn is not the photo."""
    q = question(evidence=(("D6", 12), ("D2", 12)))
    assert score_answer(base(), q, said(cited=(ELSEWHERE,))).answer_correct == 0.0
    assert score_answer(base(), q, said(cited=(GOLD,))).answer_correct == 1.0


def test_the_id_named_decides_over_the_citation():
    assert score_answer(base(), question(), said(span="D6:IMG_002", cited=(OTHER,))).answer_correct == 1.0
    assert score_answer(base(), question(), said(span="D6:IMG_2")).answer_correct == 1.0  # the number, not its digits
    assert score_answer(base(), question(), said(span="D6:IMG_003", cited=(GOLD,))).answer_correct == 0.0
    assert score_answer(base(), question(), said(span="D6:IMG_002, D6:IMG_003")).answer_correct == 0.0
    # an answerer with no span (a model): the id in its text
    assert score_answer(base(), question(), said(text="It is D6:IMG_002.")).answer_correct == 1.0


def test_a_declined_answer_is_wrong_whatever_it_cites():
    got = score_answer(base(), question(), said(text="Not sure; the closest evidence: ...", cited=(GOLD,),
                                                declined=True))
    assert got.answer_correct == 0.0 and got.answer_f1 == 0.0 and got.answered == 0.0
    assert got.unsure_with_evidence == 1.0


def test_a_non_image_gold_keeps_the_token_rule():
    q = question(answer="a paint brush")
    right = score_answer(base(), q, said(text="a paint brush", span="a paint brush", cited=(OTHER,)))
    assert right.answer_f1 == 1.0 and right.answer_correct == 1.0
    wrong = score_answer(base(), q, said(text="a palette knife", span="a palette knife", cited=(GOLD,)))
    assert wrong.answer_correct == 0.0  # citing a gold turn does not make the words right
    listed = question(answer="D6:IMG_002, D6:IMG_003")  # a list of images: not one image reference
    got = score_answer(base(), listed, said(span="the photo of D6 turn 12", cited=(GOLD,)))
    assert got.answer_correct == 0.0 and image_verdict(listed.answer, "x", (GOLD,), {GOLD}) is None


def test_an_ar_question_with_an_image_answer_is_scored_as_ar():
    q = question(evidence=(), category="AR")
    assert score_answer(base("AR"), q, said(cited=(GOLD,))).answer_correct == 0.0
    assert score_answer(base("AR"), q, said(text="Not in memory.", declined=True, refused=True)).answer_correct == 1.0


def test_the_judge_is_not_asked_which_photo():
    """A judge reads words: it cannot tell which photo a caption is, so a photo question is scored by the rule."""
    class Wrong:
        def judge(self, *a):
            raise AssertionError("the judge was asked a which-photo question")

    got = score_answer(base(), question(), said(cited=(GOLD,)), judge=Wrong())
    assert got.judged_acc == 1.0 and got.answer_correct == 1.0


def test_a_cited_node_the_answerer_was_not_shown_points_at_nothing():
    prov = Provenance(NS_, "D6", 4, __import__("datetime").datetime(2024, 7, 16, 12))
    read = Context("q", (ContextItem(OTHER, prov, "user", EvidenceForm.RAW_TEXT, "x", (), 1.0, 1),), BudgetUse(),
                   ReaderBudget(), RouteTrace("t"))
    assert score_answer(base(), question(), said(cited=(GOLD,)), read=read).answer_correct == 0.0
    assert score_answer(base(), question(), said(cited=(GOLD,))).answer_correct == 1.0


def test_a_budget_violation_scores_zero():
    from dataclasses import replace

    got = score_answer(replace(base(), violation="over"), question(), said(cited=(GOLD,)))
    assert got.answer_correct == 0.0 and got.answer_f1 == 0.0


def test_the_sandbox_sends_the_citations_back():
    from c3m.eval.sandbox import AnswerRecord

    assert "cited" in {f.name for f in fields(AnswerRecord)}


def test_the_offline_answerer_is_scored_right_on_a_converted_chat():
    """End to end on a converted chat: the answerer names the photo by its turn (its number unknown), the harness's
    rule credits it."""
    from datetime import datetime

    from c3m.language.timeline import annotate
    from c3m.models import ExtractiveAnswerer

    day = datetime(2024, 7, 16, 12)
    turns = [(4, "user", "My desk this morning. [shared a photo: a laptop and a mug on a wooden desk]"),
             (5, "assistant", "A tidy workspace!"),
             (12, "user", "Trying watercolours. [shared a photo: a paint brush resting on a palette of blues]"),
             (13, "assistant", "Blue washes are a good start.")]
    items = tuple(ContextItem(node_id_for(NS_, "D6", t), Provenance(NS_, "D6", t, day), role, EvidenceForm.RAW_TEXT,
                              text, (), 1.0, 9) for t, role, text in turns)
    ctx = Context("q", items, BudgetUse(), ReaderBudget(), RouteTrace("t"))
    ans = ExtractiveAnswerer().answer("Which image shows the paint brush?", annotate(ctx))
    assert not ans.declined and ans.span == "the photo of D6 turn 12", ans.text
    assert score_answer(base(), question(), ans, read=ctx).answer_correct == 1.0
    wrong = question(answer="D6:IMG_001", evidence=(("D6", 4), ("D6", 5)))
    assert score_answer(base(), wrong, ans, read=ctx).answer_correct == 0.0


@pytest.mark.parametrize("gold, said_, cited, expect", [
    ("D6:IMG_002", "the photo of D6 turn 12", (GOLD,), True),
    ("D6:IMG_002", None, (), False),
    ("D6:IMG_002", "D6:IMG_002", (), True),
])
def test_image_verdict_table(gold, said_, cited, expect):
    assert image_verdict(gold, said_, cited, {GOLD, REPLY}) is expect
