"""The written result schema, checked on a real finished run folder.

One tiny real run (RAG, the offline model, 1 LoCoMo conversation x 10 turns
x 2 questions) is written by the run package and read back by every reader:
the schema's own definitions, the table collector and renderer, and the W&B
tracker. No hand-built dict stands in for the folder.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from clag.config import compose_config
from clag.records.files import read_jsonl
from clag.records.runs import find_runs
from clag.records.schema import (
    SCHEMA_VERSION,
    EpisodeRecord,
    Hardware,
    Metrics,
    RunInfo,
    ScoredRow,
    check_version,
    missing_keys,
)
from clag.running.spec import RunSpec
from clag.tables.collect import metric_value
from clag.tables.render import compare_frame
from clag.tables.specs import load_defaults, load_spec

pytestmark = pytest.mark.model

OVERRIDES = [
    "method=rag",
    "dataset=locomo",
    "limit.episodes=1",
    "limit.items=10",
    "limit.questions=2",
    "runner.progress=false",
]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A finished real run under ``<tmp>/runs/`` (the collector searches a runs folder)."""
    from clag.run import run_config

    base = tmp_path_factory.mktemp("schema")
    cfg = compose_config([*OVERRIDES, f"run_dir={base / 'runs' / 'rag'}", f"cache.path={base / 'cache.sqlite'}"])
    return run_config(cfg)


def test_every_written_record_follows_the_schema(real_run: Path) -> None:
    rows = read_jsonl(real_run / "predictions.jsonl")
    assert len(rows) == 2
    for row in rows:
        assert missing_keys(row, ScoredRow) == []  # every score the schema names was written
        assert row.keys() <= ScoredRow.__annotations__.keys()  # and nothing it does not name
    records = read_jsonl(real_run / "episodes.jsonl")
    assert [r["episode_id"] for r in records] == ["conv-26"]
    assert missing_keys(records[0], EpisodeRecord) == [] and records[0].keys() <= EpisodeRecord.__annotations__.keys()
    metrics = json.loads((real_run / "metrics.json").read_text())
    assert metrics["schema_version"] == SCHEMA_VERSION
    assert missing_keys(metrics, Metrics) == [] and metrics.keys() <= Metrics.__annotations__.keys()
    assert missing_keys(metrics["run"], RunInfo) == [] and metrics["run"].keys() <= RunInfo.__annotations__.keys()
    assert missing_keys(metrics["run"]["hardware"], Hardware) == []
    config_hash = json.loads((real_run / "run.json").read_text())["config_hash"]
    assert {r["config_hash"] for r in rows + records} == {metrics["run"]["config_hash"]} == {config_hash}
    assert config_hash == RunSpec.from_config(compose_config([*OVERRIDES, f"run_dir={real_run}"])).config_hash


def test_provenance_names_engine_dtype_machine_and_packages(real_run: Path) -> None:
    run = json.loads((real_run / "metrics.json").read_text())["run"]
    assert run["engine"] == "transformers" and run["dtype"] == run["model_identity"]["dtype"]
    hardware = run["hardware"]
    assert hardware["cpu_model"] and hardware["cpu_count"] >= 1 and isinstance(hardware["gpu"], list)
    assert all(
        flag.startswith(("avx", "amx", "fma", "f16c", "sse4", "asimd", "sve", "bf16", "i8mm"))
        for flag in hardware["cpu_flags"]
    )
    for package in ("torch", "transformers", "sentence-transformers", "faiss-cpu", "nltk", "bert-score", "json-repair"):
        assert run["versions"][package] != "absent"


def test_table_collector_reads_the_real_folder(real_run: Path) -> None:
    runs = find_runs(real_run.parent)
    assert [r.path for r in runs] == [real_run]
    run = runs[0]
    metrics = json.loads((real_run / "metrics.json").read_text())
    assert (run.method, run.dataset, run.model, run.questions) == ("rag", "locomo", "qwen2.5-0.5b", 2)
    assert run.is_sliced and "locomo: 1 episodes / 2 questions / 10 items" in run.slice_text()
    assert run.computed_on.startswith(f"transformers {metrics['run']['dtype']} on ")
    f1 = metric_value(run, "f1")
    assert f1 is not None and f1.mean == pytest.approx(100 * metrics["overall"]["f1"]["mean"])
    latency = metric_value(run, "retrieval_ms")
    rows = read_jsonl(real_run / "predictions.jsonl")
    assert latency is not None and latency.mean == pytest.approx(sum(r["retrieval_ms"] for r in rows) / 2)
    assert metric_value(run, "context_chars").mean == pytest.approx(metrics["context_chars"]["mean"])
    frame = compare_frame(load_spec(1), runs, load_defaults())
    cells = frame[(frame.method == "rag") & (frame.dataset == "locomo") & (frame.metric == "f1")]
    assert cells.ours.notna().any() and cells.ours.dropna().iloc[0] == pytest.approx(f1.mean)


def test_newer_schema_is_skipped_with_a_warning(real_run: Path, tmp_path: Path, caplog) -> None:
    newer = tmp_path / "runs" / "newer"
    shutil.copytree(real_run, newer)
    metrics = json.loads((newer / "metrics.json").read_text())
    (newer / "metrics.json").write_text(json.dumps({**metrics, "schema_version": SCHEMA_VERSION + 1}))
    with caplog.at_level(logging.WARNING):
        assert find_runs(tmp_path / "runs") == []
    assert "newer than this code" in caplog.text
    check_version(metrics, "same version")  # the current version is read without complaint


def test_tracker_logs_the_real_folder(real_run: Path, monkeypatch, caplog) -> None:
    """W&B disabled (tests/conftest.py): every read of the tracker runs, nothing is sent."""
    from clag.tracking import log_run

    cfg = compose_config([*OVERRIDES, "logger=wandb"])
    metrics = json.loads((real_run / "metrics.json").read_text())
    with caplog.at_level(logging.WARNING):
        log_run(cfg, real_run, metrics, read_jsonl(real_run / "predictions.jsonl"))
    assert "W&B logging failed" not in caplog.text
