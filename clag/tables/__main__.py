"""``python -m clag.tables``: render every paper table from the finished runs.

    python -m clag.tables                               # runs/ -> results/tables/
    python -m clag.tables --out results/demo            # what `make demo` does
    python -m clag.tables --runs /data/runs --out /tmp/tables --only 1 2 10
    python -m clag.tables --judge none                  # Tables 13-14 without the LLM judge
    python -m clag.tables --stand-in qwen3-0.6b=my-model
    python -m clag.tables --only 13 14 --max-failures 0  # the failure judge on every CLAG failure

The runs folder defaults to ``$CLAG_RUNS_DIR`` or ``runs``, as the runner's. Both
``results/tables/`` and ``results/demo/`` are gitignored, so rendering never dirties
the working tree; the committed tables are ``results/reference/`` (``make reference``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from clag.tables import specs
from clag.tables.cases import judge_from_settings
from clag.tables.render import render_all

log = logging.getLogger("clag.tables")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m clag.tables", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path(os.environ.get("CLAG_RUNS_DIR", "runs")))
    parser.add_argument("--out", type=Path, default=Path("results/tables"),
                        help="folder for the tables and plots (default: results/tables, gitignored)")
    parser.add_argument("--only", type=int, nargs="*", help="table numbers to render (default: all)")
    parser.add_argument("--judge", help="model config name of the failure judge, or 'none' (default: from the specs)")
    parser.add_argument(
        "--stand-in",
        action="append",
        default=[],
        metavar="PAPER=OURS",
        help="put model OURS first among the stand-ins for the paper's backbone PAPER (repeatable)",
    )
    parser.add_argument(
        "--judge-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Hydra override of the failure judge's model config (repeatable), e.g. engine=vllm",
    )
    parser.add_argument(
        "--max-failures",
        type=int,
        metavar="N",
        help="CLAG failures Tables 13-14 send to the judge, spread evenly; 0 = every one (default: from the specs)",
    )
    parser.add_argument(
        "--run-dataset",
        action="append",
        default=[],
        metavar="N=DATASET",
        help="fill table N's cells from runs on DATASET instead of the paper's dataset (repeatable)",
    )
    args = parser.parse_args(argv)
    for pair in args.run_dataset:
        number, _, dataset = pair.partition("=")
        if not number.isdigit() or not dataset:
            parser.error(f"--run-dataset takes N=DATASET (e.g. 9=bioasq), got {pair!r}")
    return args


def _with_stand_ins(defaults: specs.Defaults, pairs: list[str]) -> specs.Defaults:
    stand_ins = {key: list(value) for key, value in defaults.stand_ins.items()}
    for pair in pairs:
        paper, _, ours = pair.partition("=")
        if not ours:
            raise SystemExit(f"--stand-in takes PAPER=OURS, got {pair!r}")
        stand_ins[paper] = [ours] + [m for m in stand_ins.get(paper, [paper]) if m != ours]
    return replace(defaults, stand_ins=stand_ins)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(name)s][%(levelname)s] %(message)s")
    args = parse_args(argv)
    if not args.runs.is_dir():
        log.warning("no runs folder at %s: every table will show only the paper's numbers", args.runs)
    defaults = _with_stand_ins(specs.load_defaults(), args.stand_in)
    if args.max_failures is not None:
        defaults = replace(defaults, cases={**defaults.cases, "max_failures": args.max_failures})
    judge = judge_from_settings(defaults, args.judge, args.judge_override)
    run_datasets = {int(number): dataset for number, _, dataset in (p.partition("=") for p in args.run_dataset)}
    written = render_all(
        args.runs, args.out, judge=judge, numbers=args.only, defaults=defaults, run_datasets=run_datasets
    )
    log.info("wrote %d files under %s (index: %s)", len(written), args.out, args.out / "README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
