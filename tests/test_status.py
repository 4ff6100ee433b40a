"""The sweep status report: the grid Hydra would run, and read-only counts under each run's own hash."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from clag.config import compose_config
from clag.data import load_slice
from clag.running.episode import note_progress
from clag.running.reference import GRIDS
from clag.running.snapshots import snapshot_key
from clag.running.spec import RunSpec
from clag.running.status import grid, hours_left, main, report, run_status, seconds_per_item, swept


def test_the_grid_is_the_sweepers_params_overridden_by_the_command_line() -> None:
    runs = grid(["experiment=reference", "method=rag,clag"])
    assert len(runs) == 2 * 2  # the command line's two methods x the experiment's two datasets
    assert {r for run in runs for r in run if r.startswith("method=")} == {"method=rag", "method=clag"}
    assert swept(runs) == {"method", "dataset"}
    table9 = grid(["experiment=reference_table9"])
    assert swept(table9) == {"method.system.n_init"}
    assert run_status(table9[0], tuple(swept(table9))).label == "clag / bioasq / n_init=5"  # the swept value named
    table10 = grid(["experiment=reference_table10"])
    assert run_status(table10[0], tuple(swept(table10))).label == "clag / bioasq / tau=0.15"  # a decimal value whole
    ablations = grid(["experiment=reference_ablations"])
    assert sorted(r for run in ablations for r in run if r.startswith("+variant=")) == [
        "+variant=global_evolution", "+variant=global_retrieval", "+variant=routing_cosine", "+variant=routing_kmeans"
    ]  # fmt: skip


def test_a_run_counts_only_its_own_rows_and_each_key_once(data_dir: Path, tmp_path: Path) -> None:
    overrides = ["experiment=reference", "method=rag", "dataset=bioasq", f"paths.runs_dir={tmp_path}"]
    fresh = run_status(overrides)
    assert (fresh.state, fresh.episodes, fresh.questions) == ("not started", 3, 60)  # the reference BioASQ slice

    folder = fresh.folder
    folder.mkdir(parents=True)
    (folder / "run.json").write_text("{}")
    own = {"config_hash": RunSpec.from_config(compose_config(overrides)).config_hash}
    rows = [{**own, "question_id": "q1"}, {**own, "question_id": "q1"}, {"config_hash": "other", "question_id": "q2"}]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut off')
    (folder / "episodes.jsonl").write_text(json.dumps({**own, "episode_id": "chunk_6"}) + "\n")
    status = run_status(overrides)
    assert (status.state, status.answered, status.episodes_done, status.finished) == ("started", 1, 1, False)
    assert (folder / "predictions.jsonl").read_text().endswith('{"cut off')  # read-only: a live run's last line stays
    assert "0 of 1 runs finished; 1 of 60 questions answered." in report([status])

    # the episodes still ingesting count by their latest progress line; a finished episode's lines and another
    # config's are left out
    note_progress(folder / "ingest_progress.jsonl", "chunk_6", 48, 48, own["config_hash"])
    for items in (16, 32):
        note_progress(folder / "ingest_progress.jsonl", "chunk_7", items, 60, own["config_hash"])
    note_progress(folder / "ingest_progress.jsonl", "chunk_8", 16, 60, "other")
    status = run_status(overrides)
    assert status.items_ingested == 32
    assert status.hours_left is None  # chunk_8 has not started under this config: its pace is unknown
    assert "| 1/3 (+32 items of the others) |" in report([status])
    assert "(+32 items of the others; ~2.5 h to go at their recent pace) |" in report([replace(status, hours_left=2.5)])

    # an episode whose memory an earlier run saved (found through the snapshot index) is in memory: the run
    # loads it instead of ingesting, and never writes an episodes.jsonl line for it
    cfg = compose_config(overrides)
    episode = load_slice(cfg)[1]
    saved, key = tmp_path / "earlier" / "memory" / episode.id, snapshot_key(cfg, episode)
    saved.mkdir(parents=True)
    (saved / "COMPLETE").write_text(key)
    (tmp_path / "memory_index").mkdir()
    (tmp_path / "memory_index" / key).write_text(str(saved))
    assert run_status(overrides).episodes_done == 2


def test_the_pace_is_new_work_in_the_current_stretch() -> None:
    """A resumed run replays its chunks in seconds and a stop is hours of no work: neither sets the pace; a
    chunk of a live run that is already overdue raises it."""

    def line(items: int, at: float, of: int = 260) -> dict:
        return {"episode_id": "chunk_9", "items": items, "of": of, "at": at}

    first_stretch = [line(16, 0), line(32, 600), line(48, 1800)]  # 600 s, then 1200 s per 16 items
    assert seconds_per_item(first_stretch, now=1800) == 1800 / 32
    assert seconds_per_item(first_stretch, now=1800 + 3000) == (1800 + 3000) / 48  # the chunk after 48: overdue
    assert seconds_per_item(first_stretch, now=1800 + 5000) == 1800 / 32  # over RESUME_GAP: stopped, not slow
    resumed = [*first_stretch, line(16, 90_000), line(32, 90_002), line(48, 90_004), line(64, 90_100),
               line(80, 91_060)]  # fmt: skip
    assert seconds_per_item(resumed, now=91_060) == 960 / 16  # the replayed 16-48 are not steps; 64 -> 80 is
    assert seconds_per_item(resumed[:7], now=90_100) is None  # 48 -> 64 finishes the chunk the stop cut short
    untimed = [{"episode_id": "chunk_9", "items": 16, "of": 260}]  # written before lines carried a time
    assert seconds_per_item(untimed, now=0) is None and seconds_per_item(first_stretch[:1], now=0) is None

    left = hours_left({"chunk_9": resumed, "chunk_8": first_stretch}, pending=2, now=91_060)
    assert left == (260 - 48) * 1800 / 32 / 3600  # the last done: chunk_8's 212 items at 56.25 s (chunk_9: 180 at 60)
    assert hours_left({"chunk_9": resumed}, pending=2, now=91_060) is None  # an episode not started: no pace
    assert hours_left({"chunk_9": untimed}, pending=1, now=0) is None


def test_no_data_folder_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    monkeypatch.delenv("CLAG_DATA_DIR", raising=False)
    assert main(["experiment=reference_conventions"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no data directory") and "\n" not in err


def test_no_sweep_is_a_usage_error_and_reference_walks_every_grid(monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2 and "--reference" in capsys.readouterr().err
    monkeypatch.delenv("CLAG_DATA_DIR", raising=False)  # the first grid stops at its data: one line, exit 2
    assert main(["--reference"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no data directory")

    walked: list[list[str]] = []
    monkeypatch.setattr("clag.running.status.grid", lambda sweep: walked.append(sweep) or [])
    assert main(["--reference", "seed=1"]) == 0
    assert walked == [[*sweep, "seed=1"] for sweep in GRIDS]
    assert capsys.readouterr().out.count("## experiment=") == len(GRIDS)
