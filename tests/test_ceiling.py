"""The ceiling benchmark's arithmetic (benchmarks/ceiling.py) and the workload report's bookkeeping
(benchmarks/workload.py), on Qwen2.5-0.5B's published shape; the rates are measured only for being
positive (no timed assertions)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks import ceiling, workload

# Qwen2.5-0.5B's config.json: 0.49B parameters, 0.36B of them outside the (tied) embedding
QWEN_05B = SimpleNamespace(
    hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, vocab_size=151936,
)  # fmt: skip


@pytest.fixture
def shape() -> ceiling.ModelShape:
    return ceiling.ModelShape.from_hf_config("qwen2.5-0.5b", QWEN_05B)


def test_the_shape_counts_the_published_parameters(shape: ceiling.ModelShape) -> None:
    assert shape.head_dim == 64 and shape.kv_heads == 2
    assert shape.linear_params == 357_826_560  # "non-embedding parameters: 0.36B"
    assert shape.linear_params + shape.head_params == pytest.approx(0.494e9, rel=0.01)  # "0.49B" (norms, biases aside)
    assert shape.kv_bytes_per_token(2) == 2 * 24 * 2 * 64 * 2  # K and V, every layer, 2 KV heads, bf16


def test_flops_per_token_grow_with_context_and_the_head_counts_only_when_generating(shape) -> None:
    first = shape.flops_per_token(0, generated=False)
    assert first == 2 * shape.linear_params
    assert shape.flops_per_token(1000, generated=False) - first == 4 * 24 * 1000 * 14 * 64
    assert shape.flops_per_token(0, generated=True) - first == 2 * shape.head_params


def test_decode_is_bandwidth_bound_alone_and_compute_bound_with_many_streams(shape) -> None:
    gflops, gbps = 500.0, 20.0
    alone = ceiling.decode_ceiling(shape, gflops, gbps, streams=1, context=512, dtype="bfloat16")
    assert alone == pytest.approx(gbps * 1e9 / shape.decode_step_bytes(1, 512, 2))  # weights read per token
    many = ceiling.decode_ceiling(shape, gflops, gbps, streams=512, context=512, dtype="bfloat16")
    assert many == pytest.approx(gflops * 1e9 / shape.flops_per_token(512, generated=True))
    assert ceiling.prefill_ceiling(shape, gflops, 512) > many  # no LM head in prefill


def test_the_workload_floor_adds_prefill_and_decode(shape) -> None:
    gflops, gbps = 500.0, 20.0
    prefill_only = ceiling.workload_floor_s(shape, gflops, gbps, 100_000, 0, calls=100, streams=10)
    assert prefill_only == pytest.approx(100_000 * shape.flops_per_token(500, generated=False) / 500e9)
    both = ceiling.workload_floor_s(shape, gflops, gbps, 100_000, 10_000, calls=100, streams=10)
    rate = ceiling.decode_ceiling(shape, gflops, gbps, 10, 1000 + 50, "bfloat16")
    assert both == pytest.approx(prefill_only + 10_000 / rate)


def test_prefix_cache_hits_cost_no_prefill(shape) -> None:
    gflops, gbps = 500.0, 20.0
    full = ceiling.workload_floor_s(shape, gflops, gbps, 100_000, 0, calls=100, streams=10)
    half = ceiling.workload_floor_s(shape, gflops, gbps, 100_000, 0, calls=100, streams=10, cached_tokens=50_000)
    assert half == pytest.approx(full / 2)


def test_a_peak_rate_is_the_best_of_its_measurements() -> None:
    busy = {"torch": "2.13", "bfloat16_gflops": 226.0, "read_gbps": 47.9}
    idle = {"torch": "2.13", "bfloat16_gflops": 399.0, "read_gbps": 33.4}
    assert workload.best_rates(busy, idle) == {"torch": "2.13", "bfloat16_gflops": 399.0, "read_gbps": 47.9}


def test_the_rates_are_measured() -> None:
    assert ceiling.matmul_gflops("bfloat16", 64, 64, m=64, rounds=1) > 0
    assert ceiling.matmul_gflops("int8", 64, 64, m=64, rounds=1) > 0
    rates = ceiling.memory_gbps(nbytes=1 << 20, rounds=1)
    assert rates["read_gbps"] > 0 and rates["copy_gbps"] > 0


def test_the_workload_report_has_ratios_quality_and_the_ceiling(tmp_path, shape, monkeypatch) -> None:
    run = tmp_path / "runs" / "a" / "run"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    (run / "predictions.jsonl").write_text('{"f1": 0.5}\n{"f1": 0.0}\n')
    assert workload.workload_quality(tmp_path / "runs") == {"runs": 1, "questions": 2, "f1": 0.25}
    rows = [
        {"setting": name, "wall_s": wall, "jobs": 4, "episodes": 5, "requests": 100, "prompt_tokens": 50_000,
         "generation_tokens": 5_000, "prefix_cache_hit_rate": 0.3, "f1": 0.25, "questions": 2, "loadavg_start": 0.1}
        for name, wall in (("today", 400.0), ("faster", 200.0))
    ]  # fmt: skip
    workload.add_ratios(rows)
    assert [row["speedup"] for row in rows] == [1.0, 2.0]
    monkeypatch.setattr(ceiling, "model_shape", lambda model: shape)
    workload.add_ceiling(rows, {"bfloat16_gflops": 500.0, "read_gbps": 20.0}, "qwen2.5-0.5b")
    assert rows[1]["ceiling_fraction"] == pytest.approx(2 * rows[0]["ceiling_fraction"])
    assert 0 < rows[0]["prefill_share_of_floor"] < 1
    report = workload.render({"rows": rows})
    assert "Fastest: **faster**, 2.00x" in report and "target 2x: hit" in report
    json.dumps(rows)  # raw.json holds them


def test_every_setting_names_a_distinct_sweep(tmp_path) -> None:
    commands = {json.dumps([s.sweep_command(tmp_path), s.serve_overrides()]) for s in workload.SETTINGS}
    assert len(commands) == len(workload.SETTINGS)
    today = workload.SETTINGS[0].sweep_command(tmp_path)
    assert "cache.enabled=false" in today and "scale=workload" in today and "hydra.launcher.n_jobs=4" in today


LOG = """(APIServer pid=1) INFO 12-03 10:08:41 [loggers.py:335] Engine 000: Avg prompt throughput: 235.9 tokens/s, \
Avg generation throughput: 115.2 tokens/s, Running: 126 reqs, Waiting: 19 reqs, CPU KV cache usage: 6.8%
(APIServer pid=1) INFO 12-03 10:08:51 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s, \
Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.0%
(APIServer pid=1) INFO 12-03 10:39:48 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s, \
Avg generation throughput: 30.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, CPU KV cache usage: 1.6%
"""


def test_the_engine_log_says_how_busy_the_cpu_was(shape) -> None:
    stats = workload.engine_stats(LOG)
    assert stats == [(126, 235.9, 115.2), (2, 0.0, 30.0)]  # the idle line is left out
    phases = workload.engine_phases(stats, shape, gflops=400.0, context=0)
    assert phases["few_streams_share"] == 0.5
    busy = (235.9 * shape.flops_per_token(0, False) + 115.2 * shape.flops_per_token(0, True)) / 400e9
    assert phases["utilisation_many_streams"] == pytest.approx(busy)
    assert phases["utilisation_few_streams"] == pytest.approx(30.0 * shape.flops_per_token(0, True) / 400e9)
    assert workload.engine_phases([], shape, 400.0, 0)["utilisation"] is None
