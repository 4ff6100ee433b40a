"""The calling-convention experiment (issue 29): what makes the reference's temporal answers ISO dates?

``experiment=reference_conventions`` asks LoCoMo's temporal questions of the
reference slice again under one change of calling convention at a time
(``configs/convention/``). This module reads those runs and says, per method
and convention: how many answers are ISO dates (``2023-05-14``, one token,
F1 0 against LoCoMo's "14 May 2023"), how many name a date some other way
and how many none, the temporal F1 and the date-aware score
(:mod:`clag.metrics.temporal`), the F1 change against the reference
convention over the same questions (paired bootstrap), and how many replies
were not the JSON asked for (their raw text is then the answer).

    python -m clag.tables.conventions results/reference/conventions --out results/reference/conventions.md
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clag.compare import paired_difference
from clag.metrics.aggregate import format_estimate
from clag.metrics.temporal import date_spans
from clag.records.runs import RunRecord, find_runs
from clag.tables.collect import report_main

# In the order of configs/convention/: the reference's own, each one change, then the authors' combination.
CONVENTIONS = {
    "reference": "chat template, JSON sentence, constrained decoding (the reference run)",
    "raw_prompt": "raw prompt text (no chat template)",
    "schema_only": "no JSON sentence (the schema alone asks for JSON)",
    "free_decoding": "free decoding (no JSON schema)",
    "authors": "raw prompt text and no JSON sentence (the authors' convention)",
}
ISO_DATE = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b")


def convention(run: RunRecord) -> str:
    return str(run.config.get("convention_name") or "")


def date_forms(predictions: list[str]) -> tuple[int, int, int]:
    """``(ISO, other, none)``: answers holding an ISO date, a date in another form only, no date at all."""
    forms = ["iso" if ISO_DATE.search(text) else "other" if date_spans(text) else "none" for text in predictions]
    return forms.count("iso"), forms.count("other"), forms.count("none")


def _not_json(rows: Sequence[Mapping[str, Any]]) -> str:
    flags = [row["answer_parsed"] for row in rows if "answer_parsed" in row]
    return f"{sum(not flag for flag in flags)}" if flags else "—"


def _temporal(run: RunRecord, key: str) -> dict[str, Any] | None:
    return ((run.metrics.get("by_category") or {}).get("2") or {}).get(key)


def conventions_table(runs: list[RunRecord]) -> str:
    """One row per method and convention (see the module docstring)."""
    known = [run for run in runs if convention(run) in CONVENTIONS]
    if not known:
        return "(no runs of experiment=reference_conventions)"
    header = (
        "| method | convention | n | ISO dates | other dates | no date | F1 | F1 vs reference [95% CI] | date match |"
        " replies not JSON |"
    )
    body = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    for method in sorted({run.method for run in known}):
        by_convention = {convention(run): run for run in known if run.method == method}
        baseline = by_convention.get("reference")
        for name, what in CONVENTIONS.items():
            run = by_convention.get(name)
            if run is None:
                continue
            rows = run.predictions
            iso, other, none = date_forms([str(row.get("prediction") or "") for row in rows])
            change = "—"
            if baseline is not None and name != "reference":
                change = format_estimate(paired_difference(rows, baseline.predictions, "f1", samples=10000),
                                         signed=True)  # fmt: skip
            body.append(
                f"| {method} | {what} | {len(rows)} | {iso} | {other} | {none} | "
                f"{format_estimate(_temporal(run, 'f1'))} | {change} | {format_estimate(_temporal(run, 'date_match'))} "
                f"| {_not_json(rows)} |"
            )
    return "\n".join(body)


def render(runs_dir: Path) -> str:
    runs = find_runs(runs_dir)
    return "\n\n".join(
        [
            f"# Calling conventions on LoCoMo's temporal questions ({runs_dir})",
            "Each convention is one change from the reference run's (its first row), but the last, the authors'"
            " combination. Full context's context is the data itself, so only its answer call changes; RAG's"
            " keywords call changes too. F1 and date match in %, with 95% bootstrap intervals; the F1 change is"
            " paired over the same questions. ISO dates: answers holding `YYYY-MM-DD`.",
            conventions_table(runs),
        ]
    ) + "\n"


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, "python -m clag.tables.conventions", __doc__, lambda runs, _out: render(runs))


if __name__ == "__main__":
    sys.exit(main())
