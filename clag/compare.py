"""Paired comparison of two runs on the same questions: is A's lead over B more than noise?

Two runs' bootstrap intervals can overlap while A beats B on most questions,
so two runs are compared question by question: the paired bootstrap of the
mean difference (:func:`clag.metrics.paired_bootstrap`) over the questions
both answered, per metric, overall, over LoCoMo's category sets and per
category, with the share of questions each run wins. The tables mark CLAG's
paired difference from each baseline with the same function
(:func:`paired_difference`).

    python -m clag.compare RUN_A RUN_B [--metrics f1 bleu1 j_lenient] [--samples 10000] [--json OUT]

With fewer than :data:`clag.metrics.aggregate.MIN_INTERVAL_N` paired
questions a cell prints ``n=K`` instead of an interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clag.metrics import ANSWER_KEYS, paired_bootstrap
from clag.metrics.aggregate import (
    CATEGORY_SETS,
    JUDGE_KEYS,
    MIN_INTERVAL_N,
    SUMMARY_KEYS,
    format_estimate,
    judge_skipped_some,
)
from clag.metrics.scoring import category_label, category_number
from clag.records.runs import RunRecord, find_runs

DEFAULT_METRICS = ("f1", "bleu1", "meteor", "bert_f1", "rougeL", "exact_match", *JUDGE_KEYS)


def paired_difference(
    rows_a: Iterable[Mapping[str, Any]],
    rows_b: Iterable[Mapping[str, Any]],
    metric: str,
    categories: Sequence[int] | None = None,
    samples: int = 10000,
    seed: int = 0,
    adversarial: str = "paper",
) -> dict[str, Any] | None:
    """A - B on ``metric`` over the questions both runs scored (optionally only ``categories``).

    Questions are matched by ``question_id``; a question either run left
    without a value (an unclear judge verdict, a skipped category) is left
    out of the pair; a J where the judge skipped some of either run's
    questions in ``categories`` is None (:func:`judge_skipped_some`).
    ``adversarial="official"`` scores LoCoMo's category 5 as LoCoMo does
    (``adversarial_official``: 1 for an abstention, else 0) in place of an
    answer metric, as ``metrics.adversarial_mode=official`` would;
    J skips category 5 under either scoring, so it never takes that value.

    Returns:
        :func:`paired_bootstrap`'s dict plus ``wins_a``, ``wins_b``, ``ties``
        (shares of the paired questions), or None when no question pairs.
    """
    wanted = set(categories) if categories is not None else None

    def chosen(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [row for row in rows if wanted is None or category_number(row.get("category")) in wanted]

    rows_a, rows_b = chosen(rows_a), chosen(rows_b)
    if metric in JUDGE_KEYS and (judge_skipped_some(rows_a) or judge_skipped_some(rows_b)):
        return None

    def value(row: Mapping[str, Any]) -> Any:
        if adversarial == "official" and metric in ANSWER_KEYS and row.get("adversarial_official") is not None:
            return row["adversarial_official"]
        return row.get(metric)

    def values(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
        return {str(row["question_id"]): float(value(row)) for row in rows if value(row) is not None}

    a, b = values(rows_a), values(rows_b)
    shared = sorted(set(a) & set(b))
    if not shared:
        return None
    first = np.array([a[q] for q in shared])
    second = np.array([b[q] for q in shared])
    result = paired_bootstrap(first, second, samples=samples, seed=seed)
    result.update(
        wins_a=float(np.mean(first > second)),
        wins_b=float(np.mean(first < second)),
        ties=float(np.mean(first == second)),
    )
    return result


def load_run(folder: Path) -> RunRecord:
    """The finished run in ``folder`` (not in a sub-folder).

    Raises:
        FileNotFoundError: ``folder`` holds no finished run.
    """
    runs = [run for run in find_runs(folder) if run.path.resolve() == folder.resolve()]
    if not runs:
        raise FileNotFoundError(f"{folder} is not a finished run folder (no readable metrics.json)")
    return runs[0]


def compare_runs(a: RunRecord, b: RunRecord, metrics: Sequence[str], samples: int = 10000, seed: int = 0) -> list[dict]:
    """One record per (metric, group) with both means, the paired difference, its interval and win shares.

    Groups: ``overall``, each of the dataset's category sets (LoCoMo
    ``categories 1-4`` / ``1-5``), then each category both runs have.
    """
    groups: list[tuple[str, Sequence[int] | None]] = [("overall", None)]
    groups += [(f"categories {name}", wanted) for name, wanted in CATEGORY_SETS.get(a.dataset, {}).items()]
    labels = {category_label(row.get("category")) for row in a.predictions} & {
        category_label(row.get("category")) for row in b.predictions
    }
    groups += [
        (f"category {label}", (int(label),))
        for label in sorted(label for label in labels if label is not None and label.isdigit())
    ]
    records = []
    for metric in metrics:
        for group, wanted in groups:
            result = paired_difference(a.predictions, b.predictions, metric, wanted, samples, seed)
            if result is not None:
                records.append({"metric": metric, "group": group, **result})
    return records


def _warnings(a: RunRecord, b: RunRecord) -> list[str]:
    """What makes the pair less than like for like."""
    notes = []
    for what, left, right in (("dataset", a.dataset, b.dataset), ("model", a.model, b.model)):
        if left != right:
            notes.append(f"warning: the runs differ in {what}: {left} vs {right}")
    ids_a = {str(r["question_id"]) for r in a.predictions}
    ids_b = {str(r["question_id"]) for r in b.predictions}
    if ids_a != ids_b:
        notes.append(
            f"warning: {len(ids_a & ids_b)} questions in both runs; {len(ids_a - ids_b)} only in A, "
            f"{len(ids_b - ids_a)} only in B (compared on the shared ones)"
        )
    for name, run in (("A", a), ("B", b)):
        judge = run.metrics.get("judge")
        if judge:
            notes.append(f"{name}'s j_* are judged by {judge.get('label', judge.get('model', '?'))}")
    return notes


def format_comparison(a: RunRecord, b: RunRecord, records: Sequence[Mapping[str, Any]]) -> str:
    """Plain-text report: one line per metric and group, values x100."""
    lines = [f"A: {a.path} ({a.method}, {a.model})", f"B: {b.path} ({b.method}, {b.model})", *_warnings(a, b)]
    lines.append("\t".join(["metric", "group", "n", "A", "B", "A-B [95% CI]", "p", "A wins", "B wins", "ties"]))
    for r in records:
        lines.append(
            "\t".join(
                [
                    r["metric"],
                    r["group"],
                    str(r["n"]),
                    f"{100 * r['mean_a']:.2f}",
                    f"{100 * r['mean_b']:.2f}",
                    format_estimate(r, signed=True),
                    f"{r['p_value']:.3f}" if r["n"] >= MIN_INTERVAL_N else "-",
                    f"{100 * r['wins_a']:.0f}%",
                    f"{100 * r['wins_b']:.0f}%",
                    f"{100 * r['ties']:.0f}%",
                ]
            )
        )
    if not records:
        lines.append("no question is scored in both runs")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clag.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path, metavar="RUN_A")
    parser.add_argument("run_b", type=Path, metavar="RUN_B")
    parser.add_argument(
        "--metrics", nargs="+", choices=SUMMARY_KEYS, help=f"default: those of {list(DEFAULT_METRICS)} both runs have"
    )
    parser.add_argument("--samples", type=int, default=10000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the records as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Compare RUN_A with RUN_B and print the report; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        a, b = load_run(args.run_a), load_run(args.run_b)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    present = [{key for row in run.predictions for key, value in row.items() if value is not None} for run in (a, b)]
    metrics = args.metrics or [m for m in DEFAULT_METRICS if m in present[0] & present[1]]
    records = compare_runs(a, b, metrics, args.samples, args.seed)
    print(format_comparison(a, b, records))
    if args.json:
        args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
