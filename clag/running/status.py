"""How far a sweep has come: every run of its grid, finished or how far it got, read-only.

A long resumable sweep (the reference run takes many sessions of a 2-core CPU)
needs one answer before each resume: which runs are finished, which are half
way, which have not started. This composes each run of the grid exactly as
``python -m clag.run -m`` would (the command line's overrides over the
experiment's ``hydra.sweeper.params``, expanded by Hydra's own parser), finds
the folder its config names, and counts the episodes in memory (ingested under
that config's hash, or with a memory snapshot an earlier run saved that it
loads instead) and the questions answered against what the slice holds; for a run
still ingesting, the hours its ingestion needs at its episodes' recent pace. It never
writes: a run may be appending to the same files.

    python -m clag.running.status experiment=reference_ablations
    python -m clag.running.status --reference    # every grid of the reference run
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from clag.config import compose_config
from clag.data import DatasetError, load_slice
from clag.records.files import read_jsonl
from clag.running.episode import INGEST_CHUNK
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
    hours_left: float | None = None  # the slowest of those episodes' ingestion left, at its recent pace

    @property
    def state(self) -> str:
        if self.finished:
            return "finished"
        return "started" if self.claimed else "not started"


RESUME_GAP = 3600.0  # seconds: a longer pause since an episode's last progress line means its run is stopped
RECENT_STEPS = 4  # the steps of new work an episode's pace is taken over


def seconds_per_item(rows: Sequence[dict[str, Any]], now: float) -> float | None:
    """An episode's ingestion pace in its current stretch, in seconds per item, from its progress lines in
    the order written (``now``: the time the pace is wanted at).

    The stretch starts where its run last (re)started: the items noted fall back, and the resumed run
    replays the chunks it had from the call cache in seconds, so only steps past the most items noted
    before count, the last ``RECENT_STEPS`` of them, and not the first of those: it finishes the chunk the
    stop cut short, whose calls made before the stop replay. While the run is live (the last line less than
    ``RESUME_GAP`` old), a chunk in progress that has already taken longer than that pace raises it.
    None before the stretch has a step of new work. The pace is the load's at the time: runs that
    share one server slow each other.
    """
    timed = [(int(row["items"]), float(row["at"]), int(row["of"])) for row in rows if row.get("at") is not None]
    start = max((i for i in range(1, len(timed)) if timed[i][0] < timed[i - 1][0]), default=0)
    most = max((items for items, _, _ in timed[:start]), default=0)
    steps = [(t1 - t0, after - before) for (before, t0, _), (after, t1, _) in itertools.pairwise(timed[start:])
             if before > most][-RECENT_STEPS:]  # fmt: skip
    if not steps:
        return None
    seconds, done = sum(s for s, _ in steps), sum(n for _, n in steps)
    items, at, of = timed[-1]
    in_progress, chunk = now - at, min(INGEST_CHUNK, of - items)
    if in_progress < RESUME_GAP and chunk and in_progress / chunk > seconds / done:
        seconds, done = seconds + in_progress, done + chunk
    return seconds / done


def hours_left(progress: dict[str, list[dict[str, Any]]], pending: int, now: float) -> float | None:
    """Hours until the last of the ``pending`` episodes not in memory is ingested, each at its recent pace
    (``progress``: each ingesting episode's lines); None while one has no pace or has not started."""
    left = []
    for rows in progress.values():
        pace = seconds_per_item(rows, now)
        if pace is None:
            return None
        left.append((int(rows[-1]["of"]) - int(rows[-1]["items"])) * pace / 3600)
    return max(left) if left and len(progress) == pending else None


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
    progress: dict[str, list[dict[str, Any]]] = {}  # the progress lines of each episode not yet in memory
    for row in read_jsonl(folder.progress):
        if row.get("config_hash") == spec.config_hash and row.get("episode_id") not in in_memory:
            progress.setdefault(row["episode_id"], []).append(row)

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
        sum(int(rows[-1]["items"]) for rows in progress.values()),
        hours_left(progress, len(loaded) - len(in_memory), time.time()),
    )


def report(statuses: Sequence[RunStatus]) -> str:
    """A Markdown table, one row per run, and a total line."""
    lines = ["| run | state | episodes in memory | questions answered | folder |", "|---|---|---|---|---|"]
    for s in statuses:
        ingesting = ""
        if s.items_ingested and not s.finished:
            pace = f"; ~{s.hours_left:.1f} h to go at their recent pace" if s.hours_left is not None else ""
            ingesting = f" (+{s.items_ingested} items of the others{pace})"
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
