"""A date-aware score for answers about time: do the prediction's dates lie where the gold answer says?

Token F1 scores a date on its wording: ``2023-07-02`` against LoCoMo's gold
``2 July 2023`` shares no token and scores 0, and ``July 2, 2023`` scores
1. This score reads both sides as spans of days and compares the days. It is
a named variant beside F1 (``date_match`` in every scored row and in
``metrics.json``), never a replacement for it.

Conventions:

* **What is read.** Absolute dates (``2 July 2023``, ``July 2, 2023``,
  ``2023-07-02``, ``24June, 2022``), day ranges (``November 5-6, 2022``, ``between 26 March and 20 April 2023``),
  months (``May 2023``, ``2023-05``), seasons (``summer 2024``: June-August,
  winter: December-February of the next year), years (``in 2022``), and
  LoCoMo's relative forms anchored on one of them: ``the week before X``
  (the 7 days before X), ``the weekend before X`` / ``of X``, ``the Friday
  before X`` (the last Friday before X), ``the day before X``, ``N days /
  weeks / months / years before X`` (and ``after``), ``a few days before X``
  (the 6 days before X), ``the week of X`` (its Monday to Sunday), ``the first
  / last week of May 2023``. Case, commas, full stops and ordinals
  (``1st``) are ignored; a relative form without its anchor (``last week``)
  is no date.
* **The gold's own granularity.** Each expression is an interval of days. A
  prediction matches when it names at least one date and every date it names
  lies inside the gold's interval: ``7 May 2023`` matches the gold ``May
  2023``, but ``May 2023`` does not match the gold ``7 May 2023`` (coarser than
  asked), and a hedge over two dates matches only if both lie inside.
* **What is counted, not scored.** A gold answer that holds no date (``four
  months``, ``Brazil``) gives ``date_match`` None and status ``gold_not_a_date``:
  the question is left out. A prediction that holds no date where the gold
  does scores 0 with status ``no_date_in_prediction``.

The parser is ours, written from LoCoMo's category-2 golds
(``tests/test_temporal.py`` holds them); it reads English only.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

MATCHED, OTHER_DATE, NO_DATE, GOLD_NOT_A_DATE = "matched", "other_date", "no_date_in_prediction", "gold_not_a_date"
TEMPORAL_KEYS = ("date_match",)

_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
_MONTHS.update({"sept": 9, "januarty": 1, "janury": 1})  # the last two: misspellings in LoCoMo's golds
_WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}  # fmt: skip
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11), "winter": (12, 2)}

MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")"
DAY, YEAR = r"(?P<day>\d{1,2})", r"(?P<year>(?:19|20)\d{2})"
_ABSOLUTE = [  # most specific first; each gives a span of days
    ("between", rf"\bbetween {DAY} {MONTH} and (?P<day2>\d{{1,2}}) (?P<month2>[a-z]+) {YEAR}\b"),
    ("day", rf"\b(?P<year>\d{{4}})-(?P<month_n>\d{{1,2}})-{DAY}\b"),
    ("range", rf"\b{MONTH} {DAY}(?:-| to | and )(?P<day2>\d{{1,2}}) {YEAR}\b"),
    ("range", rf"\b{DAY}(?:-| to | and )(?P<day2>\d{{1,2}}) {MONTH} {YEAR}\b"),
    ("day", rf"\b{DAY} {MONTH} {YEAR}\b"),
    ("day", rf"\b{MONTH} {DAY} {YEAR}\b"),
    ("month", r"\b(?P<year>\d{4})-(?P<month_n>\d{1,2})\b(?!-)"),
    ("month", rf"\b{MONTH} {YEAR}\b"),
    ("season", rf"\b(?P<season>{'|'.join(_SEASONS)}) (?:of )?{YEAR}\b"),
    ("year", rf"\b{YEAR}\b"),
]
_ABSOLUTE_RE = [(kind, re.compile(pattern)) for kind, pattern in _ABSOLUTE]
_COUNT = r"(?P<count>\d+|" + "|".join(_NUMBERS) + r")"
_RELATIVE = [  # each ends where its anchor (an absolute expression) starts
    ("few_days", r"\b(?:a )?few days (?P<way>before|after) $"),
    ("count", rf"\b{_COUNT} (?P<unit>day|week|month|year)s? (?P<way>before|after) $"),
    ("unit", r"\b(?:the )?(?P<unit>day|week|weekend|month|year) (?P<way>before|after) $"),
    ("weekday", rf"\b(?:the )?(?P<weekday>{'|'.join(_WEEKDAYS)}) (?P<way>before|after) $"),
    ("part", r"\b(?:the )?(?P<which>first|last) (?P<unit>week|weekend) of $"),
    ("of", r"\b(?:the )?(?P<unit>week|weekend) of $"),
]
_RELATIVE_RE = [(kind, re.compile(pattern)) for kind, pattern in _RELATIVE]
_LOOKBACK = 40  # characters before an anchor searched for a relative form


@dataclass(frozen=True)
class Span:
    """The days an expression names, first and last included."""

    first: date
    last: date

    def within(self, other: Span) -> bool:
        return other.first <= self.first and self.last <= other.last


def normalise(text: str) -> str:
    """Lower case; ordinals, commas and full stops gone; a space between digits and letters (``24june``)."""
    text = str(text).lower()
    text = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text)
    text = re.sub(r"(\d)([a-z])", r"\1 \2", text)
    text = re.sub(r"([a-z])(\d)", r"\1 \2", text)
    text = re.sub(r"[,.;:!?()\"']", " ", text)
    text = re.sub(r"\s*-\s*", "-", text)
    return re.sub(r"\s+", " ", text).strip()


def _month_span(year: int, month: int) -> Span:
    return Span(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _shift_months(day: date, months: int) -> tuple[int, int]:
    index = day.year * 12 + day.month - 1 + months
    return index // 12, index % 12 + 1


def _absolute(kind: str, match: re.Match[str]) -> Span | None:
    groups = match.groupdict()
    year = int(groups["year"])
    month = int(groups["month_n"]) if groups.get("month_n") else _MONTHS.get(groups.get("month") or "", 0)
    try:
        if kind == "between":
            last_month = _MONTHS.get(groups["month2"] or "", 0)
            return Span(date(year, month, int(groups["day"])), date(year, last_month, int(groups["day2"])))
        if kind == "day":
            return Span(date(year, month, int(groups["day"])), date(year, month, int(groups["day"])))
        if kind == "range":
            first, last = sorted((int(groups["day"]), int(groups["day2"])))
            return Span(date(year, month, first), date(year, month, last))
        if kind == "month":
            return _month_span(year, month)
        if kind == "season":
            start, end = _SEASONS[groups["season"]]
            last_year = year + (end < start)
            return Span(date(year, start, 1), _month_span(last_year, end).last)
        return Span(date(year, 1, 1), date(year, 12, 31))
    except ValueError:  # 31 February, month 13: not a date
        return None


def _day(day: date) -> Span:
    return Span(day, day)


def _window(base: date, sign: int, near: int, far: int) -> Span:
    """The days ``near`` to ``far`` days before (``sign`` -1) or after (+1) ``base``."""
    ends = sorted((base + timedelta(days=sign * near), base + timedelta(days=sign * far)))
    return Span(ends[0], ends[1])


def _nearest_weekday(base: date, weekday: int, sign: int) -> date:
    """The nearest ``weekday`` strictly before (``sign`` -1) or after (+1) ``base``."""
    day = base + timedelta(days=sign)
    while day.weekday() != weekday:
        day += timedelta(days=sign)
    return day


def _relative(kind: str, groups: dict[str, str | None], anchor: Span) -> Span | None:
    """The span a relative form names from its anchor: ``before`` counts back from the anchor's first
    day, ``after`` on from its last; None for a form this anchor cannot carry."""
    sign = -1 if groups.get("way") == "before" else 1
    base = anchor.first if sign < 0 else anchor.last
    unit = groups.get("unit")
    if kind == "weekday":
        return _day(_nearest_weekday(base, _WEEKDAYS[groups["weekday"] or ""], sign))
    if kind == "few_days":
        return _window(base, sign, 1, 6)
    if kind in ("unit", "count"):
        word = groups.get("count") or "1"
        count = int(word) if word.isdigit() else _NUMBERS[word]
        if unit == "day":
            return _day(base + timedelta(days=sign * count))
        if unit == "week":
            return _window(base, sign, 7 * (count - 1) + 1, 7 * count)
        if unit == "weekend":
            saturday = _nearest_weekday(base, 5, sign)
            return Span(saturday, saturday + timedelta(days=1))
        if unit == "month":
            return _month_span(*_shift_months(base, sign * count))
        year = base.year + sign * count
        return Span(date(year, 1, 1), date(year, 12, 31))
    if kind == "of" and unit == "week":
        monday = anchor.first - timedelta(days=anchor.first.weekday())
        return Span(monday, monday + timedelta(days=6))
    if kind == "of":  # the weekend nearest the day: Monday to Wednesday look back, Thursday and Friday ahead
        offset = {0: -2, 1: -3, 2: -4, 3: 2, 4: 1, 5: 0, 6: -1}[anchor.first.weekday()]
        saturday = anchor.first + timedelta(days=offset)
        return Span(saturday, saturday + timedelta(days=1))
    if anchor.last - anchor.first < timedelta(days=27):  # "the first week of" a day or a week: not read
        return None
    first = groups.get("which") == "first"
    if unit == "week":
        start = anchor.first if first else anchor.last - timedelta(days=6)
        return Span(start, start + timedelta(days=6))
    saturday = (
        _nearest_weekday(anchor.first - timedelta(days=1), 5, 1)
        if first
        else _nearest_weekday(anchor.last + timedelta(days=1), 5, -1)
    )
    return Span(saturday, saturday + timedelta(days=1))


def date_spans(text: str) -> list[Span]:
    """Every date expression of ``text`` as a span of days, in reading order (see the module's conventions)."""
    normal = normalise(text)
    taken = [False] * len(normal)
    found: list[tuple[int, Span]] = []
    for kind, pattern in _ABSOLUTE_RE:
        for match in pattern.finditer(normal):
            if any(taken[match.start() : match.end()]):
                continue
            span = _absolute(kind, match)
            if span is None:
                continue
            for index in range(match.start(), match.end()):
                taken[index] = True
            start = match.start()
            before = normal[max(0, start - _LOOKBACK) : start]
            for relative_kind, relative in _RELATIVE_RE:
                if hit := relative.search(before):
                    try:
                        shifted = _relative(relative_kind, hit.groupdict(), span)
                    except (ValueError, OverflowError):  # "900 years before 1 May 2023": past the calendar
                        shifted = None
                    if shifted is not None:
                        span, start = shifted, start - len(before) + hit.start()
                    break
            found.append((start, span))
    return [span for _, span in sorted(found, key=lambda pair: pair[0])]


def date_match(prediction: str, reference: str) -> tuple[float | None, str]:
    """``(score, status)``: 1.0 when the prediction names dates and all lie inside the gold's span, else 0.0;
    None when the gold holds no date (status says which case: :data:`MATCHED`, :data:`OTHER_DATE`,
    :data:`NO_DATE`, :data:`GOLD_NOT_A_DATE`). The gold's span runs from its first date to its last."""
    gold = date_spans(reference)
    if not gold:
        return None, GOLD_NOT_A_DATE
    wanted = Span(min(span.first for span in gold), max(span.last for span in gold))
    named = date_spans(prediction)
    if not named:
        return 0.0, NO_DATE
    if all(span.within(wanted) for span in named):
        return 1.0, MATCHED
    return 0.0, OTHER_DATE
