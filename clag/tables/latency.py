"""Table 2 at reference scale: each method's latency per question, stage by stage, from the runs' own timings.

The paper times one question at a time on an A100; the reference runs time
every stage of every question while up to 20 streams share one 2-core vLLM
server, and many of their calls were answered from the call cache when a
run was resumed or replayed. So this table keeps only real calls, and
compares across machines by ratios to RAG, as absolute times do not:

* a stage's time is the mean over the questions whose call for it was made,
  not replayed: the row's usage says so where it records the stage
  (``cache_hits`` 0); the batched answer stage has no per-row usage, and an
  answer under :data:`REPLAYED_MS` is a cache hit (a lookup takes under 10 ms,
  a real answer seconds here and over 100 ms on a GPU). Stages without an LLM call (search, assembly) are always real;
* the question-keyword call is one and the same call for every method that
  makes it, so its mean pools every run of the dataset that made it;
* retrieval = every stage but the keywords and the answer (the authors time
  it so); end to end = every stage; a method whose stage has no real call is
  "not measured" there.

One run per method and dataset, chosen as the paper tables choose theirs
(:func:`clag.tables.collect.select_run`): Qwen3-0.6B's or its stand-in's, and
for CLAG the plain settings, never an ablation or a sensitivity run. Caption:
engine, dtype, hardware and the streams in flight, from the runs.

    python -m clag.tables.latency results/reference/runs/reference --out results/reference/latency_first.md
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clag.records.runs import RunRecord, find_runs
from clag.tables.collect import report_main, select_run
from clag.tables.specs import load_defaults, load_spec

REPLAYED_MS = 50.0
METHODS = ("rag", "amem", "gam", "memoryos", "clag", "full_context", "no_memory")
PAPER_MS = {  # Table 2 of the paper (Qwen3-0.6B, one A100): retrieval, end to end
    "rag": (17.80, 289.60),
    "amem": (18.54, 408.68),
    "gam": (8303.41, 17934.32),
    "memoryos": (220.79, 968.75),
    "clag": (142.43, 514.14),
}
NOT_RETRIEVAL = ("keywords", "answer")


def real_stage_times(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Stage -> the times (ms) of the questions whose call for that stage was really made."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        usage = row.get("usage") or {}
        for stage, ms in (row.get("timings_ms") or {}).items():
            if ms is None:
                continue
            if stage in usage:
                if usage[stage].get("cache_hits", 0):
                    continue
            elif stage == "answer" and ms < REPLAYED_MS:
                continue
            out[stage].append(float(ms))
    return out


def _total(means: list[float | None]) -> float | None:
    """The sum of stage means; None when a stage has none (not measured)."""
    return None if None in means else sum(m for m in means if m is not None)


def method_latency(run: RunRecord, times: Mapping[str, list[float]], keywords: list[float]) -> dict[str, Any]:
    """Per stage ``(mean, n)`` from the run's real ``times`` (the keyword stage from the pooled ``keywords``),
    retrieval and end to end."""
    stages = sorted({stage for row in run.predictions for stage in row.get("timings_ms") or {}})
    means: dict[str, tuple[float | None, int]] = {}
    for stage in stages:
        values = keywords if stage == "keywords" else times.get(stage, [])
        means[stage] = (sum(values) / len(values) if values else None, len(values))
    return {
        "stages": means,
        "retrieval_ms": _total([mean for stage, (mean, _) in means.items() if stage not in NOT_RETRIEVAL]),
        "e2e_ms": _total([mean for mean, _ in means.values()]) if means else None,
    }


def _ms(value: float | None) -> str:
    return "not measured" if value is None else f"{value:,.0f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}"


def _caption(runs: list[RunRecord]) -> str:
    engines = sorted({f"{r.metrics['run'].get('engine')} {r.metrics['run'].get('dtype')}" for r in runs})
    cpus = sorted({
        f"{(r.metrics['run'].get('hardware') or {}).get('cpu_model', '?')} x "
        f"{(r.metrics['run'].get('hardware') or {}).get('cpu_count', '?')} cores"
        for r in runs
    })  # fmt: skip
    streams = sorted({
        int(r.metrics["run"].get("concurrent_episodes") or 1) * int((r.config.get("runner") or {}).get(
            "answer_batch_size", 1))
        for r in runs
    })  # fmt: skip
    return (
        f"Engine: {', '.join(engines)}; hardware: {', '.join(cpus)}; per sweep job, up to {max(streams)} questions "
        "in flight (concurrent episodes x answer batch), and the reference ran up to 4 jobs side by side on the one "
        "server: times include waiting for the other streams. Only ratios to RAG compare with the paper's A100."
    )


def latency_table(runs: list[RunRecord], dataset: str) -> str:
    """Markdown: one row per method, its stage times, retrieval and end to end, ratios to RAG and the paper's."""
    defaults = load_defaults()
    models = defaults.models_for(load_spec(2).model)  # Table 2's backbone, or its stand-ins
    chosen = {}
    for method in METHODS:  # plain CLAG only: no ablation, no sensitivity run
        where = defaults.clag_default if method == "clag" else {}
        if run := select_run(runs, method, dataset, models, where, []):
            chosen[method] = run
    if not chosen:
        return f"(no {dataset} runs)"
    times = {method: real_stage_times(run.predictions) for method, run in chosen.items()}
    keywords = [ms for by_stage in times.values() for ms in by_stage.get("keywords", [])]
    latency = {method: method_latency(run, times[method], keywords) for method, run in chosen.items()}
    rag = latency.get("rag", {})
    lines = [
        "| method | keywords (ms, n) | retrieval stages (ms, n) | answer (ms, n) | retrieval (ms) | end to end (ms) "
        "| e2e / RAG | paper e2e / RAG | retrieval / RAG | paper retrieval / RAG |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def shown(stage: str, mean_n: tuple[float | None, int]) -> str:
        return f"{stage} {_ms(mean_n[0])} ({mean_n[1]})"

    for method in METHODS:
        if method not in latency:
            continue
        entry = latency[method]
        stages = entry["stages"]
        middle = "; ".join(shown(s, v) for s, v in stages.items() if s not in NOT_RETRIEVAL) or "none"
        ends = [shown("", stages[s]).strip() if s in stages else "—" for s in NOT_RETRIEVAL]
        paper = PAPER_MS.get(method)
        lines.append(
            f"| {method} | {ends[0]} | {middle} | {ends[1]} | {_ms(entry['retrieval_ms'])} | {_ms(entry['e2e_ms'])} | "
            f"{_ratio(entry['e2e_ms'], rag.get('e2e_ms'))} | {_ratio(paper and paper[1], PAPER_MS['rag'][1])} | "
            f"{_ratio(entry['retrieval_ms'], rag.get('retrieval_ms'))} | "
            f"{_ratio(paper and paper[0], PAPER_MS['rag'][0])} |"
        )
    return _caption(list(chosen.values())) + "\n\n" + "\n".join(lines)


def render(runs_dir: Path) -> str:
    runs = find_runs(runs_dir)
    parts = [f"# Table 2 at reference scale: latency per question from the runs' own stage timings ({runs_dir})"]
    parts.append(__doc__.split("\n\n")[1].replace("\n", " "))
    for dataset in sorted({run.dataset for run in runs}):
        parts += [f"## {dataset}", latency_table(runs, dataset)]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, "python -m clag.tables.latency", __doc__, lambda runs, _out: render(runs))


if __name__ == "__main__":
    sys.exit(main())
