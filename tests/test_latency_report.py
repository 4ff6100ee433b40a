"""Table 2 at reference scale: only real calls are timed, the shared keyword call is pooled, ratios to RAG."""

from __future__ import annotations

from pathlib import Path

from run_folders import write_run

from clag.records.runs import find_runs
from clag.tables.latency import latency_table, real_stage_times

HIT = {"calls": 1, "cache_hits": 1}
MISS = {"calls": 1, "cache_hits": 0}


def test_replayed_calls_are_left_out() -> None:
    rows = [
        {"timings_ms": {"keywords": 900.0, "search": 20.0, "answer": 3000.0}, "usage": {"keywords": MISS}},
        {"timings_ms": {"keywords": 0.3, "search": 30.0, "answer": 0.1}, "usage": {"keywords": HIT}},  # a replay
        {"timings_ms": {"pick": 500.0}, "usage": {"pick": HIT}},  # a replayed pick that took long to look up
    ]
    times = real_stage_times(rows)
    assert times == {"keywords": [900.0], "search": [20.0, 30.0], "answer": [3000.0]}


def _run(root: Path, method: str, timings: list[dict], usage: list[dict], system: dict | None = None,
         model: str = "qwen2.5-0.5b") -> None:
    config = {"exp": "reference", "method": {"name": method, "system": system or {}}, "dataset": {"name": "locomo"},
              "model": {"name": model}, "runner": {"answer_batch_size": 8}}  # fmt: skip
    rows = [{"question_id": f"q{i}", "timings_ms": t, "usage": u} for i, (t, u) in enumerate(zip(timings, usage))]
    run = {"method": method, "dataset": "locomo", "engine": "vllm", "dtype": "bfloat16", "concurrent_episodes": 5,
           "hardware": {"cpu_model": "Xeon", "cpu_count": 2}}  # fmt: skip
    write_run(root / method / model / str(system), config, rows, {"run": run})


def test_the_keyword_call_is_pooled_and_ratios_are_to_rag(tmp_path: Path) -> None:
    _run(tmp_path, "rag", [{"keywords": 0.2, "search": 10.0, "answer": 1000.0}], [{"keywords": HIT}])
    _run(tmp_path, "clag", [{"keywords": 800.0, "pick": 2000.0, "search": 10.0, "answer": 1990.0}],
         [{"keywords": MISS, "pick": MISS}])  # fmt: skip
    for system, model in (({"tau": 0.15}, "qwen2.5-0.5b"), (None, "qwen2.5-1.5b")):  # newer, never Table 2's CLAG
        _run(tmp_path, "clag", [{"pick": 9.0, "search": 1.0, "answer": 9.0}], [{"pick": MISS}], system, model)
    text = latency_table(find_runs(tmp_path), "locomo")
    assert "| rag | 800 (1) | search 10 (1) | 1,000 (1) | 10 | 1,810 | 1.00 | 1.00 |" in text  # CLAG's keyword call
    clag = "| clag | 800 (1) | pick 2,000 (1); search 10 (1) | 1,990 (1) | 2,010 | 4,800 | 2.65 | 1.78 | 201.00 |"
    assert clag in text
    assert "Xeon x 2 cores" in text and "up to 40 questions in flight" in text
