"""Time windows a question names (c3m.language.when): every supported phrase, relative to the time it is asked."""
from datetime import datetime

import pytest

from c3m.language.when import TimeWindow, question_windows

NOW = datetime(2024, 7, 24, 18, 15)


def d(*a):
    return datetime(*a)


CASES = [
    ("What did I show you on 2024-06-17?", d(2024, 6, 17), d(2024, 6, 18)),
    ("the image shown on 16 August 2023", d(2023, 8, 16), d(2023, 8, 17)),
    ("What did I say on August 16th?", d(2023, 8, 16), d(2023, 8, 17)),  # no year: the latest not after now
    ("on July 3, 2024", d(2024, 7, 3), d(2024, 7, 4)),
    ("what happened on the 5th of May", d(2024, 5, 5), d(2024, 5, 6)),
    ("What did I buy in June?", d(2024, 6, 1), d(2024, 7, 1)),
    ("What did I buy in late June?", d(2024, 6, 21), d(2024, 7, 1)),
    ("early March 2023", d(2023, 3, 1), d(2023, 3, 11)),
    ("What happened in mid-December?", d(2023, 12, 11), d(2023, 12, 21)),
    ("What did I do last May?", d(2024, 5, 1), d(2024, 6, 1)),
    ("What did I do last July?", d(2023, 7, 1), d(2023, 8, 1)),  # "last" July: strictly before this one
    ("this month", d(2024, 7, 1), d(2024, 8, 1)),
    ("last month", d(2024, 6, 1), d(2024, 7, 1)),
    ("What did I get in 2023?", d(2023, 1, 1), d(2024, 1, 1)),
    ("last year", d(2023, 1, 1), d(2024, 1, 1)),
    ("our trip last summer", d(2023, 6, 1), d(2023, 9, 1)),
    ("in the spring of 2023", d(2023, 3, 1), d(2023, 6, 1)),
    ("yesterday", d(2024, 7, 23), d(2024, 7, 24)),
    ("today", d(2024, 7, 24), d(2024, 7, 25)),
    ("What did I do last week?", d(2024, 7, 15), d(2024, 7, 22)),
    ("What did I say two weeks ago?", d(2024, 7, 7), d(2024, 7, 14)),
    ("3 days ago", d(2024, 7, 21), d(2024, 7, 22)),
]


@pytest.mark.parametrize("question,start,end", CASES, ids=[c[0] for c in CASES])
def test_supported_phrases(question, start, end):
    (w,) = question_windows(question, NOW)
    assert (w.start, w.end) == (start, end)
    assert w.phrase and w.phrase.lower() in question.lower()


@pytest.mark.parametrize("question,start,end", [
    ("Before 19 June 2024, what was the colour of my violin?", None, d(2024, 6, 19)),
    ("until 3 July", None, d(2024, 7, 4)),
    ("Since March 2024 what changed?", d(2024, 3, 1), None),
    ("after June", d(2024, 7, 1), None),
])
def test_open_sides(question, start, end):
    (w,) = question_windows(question, NOW)
    assert (w.start, w.end) == (start, end) and not w.bounded


@pytest.mark.parametrize("question", [
    "May I ask what you said about my bike?",      # a modal verb, not the month
    "you may want to march on",                     # lower-case month words
    "What was my bike colour before she moved?",    # an event, not a date: the chain answers it
    "Which came up first in our chats, my bucket or my trunk?",
    "What is the current colour of my trunk?",
    "I have 2 cats and 12 fish",                    # numbers that are not years
])
def test_no_window(question):
    assert question_windows(question, NOW) == ()


def test_several_windows_in_order_and_invalid_dates_skipped():
    ws = question_windows("Between 2024-02-31 and the 3rd of May, and in 2022?", NOW)
    assert [w.phrase for w in ws] == ["the 3rd of May", "2022"]


def test_window_arithmetic():
    w = TimeWindow(d(2024, 6, 1), d(2024, 7, 1), "June")
    assert w.contains(d(2024, 6, 30, 23)) and not w.contains(d(2024, 7, 1))
    assert w.days_outside(d(2024, 6, 15)) == 0
    assert w.days_outside(d(2024, 5, 30)) == 2
    assert w.days_outside(d(2024, 7, 3)) == 2
    assert TimeWindow(None, d(2024, 1, 1), "before 2024").days_outside(d(2023, 1, 1)) == 0
