"""The benchmark's pure parts with tiny sizes: targets, throughput bookkeeping,
the timing proxy, synthetic search, run summaries and the written report.

No timed assertions: timings are only checked to be measured (positive).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scripted_llm import ScriptedBackend

from benchmarks import throughput as bench
from clag.llm.base import GenerationConfig


def echo_backend(words: int = 5) -> ScriptedBackend:
    return ScriptedBackend(lambda prompt, config: " ".join(["w"] * min(words, config.max_new_tokens)))


class EchoBackend(ScriptedBackend):
    """:func:`echo_backend` as a class, so that a config can name it (``model.backend._target_``)."""

    def __init__(self) -> None:
        super().__init__(lambda prompt, config: " ".join(["w"] * min(5, config.max_new_tokens)))


def test_target_verdicts_say_by_how_much() -> None:
    more = bench.Target("ratio", 3.0, higher_is_better=True)
    less = bench.Target("share", 0.1, higher_is_better=False)
    assert more.verdict(3.0) == "hit" and less.verdict(0.1) == "hit"
    assert more.verdict(1.5) == "missed by 2.00x"
    assert less.verdict(0.25) == "missed by 2.50x"
    assert more.verdict(0.0) == "missed (measured 0)"
    assert more.verdict(None) == less.verdict(math.nan) == "not measured"
    assert more.describe() == ">= 3" and less.describe() == "<= 0.1"


def test_llm_throughput_times_one_call_per_batch_size_and_round() -> None:
    backend = echo_backend(words=4)
    config = GenerationConfig(max_new_tokens=8)
    rows = bench.llm_throughput(backend, config, ["a", "b", "c", "d", "e"], (1, 2, 4), rounds=2)
    sizes = [len(prompts) for prompts in calls_by_generate(backend)]
    assert sizes == [1, 1, 2, 4, 4, 2, 1]  # untimed warm-up, then rounds in alternating order
    assert [row["batch"] for row in rows] == [1, 2, 4] and rows[0]["vs_batch1"] == 1.0
    assert [row["completion_tokens"] for row in rows] == [4, 8, 16]
    assert all(row["tokens_per_s"] >= row["median_tokens_per_s"] > 0 and row["rounds"] == 2 for row in rows)
    with pytest.raises(ValueError):
        bench.llm_throughput(backend, config, ["a"], (1, 2))


def calls_by_generate(backend: ScriptedBackend) -> list[list[str]]:
    """The scripted backend logs prompts one by one; every call starts with the first prompt, "a"."""
    groups: list[list[str]] = []
    for prompt, _ in backend.calls:
        if prompt == "a":
            groups.append([])
        groups[-1].append(prompt)
    return groups


def test_timed_backend_adds_up_calls_and_delegates() -> None:
    inner = echo_backend(words=3)
    inner.extra = "delegated"  # type: ignore[attr-defined]
    timed = bench.TimedBackend(inner)
    timed.generate(["x", "y"], GenerationConfig(max_new_tokens=4))
    timed.generate(["z"], GenerationConfig(max_new_tokens=4))
    assert (timed.calls, timed.prompts, timed.completion_tokens) == (2, 3, 9)
    assert timed.seconds > 0
    assert timed.identity() == {"backend": "scripted"} and timed.extra == "delegated"


def test_timed_run_times_the_backend_the_runner_builds_through_its_hook(tmp_path: Path, data_dir: Path) -> None:
    """RAG on a scripted backend (no model): the runner's own ``wrap_backend`` hook, nothing patched."""
    run_dir, timed = bench.timed_run(
        [
            "method=rag", "dataset=locomo", "limit.episodes=1", "limit.items=6", "limit.questions=2",
            "~model.backend", "+model.backend._target_=test_bench.EchoBackend", "runner.progress=false",
            f"cache.path={tmp_path / 'c.sqlite'}", f"run_dir={tmp_path / 'run'}", "metrics.bootstrap_samples=10",
        ]
    )  # fmt: skip
    rows = (run_dir / "predictions.jsonl").read_text().splitlines()
    assert isinstance(timed, bench.TimedBackend) and timed.backend.identity() == {"backend": "scripted"}
    assert timed.calls >= 1 and timed.prompts >= len(rows) >= 1 and timed.seconds > 0


def test_clustered_vectors_are_unit_and_near_their_centre() -> None:
    vectors, labels = bench.clustered_unit_vectors(300, 5, dim=32, seed=1)
    assert vectors.shape == (300, 32) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert set(labels.tolist()) <= set(range(5))
    centroid = vectors[labels == labels[0]].mean(axis=0)
    others = vectors[labels != labels[0]].mean(axis=0)
    assert vectors[0] @ centroid > vectors[0] @ others


def test_retrieval_scaling_tiny_sizes_use_clag_primitives() -> None:
    rows = bench.retrieval_scaling(sizes=(64, 256), queries=4, k=5, k_route=2, dim=16, faiss_threads=(1,))
    assert [row["notes"] for row in rows] == [64, 256] and rows[0]["faiss_threads"] == "1"
    for row in rows:
        assert row["clusters"] == round(math.sqrt(row["notes"]))
        assert 0 < row["searched_notes"] < row["notes"]
        assert row["flat_ms"] > 0 and row["two_stage_ms"] > 0 and row["two_stage_subset_ms"] > 0
        # both stage-2 structures search the same members exactly
        assert 0 < row["recall_at_k"] <= 1 and row["recall_at_k_subset"] == pytest.approx(row["recall_at_k"])


def fake_run(tmp_path: Path, method: str, e2e: list[float], pick: float | None) -> Path:
    run_dir = tmp_path / method
    run_dir.mkdir()
    rows = [
        {"question_id": f"q{i}", "timings_ms": {"keywords": 10.0, "pick": pick or 0.0, "answer": 30.0 + i}}
        for i in range(len(e2e))
    ]
    (run_dir / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = {
        "usage": {
            "items": 4,
            "ingest_s": 8.0,
            "llm_calls_per_item": 2.0,
            "llm_calls_per_question": 3.0,
            "ingestion": {"note": {"calls": 4}},
            "questions": {"keywords": {"calls": 2}},
        },
        "latency": {
            "retrieval_ms": {"mean": float(np.mean(e2e)) / 4},
            "e2e_ms": {"mean": float(np.mean(e2e))},
        },
        "run": {"wall_s": 20.0, "peak_rss_mb": 3000.0},
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    return run_dir


def test_run_summaries_ratios_targets_and_report(tmp_path: Path) -> None:
    timed = bench.TimedBackend(echo_backend())
    timed.seconds = 18.0
    rows = [
        bench.summarise_run("rag", fake_run(tmp_path, "rag", [100.0, 300.0], None), timed),
        bench.summarise_run("clag", fake_run(tmp_path, "clag", [400.0, 400.0], 50.0), timed),
    ]
    bench.add_rag_ratios(rows)
    rag, clag = rows
    assert rag["items_per_s"] == 0.5 and rag["pick_ms"] is None and clag["pick_ms"] == 50.0  # 0 = no pick call
    assert rag["answer_ms"] == 30.5 and rag["question_usage"] == {"keywords": {"calls": 2}}
    assert rag["outside_llm_share"] == pytest.approx(0.1)
    assert clag["e2e_ms_vs_rag"] == pytest.approx(2.0) and rag["e2e_ms_vs_rag"] == 1.0

    llm = [
        {"backend": "transformers bf16", "batch": 1, "tokens_per_s": 10.0},
        {"backend": "transformers bf16", "batch": 8, "tokens_per_s": 40.0},
    ]
    retrieval = [{"notes": 100_000, "faiss_threads": "1", "speedup": 20.0, "speedup_subset": 5.0}]
    results = {"llm": llm, "methods": rows, "retrieval": retrieval, "model_loads": 1}
    verdicts = {row["target"]: row["verdict"] for row in bench.target_rows(results)}
    assert verdicts[bench.TARGETS["batch8_over_batch1"].name] == "hit"
    assert verdicts[bench.TARGETS["clag_over_rag_e2e"].name] == "missed by 1.33x"
    assert verdicts[bench.TARGETS["outside_llm_share"].name] == "hit"
    assert verdicts[bench.TARGETS["model_loads"].name] == "hit"
    two_stage = [v for name, v in verdicts.items() if name.startswith(bench.TARGETS["two_stage_speedup_100k"].name)]
    assert two_stage == ["hit", "missed by 2.00x"]


def test_missing_sections_are_reported_as_not_measured() -> None:
    verdicts = [row["verdict"] for row in bench.target_rows({})]
    assert verdicts == ["not measured"] * len(bench.TARGETS)


def test_report_files(tmp_path: Path) -> None:
    machine = {"host": "h", "cpu": "c", "cores": 2, "platform": "p", "date": "d", "loadavg": [1.0, 1.0, 1.0]}
    machine |= {"torch_threads": 2, "faiss_threads": 2}
    results = {
        "machine": machine,
        "scale": {"name": "quick", "episode": "conv-26", "items": 8, "questions": 2, "queries": 5, "rounds": 2},
        "loadavg_end": [2.0, 1.5, 1.0],
        "wall_s": 600.0,
        "llm": [{"backend": "transformers bf16", "batch": 1, "tokens_per_s": 12.5}],
        "llm_notes": ["llama.cpp: skipped"],
        "methods": [{"method": "rag", "e2e_ms": 1234.5, "pick_ms": None, "question_usage": {"answer": {"calls": 1}}}],
        "model_loads": 1,
        "rss_after_llm_mb": 3000.0,
        "peak_rss_mb": 3500.0,
        "retrieval": [{"notes": 1000, "flat_ms": 0.05}],
        "targets": [{"target": "t", "goal": ">= 3", "measured": 2.0, "verdict": "missed by 1.50x"}],
    }
    bench.write_outputs(results, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert (
        "took 10.0 min" in report
        and "missed by 1.50x" in report
        and "| rag |" in report
        and "llama.cpp: skipped" in report
    )
    assert "1,234" in report and "| — |" in report
    header, row = (tmp_path / "methods.csv").read_text().splitlines()
    assert header == "method,e2e_ms,pick_ms,question_usage"
    assert row == 'rag,1234.5,,"{""answer"": {""calls"": 1}}"'  # nested values as JSON
    assert json.loads((tmp_path / "raw.json").read_text())["model_loads"] == 1


def test_command_line_scales() -> None:
    assert bench.SCALES["quick"].items < bench.SCALES["full"].items
    overrides = bench.method_overrides("clag", bench.SCALES["quick"], Path("/tmp/w"))
    assert "cache.enabled=false" in overrides and "runner.answer_batch_size=1" in overrides
    assert "runner.warmup=true" in overrides and "limit.items=8" in overrides
    assert "method.system.buffer_size=4" in overrides  # CLAG clusters within the slice
    assert not any("buffer_size" in o for o in bench.method_overrides("amem", bench.SCALES["quick"], Path("/w")))


def test_optional_backends_that_fail_or_are_absent_are_skipped_with_a_note(monkeypatch) -> None:
    def broken(model: str, rounds: int):
        raise ImportError("half-edited module")

    monkeypatch.setattr(bench, "_backend_throughput", broken)
    rows, notes = bench.run_llm_section([("extra", "m", "json"), ("gone", "m", "no_such_module_x")], 1, optional=True)
    assert rows == []
    assert notes == [
        "extra: skipped, it failed: ImportError: half-edited module",
        "gone: skipped (`no_such_module_x` does not import; see the `llamacpp` extra).",
    ]
    with pytest.raises(ImportError):
        bench.run_llm_section([("default", "m", "json")], 1, optional=False)


@pytest.mark.parametrize("features_off", [True, False])
def test_demo_slice_overrides_compose_to_the_demo_slice(tmp_path: Path, features_off: bool) -> None:
    cfg = bench._compose(bench.demo_slice_overrides(**bench.BEFORE_AFTER, workdir=tmp_path, features_off=features_off))
    assert cfg.limit.episode_ids == list(cfg.dataset.demo.episode_ids)
    assert cfg.limit["items"] == cfg.dataset.demo["items"] == 4  # `.items` is the mapping method
    assert cfg.cache.enabled is False and cfg.run_dir == str(tmp_path / "runs" / ("off" if features_off else "on"))
    serial = (cfg.model.backend.batch_size, cfg.runner.concurrent_episodes, cfg.runner.answer_batch_size)
    assert (serial == (1, 1, 1)) is features_off


def test_slice_runs_are_compared_by_wall_time_and_predictions() -> None:
    before = {"wall_s": 300.0, "predictions": {"q1": "a", "q2": "b", "q3": "c"}}
    after = {"wall_s": 100.0, "predictions": {"q1": "a", "q2": "x", "q3": "c"}}
    bench.compare_slice_runs(before, after)
    assert after["speedup"] == 3.0 and after["same_predictions"] == "2/3"


def test_engine_stream_rows_use_disjoint_prompts_and_set_the_batch_to_the_streams() -> None:
    from benchmarks import engines

    backend = echo_backend(words=4)
    backend.batch_size = 1  # type: ignore[attr-defined]
    prompts = [f"p{i}" for i in range(1 + 1 + 2 + 3)]
    rows = engines.stream_throughput(backend, prompts, streams=(1, 2, 3))
    assert [row["streams"] for row in rows] == [1, 2, 3] and backend.batch_size == 3  # type: ignore[attr-defined]
    assert [row["completion_tokens"] for row in rows] == [4, 8, 12] and rows[0]["vs_1_stream"] == 1.0
    asked = [prompt for prompt, _ in backend.calls]
    assert asked[0] == "p0" and len(set(asked[1:])) == len(asked[1:]) == 6  # warm-up, then each prompt once
    with pytest.raises(ValueError, match="need 7 prompts"):
        engines.stream_throughput(backend, prompts[:6], streams=(1, 2, 3))


def test_engine_demo_rows_compare_against_the_faster_local_engine() -> None:
    from benchmarks import engines

    rows = [
        {"engine": "vllm", "wall_s": 100.0, "predictions": {"a/q1": "x", "b/q1": "y"}},
        {"engine": "transformers int8", "wall_s": 180.0, "predictions": {"a/q1": "x", "b/q1": "z"}},
        {"engine": "transformers bf16", "wall_s": 120.0, "predictions": {"a/q1": "x", "b/q1": "y"}},
    ]
    target = engines.compare_demo_rows(rows)
    assert target["against"] == "transformers bf16" and target["speedup"] == 1.2
    assert target["verdict"] == "missed by 1.25x"
    assert rows[1]["same_predictions_as_vllm"] == "1/2" and rows[2]["same_predictions_as_vllm"] == "2/2"
    assert engines.compare_demo_rows(rows[1:])["verdict"] == "not measured"


def test_engine_demo_command_composes_the_demo_slice_through_one_server(tmp_path: Path) -> None:
    from benchmarks import engines

    command = engines.demo_slice_command(["engine=vllm"], tmp_path, parallel=True)
    assert command[1:4] == ["-m", "clag.run", "-m"] and "hydra/launcher=parallel" in command
    cfg = bench._compose([arg for arg in command[4:] if not arg.startswith(("method=", "hydra"))])
    assert cfg.model.engine == "vllm" and cfg.cache.enabled is False and cfg.limit.episode_ids == ["conv-30", "conv-48"]
    assert "hydra/launcher=parallel" not in engines.demo_slice_command(["engine=transformers"], tmp_path, False)
