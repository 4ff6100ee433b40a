"""Does an LLM judge separate right answers from wrong ones? A calibration set of known verdicts.

A judge's J is a number only if the judge accepts right answers and rejects
wrong ones. On adversarial answers written by hand, the 1.5B judge's lenient
prompt accepted about half of the answers with a wrong fact and the strict one
rejected 30% of the right ones (the long ones), so J is calibrated here before
it is reported. Each LoCoMo question of a run's slice yields candidate answers
whose verdict is known without a judge:

* right: ``gold`` (the gold answer verbatim), ``gold_long`` (the gold inside
  a longer sentence, as verbose small models answer: the strict prompt's weak
  spot) and ``gold_iso`` (a temporal gold of one day or one month written as
  ISO 8601, ``2023-05-07`` or ``2023-05``: the form most of the first
  reference's temporal answers took; added 2026-12-04);
* wrong but plausible: ``other_gold`` (the gold of another question of the same
  conversation and category that shares no content word with this gold, and,
  for a date, names no day inside it), ``near_date`` (a temporal gold that
  names one day or one month, moved to the next day or month in LoCoMo's own
  wording: the wrong answers of the reference's temporal questions are mostly
  such near misses), ``vague`` (``Sometime in <year>`` for a temporal gold that
  names a day or a month: right year, wrong precision) and ``adversarial``
  (category 5: LoCoMo's adversarial answer, the fact of the other speaker,
  against the gold that the conversation does not say).

The rule that lets a prompt's J into Table 1 and the claims
(:func:`separates`): it accepts at least :data:`MIN_RIGHT` of every right kind,
at most :data:`MAX_WRONG` of every wrong kind, and agrees with itself
(a second, sampled judge run at another seed) with Cohen's kappa at least
:data:`MIN_SELF_KAPPA`. Unclear verdicts are counted and left out, as in J. Each prompt's
date-vetoed variant (:func:`clag.metrics.judge.date_vetoed`) is measured and
ruled on like a prompt; ``gold_iso`` is the kind that would catch a veto that
overrules right dates written another way (``near_date`` and ``vague`` share
the veto's date parser, so the veto rejects them by construction).
"""

from __future__ import annotations

import calendar
import hashlib
import json
import random
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from clag.metrics import cohen_kappa
from clag.metrics.aggregate import summarize
from clag.metrics.scoring import category_number
from clag.metrics.temporal import Span, date_match, date_spans

RIGHT_KINDS = ("gold", "gold_long", "gold_iso")
WRONG_KINDS = ("other_gold", "near_date", "vague", "adversarial")
KINDS = RIGHT_KINDS + WRONG_KINDS
NOT_MENTIONED = "Not mentioned in the conversation"
MIN_RIGHT, MAX_WRONG, MIN_SELF_KAPPA = 0.8, 0.2, 0.6
_LONG = "From what was said in the conversation, the answer is {gold}; that is what came up when they talked about it."
_STOP = frozenset("a an the of in on at to and or for with by from is was were be her his their".split())


def _content_words(text: str) -> set[str]:
    return {word for word in re.findall(r"[a-z0-9]+", str(text).lower()) if word not in _STOP}


def _distinct(candidate: str, gold: str) -> bool:
    """True when ``candidate`` is plainly another answer: no shared content word, no day inside a dated gold."""
    if _content_words(candidate) & _content_words(gold):
        return False
    score, _ = date_match(candidate, gold)
    return not score


def _one_span(gold: str) -> Span | None:
    """The one span of days a gold names, or None (no date, or several)."""
    spans = date_spans(gold)
    return spans[0] if len(spans) == 1 else None


def _vague(span: Span) -> str | None:
    """``Sometime in <year>`` for a gold span of at most a month, else None."""
    return f"Sometime in {span.first.year}" if (span.last - span.first).days <= 31 else None


def _unit(span: Span) -> str | None:
    """``day`` or ``month`` for a span of exactly one day or one whole month, else None."""
    first, last = span.first, span.last
    if first == last:
        return "day"
    if first.day == 1 and (last + timedelta(days=1)).day == 1 and first.month == last.month:
        return "month"
    return None


def _near_date(span: Span) -> str | None:
    """The next day (``8 May 2023`` for ``7 May 2023``) or month (``June 2023`` for ``May 2023``) after a gold
    span of exactly one day or one whole month, in LoCoMo's wording; else None."""
    unit = _unit(span)
    if unit == "day":
        moved = span.first + timedelta(days=1)
        return f"{moved.day} {calendar.month_name[moved.month]} {moved.year}"
    if unit == "month":
        moved = span.last + timedelta(days=1)
        return f"{calendar.month_name[moved.month]} {moved.year}"
    return None


def _iso(span: Span) -> str | None:
    """A one-day or one-month gold span in ISO 8601 (``2023-05-07``, ``2023-05``); else None."""
    unit = _unit(span)
    if unit == "day":
        return span.first.isoformat()
    return span.first.strftime("%Y-%m") if unit == "month" else None


def calibration_rows(rows: Sequence[Mapping[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """The calibration set of one LoCoMo run's questions (any run: they share questions and golds).

    Each returned row is a judge input (``question``, ``answer`` = the gold the
    judge sees, ``prediction`` = the candidate) with ``kind``, ``expected``
    (True = a right answer) and the source ``question_id``. A question without
    a usable candidate of some kind simply yields no row of that kind.
    """
    rng = random.Random(seed)
    pool: dict[tuple[str, int | None], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if str(row.get("answer") or "").strip():
            pool[(str(row.get("episode_id")), category_number(row.get("category")))].append(row)
    out: list[dict[str, Any]] = []

    def add(row: Mapping[str, Any], kind: str, gold: str, candidate: str) -> None:
        out.append(
            {
                "question_id": f"{row['question_id']}:{kind}",
                "source_question_id": row["question_id"],
                "episode_id": row.get("episode_id"),
                "category": row.get("category"),
                "question": row.get("question", ""),
                "answer": gold,
                "prediction": candidate,
                "kind": kind,
                "expected": kind in RIGHT_KINDS,
            }
        )

    for row in rows:
        gold = str(row.get("answer") or "").strip()
        category = category_number(row.get("category"))
        if category == 5:
            if str(row.get("adversarial_answer") or "").strip():
                add(row, "adversarial", NOT_MENTIONED, str(row["adversarial_answer"]).strip())
            continue
        if not gold:
            continue
        add(row, "gold", gold, gold)
        add(row, "gold_long", gold, _LONG.format(gold=gold))
        others = [
            str(other["answer"]).strip()
            for other in pool[(str(row.get("episode_id")), category)]
            if other["question_id"] != row["question_id"] and _distinct(str(other["answer"]), gold)
        ]
        if others:
            add(row, "other_gold", gold, rng.choice(sorted(set(others))))
        span = _one_span(gold) if category == 2 else None
        if span and (iso := _iso(span)):
            add(row, "gold_iso", gold, iso)
        if span and (near := _near_date(span)):
            add(row, "near_date", gold, near)
        if span and (vague := _vague(span)):
            add(row, "vague", gold, vague)
    return out


def sampled_subset(items: Sequence[Mapping[str, Any]], size: int) -> list[int]:
    """Indices of the ``size`` items whose ``question_id`` hashes lowest: a seeded sample that stays the
    same for the items already there when kinds are added (so their cached verdicts are reused)."""
    def rank(i: int) -> str:
        return hashlib.sha256(str(items[i]["question_id"]).encode()).hexdigest()

    return sorted(sorted(range(len(items)), key=rank)[:size])


def acceptance(judged: Sequence[Mapping[str, Any]], prompt: str, samples: int = 1000) -> dict[str, dict[str, Any]]:
    """Per kind: the share of clear verdicts that accepted the candidate (bootstrap interval), and the unclear."""
    by_kind: dict[str, list[float]] = defaultdict(list)
    unclear: dict[str, int] = defaultdict(int)
    for row in judged:
        value = row.get(f"j_{prompt}")
        if value is None:
            unclear[row["kind"]] += 1
        else:
            by_kind[row["kind"]].append(float(value))
    return {
        kind: {**summarize(by_kind[kind], samples), "unclear": unclear[kind], "expected": kind in RIGHT_KINDS}
        for kind in KINDS
        if by_kind[kind] or unclear[kind]
    }


def self_agreement(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]], prompt: str) -> dict:
    """Cohen's kappa of two judge runs over the same calibration rows (both verdicts clear)."""
    pairs = [
        (a[f"j_{prompt}"], b[f"j_{prompt}"])
        for a, b in zip(first, second, strict=True)
        if None not in (a.get(f"j_{prompt}"), b.get(f"j_{prompt}"))
    ]
    return cohen_kappa([a for a, _ in pairs], [b for _, b in pairs])


def separates(kinds: Mapping[str, Mapping[str, Any]], kappa: float | None) -> tuple[bool, list[str]]:
    """The rule: does this prompt's J enter the tables? Returns the verdict and each failed condition."""
    failed = []
    for kind, stats in kinds.items():
        rate = stats.get("mean")
        if rate is None:
            continue
        if stats["expected"] and rate < MIN_RIGHT:
            failed.append(f"accepts {rate:.0%} of {kind} (right; needs >= {MIN_RIGHT:.0%})")
        if not stats["expected"] and rate > MAX_WRONG:
            failed.append(f"accepts {rate:.0%} of {kind} (wrong; needs <= {MAX_WRONG:.0%})")
    if kappa is None or kappa < MIN_SELF_KAPPA:
        shown = "undefined" if kappa is None else f"{kappa:.2f}"
        failed.append(f"self-agreement kappa {shown} (needs >= {MIN_SELF_KAPPA})")
    return not failed, failed


def _drawn_with(overrides: Sequence[str]) -> str:
    """The sampled pass's own overrides, as a clause: they say whether its draws were independent per item."""
    return f", drawn with {', '.join(f'`{o}`' for o in overrides)}" if overrides else ""


def format_report(report: Mapping[str, Any]) -> str:
    """Markdown: acceptance per prompt and kind with intervals, self-agreement, and the rule's verdict."""
    rule = report["rule"]
    lines = [
        f"# Judge calibration: {report['judge']['label']}",
        "",
        f"{report['items']} candidate answers with known verdicts, built from the questions of "
        f"`{report['source_run']}` (`clag.metrics.judge_calibration`). Acceptance = the share of clear verdicts "
        "that called the candidate CORRECT (95% bootstrap interval); unclear verdicts are counted apart. "
        f"Self-agreement: Cohen's kappa of the greedy judge and a second run sampled at temperature "
        f"{report['second_run']['temperature']}, seed {report['second_run']['seed']}, on a fixed sample of "
        f"{report['second_run']['items']} of the items (the lowest hashes of their ids)"
        + _drawn_with(report["second_run"].get("overrides", ()))
        + ".",
        "",
        f"The rule: a prompt's J enters Table 1 and the claims only if it accepts at least {rule['min_right']:.0%} "
        f"of every right kind, at most {rule['max_wrong']:.0%} of every wrong kind, and agrees with itself at "
        f"kappa >= {rule['min_self_kappa']}.",
        "",
        "| prompt | kind | should be | n | accepted (%) | unclear |",
        "|---|---|---|---|---|---|",
    ]
    for prompt, result in report["prompts"].items():
        for kind, stats in result["kinds"].items():
            shown = "-" if stats["mean"] is None else (
                f"{100 * stats['mean']:.1f} [{100 * stats['ci_low']:.1f}, {100 * stats['ci_high']:.1f}]"
            )
            expected = "accepted" if stats["expected"] else "rejected"
            lines.append(f"| {prompt} | {kind} | {expected} | {stats['n']} | {shown} | {stats['unclear']} |")
    lines.append("")
    for prompt, result in report["prompts"].items():
        kappa = result["self_agreement"]["kappa"]
        shown = "undefined" if kappa is None else f"{kappa:.3f}"
        verdict = "passes: its J is reported" if result["passes"] else "fails: its J is left out of the tables"
        reasons = f" ({'; '.join(result['failed'])})" if result["failed"] else ""
        lines.append(
            f"- **{prompt}**: self-agreement kappa {shown} (n = {result['self_agreement']['n']}); {verdict}{reasons}."
        )
    return "\n".join(lines) + "\n"


def passing_prompts(report: Mapping[str, Any] | None) -> frozenset[str]:
    """The prompts whose J the tables may show (none without a calibration report)."""
    return frozenset(name for name, result in ((report or {}).get("prompts") or {}).items() if result.get("passes"))


REPORT = Path("judge_calibration") / "calibration.json"


def find_report(runs_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The calibration report that governs runs under ``runs_dir``: ``judge_calibration/calibration.json`` in
    it or the nearest folder above it (``results/reference/`` for the reference runs); None if there is none."""
    for folder in (runs_dir, *runs_dir.parents):  # as given (a relative folder is named relatively)
        if (folder / REPORT).is_file():
            return folder / REPORT, json.loads((folder / REPORT).read_text())
    return None


def allowed_metrics(metrics: Sequence[str], report: Mapping[str, Any] | None) -> list[str]:
    """``metrics`` without the J of every prompt the calibration does not let through (all J without one)."""
    passing = passing_prompts(report)
    return [m for m in metrics if not m.startswith("j_") or m.removeprefix("j_") in passing]


def judge_note(found: tuple[Path, dict[str, Any]] | None, judged: bool = True) -> str:
    """One sentence for a report: which calibration (:func:`find_report`'s) governs J and what it let through;
    ``judged=False`` adds that the report's runs carry no J yet (so its J columns are absent, not lost)."""
    if found is None:
        return "J (LLM-judge accuracy) is left out: no judge calibration governs these runs."
    path, report = found
    passing = sorted(passing_prompts(report))
    shown = ", ".join(f"j_{name}" for name in passing) if passing else "no J"
    unjudged = " (no run here is judged yet: `python -m clag.judge RUN_DIR...`)" if passing and not judged else ""
    return f"J: {report['judge']['label']}, calibrated in {path}; the rule lets through {shown}{unjudged}."
