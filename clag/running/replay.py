"""Replay finished runs from their recorded LLM calls alone, and compare each prediction.

A committed run says "these calls made these predictions". This checks it:
every finished run of a sweep grid (composed as :mod:`clag.running.status`
composes it) is run again into a scratch folder, with a call cache filled only
from the recorded shards (:mod:`clag.llm.cache_shards`) and ``cache.only=true``,
so the model is never called. A run whose path is all in the cache gives its
predictions again, from the same retrieved items, on any machine; a call the
cache lacks stops the replay with one line naming the stage and the prompt's
start. Such a gap means the
recorded run got another answer for some earlier call than the cache holds
(two runs sending one call at the same moment, before the cache kept the first
answer for both) or made a call nobody recorded.

Each run is replayed in its own process, so an episode still running when
another one stops cannot run on beside the next replay. Replayed folders are
kept: running the same command again compares the finished ones without
replaying them.

    python -m clag.running.replay --shards results/reference/llm_cache --scratch /tmp/replay experiment=reference
    python -m clag.running.replay --shards results/reference/llm_cache --scratch /tmp/replay --reference
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clag.config import compose_config
from clag.llm.cache import CallCache
from clag.llm.cache_shards import import_shards
from clag.records.files import read_jsonl
from clag.running.folder import RunFolder
from clag.running.spec import RunSpec
from clag.running.status import add_grid_arguments, grid, grids_of, run_label


@dataclass(frozen=True)
class Replay:
    """One recorded run against its replay."""

    label: str
    questions: int  # recorded predictions
    identical: int  # replayed with the same prediction from the same retrieved items
    differing: int  # replayed with another prediction or other retrieved items
    stopped: str | None  # the replay's last error line, if it did not finish

    @property
    def verdict(self) -> str:
        if self.stopped is not None:
            return "stopped: " + self.stopped
        if self.identical == self.questions:
            return "identical"
        return "differs"


def outcomes(folder: Path, config_hash: str) -> dict[str, tuple[str, list[str]]]:
    """Question id -> (prediction, retrieved ids) of the rows ``config_hash`` wrote in ``folder``:
    what the LLM calls decide (timings are the machine's; scores follow from these)."""
    rows = read_jsonl(folder / "predictions.jsonl") if (folder / "predictions.jsonl").exists() else []
    return {
        row["question_id"]: (row["prediction"], row["retrieved_ids"])
        for row in rows
        if row.get("config_hash") == config_hash
    }


def replay_run(run: Sequence[str], scratch: Path) -> Replay | None:
    """Replay one run of the grid (its overrides) into ``scratch``; ``None`` if it never finished."""
    recorded = RunSpec.from_config(compose_config(list(run)))
    if not RunFolder(recorded.run_dir).is_finished(recorded.config_hash):
        return None
    label = run_label(recorded.cfg)
    scratch_overrides = [
        f"paths.runs_dir={scratch / 'runs'}",
        f"cache.path={scratch / 'llm_cache.sqlite'}",
        "cache.only=true",
        "runner.progress=false",
    ]  # none of them is hashed: the replay computes under the recorded run's hash
    replayed = RunSpec.from_config(compose_config([*run, *scratch_overrides]))
    if replayed.config_hash != recorded.config_hash:
        raise RuntimeError(f"{label}: the scratch overrides changed the run's hash; they must not")
    done = subprocess.run([sys.executable, "-m", "clag.run", *run, *scratch_overrides], capture_output=True, text=True)
    stopped = None
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line]
        stopped = (errors or lines or [f"exit code {done.returncode}"])[-1].split("] ", 1)[-1]
    before = outcomes(recorded.run_dir, recorded.config_hash)
    after = outcomes(replayed.run_dir, replayed.config_hash)
    same = sum(after.get(question) == outcome for question, outcome in before.items())
    return Replay(label, len(before), same, sum(question in after for question in before) - same, stopped)


def report(replays: Sequence[Replay]) -> str:
    """A Markdown table, one row per replayed run, and a total line."""
    lines = ["| run | recorded questions | replayed identical | replayed different | replay |", "|---|---|---|---|---|"]
    for r in replays:
        lines.append(f"| {r.label} | {r.questions} | {r.identical} | {r.differing} | {r.verdict} |")
    exact = sum(r.verdict == "identical" for r in replays)
    same, total = sum(r.identical for r in replays), sum(r.questions for r in replays)
    lines.append(f"\n{exact} of {len(replays)} finished runs replayed identically; {same} of {total} predictions.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clag.running.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=Path, required=True, help="the recorded calls: a folder of cache shards")
    parser.add_argument("--scratch", type=Path, required=True, help="where the replayed runs and their cache go")
    add_grid_arguments(parser)
    args = parser.parse_args(argv)
    sweeps = grids_of(parser, args)
    cache = CallCache(args.scratch / "llm_cache.sqlite")
    imported = import_shards(cache, args.shards)
    print(f"{imported} recorded calls from {args.shards} in {cache.path}", flush=True)
    replays = []
    for run in (run for sweep in sweeps for run in grid(sweep)):
        replay = replay_run(run, args.scratch)
        if replay is not None:
            print(f"{replay.label}: {replay.verdict}", flush=True)
            replays.append(replay)
    print(report(replays))
    return 0 if all(r.verdict == "identical" for r in replays) else 1


if __name__ == "__main__":
    sys.exit(main())
