"""Judge finished run folders in place with an LLM judge (the prompts and scoring: :mod:`clag.metrics.judge`).

Each run's ``predictions.jsonl`` gains the verdicts and its ``metrics.json``
the ``j_*`` accuracies and the ``judge`` section, as when a run judges
itself at its end (``metrics.judge.enabled``).

    python -m clag.judge RUN_DIR [RUN_DIR ...] [--model qwen2.5-1.5b] [--prompts lenient strict]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

from clag.llm.client import LLMClient
from clag.metrics.judge import PROMPTS, JudgeSettings, apply_judge, format_judge
from clag.records.files import read_jsonl, rewrite_jsonl, write_json
from clag.running.build import judge_client


def judge_run(run_dir: Path, settings: JudgeSettings, llm: LLMClient | None = None) -> dict[str, Any]:
    """Judge one finished run folder in place; returns its updated ``metrics.json``.

    Raises:
        FileNotFoundError: The folder holds no finished run.
    """
    metrics_path, predictions_path = run_dir / "metrics.json", run_dir / "predictions.jsonl"
    for path in (metrics_path, predictions_path, run_dir / "config.yaml"):
        if not path.is_file():
            raise FileNotFoundError(f"{run_dir} is not a finished run folder: {path.name} is missing")
    run_cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    metrics = json.loads(metrics_path.read_text())
    rows = read_jsonl(predictions_path)
    name = settings.model or str((run_cfg.get("model") or {}).get("name", ""))
    if llm is None:
        llm, name = judge_client(settings, run_cfg)
    dataset = str((run_cfg.get("dataset") or {}).get("name", "")) or None
    judged = apply_judge(rows, metrics, llm, settings, dataset, name)
    rewrite_jsonl(predictions_path, judged)
    write_json(metrics_path, metrics)
    return metrics


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clag.judge", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="finished run folders")
    parser.add_argument("--model", help="configs/model name of the judge (default: each run's own model)")
    parser.add_argument("--prompts", nargs="+", choices=PROMPTS, default=list(PROMPTS))
    parser.add_argument("--max-new-tokens", type=int, default=JudgeSettings.max_new_tokens)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Judge each run folder in place and print its report; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = JudgeSettings(
        enabled=True, model=args.model, prompts=tuple(args.prompts), max_new_tokens=args.max_new_tokens
    )
    status = 0
    for run_dir in args.run_dirs:
        try:
            metrics = judge_run(run_dir, settings)
        except (OSError, ValueError, RuntimeError) as err:
            print(f"error: {err}", file=sys.stderr)
            status = 2
            continue
        print(f"== {run_dir}")
        print(format_judge(metrics))
    return status


if __name__ == "__main__":
    sys.exit(main())
