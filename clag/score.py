"""Re-score a predictions file without rerunning any model that made it.

    python -m clag.score FILE.jsonl [--out OUT.jsonl] [--bert-model roberta-large] [--adversarial-mode official]
    python -m clag.score --refresh RUNS_DIR [RUNS_DIR ...]

Reads rows with at least ``prediction`` and ``reference`` (the runner's
``predictions.jsonl`` qualifies), writes them back to ``--out`` (default
``FILE.scored.jsonl``) with the per-question metric keys of
``clag.metrics.score_rows``, saves the aggregate next to it
(``OUT.metrics.json`` unless ``--metrics-out``) and prints a summary.
A malformed row stops the command with a message naming its line.

``--refresh`` brings finished runs aggregated by an earlier version up to
date, in place: a row without the date-aware score gains ``date_match`` and
``date_status`` (:mod:`clag.metrics.temporal`), and ``metrics.json``'s answer
tables are recomputed from the rows with the run's own bootstrap settings (so
that, e.g., a J the judge scored on part of a category set leaves that set's
table, :func:`clag.metrics.aggregate.judge_skipped_some`). Every other score of
a row is kept as it was (no model is loaded); a run whose files would not
change is left untouched.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from clag.metrics import MetricSettings, aggregate_rows, score_rows
from clag.metrics.aggregate import refresh_answer_tables
from clag.metrics.scoring import date_scores
from clag.metrics.settings import ADVERSARIAL_MODES
from clag.records.files import rewrite_jsonl, write_json
from clag.records.runs import find_runs

REQUIRED_KEYS = ("prediction", "reference")
SUMMARY_COLUMNS = ("f1", "bleu1", "meteor", "bert_f1", "rougeL", "exact_match", "f1_official")


class ScoreInputError(ValueError):
    """A predictions file the scorer cannot read; the message names the line."""


def read_rows(path: Path) -> list[dict]:
    """Parse a JSONL predictions file; blank lines are skipped.

    Raises:
        ScoreInputError: A line is not JSON, not an object, or lacks a required key.
    """
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ScoreInputError(f"{path}:{number}: malformed JSON ({err.msg} at column {err.colno})") from err
            if not isinstance(row, dict):
                raise ScoreInputError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            missing = [key for key in REQUIRED_KEYS if key not in row]
            if missing:
                raise ScoreInputError(f"{path}:{number}: missing key(s) {', '.join(missing)}")
            rows.append(row)
    return rows


def _parser() -> argparse.ArgumentParser:
    defaults = MetricSettings()
    parser = argparse.ArgumentParser(prog="python -m clag.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, nargs="?", help="predictions JSONL")
    parser.add_argument("--refresh", type=Path, nargs="+", metavar="RUNS_DIR",
                        help="bring the finished runs under each folder up to the current scoring, in place")
    parser.add_argument("--out", type=Path, help="scored rows (default FILE.scored.jsonl)")
    parser.add_argument("--metrics-out", type=Path, help="aggregate JSON (default OUT.metrics.json)")
    parser.add_argument("--bert-model", default=defaults.bert_model, help="roberta-large = the paper's")
    parser.add_argument("--bert-num-layers", type=int, default=defaults.bert_num_layers)
    parser.add_argument("--sbert-model", default=defaults.sbert_model)
    parser.add_argument("--adversarial-mode", choices=ADVERSARIAL_MODES, default=defaults.adversarial_mode)
    parser.add_argument("--bootstrap-samples", type=int, default=defaults.bootstrap_samples)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    return parser


def _cell(summary: dict | None) -> str:
    if not summary:
        return "-"
    return f"{100 * summary['mean']:.2f} [{100 * summary['ci_low']:.2f}, {100 * summary['ci_high']:.2f}]"


def format_summary(metrics: dict) -> str:
    """Plain-text table of the headline means (x100) with their 95% intervals."""
    groups = [("overall", metrics["overall"])]
    groups += [(f"category {label}", table) for label, table in metrics["by_category"].items()]
    lines = ["\t".join(["", "n", *SUMMARY_COLUMNS])]
    for name, table in groups:
        count = table.get("f1", {}).get("n", 0)
        lines.append("\t".join([name, str(count), *(_cell(table.get(key)) for key in SUMMARY_COLUMNS)]))
    evidence = metrics["evidence"]
    if evidence["n_with_evidence"]:
        cells = [f"{key} {_cell(value)}" for key, value in evidence["overall"].items()]
        lines.append(f"evidence (n={evidence['n_with_evidence']}): " + "; ".join(cells))
    lines.append(f"settings: {json.dumps(metrics['settings'])}")
    return "\n".join(lines)


def refresh_runs(runs_dir: Path) -> tuple[int, int]:
    """Re-aggregate every finished run under ``runs_dir`` (adding the date-aware score where a row lacks
    it); returns (runs changed, runs found)."""
    runs = find_runs(runs_dir)
    updated = 0
    for run in runs:
        rows = [row if "date_match" in row else {**row, **date_scores(row)} for row in run.predictions]
        metrics = dict(run.metrics)
        refresh_answer_tables(metrics, rows, run.dataset or None)
        if rows == run.predictions and metrics == run.metrics:
            continue
        rewrite_jsonl(run.path / "predictions.jsonl", rows)
        write_json(run.path / "metrics.json", metrics)
        updated += 1
    return updated, len(runs)


def main(argv: list[str] | None = None) -> int:
    """Score FILE, write the scored rows and the aggregate; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.refresh:
        for runs_dir in args.refresh:
            updated, found = refresh_runs(runs_dir)
            print(f"{runs_dir}: {updated} of {found} finished runs re-aggregated")
        return 0
    if args.file is None:
        parser.error("give a predictions FILE, or --refresh RUNS_DIR")
    settings = MetricSettings(
        bert_model=args.bert_model,
        bert_num_layers=args.bert_num_layers,
        adversarial_mode=args.adversarial_mode,
        bootstrap_samples=args.bootstrap_samples,
        seed=args.seed,
        sbert_model=args.sbert_model,
    )
    try:
        rows = read_rows(args.file)
    except (OSError, ScoreInputError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.out or args.file.with_name(f"{args.file.stem}.scored.jsonl")
    metrics_out = args.metrics_out or out.with_suffix(".metrics.json")
    scored = score_rows(rows, settings)
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in scored), encoding="utf-8")
    metrics = aggregate_rows(scored, settings)
    metrics_out.write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_summary(metrics))
    print(f"wrote {out} and {metrics_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
