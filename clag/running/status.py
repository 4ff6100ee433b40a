"""How far a sweep has come: every run of its grid, finished or how far it got, read-only.

A long resumable sweep (the reference run takes many sessions of a 2-core CPU)
needs one answer before each resume: which runs are finished, which are half
way, which have not started. This composes each run of the grid exactly as
``python -m clag.run -m`` would (the command line's overrides over the
experiment's ``hydra.sweeper.params``, expanded by Hydra's own parser), finds
the folder its config names, and counts the episodes in memory (ingested under
that config's hash, or with a memory snapshot an earlier run saved that it
loads instead) and the questions answered against what the slice holds. It never
writes: a run may be appending to the same files.

    python -m clag.running.status experiment=reference_ablations
    python -m clag.running.status --reference    # every grid of the reference run
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from clag.config import compose_config
from clag.data import DatasetError, load_slice
from clag.records.files import read_jsonl
from clag.running.folder import RunFolder
from clag.running.reference import GRIDS
from clag.running.snapshots import find_snapshot
from clag.running.spec import RunSpec


@dataclass(frozen=True)
class RunStatus:
    """One run of the grid and how far its folder is."""

    label: str
    folder: Path
    claimed: bool
    finished: bool
    episodes_done: int
    episodes: int
    answered: int
    questions: int
    items_ingested: int = 0  # items of the episodes still ingesting (their last ingest_progress.jsonl line)

    @property
    def state(self) -> str:
        if self.finished:
            return "finished"
        return "started" if self.claimed else "not started"


def grid(overrides: Sequence[str]) -> list[list[str]]:
    """Each run's overrides: the sweeper's params, overridden key by key by the command line, crossed."""
    parser = OverridesParser.create()
    given = parser.parse_overrides(list(overrides))
    fixed = [o.input_line for o in given if not o.is_sweep_override() and o.input_line]
    params = compose_config(fixed, return_hydra_config=True).hydra.sweeper.params or {}
    swept = parser.parse_overrides([f"{key}={value}" for key, value in params.items()])
    by_key = {parsed.get_key_element(): parsed for parsed in [*swept, *given]}
    choices = [
        [f"{key}={value}" for value in parsed.sweep_string_iterator()]
        if parsed.is_sweep_override()
        else [f"{key}={parsed.get_value_element_as_str()}"]
        for key, parsed in by_key.items()
    ]
    return [list(run) for run in itertools.product(*choices)]


def run_label(cfg: DictConfig) -> str:
    """``method / dataset[ / variant or convention]``: a run of the grid as the reports name it."""
    variant = cfg.get("variant_name") or cfg.get("convention_name")
    return f"{cfg.method.name} / {cfg.dataset.name}" + (f" / {variant}" if variant else "")


def swept(runs: Sequence[Sequence[str]]) -> set[str]:
    """The keys whose value differs between the grid's runs (``method``, ``n_init``, ...)."""
    values: dict[str, set[str]] = {}
    for run in runs:
        for override in run:
            key, _, value = override.partition("=")
            values.setdefault(key, set()).add(value)
    return {key for key, seen in values.items() if len(seen) > 1}


def run_status(overrides: Sequence[str], shown: Sequence[str] = ()) -> RunStatus:
    """How far the folder of the run ``overrides`` compose to has come; its label names the method, the
    dataset and the values of the keys in ``shown`` (those the grid sweeps), where the label lacks them."""
    spec = RunSpec.from_config(compose_config(overrides))
    cfg, folder = spec.cfg, RunFolder(spec.run_dir)
    loaded = load_slice(cfg)

    def keys(path: Path, key: str) -> set[Any]:
        """Distinct keys of this config's rows (a replayed episode writes its row again)."""
        own = spec.config_hash
        return {row.get(key) for row in read_jsonl(path) if row.get("config_hash", own) == own}

    in_memory = keys(folder.episodes, "episode_id")  # ingested here
    finished = folder.is_finished(spec.config_hash)  # so every episode was in memory (a fresh clone keeps no snapshot)
    in_memory |= {e.id for e in loaded if finished or e.id in in_memory or find_snapshot(cfg, e, spec.run_dir)}
    ingesting = {  # the latest progress line of each episode not yet in memory
        row["episode_id"]: int(row["items"])
        for row in read_jsonl(folder.progress)
        if row.get("config_hash") == spec.config_hash and row.get("episode_id") not in in_memory
    }

    label = run_label(cfg)
    pairs = (override.partition("=") for override in overrides)
    extra = [(key, value) for key, _, value in pairs if key in shown and value not in label]
    return RunStatus(
        label + "".join(f" / {key.lstrip('+').rpartition('.')[2]}={value}" for key, value in extra),
        spec.run_dir,
        folder.marker.is_file(),
        finished,
        len(in_memory),
        len(loaded),
        len(keys(folder.predictions, "question_id")),
        sum(len(episode.questions) for episode in loaded),
        sum(ingesting.values()),
    )


def report(statuses: Sequence[RunStatus]) -> str:
    """A Markdown table, one row per run, and a total line."""
    lines = ["| run | state | episodes in memory | questions answered | folder |", "|---|---|---|---|---|"]
    for s in statuses:
        ingesting = f" (+{s.items_ingested} items of the others)" if s.items_ingested and not s.finished else ""
        lines.append(
            f"| {s.label} | {s.state} | {s.episodes_done}/{s.episodes}{ingesting} | {s.answered}/{s.questions} "
            f"| {s.folder} |"
        )
    finished = sum(s.finished for s in statuses)
    answered = sum(s.answered for s in statuses)
    total = sum(s.questions for s in statuses)
    lines.append(f"\n{finished} of {len(statuses)} runs finished; {answered} of {total} questions answered.")
    return "\n".join(lines)


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """A sweep's overrides, or ``--reference`` for every grid of the reference run (with the overrides added)."""
    parser.add_argument("--reference", action="store_true", help="every grid of clag.running.reference.GRIDS")
    parser.add_argument("overrides", nargs="*", help="the sweep's overrides, as given to python -m clag.run -m")


def grids_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[list[str]]:
    """The sweeps :func:`add_grid_arguments` named, each as its overrides."""
    if not (args.reference or args.overrides):
        parser.error("give a sweep's overrides, or --reference")
    return [[*sweep, *args.overrides] for sweep in GRIDS] if args.reference else [args.overrides]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clag.running.status", description=__doc__.splitlines()[0])
    add_grid_arguments(parser)
    args = parser.parse_args(argv)
    for sweep in grids_of(parser, args):
        try:
            runs = grid(sweep)
            statuses = [run_status(run, tuple(swept(runs))) for run in runs]
        except DatasetError as err:  # no data folder, a missing or damaged file: one line, as the runner says it
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"## {' '.join(sweep)}\n\n{report(statuses)}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
