"""Time windows a question names ("the image shown on 2024-06-17", "in late June", "last May", "before 16 August
2024", "two weeks ago"), relative to the time it is asked.

Sessions carry their time; a question that names a date or period asks about the sessions of that period, so the
reader searches inside the window as a channel of its own and the reranker weighs whether a turn's session falls
in it. What is understood (``question_windows``), each read as a half-open ``[start, end)`` window:

- a day: ISO ``2024-06-17``; ``16 August 2024``, ``August 16(th)(, 2024)``, ``the 5th of May`` (a missing year is
  the latest one not after the question);
- a month: ``June``, ``June 2024``, ``last May`` (the latest May before the question's month), ``this month``,
  ``last month``; a part of one: ``early`` (days 1-10), ``mid``/``middle of`` (11-20), ``late``/``end of`` (21-end),
  ``beginning``/``start of`` (= early);
- a year: ``in 2024``, ``last year``, ``this year``; a season: ``(last) summer``, ``in the spring of 2024``
  (northern meteorological seasons: spring = March-May, ..., winter = December-February);
- relative days and weeks: ``today``, ``yesterday``, ``last week``, ``this week``, ``N days/weeks/months ago``;
- an open side: ``before X`` / ``until X`` / ``by X`` (everything before X's start, or X's end for until/by), ``after
  X`` / ``since X`` (from X's end, or X's start for since).

Bare month names count only when capitalised, or inside a date ("may" is a verb, and so is "May" before a pronoun:
"May I ask ..."; "March" in "the March of time" is a known miss). A period named by an event ("before she moved") is
not a date: the reranker's "now"/"before" cues and the update chain answer those. "N units ago" is a window around
that point (the day itself; +-3 days for weeks, +-15 for months).

Why not ``dateparser``: it parses a date *string* into a point, so the phrases still have to be found first, and it
reads none of "late June", "last May", "mid-December" or "last summer" (measured, dateparser 1.5.0: None for each;
its ``search_dates`` reads "in June" as 24 June and "19 June 2024" as "June" plus "2024"; importing it and its first
call take ~2 s). What is needed here is a window, which this small grammar
computes with the ``calendar`` module; ``tests/test_when.py`` holds every case it supports.
"""
from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
MONTHS["sept"] = 9
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December|" \
         r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
_PART = r"(?P<part>early|mid|middle of|late|end of|beginning of|start of)"
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3}
SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}


@dataclass(frozen=True)
class TimeWindow:
    """A half-open window ``[start, end)`` (None: open on that side) and the words it was read from."""

    start: datetime | None
    end: datetime | None
    phrase: str

    def contains(self, t: datetime) -> bool:
        return (self.start is None or t >= self.start) and (self.end is None or t < self.end)

    def days_outside(self, t: datetime) -> float:
        """0 inside the window, else the distance to its nearest edge in days."""
        if self.start is not None and t < self.start:
            return (self.start - t).total_seconds() / 86400
        if self.end is not None and t >= self.end:
            return (t - self.end).total_seconds() / 86400
        return 0.0

    @property
    def bounded(self) -> bool:
        """Closed on both sides (a period the reader can search inside)."""
        return self.start is not None and self.end is not None


# -- the patterns, most specific first ------------------------------------------------------------
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DAY_MONTH = re.compile(rf"\b(?:the\s+)?(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+({_MONTH})(?:,?\s+(\d{{4}}))?\b", re.I)
_MONTH_DAY = re.compile(rf"\b({_MONTH})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.I)
_MONTH_PART = re.compile(rf"\b(?:(?:in|during)\s+)?(?:the\s+)?(?:{_PART}[\s-]+)?(?P<last>last\s+|this\s+)?"
                         rf"(?P<month>{_MONTH})(?:[\s,]+(?:of\s+)?(?P<year>\d{{4}}))?\b")
_SEASON = re.compile(r"\b(?P<last>last|this)?\s*(?:the\s+)?(?P<season>spring|summer|autumn|fall|winter)"
                     r"(?:\s+(?:of\s+)?(?P<year>\d{4}))?\b", re.I)
_YEAR = re.compile(r"\b(?:in|during|of|since|before|after|until)\s+(\d{4})\b", re.I)
_RELATIVE = re.compile(r"\b(?:today|yesterday|(?:last|this|past)\s+(?:week|month|year)|"
                       r"(?:\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)\s+"
                       r"(?:days?|weeks?|months?|years?)\s+ago)\b", re.I)
_MODAL = re.compile(r"\s+(?:i|we|you|he|she|they|it)\b", re.I)
_SIDE = re.compile(r"\b(before|until|till|by|after|since|prior to)\s+(?:the\s+)?$", re.I)


def question_windows(question: str, now: datetime) -> tuple[TimeWindow, ...]:
    """Every window ``question`` names, relative to ``now`` (the time it is asked), in the order they appear."""
    found: list[tuple[int, int, TimeWindow]] = []
    taken: list[tuple[int, int]] = []

    def free(a: int, b: int) -> bool:
        return all(b <= s or a >= e for s, e in taken)

    def add(m: re.Match, window: TimeWindow | None) -> None:
        if window is None or not free(m.start(), m.end()):
            return
        taken.append((m.start(), m.end()))
        found.append((m.start(), m.end(), window))

    for m in _ISO.finditer(question):
        add(m, _day(int(m[1]), int(m[2]), int(m[3]), m[0]))
    for m in _DAY_MONTH.finditer(question):
        add(m, _day(_year(m[3], MONTHS[m[2].lower().rstrip(".")], now), MONTHS[m[2].lower().rstrip(".")],
                    int(m[1]), m[0]))
    for m in _MONTH_DAY.finditer(question):
        month = MONTHS[m[1].lower().rstrip(".")]
        add(m, _day(_year(m[3], month, now), month, int(m[2]), m[0]))
    for m in _RELATIVE.finditer(question):
        add(m, _relative(m[0], now))
    for m in _MONTH_PART.finditer(question):
        word = m["month"]
        if not word[0].isupper() and not m["year"]:  # "may" / "march" as words, not months
            continue
        if word.lower() == "may" and not m["year"] and _MODAL.match(question, m.end()):  # "May I ask ..."
            continue
        add(m, _month(m, now))
    for m in _SEASON.finditer(question):
        if m["last"] or m["year"] or re.search(r"\b(in|during|this|last)\s+(the\s+)?$", question[:m.start("season")], re.I):
            add(m, _season(m, now))
    for m in _YEAR.finditer(question):
        y = int(m[1])
        if 1900 <= y <= 2200:
            span = re.search(r"\d{4}", m[0])
            sub = _Span(m.start() + span.start(), m.start() + span.end())
            add(sub, TimeWindow(datetime(y, 1, 1), datetime(y + 1, 1, 1), m[1]))
    out = []
    for start, _end, w in sorted(found, key=lambda f: f[0]):
        side = _SIDE.search(question[:start])
        out.append(_open_side(w, side[1].lower()) if side else w)
    return tuple(out)


class _Span:
    """A match-like (start, end) for a sub-span of a match."""

    def __init__(self, a: int, b: int):
        self._a, self._b = a, b

    def start(self) -> int:
        return self._a

    def end(self) -> int:
        return self._b


def _open_side(w: TimeWindow, word: str) -> TimeWindow:
    if word in ("before", "prior to"):
        return TimeWindow(None, w.start, f"{word} {w.phrase}")
    if word in ("until", "till", "by"):
        return TimeWindow(None, w.end, f"{word} {w.phrase}")
    if word == "since":
        return TimeWindow(w.start, None, f"{word} {w.phrase}")
    return TimeWindow(w.end, None, f"{word} {w.phrase}")  # after


def _year(text: str | None, month: int, now: datetime) -> int:
    """The year written, else the latest year in which ``month`` is not after ``now``."""
    if text:
        return int(text)
    return now.year if month <= now.month else now.year - 1


def _day(y: int, m: int, d: int, phrase: str) -> TimeWindow | None:
    try:
        start = datetime(y, m, d)
    except ValueError:  # 2024-02-31, "the 40th of May"
        return None
    return TimeWindow(start, start + timedelta(days=1), phrase)


def _month_start(y: int, m: int) -> datetime:
    return datetime(y + (m - 1) // 12, (m - 1) % 12 + 1, 1)


def _month(m: re.Match, now: datetime) -> TimeWindow:
    month = MONTHS[m["month"].lower().rstrip(".")]
    if m["year"]:
        year = int(m["year"])
    elif m["last"] and m["last"].strip().lower() == "last":  # the latest such month strictly before this one
        year = now.year if month < now.month else now.year - 1
    else:
        year = _year(None, month, now)
    start, end = _month_start(year, month), _month_start(year, month + 1)
    part = (m["part"] or "").lower()
    if part in ("early", "beginning of", "start of"):
        end = start + timedelta(days=10)
    elif part in ("mid", "middle of"):
        start, end = start + timedelta(days=10), start + timedelta(days=20)
    elif part in ("late", "end of"):
        start = start + timedelta(days=20)
    return TimeWindow(start, end, m[0].strip())


def _season(m: re.Match, now: datetime) -> TimeWindow:
    first, months = SEASONS[m["season"].lower()]
    if m["year"]:
        year = int(m["year"])
    else:  # the latest such season that has begun (last: the one before the current or latest)
        year = now.year if _month_start(now.year, first) <= now else now.year - 1
        if (m["last"] or "").lower() == "last" and _month_start(year, first + months) > now:
            year -= 1
    start = _month_start(year, first)
    return TimeWindow(start, _month_start(year, first + months), m[0].strip())


def _relative(phrase: str, now: datetime) -> TimeWindow | None:
    text = phrase.lower()
    day = datetime(now.year, now.month, now.day)
    if text == "today":
        return TimeWindow(day, day + timedelta(days=1), phrase)
    if text == "yesterday":
        return TimeWindow(day - timedelta(days=1), day, phrase)
    unit = re.search(r"(day|week|month|year)", text)[1]
    if text.startswith(("last", "this", "past")):
        if unit == "week":
            monday = day - timedelta(days=day.weekday())
            return (TimeWindow(monday, monday + timedelta(days=7), phrase) if text.startswith("this")
                    else TimeWindow(monday - timedelta(days=7), monday, phrase) if text.startswith("last")
                    else TimeWindow(day - timedelta(days=7), day + timedelta(days=1), phrase))
        if unit == "month":
            this = _month_start(now.year, now.month)
            return (TimeWindow(this, _month_start(now.year, now.month + 1), phrase) if text.startswith("this")
                    else TimeWindow(_month_start(now.year, now.month - 1), this, phrase))
        this = datetime(now.year, 1, 1)
        return (TimeWindow(this, datetime(now.year + 1, 1, 1), phrase) if text.startswith("this")
                else TimeWindow(datetime(now.year - 1, 1, 1), this, phrase))
    m = re.match(r"(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)\s", text)
    n = int(m[1]) if m[1].isdigit() else _NUMBER_WORDS[m[1]]
    if unit in ("day", "week"):
        at = day - timedelta(days=n * (7 if unit == "week" else 1))
        half = timedelta(days=0 if unit == "day" else 3)
    else:
        months = n * (12 if unit == "year" else 1)
        at = _month_start(now.year, now.month - months).replace(day=min(now.day, 28))
        half = timedelta(days=15 if unit == "month" else 182)
    return TimeWindow(at - half, at + half + timedelta(days=1), phrase)  # "about then": a window around it
