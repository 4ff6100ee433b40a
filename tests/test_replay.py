"""Replaying a recorded run from its recorded calls alone (``clag.running.replay``).

A real RAG run on a real LoCoMo slice with a deterministic stand-in backend is
recorded, its calls exported as shards, and replayed in a fresh process with
``cache.only=true``: identical; a recorded prediction changed afterwards is
reported as different; a recorded call missing from the shards stops the
replay with the line that names it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from clag.llm.base import Completion, GenerationConfig
from clag.llm.cache import CallCache
from clag.llm.cache_shards import export_shard, shard_paths
from clag.run import run_with_overrides
from clag.running.replay import main

TESTS = Path(__file__).resolve().parent


class LastWordsBackend:
    """Answers each prompt with its last three words: deterministic, and different per prompt."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    def identity(self) -> dict[str, Any]:
        return {"backend": "last-words"}

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        return [Completion(" ".join(prompt.split()[-3:]), len(prompt.split()), 3) for prompt in prompts]


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("PYTHONPATH", str(TESTS))  # the replay's own process imports this module's backend
    overrides = [
        "method=rag", "dataset=locomo", "limit.episodes=1", "limit.items=10", "limit.questions=2",
        f"model.backend._target_={__name__}.LastWordsBackend", f"paths.runs_dir={tmp_path / 'runs'}",
        f"cache.path={tmp_path / 'calls.sqlite'}", "runner.progress=false",
    ]  # fmt: skip
    run_dir = run_with_overrides(overrides)
    export_shard(CallCache(tmp_path / "calls.sqlite"), tmp_path / "shards")
    return {"overrides": overrides, "run_dir": run_dir, "shards": tmp_path / "shards", "root": tmp_path}


def test_a_recorded_run_replays_identically_and_a_changed_prediction_is_caught(
    recorded: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--shards", str(recorded["shards"]), "--scratch", str(recorded["root"] / "scratch"), *recorded["overrides"]]
    assert main(args) == 0
    assert "1 of 1 finished runs replayed identically; 2 of 2 predictions." in capsys.readouterr().out

    path = recorded["run_dir"] / "predictions.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["prediction"] += " (edited)"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(args) == 1  # the replayed folder is kept: compared again, not replayed again
    assert "| rag / locomo | 2 | 1 | 1 | differs |" in capsys.readouterr().out


def test_a_recorded_call_missing_from_the_shards_stops_the_replay_with_its_stage(
    recorded: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    [shard] = shard_paths(recorded["shards"])
    with gzip.open(shard, "rt", encoding="utf-8") as handle:
        rows = handle.readlines()
    kept = recorded["root"] / "kept"
    kept.mkdir()
    with gzip.open(kept / shard.name, "wt", encoding="utf-8") as handle:
        handle.writelines(rows[:-1])  # one recorded call lost
    scratch = recorded["root"] / "scratch"
    assert main(["--shards", str(kept), "--scratch", str(scratch), *recorded["overrides"]]) == 1
    out = capsys.readouterr().out
    assert "stopped: stage '" in out and "not in the LLM cache" in out and "cache.only=true" in out
    assert "0 of 1 finished runs replayed identically" in out
