"""The date-aware score: LoCoMo's own golds read as spans of days, predictions compared at their granularity."""

from __future__ import annotations

from datetime import date

import pytest

from clag.metrics.temporal import GOLD_NOT_A_DATE, MATCHED, NO_DATE, OTHER_DATE, Span, date_match, date_spans


def day(y: int, m: int, d: int) -> Span:
    return Span(date(y, m, d), date(y, m, d))


# Golds copied from LoCoMo's category-2 questions (locomo10.json), with the days each names.
GOLDS = [
    ("7 May 2023", day(2023, 5, 7)),
    ("May 1, 2023", day(2023, 5, 1)),
    ("24 June, 2023", day(2023, 6, 24)),
    ("The Friday before 24June, 2022.", day(2022, 6, 17)),  # 24 June 2022 was a Friday: the one before
    ("The sunday before 25 May 2023", day(2023, 5, 21)),
    ("Saturday after 11 September, 2023.", day(2023, 9, 16)),
    ("The week before 6 March 2023", Span(date(2023, 2, 27), date(2023, 3, 5))),
    ("Two weeks before 11 August 2023", Span(date(2023, 7, 28), date(2023, 8, 3))),
    ("few days before November 22, 2023", Span(date(2023, 11, 16), date(2023, 11, 21))),
    ("The weekend before 17 July 2023", Span(date(2023, 7, 15), date(2023, 7, 16))),
    ("The weekend of 22August, 2022.", Span(date(2022, 8, 20), date(2022, 8, 21))),  # a Monday: the one before
    ("The week of 23 August 2023", Span(date(2023, 8, 21), date(2023, 8, 27))),
    ("first week of April, 2023", Span(date(2023, 4, 1), date(2023, 4, 7))),
    ("last week of May 2023", Span(date(2023, 5, 25), date(2023, 5, 31))),
    ("November 5-6, 2022", Span(date(2022, 11, 5), date(2022, 11, 6))),
    ("between 26 March and 20 April 2023", Span(date(2023, 3, 26), date(2023, 4, 20))),
    ("June, 2023", Span(date(2023, 6, 1), date(2023, 6, 30))),
    ("in summer 2022", Span(date(2022, 6, 1), date(2022, 8, 31))),
    ("in 2022", Span(date(2022, 1, 1), date(2022, 12, 31))),
    ("Januarty 5, 2024", day(2024, 1, 5)),  # LoCoMo's misspelling
]


@pytest.mark.parametrize(("gold", "span"), GOLDS)
def test_locomo_golds_read_as_the_days_they_name(gold: str, span: Span) -> None:
    assert date_spans(gold) == [span]


@pytest.mark.parametrize("gold", ["four months", "Brazil", "10 years ago", "13 August", "The week of April 3rd to 9th"])
def test_golds_without_a_full_date_are_left_out(gold: str) -> None:
    assert date_match("2023-05-07", gold) == (None, GOLD_NOT_A_DATE)


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("2023-07-02", "2 July 2023", (1.0, MATCHED)),  # the ISO form F1 scores 0
        ("July 2, 2023", "2 July 2023", (1.0, MATCHED)),
        ("Caroline went on 7 May 2023.", "May 2023", (1.0, MATCHED)),  # finer than the gold, inside it
        ("May 2023", "7 May 2023", (0.0, OTHER_DATE)),  # coarser than asked
        ("2023-03-01", "The week before 6 March 2023", (1.0, MATCHED)),
        ("6 March 2023", "The week before 6 March 2023", (0.0, OTHER_DATE)),  # the anchor, not the week
        ("1 March 2023 or 10 March 2023", "The week before 6 March 2023", (0.0, OTHER_DATE)),  # a hedge
        ("last week", "The week before 6 March 2023", (0.0, NO_DATE)),  # no anchor, no date
        ("Not mentioned in the conversation", "2022", (0.0, NO_DATE)),
        ("2022-08", "August 2022", (1.0, MATCHED)),
        ("The Friday before 15 July 2023", "2023-07-14", (1.0, MATCHED)),
    ],
)
def test_a_prediction_matches_when_every_date_it_names_lies_inside_the_gold(
    prediction: str, gold: str, expected: tuple[float, str]
) -> None:
    assert date_match(prediction, gold) == expected


def test_impossible_dates_and_runaway_counts_never_raise() -> None:
    assert date_spans("31 February 2023") == [Span(date(2023, 2, 1), date(2023, 2, 28))]  # the month is still read
    assert date_spans("999999999 days before 1 May 2023") == [day(2023, 5, 1)]
    assert date_spans("") == []
