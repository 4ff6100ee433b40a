"""Judge finished run folders in place with an LLM judge (the prompts and scoring: :mod:`clag.metrics.judge`).

Each run's ``predictions.jsonl`` gains the verdicts and its ``metrics.json``
the ``j_*`` accuracies and the ``judge`` section, as when a run judges
itself at its end (``metrics.judge.enabled``).

    python -m clag.judge RUN_DIR [RUN_DIR ...] [--model qwen2.5-1.5b] [--prompts lenient strict]
        [--override engine=vllm ...]

With ``--calibrate OUT``, the first RUN_DIR (a LoCoMo run) gives the
questions of a calibration set of known verdicts
(:mod:`clag.metrics.judge_calibration`); the judge grades it twice, greedy
and sampled at another seed (``--sampled-override`` adds Hydra overrides to
that pass alone), and ``OUT`` receives ``items.jsonl``,
``calibration.json`` (acceptance per prompt and kind, self-agreement, and
whether each prompt passes the rule that lets its J into the tables) and
``calibration.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from clag.llm.client import LLMClient
from clag.metrics import judge_calibration as calibration
from clag.metrics.judge import PROMPTS, JudgeSettings, apply_judge, format_judge, judge_rows, judged_names
from clag.records.files import read_jsonl, rewrite_jsonl, write_json
from clag.running.build import judge_client, named_judge_client


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


SAMPLED = {"temperature": 0.7, "seed": 1}
"""The calibration's second judge run: sampled, so that its agreement with the greedy run measures the
judge's own noise (a second greedy run would repeat the first)."""
SAMPLED_ITEMS = 200
"""Items the second run judges (those whose ids hash lowest: a fixed sample): a 1.5B judge on 2 CPU cores
makes ~30 calls a minute, and 200 pairs put kappa within about +-0.1."""


def calibrate(
    run_dir: Path,
    out: Path,
    settings: JudgeSettings,
    llm: LLMClient | None = None,
    sampled_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """Judge the calibration set of ``run_dir``'s questions twice; write and return ``calibration.json``.

    ``sampled_overrides`` apply to the sampled pass alone: its draws must be independent across items
    for its agreement to measure the judge's noise, which a served judge that keeps one seed for every
    request (so that its greedy calls keep their cache keys) gets from ``model.backend.seed_per_prompt=true``.
    A given ``llm`` serves both passes.

    Raises:
        ValueError: No question yields an item, or ``sampled_overrides`` come with a given ``llm``.
    """
    rows = read_jsonl(run_dir / "predictions.jsonl")
    items = calibration.calibration_rows(rows)
    if not items:
        raise ValueError(f"{run_dir}: no question yields a calibration item (a LoCoMo run is needed)")
    name = str(settings.model)
    if llm is not None and sampled_overrides:
        raise ValueError("sampled_overrides build the sampled pass's own judge: give no llm with them")
    llm = llm or named_judge_client(settings)
    extended = replace(settings, overrides=(*settings.overrides, *sampled_overrides))
    sampled_llm = named_judge_client(extended) if sampled_overrides else llm
    unskipped = replace(settings, skip_categories={})
    first, summary = judge_rows(items, llm, unskipped, None, name)
    subset = calibration.sampled_subset(items, SAMPLED_ITEMS)
    second, _ = judge_rows([items[i] for i in subset], sampled_llm, replace(unskipped, **SAMPLED), None, name)
    report: dict[str, Any] = {
        "judge": {key: summary[key] for key in ("model", "params_b", "small", "label", "prompts", "model_identity")},
        "source_run": str(run_dir),
        "items": len(items),
        "second_run": {**SAMPLED, "items": len(subset), "overrides": list(sampled_overrides)},
        "rule": {
            "min_right": calibration.MIN_RIGHT,
            "max_wrong": calibration.MAX_WRONG,
            "min_self_kappa": calibration.MIN_SELF_KAPPA,
        },
        "prompts": {},
    }
    for prompt in judged_names(settings.prompts):
        kinds = calibration.acceptance(first, prompt)
        agreement = calibration.self_agreement([first[i] for i in subset], second, prompt)
        passed, failed = calibration.separates(kinds, agreement["kappa"])
        report["prompts"][prompt] = {"kinds": kinds, "self_agreement": agreement, "passes": passed, "failed": failed}
    out.mkdir(parents=True, exist_ok=True)
    for i, again in zip(subset, second):
        first[i]["sampled"] = {prompt: again["judge"].get(prompt) for prompt in settings.prompts}
    rewrite_jsonl(out / "items.jsonl", first)
    write_json(out / "calibration.json", report)
    (out / "calibration.md").write_text(calibration.format_report(report))
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clag.judge", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="finished run folders")
    parser.add_argument("--model", help="configs/model name of the judge (default: each run's own model)")
    parser.add_argument("--prompts", nargs="+", choices=PROMPTS, default=list(PROMPTS))
    parser.add_argument("--max-new-tokens", type=int, default=JudgeSettings.max_new_tokens)
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="Hydra override of the judge model's config (repeatable), e.g. engine=vllm",
    )
    parser.add_argument("--calibrate", type=Path, metavar="OUT", help="judge the calibration set into OUT instead")
    parser.add_argument(
        "--sampled-override", action="append", default=[], metavar="KEY=VALUE",
        help="Hydra override of the calibration's sampled pass alone (repeatable)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Judge each run folder in place and print its report; returns the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = JudgeSettings(
        enabled=True,
        model=args.model,
        prompts=tuple(args.prompts),
        max_new_tokens=args.max_new_tokens,
        overrides=tuple(args.override),
    )
    if args.calibrate:
        if not args.model:
            print("error: --calibrate needs --model (the judge is not a run's own model here)", file=sys.stderr)
            return 2
        try:
            report = calibrate(args.run_dirs[0], args.calibrate, settings, sampled_overrides=args.sampled_override)
        except (OSError, ValueError, RuntimeError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(calibration.format_report(report))
        return 0
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
