"""Run folders that cannot lie: one config per folder, a refusal in one line, nothing lost.

The runs here are real runs of the run package (real LoCoMo slice, real
embedder, real scoring) with a canned LLM backend, so the folder's control
flow is checked in seconds; ``test_runner`` and ``test_schema`` do the same
with the real offline model.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from clag.config import compose_config
from clag.llm.base import Completion, GenerationConfig, LLMBackend
from clag.llm.coalesce import CoalescingBackend
from clag.records.files import JsonlLog, RunFolderError, read_jsonl
from clag.running.build import build_backend
from clag.running.folder import RunFolder
from clag.running.loop import execute
from clag.running.spec import RunSpec

ROOT = Path(__file__).resolve().parent.parent


class CannedBackend:
    """Answers every prompt with the same words; accepts (and ignores) any backend settings of a model config."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.prompts = 0

    def identity(self) -> dict[str, Any]:
        return {"backend": "canned"}

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        self.prompts += len(prompts)
        return [Completion("Caroline, painting", len(prompt.split()), 2) for prompt in prompts]


class ServedBackend(CannedBackend):
    """A backend that batches concurrent requests itself, as a served engine does."""

    serves_concurrently = True


def overrides(run_dir: Path, *extra: str) -> list[str]:
    return [
        "method=rag",
        "dataset=locomo",
        "limit.episodes=1",
        "limit.items=10",
        "limit.questions=2",
        "runner.answer_batch_size=1",
        "runner.progress=false",
        "cache.enabled=false",
        f"model.backend._target_={__name__}.CannedBackend",
        f"run_dir={run_dir}",
        *extra,
    ]


def run(run_dir: Path, *extra: str) -> Path:
    return execute(RunSpec.from_config(compose_config(overrides(run_dir, *extra))))


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes, to show a refused run changed nothing."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def hashes(path: Path) -> set[str]:
    return {row["config_hash"] for row in read_jsonl(path)}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One finished canned RAG run (2 questions, answered one per batch)."""
    return run(tmp_path_factory.mktemp("finished") / "run")


def test_rows_and_records_carry_the_config_hash(finished: Path) -> None:
    marker = json.loads((finished / "run.json").read_text())
    metrics = json.loads((finished / "metrics.json").read_text())
    assert marker["config_hash"] == metrics["run"]["config_hash"]
    assert hashes(finished / "predictions.jsonl") == {marker["config_hash"]}
    assert hashes(finished / "episodes.jsonl") == {marker["config_hash"]}
    assert len(read_jsonl(finished / "predictions.jsonl")) == 2


def test_another_method_in_the_same_run_dir_is_refused(finished: Path, tmp_path: Path) -> None:
    """The issue's sequence: RAG, then GAM into the same run_dir, on the command line."""
    before = contents(finished)
    result = subprocess.run(
        [sys.executable, "-m", "clag.run", *overrides(finished, "method=gam")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    rag_hash = json.loads((finished / "run.json").read_text())["config_hash"]
    gam_hash = RunSpec.from_config(compose_config(overrides(finished, "method=gam"))).config_hash
    assert rag_hash[:8] in errors[0] and gam_hash[:8] in errors[0]
    assert "method.name" in errors[0] and "method.system._target_" in errors[0]
    assert contents(finished) == before  # nothing of the first run lost or rewritten
    assert "Traceback" not in result.stderr


def killed_copy(finished: Path, target: Path) -> Path:
    """``finished`` as a kill after the first answered question, in the middle of the next row, leaves it."""
    target.mkdir()
    for name, data in contents(finished).items():
        if name != "metrics.json":
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(data)
    lines = (finished / "predictions.jsonl").read_text().splitlines(keepends=True)
    (target / "predictions.jsonl").write_text(lines[0] + lines[1][:40])
    return target


def test_killed_run_restarted_with_another_config_is_refused(finished: Path, tmp_path: Path) -> None:
    killed = killed_copy(finished, tmp_path / "killed")
    before = contents(killed)
    with pytest.raises(RunFolderError) as refused:
        run(killed, "method.system.retrieve_k=5")
    assert "\n" not in str(refused.value) and "method.system.retrieve_k" in str(refused.value)
    assert contents(killed) == before


def test_move_aside_keeps_the_old_run_and_starts_clean(finished: Path, tmp_path: Path) -> None:
    killed = killed_copy(finished, tmp_path / "killed")
    old_hash = json.loads((killed / "run.json").read_text())["config_hash"]
    before = contents(killed)
    run(killed, "method.system.retrieve_k=5", "runner.on_config_mismatch=move_aside")
    aside = tmp_path / f"killed.old-{old_hash[:8]}"
    assert contents(aside) == before  # the old run, untouched, beside the new one
    new_hash = json.loads((killed / "run.json").read_text())["config_hash"]
    assert new_hash != old_hash
    assert hashes(killed / "predictions.jsonl") == {new_hash}  # no row of the old config adopted
    assert len(read_jsonl(killed / "predictions.jsonl")) == 2
    assert json.loads((killed / "metrics.json").read_text())["run"]["config_hash"] == new_hash


def test_killed_run_resumes_to_the_uninterrupted_predictions(finished: Path, tmp_path: Path) -> None:
    killed = killed_copy(finished, tmp_path / "killed")
    run(killed)
    assert [r["prediction"] for r in read_jsonl(killed / "predictions.jsonl")] == [
        r["prediction"] for r in read_jsonl(finished / "predictions.jsonl")
    ]


def test_rows_of_another_config_are_never_adopted(finished: Path, tmp_path: Path) -> None:
    """A folder whose log mixes configs (a hand copy, an old harness) is refused, not merged."""
    mixed = killed_copy(finished, tmp_path / "mixed")
    rows = read_jsonl(mixed / "predictions.jsonl")
    foreign = {**rows[0], "question_id": "conv-26:other", "config_hash": "f" * 64}
    with (mixed / "predictions.jsonl").open("a") as handle:
        handle.write("\n" + json.dumps(foreign) + "\n")
    with pytest.raises(RunFolderError, match="ffffffff"):
        run(mixed)


def test_folder_from_before_the_marker_resumes_when_its_config_matches(finished: Path, tmp_path: Path) -> None:
    """Old run folders (no run.json, rows without a hash) are judged by their config.yaml."""
    old = killed_copy(finished, tmp_path / "old")
    (old / "run.json").unlink()
    for name in ("predictions.jsonl", "episodes.jsonl"):
        rows = [{k: v for k, v in r.items() if k != "config_hash"} for r in read_jsonl(old / name)]
        (old / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    run(old)
    assert len(read_jsonl(old / "predictions.jsonl")) == 2
    with pytest.raises(RunFolderError):
        run(old, "method.system.retrieve_k=5")


def test_folder_without_results_is_taken_by_the_next_config(tmp_path: Path) -> None:
    """A run that stopped before its first row (a data error, say) leaves nothing to protect."""
    first = RunSpec.from_config(compose_config(overrides(tmp_path / "run")))
    RunFolder(first.run_dir).claim(first)
    second = RunSpec.from_config(compose_config(overrides(tmp_path / "run", "method.system.retrieve_k=5")))
    RunFolder(second.run_dir).claim(second)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config_hash"] == second.config_hash


class FullDisk:
    """A file handle whose writes stop halfway with ENOSPC, as on a full disk."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def write(self, text: str) -> int:
        self.handle.write(text[: len(text) // 2])
        self.handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def test_full_disk_while_writing_predictions(finished: Path, tmp_path: Path, monkeypatch) -> None:
    original = Path.open
    appends = []

    def open_(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = original(self, mode, *args, **kwargs)
        if self.name == "predictions.jsonl" and mode == "a":
            appends.append(self)
            if len(appends) == 2:  # the disk fills while the second answer batch is written
                return FullDisk(handle)
        return handle

    monkeypatch.setattr(Path, "open", open_)
    target = tmp_path / "full"
    with pytest.raises(RunFolderError) as full:
        run(target)
    message = str(full.value)
    assert "\n" not in message and "predictions.jsonl" in message and os.strerror(errno.ENOSPC) in message
    assert len(read_jsonl(target / "predictions.jsonl")) == 1  # the first batch intact, the torn row not a row
    assert not (target / "metrics.json").exists()
    monkeypatch.setattr(Path, "open", original)
    run(target)  # space freed: the same command resumes
    assert [r["prediction"] for r in read_jsonl(target / "predictions.jsonl")] == [
        r["prediction"] for r in read_jsonl(finished / "predictions.jsonl")
    ]


def test_torn_last_line_is_cut_and_unreadable_lines_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"k": "a", "config_hash": "h"}\nnot json\n{"k": "b", "config_hash": "h"}\n{"k": "c", "con')
    log = JsonlLog(path, "k", "h")
    assert sorted(log.rows) == ["a", "b"]
    assert path.read_text().endswith('"b", "config_hash": "h"}\n') and "not json" in path.read_text()
    assert [r["k"] for r in read_jsonl(path)] == ["a", "b"]


def test_unknown_mismatch_policy_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="runner.on_config_mismatch='rename'"):
        run(tmp_path / "run", "runner.on_config_mismatch=rename")


# -- the run package's seams ------------------------------------------------------------------------


def test_coalescer_only_in_front_of_backends_that_do_not_batch_themselves(tmp_path: Path) -> None:
    canned = compose_config(overrides(tmp_path)).model
    assert isinstance(build_backend(canned, concurrent=True), CoalescingBackend)
    assert isinstance(build_backend(canned, concurrent=False), CannedBackend)
    served = compose_config(overrides(tmp_path, f"model.backend._target_={__name__}.ServedBackend")).model
    assert type(build_backend(served, concurrent=True)) is ServedBackend


class CountingBackend:
    """A wrapper as the benchmark uses one: counts the prompts, passes everything else through."""

    def __init__(self, backend: LLMBackend) -> None:
        self.backend = backend
        self.prompts = 0

    def identity(self) -> dict[str, Any]:
        return self.backend.identity()

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        self.prompts += len(prompts)
        return self.backend.generate(prompts, config)

    def __getattr__(self, name: str) -> Any:  # e.g. the coalescer's client()
        return getattr(self.backend, name)


@pytest.mark.parametrize("target", ["CannedBackend", "ServedBackend"])
def test_wrapped_backend_sees_every_call_of_concurrent_episodes(tmp_path: Path, target: str) -> None:
    wrappers: list[CountingBackend] = []

    def wrap(backend: LLMBackend) -> LLMBackend:
        wrappers.append(CountingBackend(backend))
        return wrappers[-1]

    extra = ["limit.episodes=2", "runner.concurrent_episodes=2", f"model.backend._target_={__name__}.{target}"]
    run_dir = execute(RunSpec.from_config(compose_config(overrides(tmp_path / "run", *extra))), wrap_backend=wrap)
    rows = read_jsonl(run_dir / "predictions.jsonl")
    assert {r["episode_id"] for r in rows} == {"conv-26", "conv-30"}
    assert len(wrappers) == 1
    coalesced = isinstance(wrappers[0].backend, CoalescingBackend)
    assert coalesced == (target == "CannedBackend")
    canned = wrappers[0].backend.backend if coalesced else wrappers[0].backend
    # every prompt the model got went through the wrapper (RAG: keywords and answer per question, at least)
    assert wrappers[0].prompts == canned.prompts >= 2 * len(rows)


HOLD_IN_CHILD = """
import sys, time
from pathlib import Path
from clag.running.folder import RunFolder
with RunFolder(Path(sys.argv[1])).hold():
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_folder_held_by_a_live_process_is_refused_and_a_gone_holder_taken_over(tmp_path, caplog) -> None:
    run_dir = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", HOLD_IN_CHILD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderError) as refused:
            run(run_dir)
        message = str(refused.value)
        assert f"is in use by pid {child.pid} on " in message and "\n" not in message
        assert not (run_dir / "predictions.jsonl").exists()  # nothing written beside the holder
    finally:
        child.kill()
        child.wait()
    caplog.set_level("INFO", logger="clag.running.folder")
    finished = run(run_dir)  # the holder is gone (killed): its lock went with it
    assert (finished / "metrics.json").exists()
    assert f"taking over from pid {child.pid} on " in caplog.text
    with RunFolder(run_dir).hold(), pytest.raises(RunFolderError):  # one process, two holds: refused too
        with RunFolder(run_dir).hold():
            pass


def test_a_slice_that_asks_nothing_says_so(tmp_path) -> None:
    from clag.data import DatasetError

    with pytest.raises(DatasetError, match="the slice asks nothing: 1 episode"):
        run(tmp_path / "run", "limit.questions=0")
    assert not (tmp_path / "run" / "metrics.json").exists()
