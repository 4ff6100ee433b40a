"""Throughput benchmark behind ``make bench`` (issues #8 and #17): ratios on this machine.

One run measures, with fresh state so every LLM call is real:

1. LLM tokens/s at batch 1, 4 and 8 per available backend (the backend
   called directly, no cache; completion tokens counted as generated, since
   there is no way to ignore end-of-sequence);
2. ingestion items/s per method on one small real LoCoMo slice, through the
   runner (``clag.run.run_with_overrides``), the LLM cache off;
3. retrieval and end-to-end ms per question from the same runs, answered
   one question at a time after an untimed warm-up (Table 2's protocol,
   ``configs/experiment/table2.yaml``), and their ratio to RAG;
4. retrieval latency against memory size on synthetic clustered notes:
   global flat search, CLAG's two stages as CLAG runs them (nearest
   centroids, then ``ClusterSet.search`` over the per-cluster
   :class:`clag.cluster_index.ClusterIndex`) and, for reference, the same
   stage 2 as a FAISS subset search over the flat index (what CLAG used
   before the per-cluster index); the SLM pick is timed
   apart (its mean from the CLAG run of section 2);
5. the share of each run's wall time spent outside ``backend.generate``
   (a timing proxy wrapped around the runner's backend, in this module only);
6. peak RSS and the number of model loads in the process;
7. one ``make demo`` slice run twice, cache off: once with every
   throughput feature off (backend batch 1, one episode at a time, one
   question per answer call: how the harness ran before them) and once as
   the demo runs it; the wall-time ratio and how many predictions agree;
8-9. the engine rows (:mod:`benchmarks.engines`): vLLM against the
   transformers backend at 1-32 concurrent streams, and the demo's LoCoMo
   slice through each engine.

Runs are timed through the runner's own hook (``execute(wrap_backend=)``)
and model loads are read from the transformers backend's registry of
loaded models: nothing in the harness is patched.

Pure parts (targets, tables, synthetic data, the timing proxy) are plain
functions, tested in ``tests/test_bench.py``; :func:`main` wires them to the
real model and data.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
import json
import logging
import math
import os
import platform
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks.engines import render_engine_section, run_engines, timed_generate
from clag.hardware import cpu_model_and_flags
from clag.llm.base import Completion, GenerationConfig, LLMBackend

log = logging.getLogger(__name__)

METHODS = ("rag", "amem", "clag", "gam", "memoryos")
BATCH_SIZES = (1, 4, 8)
MEMORY_SIZES = (1_000, 10_000, 100_000)
EMBED_DIM = 384  # all-MiniLM-L6-v2
LLM_MAX_NEW_TOKENS = 64
# Prompts that make the model write past LLM_MAX_NEW_TOKENS, so every row of a batch decodes to the end.
LLM_PROMPTS = tuple(
    f"Write a 200-word story about {topic}."
    for topic in (
        "the sea",
        "a mountain village",
        "a robot learning to paint",
        "an old library",
        "a desert caravan",
        "a rainy city night",
        "a space station",
        "a lost dog finding home",
    )
)
# Section 7: the demo slice timed with the throughput features off, then on (A-mem: two LLM calls per
# item, one of them long; LoCoMo's demo slice has 2 conversations to ingest side by side).
BEFORE_AFTER = {"method": "amem", "dataset": "locomo"}
FEATURES_OFF = ("model.backend.batch_size=1", "runner.concurrent_episodes=1", "runner.answer_batch_size=1")
# (backend label, config overrides, module it needs); the first is the default path, the others optional extras
BACKENDS = (
    ("transformers", ("model=qwen2.5-0.5b",), "transformers"),
    ("llama.cpp", ("model=qwen2.5-0.5b", "engine=llamacpp"), "llama_cpp"),
)


@dataclass(frozen=True)
class Scale:
    """How much each section measures.

    Attributes:
        name: ``quick`` (``make bench``) or ``full``.
        episode: LoCoMo conversation of the method runs.
        items: Turns ingested (LoCoMo's first ``items`` turns).
        questions: Questions asked (those whose evidence lies in the kept turns).
        queries: Synthetic queries per memory size.
        rounds: Timed rounds per LLM batch size (the best is reported).
    """

    name: str
    episode: str
    items: int
    questions: int
    queries: int
    rounds: int


SCALES = {
    # conv-26's first 8 turns hold the evidence of 2 questions; agentic ingestion costs ~20 s per turn here.
    "quick": Scale("quick", "conv-26", items=8, questions=2, queries=50, rounds=2),
    # the demo slice of configs/dataset/locomo.yaml
    "full": Scale("full", "conv-26", items=20, questions=6, queries=200, rounds=3),
}


@dataclass(frozen=True)
class Target:
    """A benchmark target of issue #8 and the verdict on a measured value."""

    name: str
    goal: float
    higher_is_better: bool

    def verdict(self, value: float | None) -> str:
        """``hit``, ``missed by <factor>x`` or ``not measured``."""
        if value is None or not math.isfinite(value):
            return "not measured"
        if value >= self.goal if self.higher_is_better else value <= self.goal:
            return "hit"
        if self.higher_is_better and value <= 0:
            return "missed (measured 0)"
        factor = self.goal / value if self.higher_is_better else value / self.goal
        return f"missed by {factor:.2f}x"

    def describe(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {self.goal:g}"


TARGETS = {
    "batch8_over_batch1": Target("LLM tokens/s, batch 8 / batch 1 (transformers)", 3.0, True),
    "two_stage_speedup_100k": Target("flat / two-stage search time at 100k notes (no SLM pick)", 10.0, True),
    "outside_llm_share": Target("share of wall time outside LLM calls (all method runs)", 0.10, False),
    "clag_over_rag_e2e": Target("CLAG / RAG end-to-end latency", 1.5, False),
    "model_loads": Target("model loads in the benchmark process", 1.0, False),
}


# -- machine ---------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on: host, CPU, cores, load, date, thread pools."""
    import faiss
    import torch

    return {
        "host": platform.node(),
        "cpu": cpu_model_and_flags()[0],
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "loadavg": list(os.getloadavg()),
        "torch_threads": torch.get_num_threads(),
        "faiss_threads": faiss.omp_get_max_threads(),
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- 1. LLM throughput -----------------------------------------------------------------------------


def llm_throughput(
    backend: LLMBackend,
    config: GenerationConfig,
    prompts: Sequence[str] = LLM_PROMPTS,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    rounds: int = 2,
) -> list[dict[str, Any]]:
    """Tokens/s of one ``generate`` call with ``b`` prompts (the first ``b`` of ``prompts``).

    Each batch size is measured ``rounds`` times, in alternating order, and
    the best round is reported (the median too): on a shared CPU another
    process can stall a run several-fold, and the best of a few is the usual
    estimate of what the code itself costs (``timeit`` does the same). The
    first call (weights load, kernels compile) is untimed. A backend with a
    ``batch_size`` (transformers) must allow at least ``max(batch_sizes)``.
    """
    if max(batch_sizes) > len(prompts):
        raise ValueError(f"need at least {max(batch_sizes)} prompts, got {len(prompts)}")
    backend.generate(list(prompts[:1]), GenerationConfig(max_new_tokens=2))
    samples: dict[int, list[dict[str, Any]]] = {size: [] for size in batch_sizes}
    for round_ in range(rounds):
        for size in batch_sizes if round_ % 2 == 0 else list(reversed(batch_sizes)):
            samples[size].append(timed_generate(backend, prompts[:size], config))
    rows = []
    for size in batch_sizes:
        best = max(samples[size], key=lambda sample: sample["tokens_per_s"])
        median = statistics.median(sample["tokens_per_s"] for sample in samples[size])
        rows.append({"batch": size, "rounds": rounds, **best, "median_tokens_per_s": median})
    for row in rows:
        row["vs_batch1"] = row["tokens_per_s"] / rows[0]["tokens_per_s"]
    return rows


# -- timing proxy and load counting ------------------------------------------------------------------


class TimedBackend:
    """A backend proxy adding up the wall time spent inside ``generate``.

    Runs sequentially here; with concurrent episodes the sum would count
    overlapping calls twice.
    """

    def __init__(self, backend: LLMBackend) -> None:
        self.backend = backend
        self.seconds = 0.0
        self.calls = 0
        self.prompts = 0
        self.completion_tokens = 0
        self._lock = threading.Lock()

    def identity(self) -> dict[str, Any]:
        return self.backend.identity()

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        start = time.perf_counter()
        completions = self.backend.generate(prompts, config)
        with self._lock:
            self.seconds += time.perf_counter() - start
            self.calls += 1
            self.prompts += len(prompts)
            self.completion_tokens += sum(c.completion_tokens for c in completions)
        return completions

    def __getattr__(self, name: str) -> Any:  # e.g. CoalescingBackend.client()
        return getattr(self.backend, name)


def timed_run(overrides: list[str]) -> tuple[Path, TimedBackend]:
    """One run as ``clag.run`` makes it, its backend timed through the runner's ``wrap_backend`` hook."""
    from clag.config import compose_config
    from clag.config_schema import validate_config
    from clag.running.loop import execute
    from clag.running.spec import RunSpec

    cfg = compose_config(overrides)
    validate_config(cfg)
    timed: list[TimedBackend] = []

    def wrap(backend: LLMBackend) -> LLMBackend:
        timed.append(TimedBackend(backend))
        return timed[-1]

    run_dir = execute(RunSpec.from_config(cfg), wrap_backend=wrap)
    return run_dir, timed[0]


def model_loads() -> int:
    """Transformers models loaded in this process (the backend's registry of loaded weights)."""
    from clag.llm.transformers_backend import _LOADED

    return sum(loaded.model is not None for loaded in _LOADED.values())


# -- 2, 3, 5, 6. method runs -----------------------------------------------------------------------


def method_overrides(method: str, scale: Scale, workdir: Path) -> list[str]:
    """Overrides of one timed run: Table 2's protocol on the benchmark slice, nothing reused.

    CLAG clusters only after ``buffer_size`` notes (100); on a slice this
    small that never happens and CLAG would run as A-mem, so its cold start
    comes after half the slice: the rest is routed and questions get the
    two-stage retrieval with its SLM pick.
    """
    clag = [f"method.system.buffer_size={max(1, scale.items // 2)}"] if method == "clag" else []
    return clag + [
        f"method={method}",
        "dataset=locomo",
        "model=qwen2.5-0.5b",
        f"limit.episode_ids=[{scale.episode}]",
        f"limit.items={scale.items}",
        f"limit.questions={scale.questions}",
        "runner.answer_batch_size=1",
        "runner.warmup=true",
        "runner.progress=false",
        "cache.enabled=false",
        f"cache.path={workdir / 'cache.sqlite'}",
        f"paths.runs_dir={workdir / 'runs'}",
        f"run_dir={workdir / 'runs' / method}",
        "exp=bench",
        "logger=none",
    ]


def summarise_run(method: str, run_dir: Path, timed: TimedBackend) -> dict[str, Any]:
    """One table row from a finished run folder and the proxy that timed its LLM calls."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line.strip()]
    usage, run, latency = metrics["usage"], metrics["run"], metrics["latency"]
    wall = run["wall_s"]
    return {
        "method": method,
        "items": usage["items"],
        "ingest_s": usage["ingest_s"],
        "items_per_s": usage["items"] / usage["ingest_s"] if usage["ingest_s"] else None,
        "llm_calls_per_item": usage["llm_calls_per_item"],
        "questions": len(rows),
        "llm_calls_per_question": usage["llm_calls_per_question"],
        "keywords_ms": mean_stage_ms(rows, "keywords"),
        "pick_ms": mean_stage_ms(rows, "pick"),
        "retrieval_ms": latency["retrieval_ms"]["mean"],
        "answer_ms": mean_stage_ms(rows, "answer"),
        "e2e_ms": latency["e2e_ms"]["mean"],
        "wall_s": wall,
        "llm_s": timed.seconds,
        "llm_calls": timed.calls,
        "llm_completion_tokens": timed.completion_tokens,
        "outside_llm_share": max(0.0, wall - timed.seconds) / wall if wall else None,
        "peak_rss_mb": run["peak_rss_mb"],
        "ingestion_usage": usage["ingestion"],
        "question_usage": usage["questions"],
    }


def mean_stage_ms(rows: Sequence[dict[str, Any]], stage: str) -> float | None:
    """Mean of a stage's ``timings_ms`` over the questions that ran it (a 0 means it did not run)."""
    values = [row["timings_ms"][stage] for row in rows if row["timings_ms"].get(stage)]
    return statistics.fmean(values) if values else None


def add_rag_ratios(rows: list[dict[str, Any]]) -> None:
    """Retrieval and end-to-end latency of each method over RAG's (Table 2's comparison)."""
    rag = next((row for row in rows if row["method"] == "rag"), None)
    for row in rows:
        for key in ("retrieval_ms", "e2e_ms"):
            base = rag[key] if rag else None
            row[f"{key}_vs_rag"] = row[key] / base if base and row[key] is not None else None


def run_methods(methods: Sequence[str], scale: Scale, workdir: Path) -> list[dict[str, Any]]:
    rows = []
    for method in methods:
        start = time.perf_counter()
        run_dir, timed = timed_run(method_overrides(method, scale, workdir / method))
        row = summarise_run(method, run_dir, timed)
        row["loadavg_1m"] = os.getloadavg()[0]
        rows.append(row)
        log.info("%s: %.0f s (%s)", method, time.perf_counter() - start, json.dumps(row, default=str))
    add_rag_ratios(rows)
    return rows


def demo_slice_overrides(method: str, dataset: str, workdir: Path, features_off: bool) -> list[str]:
    """One ``scale=demo`` run, cache off; ``features_off`` adds :data:`FEATURES_OFF`."""
    name = "off" if features_off else "on"
    return [
        f"method={method}",
        f"dataset={dataset}",
        "scale=demo",
        "model=qwen2.5-0.5b",
        "runner.progress=false",
        "cache.enabled=false",
        f"cache.path={workdir / 'cache.sqlite'}",
        f"paths.runs_dir={workdir / 'runs'}",
        f"run_dir={workdir / 'runs' / name}",
        "exp=bench",
        "logger=none",
        *(FEATURES_OFF if features_off else ()),
    ]


def run_before_after(method: str, dataset: str, workdir: Path) -> list[dict[str, Any]]:
    """Section 7: the same demo slice with the throughput features off, then on."""
    rows = []
    for features_off in (True, False):
        run_dir, timed = timed_run(demo_slice_overrides(method, dataset, workdir, features_off))
        rows.append(summarise_slice_run(run_dir, timed, features_off))
    compare_slice_runs(*rows)
    return rows


def summarise_slice_run(run_dir: Path, timed: TimedBackend, features_off: bool) -> dict[str, Any]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    predictions = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line]
    usage = metrics["usage"]
    return {
        "setting": "features off (batch 1, sequential)" if features_off else "as `make demo` runs it",
        "episodes": len(metrics["structure"]) or None,
        "items": usage["items"],
        "questions": len(predictions),
        "wall_s": metrics["run"]["wall_s"],
        "llm_s": timed.seconds,
        "llm_calls": timed.calls,
        "llm_completion_tokens": timed.completion_tokens,
        "tokens_per_llm_s": timed.completion_tokens / timed.seconds if timed.seconds else None,
        "predictions": {row["question_id"]: row["prediction"] for row in predictions},
    }


def compare_slice_runs(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Adds the speed-up (before / after wall time) and the share of identical predictions to ``after``."""
    after["speedup"] = before["wall_s"] / after["wall_s"] if after["wall_s"] else None
    shared = before["predictions"].keys() & after["predictions"].keys()
    same = sum(before["predictions"][q] == after["predictions"][q] for q in shared)
    after["same_predictions"] = f"{same}/{len(shared)}"


# -- 4. retrieval vs memory size -------------------------------------------------------------------


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


def clustered_unit_vectors(
    n: int, n_clusters: int, dim: int = EMBED_DIM, spread: float = 1.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit vectors drawn around ``n_clusters`` random unit centres, and their cluster labels.

    Sentence embeddings are clustered, not uniform; with ``spread`` = 1 a
    note's cosine to its centre is ~0.7 and to other centres ~0.
    """
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((n_clusters, dim), dtype=np.float32))
    labels = rng.integers(n_clusters, size=n)
    noise = rng.standard_normal((n, dim), dtype=np.float32) * (spread / math.sqrt(dim))
    return unit_rows(centres[labels] + noise), labels


def timed_ms(search: Callable[[np.ndarray], Any], queries: np.ndarray, warmup: int = 3) -> dict[str, float]:
    """Median and mean ms of ``search`` per query (a few untimed calls first)."""
    for query in queries[:warmup]:
        search(query)
    times = []
    for query in queries:
        start = time.perf_counter()
        search(query)
        times.append((time.perf_counter() - start) * 1000)
    return {"median": statistics.median(times), "mean": statistics.fmean(times)}


def build_synthetic_memory(vectors: np.ndarray, labels: np.ndarray) -> tuple[Any, Any]:
    """CLAG's own search structures over synthetic notes: an ``AgenticCore`` (its
    flat ``VectorIndex``) and a ``ClusterSet`` (centroids = member means, as
    after a consolidation, and its per-cluster search matrices).

    Only the search primitives are used, which call no LLM and no embedder,
    so both are stand-ins (the core reads only the embedder's ``dim``).
    """
    from clag.memory.agentic import AgenticCore
    from clag.memory.clustering import Cluster, ClusterSet

    dim = vectors.shape[1]
    core = AgenticCore(llm=None, embedder=SimpleNamespace(dim=dim))  # type: ignore[arg-type]
    core.index.add([str(i) for i in range(len(vectors))], vectors)
    clusters = ClusterSet(core, llm=None)  # type: ignore[arg-type]
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        cid = f"cluster_{label}"
        clusters.clusters[cid] = Cluster(cid, members.tolist())
        clusters.centroids[cid] = vectors[members].mean(axis=0)
    clusters.reindex()
    return core, clusters


def retrieval_scaling(
    sizes: Sequence[int] = MEMORY_SIZES,
    queries: int = 50,
    k: int = 10,
    k_route: int = 3,
    dim: int = EMBED_DIM,
    seed: int = 0,
    faiss_threads: Sequence[int | None] = (None, 1),
) -> list[dict[str, Any]]:
    """Search latency at each memory size and FAISS thread count, without the SLM pick.

    ``None`` keeps FAISS's default (OpenMP: every core), which the harness
    runs with; on a contended CPU its threads wait for each other on every
    single-query search, so one thread is measured too.
    """
    import faiss

    default = faiss.omp_get_max_threads()
    rows = []
    try:
        for threads in faiss_threads:
            faiss.omp_set_num_threads(threads or default)
            for n in sizes:
                row = measure_size(n, queries, k, k_route, dim, seed)
                rows.append({"faiss_threads": f"{threads or default}{'' if threads else ' (default)'}", **row})
    finally:
        faiss.omp_set_num_threads(default)
    return rows


def measure_size(n: int, queries: int, k: int, k_route: int, dim: int, seed: int) -> dict[str, Any]:
    """Flat search against CLAG's two stages over ``n`` synthetic notes in ``sqrt(n)`` clusters.

    Stage 1 takes the ``k_route`` nearest centroids (CLAG's candidates; the
    pick would keep some or all of them, so searching all of them is the
    worst case). At 100k notes ``sqrt(n)`` gives ~316 clusters of ~316
    notes, close to what CLAG's split at ``tau_split`` = 300 keeps.
    """
    n_clusters = max(1, round(math.sqrt(n)))
    vectors, labels = clustered_unit_vectors(n, n_clusters, dim, seed=seed)
    core, clusters = build_synthetic_memory(vectors, labels)
    rng = np.random.default_rng(seed + 1)
    near = vectors[rng.integers(n, size=queries)]
    probes = unit_rows(near + rng.standard_normal(near.shape, dtype=np.float32) / math.sqrt(dim))

    def flat(query: np.ndarray) -> set[int]:
        return {int(key) for key, _ in core.index.search(query, k)}

    def stage1(query: np.ndarray) -> list[str]:
        return clusters.nearest(query, k_route)

    def two_stage(query: np.ndarray) -> set[int]:  # ClagMemory._search_clusters with merge=union
        return set(clusters.search(query, k, stage1(query)))

    def two_stage_subset(query: np.ndarray) -> set[int]:  # the same, as a FAISS subset search (before)
        return set(core.search(query, k, clusters.members_of(stage1(query))))

    times = {
        name: timed_ms(fn, probes)
        for name, fn in (
            ("flat", flat),
            ("stage1", stage1),
            ("two_stage", two_stage),
            ("subset", two_stage_subset),
        )
    }
    truths = [flat(query) for query in probes]
    return {
        "notes": n,
        "clusters": len(clusters),
        "searched_notes": statistics.fmean(len(clusters.members_of(stage1(q))) for q in probes),
        "flat_ms": times["flat"]["median"],
        "stage1_ms": times["stage1"]["median"],
        "two_stage_ms": times["two_stage"]["median"],
        "two_stage_subset_ms": times["subset"]["median"],
        "speedup": times["flat"]["median"] / times["two_stage"]["median"],
        "speedup_subset": times["flat"]["median"] / times["subset"]["median"],
        "recall_at_k": statistics.fmean(len(t & two_stage(q)) / k for t, q in zip(truths, probes)),
        "recall_at_k_subset": statistics.fmean(len(t & two_stage_subset(q)) / k for t, q in zip(truths, probes)),
        "mean_ms": {name: value["mean"] for name, value in times.items()},
        "queries": queries,
        "k": k,
        "k_route": k_route,
    }


# -- targets and reports ---------------------------------------------------------------------------


SEARCH_VARIANTS = (("speedup", "CLAG (per-cluster index)"), ("speedup_subset", "FAISS subset search (before)"))


def target_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of issue #8 with its measured value(s) and verdict.

    The search target gets one row per stage-2 structure and FAISS thread
    setting at 100k notes (``not measured`` when that size was not run).
    """
    measured: dict[str, list[tuple[str, float | None]]] = {key: [("", None)] for key in TARGETS}
    by_batch = {r["batch"]: r for r in results.get("llm", []) if r["backend"].startswith("transformers")}
    if 1 in by_batch and 8 in by_batch:
        measured["batch8_over_batch1"] = [("", by_batch[8]["tokens_per_s"] / by_batch[1]["tokens_per_s"])]
    largest = [r for r in results.get("retrieval", []) if r["notes"] >= 100_000]
    if largest:
        measured["two_stage_speedup_100k"] = [
            (f", {label}, FAISS threads {row['faiss_threads']}", row[key])
            for row in largest
            for key, label in SEARCH_VARIANTS
        ]
    runs = results.get("methods", [])
    wall = sum(r["wall_s"] for r in runs)
    if wall:
        measured["outside_llm_share"] = [("", sum(max(0.0, r["wall_s"] - r["llm_s"]) for r in runs) / wall)]
    clag = next((r for r in runs if r["method"] == "clag"), None)
    if clag:
        measured["clag_over_rag_e2e"] = [("", clag["e2e_ms_vs_rag"])]
    if "model_loads" in results:
        measured["model_loads"] = [("", float(results["model_loads"]))]
    return [
        target_row(target.name + suffix, target, value)
        for key, target in TARGETS.items()
        for suffix, value in measured[key]
    ]


def target_row(name: str, target: Target, value: float | None) -> dict[str, Any]:
    return {"target": name, "goal": target.describe(), "measured": value, "verdict": target.verdict(value)}


def format_value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if value == 0 or abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A Markdown table of ``rows`` with ``(key, header)`` columns."""
    lines = ["| " + " | ".join(header for _, header in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_value(row.get(key)) for key, _ in columns) + " |" for row in rows]
    return "\n".join(lines)


LLM_COLUMNS = (
    ("backend", "backend"),
    ("batch", "batch"),
    ("rounds", "rounds"),
    ("completion_tokens", "completion tokens"),
    ("seconds", "s (best)"),
    ("tokens_per_s", "tokens/s (best)"),
    ("median_tokens_per_s", "tokens/s (median)"),
    ("vs_batch1", "best / batch 1"),
    ("loadavg_1m", "load 1m"),
)
METHOD_COLUMNS = (
    ("method", "method"),
    ("items", "items"),
    ("ingest_s", "ingest s"),
    ("items_per_s", "items/s"),
    ("llm_calls_per_item", "LLM calls/item"),
    ("questions", "questions"),
    ("keywords_ms", "keywords ms"),
    ("pick_ms", "SLM pick ms"),
    ("retrieval_ms", "retrieval ms"),
    ("retrieval_ms_vs_rag", "retrieval / RAG"),
    ("answer_ms", "answer ms"),
    ("e2e_ms", "end-to-end ms"),
    ("e2e_ms_vs_rag", "end-to-end / RAG"),
    ("wall_s", "wall s"),
    ("llm_s", "in LLM s"),
    ("outside_llm_share", "outside LLM"),
    ("peak_rss_mb", "peak RSS MB"),
    ("loadavg_1m", "load 1m"),
)
RETRIEVAL_COLUMNS = (
    ("faiss_threads", "FAISS threads"),
    ("notes", "notes"),
    ("clusters", "clusters"),
    ("searched_notes", "notes in 3 nearest clusters"),
    ("flat_ms", "flat ms"),
    ("stage1_ms", "stage 1 ms"),
    ("two_stage_ms", "two-stage ms (CLAG)"),
    ("speedup", "flat / two-stage"),
    ("recall_at_k", "recall@10 vs flat"),
    ("two_stage_subset_ms", "two-stage ms (FAISS subset, before)"),
    ("speedup_subset", "flat / two-stage (FAISS subset, before)"),
    ("with_pick_ms", "two-stage + SLM pick ms"),
)
SLICE_COLUMNS = (
    ("setting", "setting"),
    ("episodes", "episodes"),
    ("items", "items"),
    ("questions", "questions"),
    ("llm_calls", "LLM calls"),
    ("llm_completion_tokens", "completion tokens"),
    ("tokens_per_llm_s", "tokens / s in LLM"),
    ("wall_s", "wall s"),
    ("speedup", "speed-up"),
    ("same_predictions", "same predictions"),
)
TARGET_COLUMNS = (("target", "target"), ("goal", "goal"), ("measured", "measured"), ("verdict", "verdict"))


def render_report(results: dict[str, Any]) -> str:
    """The Markdown report: machine, the tables, the targets, notes."""
    machine = results["machine"]
    scale = results["scale"]
    lines = [
        f"# Throughput benchmark ({scale['name']})",
        "",
        f"Measured on `{machine['host']}` ({machine['cpu']}, {machine['cores']} cores, {machine['platform']}) "
        f"on {machine['date']}; load average at start {', '.join(f'{v:.2f}' for v in machine['loadavg'])}, "
        f"at end {', '.join(f'{v:.2f}' for v in results['loadavg_end'])}; torch threads "
        f"{machine['torch_threads']}, FAISS threads {machine['faiss_threads']}; the benchmark took "
        f"{results['wall_s'] / 60:.1f} min. The machine is shared: "
        "numbers are noisy, ratios are the point.",
        "",
        "## Targets",
        "",
        markdown_table(results["targets"], TARGET_COLUMNS),
        "",
    ]
    if "methods" in results:
        lines += harness_report(results)
    if results.get("engines"):
        lines += render_engine_section(results["engines"], markdown_table)
    return "\n".join(lines)


def harness_report(results: dict[str, Any]) -> list[str]:
    """Report lines of sections 1-7."""
    scale = results["scale"]
    lines = [
        f"## 1. LLM tokens/s by batch size (up to {LLM_MAX_NEW_TOKENS} new tokens per prompt)",
        "",
        "One `generate` call with the first `batch` of 8 fixed story prompts, the backend called directly "
        "(no cache); completion tokens as generated. Each size is timed `rounds` times in alternating order "
        "and the best round is reported (another process on the 2 cores can stall a round several-fold).",
        "",
        markdown_table(results["llm"], LLM_COLUMNS),
        "",
        *[f"- {note}" for note in results["llm_notes"]],
        "",
        f"## 2-3, 5-6. Methods on LoCoMo {scale['episode']}, {scale['items']} turns, {scale['questions']} questions",
        "",
        "Cache off, one question per answer call, untimed warm-up (Table 2's protocol); CLAG's cold start "
        f"after {max(1, scale['items'] // 2)} notes (`buffer_size`), so that it clusters on this slice. Retrieval ms "
        "excludes the keyword call (as the authors time it) and includes CLAG's SLM pick; end-to-end = "
        "keywords + retrieval + answer. 'In LLM s' is the time inside `backend.generate` (timing proxy); "
        "peak RSS is the process's peak so far (ru_maxrss), model included.",
        "",
        markdown_table(results["methods"], METHOD_COLUMNS),
        "",
        f"Transformers models loaded in this process (the backend's registry of loaded weights): "
        f"{results['model_loads']}. Peak RSS after loading the model (section 1): "
        f"{format_value(results['rss_after_llm_mb'])} MB; of the whole benchmark: "
        f"{format_value(results['peak_rss_mb'])} MB.",
        "",
        "## 4. Retrieval latency vs memory size (synthetic notes, no SLM pick)",
        "",
        f"{EMBED_DIM}-d unit vectors around sqrt(n) random centres; centroids = member means; "
        "median over the queries, k = 10. Two-stage = CLAG's own primitives: `ClusterSet.nearest` "
        "(3 nearest centroids), then `ClusterSet.search` over those clusters' own matrices "
        "(`clag.cluster_index.ClusterIndex`); FAISS subset = the same stage 1, then a FAISS "
        "`IDSelectorBatch` search of the flat index restricted to their members (CLAG's stage 2 before "
        "the per-cluster index: the scan still visits every vector). "
        "'+ SLM pick' adds the mean pick call of the CLAG run above.",
        "",
        markdown_table(results["retrieval"], RETRIEVAL_COLUMNS),
        "",
    ]
    if results.get("before_after"):
        spec = results["before_after_spec"]
        lines += [
            f"## 7. One demo slice before and after: {spec['method']} on the {spec['dataset']} slice of `make demo`",
            "",
            "Cache off, the model already loaded. 'Features off' = "
            + ", ".join(f"`{o}`" for o in FEATURES_OFF)
            + " (every call one sequence, episodes one after another); the second run is the demo's own "
            "setting (batches of up to 8, the slice's episodes ingested side by side). Predictions may differ "
            "where a padded int8 or bf16 batch flips a near-tie greedy token (see docs/throughput.md).",
            "",
            markdown_table(results["before_after"], SLICE_COLUMNS),
            "",
        ]
    return lines


def csv_cell(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, dict | list) else value


def write_outputs(results: dict[str, Any], out_dir: Path) -> None:
    """``report.md``, one CSV per table and ``raw.json`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.md").write_text(render_report(results))
    engines = results.get("engines") or {}
    tables = {name: results.get(name) for name in ("llm", "methods", "retrieval", "before_after", "targets")}
    tables |= {"engine_streams": engines.get("streams"), "engine_demo": engines.get("demo")}
    for name, rows in tables.items():
        if not rows:
            continue
        keys = list(dict.fromkeys(key for row in rows for key in row))
        with (out_dir / f"{name}.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=keys)
            writer.writeheader()
            writer.writerows([{key: csv_cell(value) for key, value in row.items()} for row in rows])
    (out_dir / "raw.json").write_text(json.dumps(results, indent=2, default=str))


# -- entry point -----------------------------------------------------------------------------------


def _compose(overrides: list[str]) -> Any:
    from clag.config import compose_config

    return compose_config(overrides)


def run_llm_section(
    backends: Sequence[tuple[str, Sequence[str], str]], rounds: int, optional: bool
) -> tuple[list[dict[str, Any]], list[str]]:
    """Section 1 for the given ``(label, config overrides, module)`` backends.

    A backend whose module is absent is skipped; an ``optional`` backend that
    fails (an extra built wrongly, or code mid-change) is skipped with its
    error in the notes, so the default path's numbers are still written.
    """
    rows, notes = [], []
    for label, overrides, module in backends:
        if importlib.util.find_spec(module) is None:
            notes.append(f"{label}: skipped (`{module}` does not import; see the `llamacpp` extra).")
            continue
        try:
            measured, config, dtype = _backend_throughput(overrides, rounds)
        except Exception as err:  # noqa: BLE001 - only for optional backends, reported below
            if not optional:
                raise
            log.exception("%s failed", label)
            notes.append(f"{label}: skipped, it failed: {type(err).__name__}: {err}")
            continue
        rows += [{"backend": label, **row} for row in measured]
        notes.append(f"{label}: {f'dtype {dtype}, ' if dtype else ''}generation settings {json.dumps(config.key())}.")
    return rows, notes


def _backend_throughput(
    overrides: Sequence[str], rounds: int
) -> tuple[list[dict[str, Any]], GenerationConfig, str | None]:
    """:func:`llm_throughput` of one configured backend with its own generation settings, and its dtype."""
    from omegaconf import OmegaConf

    from clag.running.build import build_backend

    cfg = _compose(list(overrides))
    generation = OmegaConf.to_container(cfg.model.generation, resolve=True)
    config = GenerationConfig(**{**generation, "max_new_tokens": LLM_MAX_NEW_TOKENS})
    backend = build_backend(cfg.model)
    if getattr(backend, "batch_size", max(BATCH_SIZES)) < max(BATCH_SIZES):
        backend.batch_size = max(BATCH_SIZES)
    return llm_throughput(backend, config, rounds=rounds), config, backend.identity().get("dtype")


def run_benchmark(
    scale: Scale,
    methods: Sequence[str],
    sizes: Sequence[int],
    before_after: bool = True,
    sections: Sequence[str] = ("harness", "engines"),
) -> dict[str, Any]:
    start = time.perf_counter()
    results: dict[str, Any] = {"machine": machine_info(), "scale": asdict(scale)}
    with tempfile.TemporaryDirectory(prefix="clag-bench-") as workdir:
        if "harness" in sections:
            run_harness_sections(results, scale, methods, sizes, before_after, Path(workdir))
        parts = set(sections) & {"engine-demo", "engine-streams"}
        if "engines" in sections:
            parts |= {"engine-demo", "engine-streams"}
        if parts:  # last: its bf16 row loads a second model, which the harness must not count
            results["engines"] = run_engines(
                os.environ["CLAG_DATA_DIR"],
                Path(workdir) / "engines",
                demo="engine-demo" in parts,
                streams="engine-streams" in parts,
            )
    results["peak_rss_mb"] = peak_rss_mb()
    results["loadavg_end"] = list(os.getloadavg())
    results["wall_s"] = time.perf_counter() - start
    results["targets"] = target_rows(results)
    return results


def run_harness_sections(
    results: dict[str, Any],
    scale: Scale,
    methods: Sequence[str],
    sizes: Sequence[int],
    before_after: bool,
    workdir: Path,
) -> None:
    """Sections 1-7 into ``results``."""
    results["llm"], results["llm_notes"] = run_llm_section(BACKENDS[:1], scale.rounds, optional=False)
    results["rss_after_llm_mb"] = peak_rss_mb()
    results["methods"] = run_methods(methods, scale, workdir)
    if before_after:
        results["before_after_spec"] = dict(BEFORE_AFTER)
        results["before_after"] = run_before_after(**BEFORE_AFTER, workdir=workdir / "before_after")
    results["model_loads"] = model_loads()
    # after the runs, so that llama.cpp's weights do not count in their peak RSS
    more_rows, more_notes = run_llm_section(BACKENDS[1:], scale.rounds, optional=True)
    results["llm"] += more_rows
    results["llm_notes"] += more_notes
    results["retrieval"] = retrieval_scaling(sizes, queries=scale.queries)
    clag = next((r for r in results["methods"] if r["method"] == "clag"), None)
    for row in results["retrieval"]:
        row["with_pick_ms"] = row["two_stage_ms"] + clag["pick_ms"] if clag and clag["pick_ms"] else None


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="scale", action="store_const", const="quick", help="small slices (default)")
    mode.add_argument("--full", dest="scale", action="store_const", const="full", help="the demo slice, more queries")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--sizes", nargs="+", type=int, default=list(MEMORY_SIZES), help="synthetic memory sizes")
    parser.add_argument("--no-before-after", dest="before_after", action="store_false", help="skip section 7 (~10 min)")
    parser.add_argument(
        "--sections",
        nargs="+",
        default=["harness", "engines"],
        choices=["harness", "engines", "engine-streams", "engine-demo"],
        help="harness = sections 1-7 (transformers), engines = 8-9 (vLLM against transformers): "
        "engine-streams (8) and engine-demo (9) alone",
    )
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="reports go to OUT/<scale>/")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("WANDB_MODE", "disabled")):
        os.environ.setdefault(name, value)
    scale = SCALES[args.scale or "quick"]
    results = run_benchmark(scale, args.methods, args.sizes, args.before_after, args.sections)
    write_outputs(results, args.out / scale.name)
    log.info("report: %s", args.out / scale.name / "report.md")
    return results
