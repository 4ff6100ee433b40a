"""The fixed cold workload (issue 27): one slice that stands for the reference run, timed per setting.

The workload is ``scale=workload`` (configs/scale/workload.yaml): A-mem and
CLAG, the reference's two costliest methods, on LoCoMo's five reference
conversations cut to 12 turns and BioASQ's chunk 6 cut to 20 sentences, with
every question whose evidence lies inside; the LLM cache is off, so every call
is made. It runs as ``make reference`` runs its sweeps: one vLLM server, the
four jobs (2 methods x 2 datasets) side by side through the parallel launcher,
each with its episodes side by side.

Each setting gets a fresh server (started untimed, then one untimed warm-up
request), then the sweep is timed end to end. Per setting the report gives the
wall time, its ratio to today's settings, the server's own counters (requests,
prompt and generated tokens, prefix-cache hit rate: the vLLM ``/metrics``
deltas), the workload's F1 (identical predictions are not expected across
settings: batches differ), and the fraction of the CPU's ceiling reached (the
shortest wall time the measured matmul rate and bandwidth allow for the tokens
actually processed, :func:`benchmarks.ceiling.workload_floor_s`).

Run it alone on an idle machine: ``make bench-workload`` (~20 min per setting on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.ceiling import ModelShape

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
# The server as `make reference` starts it (experiment=reference: its context length and KV cache).
SERVER_BASE = ("experiment=reference",)
SWEEP = ("experiment=reference", "scale=workload", "method=amem,clag", "dataset=locomo,bioasq")
MODEL = "qwen2.5-0.5b"  # the reference run's model (the server's, as configs/experiment/reference.yaml serves it)
TARGET_SPEEDUP = 2.0  # issue 27: the workload at least 2x faster than today's reference settings
TARGET_CEILING_FRACTION = 0.5  # ... and at least half of the ceiling


@dataclass(frozen=True)
class Setting:
    """One way of serving the workload.

    Attributes:
        name: Its row label; the first setting of a run is the baseline of the ratios.
        serve: Overrides of the server's settings (``model.serve.*``).
        jobs: Sweep jobs side by side (``hydra.launcher.n_jobs``; the workload has 4).
        episodes: Episodes side by side per job (``runner.concurrent_episodes``).
        run_args: More overrides of the sweep.
    """

    name: str
    serve: tuple[str, ...] = ()
    jobs: int = 4
    episodes: int = 5
    run_args: tuple[str, ...] = field(default=())

    def serve_overrides(self) -> list[str]:
        return [*SERVER_BASE, *self.serve]

    def sweep_command(self, workdir: Path) -> list[str]:
        return [
            sys.executable, "-m", "clag.run", "-m", *SWEEP, *self.run_args,
            f"hydra.launcher.n_jobs={self.jobs}", f"runner.concurrent_episodes={self.episodes}",
            "cache.enabled=false", f"cache.path={workdir / 'cache.sqlite'}", f"paths.runs_dir={workdir / 'runs'}",
            "exp=bench-workload", "logger=none", "runner.progress=false", "runner.save_memory=false",
        ]  # fmt: skip


# The 2026-12-02 `make reference` settings first (vLLM's CPU block of 128), then one change at a time.
# Block size 32 won (1.05x) and is the default since (configs/engine/vllm.yaml), so the later rows
# change one thing from it: run them with "block size 32" first, which is then their baseline.
SETTINGS = (
    Setting("today (make reference)", serve=("model.serve.block_size=128",)),
    Setting("block size 32", serve=("model.serve.block_size=32",)),
    Setting("max-num-seqs 8", serve=("model.serve.block_size=32", "model.serve.extra_args=[--max-num-seqs,8]")),
    Setting("2 jobs at once", serve=("model.serve.block_size=32",), jobs=2),
)


# -- pure parts (tests/test_bench.py) ----------------------------------------------------------------


def workload_quality(runs_dir: Path) -> dict[str, Any]:
    """Runs finished, questions answered and their mean F1 (pooled over the runs' questions)."""
    metrics = sorted(runs_dir.rglob("metrics.json"))
    f1 = []
    for path in metrics:
        for line in (path.parent / "predictions.jsonl").read_text().splitlines():
            if line.strip():
                f1.append(float(json.loads(line)["f1"]))
    return {"runs": len(metrics), "questions": len(f1), "f1": sum(f1) / len(f1) if f1 else None}


STATS_LINE = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs"
)


def engine_stats(log_text: str) -> list[tuple[int, float, float]]:
    """``(requests running, prompt tokens/s, generated tokens/s)`` of each of vLLM's periodic stats
    lines (one per ~10 s of a busy server), idle ones left out."""
    lines = STATS_LINE.findall(log_text)
    rows = [(int(running), float(prompt), float(generated)) for prompt, generated, running in lines]
    return [row for row in rows if any(row)]


def engine_phases(
    stats: list[tuple[int, float, float]], shape: ModelShape, gflops: float, context: int, few: int = 2
) -> dict[str, float | None]:
    """How busy the engine kept the CPU: each interval's FLOPs (its tokens/s as vLLM's log counts them,
    times a token's FLOPs at ``context``) over the peak ``gflops``, overall and split by the requests
    running (with ``few`` or fewer, each decode step reads all the weights for a handful of tokens)."""
    prefill, decode = shape.flops_per_token(context, False), shape.flops_per_token(context, True)
    use = [(running, (prompt * prefill + generated * decode) / (gflops * 1e9)) for running, prompt, generated in stats]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "few_streams_share": mean([float(running <= few) for running, _ in use]),
        "utilisation": mean([u for _, u in use]),
        "utilisation_few_streams": mean([u for running, u in use if running <= few]),
        "utilisation_many_streams": mean([u for running, u in use if running >= 10]),
    }


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's speed-up over the first (the baseline)."""
    base = rows[0]["wall_s"]
    for row in rows:
        row["speedup"] = base / row["wall_s"] if row.get("wall_s") else None


# -- measurement -----------------------------------------------------------------------------------


def run_setting(setting: Setting, workdir: Path) -> dict[str, Any]:
    """Start the setting's server, time the sweep on it, read its counters, stop it."""
    from clag.llm import serve
    from clag.llm.base import GenerationConfig
    from clag.llm.openai_backend import OpenAICompatibleBackend

    spec = serve.compose_spec(setting.serve_overrides())
    serve.stop(spec.name)  # a server left from another setting must not serve this one
    began = time.perf_counter()
    with serve.VLLMServer(spec, timeout_s=1200) as server:
        startup_s = time.perf_counter() - began
        warm = OpenAICompatibleBackend(base_url=server.url, model=spec.name, dtype=spec.dtype)
        warm.generate(["Say hello."], GenerationConfig(max_new_tokens=8))
        before = serve.server_metrics(server.url)
        load_start = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run(setting.sweep_command(workdir), cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = serve.server_metrics(server.url)
        stats = engine_stats(Path(server.state.log).read_text(errors="replace"))
    if done.returncode != 0:
        raise RuntimeError(f"{setting.name}: the sweep failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return {
        "setting": setting.name,
        **asdict(setting),
        "startup_s": startup_s,
        "wall_s": wall,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg()[0],
        **serve.engine_counters(before, after),
        **workload_quality(workdir / "runs"),
        "engine_stats": stats,
    }


def add_ceiling(rows: list[dict[str, Any]], rates: dict[str, Any], model: str) -> None:
    """Each row's floor (the least wall time the CPU's rates allow for the tokens its engine computed)
    and the fraction of it reached; and prefill's share of the floor (what no faster decode wins back)."""
    from benchmarks.ceiling import model_shape, workload_floor_s

    shape = model_shape(model)
    for row in rows:

        def floor(generated: int, row: dict[str, Any] = row) -> float:
            return workload_floor_s(
                shape, rates["bfloat16_gflops"], rates["read_gbps"], int(row["prompt_tokens"]), generated,
                int(row["requests"]), streams=row["jobs"] * row["episodes"],
                cached_tokens=int(row.get("prefix_cache_hits") or 0),
            )  # fmt: skip

        row["floor_s"] = floor(int(row["generation_tokens"]))
        row["ceiling_fraction"] = row["floor_s"] / row["wall_s"]
        row["prefill_share_of_floor"] = floor(0) / row["floor_s"]
        context = int(row["prompt_tokens"] / row["requests"])
        row.update(engine_phases(row.get("engine_stats") or [], shape, rates["bfloat16_gflops"], context))


def best_rates(*measured: dict[str, Any]) -> dict[str, Any]:
    """Per rate the best of several measurements (a busy machine only lowers a peak)."""
    best = dict(measured[0])
    for rates in measured[1:]:
        for key, value in rates.items():
            if isinstance(value, float):
                best[key] = max(best.get(key, 0.0), value)
    return best


COLUMNS = (
    ("setting", "setting", "{}"),
    ("wall_s", "wall s", "{:.0f}"),
    ("speedup", "vs today", "{:.2f}x"),
    ("requests", "requests", "{:.0f}"),
    ("prompt_tokens", "prompt tok", "{:.0f}"),
    ("generation_tokens", "generated tok", "{:.0f}"),
    ("prefix_cache_hit_rate", "prefix hits", "{:.0%}"),
    ("f1", "F1", "{:.3f}"),
    ("questions", "questions", "{}"),
    ("floor_s", "ceiling s", "{:.0f}"),
    ("ceiling_fraction", "of ceiling", "{:.0%}"),
    ("few_streams_share", "time at <= 2 streams", "{:.0%}"),
    ("utilisation_many_streams", "CPU use at >= 10", "{:.0%}"),
    ("utilisation_few_streams", "at <= 2", "{:.0%}"),
    ("loadavg_start", "load", "{:.1f}"),
)


def render(results: dict[str, Any]) -> str:
    """The workload table with the targets' verdicts."""
    rows = [row for row in results["rows"] if "error" not in row]
    lines = ["| " + " | ".join(label for _, label, _ in COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for row in rows:
        cells = [fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [f"| {row['setting']} | failed: {row['error'].splitlines()[-1][:200]} |" for row in results["rows"]
              if "error" in row]
    best = max(rows, key=lambda row: row["speedup"] or 0)
    lines += [
        "",
        f"Fastest: **{best['setting']}**, {best['speedup']:.2f}x today's settings "
        f"(target {TARGET_SPEEDUP:g}x: {'hit' if best['speedup'] >= TARGET_SPEEDUP else 'missed'}), "
        f"{best['ceiling_fraction']:.0%} of the ceiling (target {TARGET_CEILING_FRACTION:.0%}: "
        f"{'hit' if best['ceiling_fraction'] >= TARGET_CEILING_FRACTION else 'missed'}); prefill is "
        f"{best['prefill_share_of_floor']:.0%} of its ceiling time.",
    ]
    return "\n".join(lines) + "\n"


def score(results: dict[str, Any]) -> None:
    """Ratios and ceiling fractions of every measured row, from the results' rates."""
    measured = [row for row in results["rows"] if "error" not in row]
    if measured:
        add_ratios(measured)
        add_ceiling(measured, results["rates"], MODEL)


def write_report(results: dict[str, Any], out: Path) -> None:
    """``raw.json`` and ``report.md`` under ``out`` (rewritten after every setting: a killed run keeps its rows)."""
    from benchmarks.ceiling import ceiling_rows, model_shape
    from benchmarks.ceiling import render as render_ceiling

    out.mkdir(parents=True, exist_ok=True)
    (out / "raw.json").write_text(json.dumps(results, indent=2))
    if not any("error" not in row for row in results["rows"]):
        return
    rates = results["rates"]
    ceiling = {"machine": results["machine"], "rates": rates, "ceilings": ceiling_rows(model_shape(MODEL), rates)}
    sources = ", ".join(["this run's own measurements", *results.get("rate_sources", [])])
    notes = "".join(f"- {note}\n" for note in results.get("notes", []))
    (out / "report.md").write_text(
        "# The fixed cold workload\n\n" + render(results) + (f"\nNotes:\n\n{notes}" if notes else "")
        + f"\n## The CPU's rates\n\nEach rate is the best of {sources}.\n\n" + render_ceiling(ceiling)
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from benchmarks.ceiling import measure, model_shape
    from benchmarks.throughput import machine_info

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [setting.name for setting in SETTINGS]
    parser.add_argument("--settings", nargs="+", default=names, choices=names, help="the first is the baseline")
    parser.add_argument("--out", type=Path, default=Path("results/bench/workload"))
    parser.add_argument("--report-only", action="store_true", help="re-render OUT/report.md from OUT/raw.json")
    parser.add_argument("--rates", nargs="*", type=Path, default=[],
                        help="with --report-only: more rates (a benchmarks.ceiling raw.json); the best counts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("WANDB_MODE", "disabled")):
        os.environ.setdefault(name, value)
    if args.report_only:
        results = json.loads((args.out / "raw.json").read_text())
        more = [json.loads(path.read_text())["rates"] for path in args.rates]
        results["rates"] = best_rates(results["rates"], *more)
        results.setdefault("rate_sources", []).extend(str(path) for path in args.rates)
        score(results)
        write_report(results, args.out)
        return results
    data = Path(os.environ.get("CLAG_DATA_DIR") or REPO / "data")
    missing = [name for name in ("locomo", "bioasq") if not (data / name).is_dir()]
    if missing:  # before any server starts: a sweep without data fails after minutes of start-up
        log.error("no %s under %s: set CLAG_DATA_DIR to the data root (or run `make data`)", " or ".join(missing), data)
        return {"error": f"no data under {data}"}
    results: dict[str, Any] = {"machine": machine_info(), "sweep": list(SWEEP), "rows": []}
    results["rates"] = measure(model_shape(MODEL))  # first, on the idle machine: no server is up yet
    for setting in (s for name in args.settings for s in SETTINGS if s.name == name):
        log.info("setting: %s", setting.name)
        with tempfile.TemporaryDirectory(prefix="clag-workload-") as workdir:
            try:
                results["rows"].append(run_setting(setting, Path(workdir)))
            except (RuntimeError, OSError) as err:  # e.g. a flag this engine refuses: the other rows still count
                log.error("setting %s failed: %s", setting.name, err)
                results["rows"].append({"setting": setting.name, **asdict(setting), "error": str(err)[-500:]})
        score(results)
        write_report(results, args.out)
    results["rates"] = best_rates(results["rates"], measure(model_shape(MODEL)))  # again, every server stopped
    score(results)
    write_report(results, args.out)
    log.info("report: %s", args.out / "report.md")
    return results


if __name__ == "__main__":
    sys.exit(2 if main().get("error") else 0)
