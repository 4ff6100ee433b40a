"""Engine rows of ``make bench``: vLLM against the transformers backend, measured in one run.

1. Generated tokens/s at 1, 8, 16 and 32 concurrent streams: for vLLM, that
   many requests in flight at once (continuous batching on the server); for
   the transformers backend, one batch of that many rows, in int8 and in
   bf16 (float32 where the CPU lacks native bf16). Each stream count gets
   its own, disjoint prompts (windows of real LoCoMo conversations, ~300
   prompt tokens, a summary asked for), so vLLM's prefix cache cannot serve
   one count's prompts from another's.
2. The LoCoMo slice of ``make demo`` (five methods, cache off) timed
   through vLLM and through the transformers backend at the demo's own
   dtype, each as it is meant to run: transformers one job after another
   (the demo's own concurrency inside each job), vLLM with the five jobs
   side by side (``hydra/launcher=parallel``), all feeding one server;
   with the server's prefix-cache hit rate (``/metrics``) and the mean
   prompt / completion tokens per call (what a GPU estimate scales from).

The CPU is shared: every row carries the load average, and the verdicts are
ratios of rows measured in the same run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clag.llm.base import GenerationConfig, LLMBackend

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
STREAMS = (1, 8, 16, 32)
MAX_NEW_TOKENS = 64
WINDOW_TURNS = 10
# (label, overrides) of the engines compared; the served one is started by clag.llm.serve
ENGINES = (
    ("vllm", ["engine=vllm"]),
    ("transformers int8", ["engine=transformers", "model.dtype=int8"]),
    ("transformers bf16", ["engine=transformers", "model.dtype=bfloat16"]),
)
# the demo slice through vLLM and through `make demo`'s own engine (transformers, dtype auto)
DEMO_ENGINES = (("vllm", ["engine=vllm"]), ("transformers (demo's dtype)", ["engine=transformers"]))
DEMO_METHODS = ("rag", "amem", "clag", "gam", "memoryos")
DEMO_TARGET = 1.5  # issue 17: the demo slice through vLLM at least 1.5x faster than through transformers


def stream_prompts(data_dir: str | Path, count: int) -> list[str]:
    """``count`` distinct prompts: consecutive windows of LoCoMo turns, each followed by a summary request."""
    from clag.data import load_episodes

    prompts = []
    for episode in load_episodes("locomo", data_dir):
        turns = [f"{item.speaker}: {item.text}" for item in episode.items]
        for start in range(0, len(turns) - WINDOW_TURNS + 1, WINDOW_TURNS):
            window = "\n".join(turns[start : start + WINDOW_TURNS])
            prompts.append(f"{window}\n\nSummarise the conversation above in about 150 words.")
            if len(prompts) == count:
                return prompts
    raise ValueError(f"LoCoMo holds fewer than {count} windows of {WINDOW_TURNS} turns")


def timed_generate(backend: LLMBackend, prompts: Sequence[str], config: GenerationConfig) -> dict[str, Any]:
    """One timed ``generate`` call: its tokens, seconds, generated tokens/s and the load average after it."""
    start = time.perf_counter()
    completions = backend.generate(list(prompts), config)
    seconds = time.perf_counter() - start
    tokens = sum(c.completion_tokens for c in completions)
    return {
        "prompt_tokens": sum(c.prompt_tokens for c in completions),
        "completion_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "loadavg_1m": os.getloadavg()[0],
    }


def stream_throughput(
    backend: LLMBackend, prompts: Sequence[str], streams: Sequence[int] = STREAMS
) -> list[dict[str, Any]]:
    """Tokens/s of ``n`` prompts generated at once, for each ``n`` in ``streams``.

    ``prompts`` must hold ``1 + sum(streams)`` prompts: the first warms the
    backend up (weights load, kernels compile; untimed), then each stream
    count takes the next ``n``. A backend with a ``batch_size`` gets it set
    to ``n`` (all streams in one batch); a served one must allow ``n``
    requests in flight (``max_concurrency``).
    """
    if len(prompts) < 1 + sum(streams):
        raise ValueError(f"need {1 + sum(streams)} prompts, got {len(prompts)}")
    config = GenerationConfig(max_new_tokens=MAX_NEW_TOKENS)
    backend.generate(list(prompts[:1]), GenerationConfig(max_new_tokens=2))
    rows, offset = [], 1
    for n in streams:
        if hasattr(backend, "batch_size"):
            backend.batch_size = n
        rows.append({"streams": n, **timed_generate(backend, prompts[offset : offset + n], config)})
        offset += n
    for row in rows:
        row["vs_1_stream"] = row["tokens_per_s"] / rows[0]["tokens_per_s"]
    return rows


def demo_slice_command(engine: Sequence[str], workdir: Path, parallel: bool) -> list[str]:
    """The LoCoMo slice of ``make demo`` (five methods, cache off) as one multirun through ``engine``."""
    return [
        sys.executable, "-m", "clag.run", "-m", f"method={','.join(DEMO_METHODS)}", "dataset=locomo",
        "scale=demo", *engine, "cache.enabled=false", f"cache.path={workdir / 'cache.sqlite'}",
        f"paths.runs_dir={workdir / 'runs'}", "exp=bench-engines", "logger=none", "runner.progress=false",
        *(["hydra/launcher=parallel", f"hydra.launcher.n_jobs={len(DEMO_METHODS)}"] if parallel else []),
    ]  # fmt: skip


def summarise_demo_runs(runs_dir: Path) -> dict[str, Any]:
    """Calls, tokens per call and predictions of every run of one demo-slice sweep."""
    calls = prompt_tokens = completion_tokens = 0
    predictions: dict[str, str] = {}
    for metrics_path in sorted(runs_dir.glob("bench-engines/*/*/*/*/metrics.json")):
        usage = json.loads(metrics_path.read_text())["usage"]
        for part in ("ingestion", "questions"):
            for stage in usage.get(part, {}).values():
                calls += stage.get("calls", 0) - stage.get("cache_hits", 0)
                prompt_tokens += stage.get("prompt_tokens", 0)
                completion_tokens += stage.get("completion_tokens", 0)
        method = metrics_path.parts[-4]
        for line in (metrics_path.parent / "predictions.jsonl").read_text().splitlines():
            row = json.loads(line)
            predictions[f"{method}/{row['question_id']}"] = row["prediction"]
    return {
        "runs": len(list(runs_dir.glob("bench-engines/*/*/*/*/metrics.json"))),
        "llm_calls": calls,
        "prompt_tokens_per_call": prompt_tokens / calls if calls else None,
        "completion_tokens_per_call": completion_tokens / calls if calls else None,
        "predictions": predictions,
    }


def run_demo_slice(label: str, engine: Sequence[str], workdir: Path, server_url: str | None) -> dict[str, Any]:
    """Time one engine's demo-slice sweep (a subprocess, as ``make demo`` runs it)."""
    from clag.llm.serve import engine_counters, server_metrics

    served = server_url is not None
    before = server_metrics(server_url) if served else {}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(demo_slice_command(engine, workdir, parallel=served), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"demo slice through {label} failed:\n{done.stderr[-2000:]}")
    row = {"engine": label, "jobs_at_once": len(DEMO_METHODS) if served else 1, "wall_s": wall}
    row.update(summarise_demo_runs(workdir / "runs"))
    row["loadavg_1m_start"], row["loadavg_1m_end"] = load, os.getloadavg()[0]
    if served:
        counters = engine_counters(before, server_metrics(server_url))
        row["prefix_cache_hit_rate"] = counters.get("prefix_cache_hit_rate")
        row["server_requests"] = counters.get("requests")
    return row


def compare_demo_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The vLLM / transformers wall-time ratio and the target's verdict (against the faster local row)."""
    served = next((r for r in rows if r["engine"] == "vllm"), None)
    local = [r for r in rows if r["engine"] != "vllm"]
    if served is None or not local:
        return {"speedup": None, "verdict": "not measured"}
    best_local = min(local, key=lambda r: r["wall_s"])
    speedup = best_local["wall_s"] / served["wall_s"]
    for row in local:
        shared = row["predictions"].keys() & served["predictions"].keys()
        same = sum(row["predictions"][key] == served["predictions"][key] for key in shared)
        row["same_predictions_as_vllm"] = f"{same}/{len(shared)}"
    verdict = "hit" if speedup >= DEMO_TARGET else f"missed by {DEMO_TARGET / speedup:.2f}x"
    return {"speedup": speedup, "against": best_local["engine"], "goal": f">= {DEMO_TARGET}", "verdict": verdict}


def run_engines(data_dir: str | Path, workdir: Path, demo: bool = True, streams: bool = True) -> dict[str, Any]:
    """The demo-slice rows (:data:`DEMO_ENGINES`) and the stream rows (:data:`ENGINES`), one server for both."""
    from clag.config import compose_config
    from clag.llm import serve
    from clag.running.build import build_backend

    prompts = stream_prompts(data_dir, 1 + sum(STREAMS))
    spec = serve.compose_spec(["model=qwen2.5-0.5b"])
    results: dict[str, Any] = {"streams": [], "demo": [], "served_model": {}}
    with serve.VLLMServer(spec, timeout_s=1200) as server:
        started = server.state
        assert started is not None
        results["served_model"] = {"dtype": started.dtype, "extra_args": started.extra_args, "started": server.started}
        if demo:  # first: the comparison the target is about
            for label, engine in DEMO_ENGINES:
                url = started.url if label == "vllm" else None
                row = run_demo_slice(label, engine, workdir / re.sub(r"[^a-z0-9]+", "-", label), url)
                results["demo"].append(row)
                log.info(
                    "demo slice via %s: %s", label, json.dumps({k: v for k, v in row.items() if k != "predictions"})
                )
            results["demo_target"] = compare_demo_rows(results["demo"])
            log.info("demo target: %s", json.dumps(results["demo_target"]))
        for label, engine in ENGINES if streams else ():
            cfg = compose_config(["model=qwen2.5-0.5b", *engine])
            backend = build_backend(cfg.model)
            rows = stream_throughput(backend, prompts)
            dtype = backend.identity().get("dtype")
            results["streams"] += [{"engine": label, "dtype": dtype, **row} for row in rows]
            log.info("%s: %s", label, json.dumps(rows))
            del backend
    return results


STREAM_COLUMNS = (
    ("engine", "engine"),
    ("dtype", "dtype"),
    ("streams", "streams"),
    ("prompt_tokens", "prompt tokens"),
    ("completion_tokens", "completion tokens"),
    ("seconds", "s"),
    ("tokens_per_s", "tokens/s"),
    ("vs_1_stream", "vs 1 stream"),
    ("loadavg_1m", "load 1m"),
)
DEMO_COLUMNS = (
    ("engine", "engine"),
    ("jobs_at_once", "jobs at once"),
    ("runs", "runs"),
    ("llm_calls", "LLM calls"),
    ("prompt_tokens_per_call", "prompt tokens / call"),
    ("completion_tokens_per_call", "completion tokens / call"),
    ("wall_s", "wall s"),
    ("prefix_cache_hit_rate", "prefix-cache hit rate"),
    ("same_predictions_as_vllm", "same predictions as vLLM"),
    ("loadavg_1m_start", "load 1m at start"),
    ("loadavg_1m_end", "load 1m at end"),
)


def render_engine_section(results: dict[str, Any], markdown_table: Any) -> list[str]:
    """Report lines of the engine rows (``markdown_table`` is the report's own table writer)."""
    lines: list[str] = []
    if results.get("streams"):
        lines += [
            f"## 8. Engines: tokens/s by concurrent streams (up to {MAX_NEW_TOKENS} new tokens, ~300-token prompts)",
            "",
            "vLLM: that many requests in flight at once on one server "
            f"({results['served_model'].get('dtype')}); transformers: one batch of that many rows. Disjoint real "
            "prompts per row (LoCoMo windows), greedy; one round each.",
            "",
            markdown_table(results["streams"], STREAM_COLUMNS),
            "",
        ]
    if results.get("demo"):
        target = results["demo_target"]
        lines += [
            "## 9. The LoCoMo slice of `make demo` through each engine (five methods, cache off)",
            "",
            "Transformers: the five jobs one after another (the demo's own episode concurrency inside each); "
            "vLLM: the five jobs side by side (`hydra/launcher=parallel`), one server. Wall time of the whole "
            "sweep, process start-up included.",
            "",
            markdown_table(results["demo"], DEMO_COLUMNS),
            "",
            f"Target: vLLM {target.get('goal', '>= 1.5')}x faster than the faster transformers row "
            f"({target.get('against')}): measured {target['speedup']:.2f}x, {target['verdict']}."
            if target.get("speedup")
            else "Target: not measured.",
            "",
        ]
    return lines
