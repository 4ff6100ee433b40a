"""The run loop behind ``clag.run``: ingest, retrieve, answer, score, resume.

Kept apart from the Hydra entry point so tests, notebooks and sweeps call
the same code. Determinism is what makes resuming safe: questions are
answered in fixed chunks of an episode (the same batches on every run),
greedy decoding is the default, and every LLM call goes through the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import random
import resource
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from clag.answer import Answerer
from clag.data import episode_fingerprint, load_episodes
from clag.embed import Embedder
from clag.llm.base import GenerationConfig, LLMBackend
from clag.llm.cache import CallCache
from clag.llm.client import LLMClient, UsageMeter
from clag.llm.coalesce import CoalescingBackend
from clag.memory.base import MemorySystem
from clag.metrics import MetricSettings, aggregate_rows, score_rows
from clag.types import Episode, Question

log = logging.getLogger(__name__)

INGEST_CHUNK = 16
# Keys that do not change what a run computes, left out of the run's hash.
_UNHASHED = (
    "paths",
    "logger",
    "run_dir",
    "runner.progress",
    "runner.reuse_memory_from",
    "runner.warmup",
    "cache",
    "hydra",
)


@dataclass
class RunSpec:
    """A resolved config plus the folder it writes to."""

    cfg: DictConfig
    run_dir: Path
    config_hash: str

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RunSpec:
        container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
        config_hash = _hash_config(container)
        if cfg.get("run_dir"):
            run_dir = Path(cfg.run_dir)
        else:
            model = cfg.model.name
            run_dir = (
                Path(cfg.paths.runs_dir)
                / cfg.exp
                / cfg.dataset.name
                / cfg.method.name
                / model
                / f"seed{cfg.seed}-{config_hash[:8]}"
            )
        return cls(cfg=cfg, run_dir=run_dir, config_hash=config_hash)


def _hash_config(container: dict[str, Any]) -> str:
    trimmed = json.loads(json.dumps(container, default=str))
    for dotted in _UNHASHED:
        node = trimmed
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True).encode()).hexdigest()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # torch is a dependency; guard only for exotic installs
        pass


_EMBEDDERS: dict[str, Embedder] = {}


def build_embedder(cfg: DictConfig) -> Embedder:
    """One embedder per process and setting, shared by methods and sweeps."""
    key = json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True)
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = instantiate(cfg)
    return _EMBEDDERS[key]


def build_backend(model_cfg: DictConfig, concurrent: bool = False, coalesce_wait_s: float = 1.0) -> LLMBackend:
    """The configured backend (weights are loaded once per process by the backend
    itself), behind a :class:`CoalescingBackend` when episodes run concurrently."""
    backend = instantiate(model_cfg.backend)
    return CoalescingBackend(backend, max_wait_s=coalesce_wait_s) if concurrent else backend


def build_client(backend: LLMBackend, model_cfg: DictConfig, cache_cfg: DictConfig) -> LLMClient:
    """A client (own usage meter) over a shared backend and cache."""
    cache = CallCache(cache_cfg.path) if cache_cfg.enabled else None
    generation = GenerationConfig(**OmegaConf.to_container(model_cfg.generation, resolve=True))
    stage_settings = (
        OmegaConf.to_container(model_cfg.stage_settings, resolve=True) if "stage_settings" in model_cfg else {}
    )
    return LLMClient(
        backend, cache, generation, stage_settings, constrained_json=bool(model_cfg.get("constrained_json", True))
    )


class PredictionLog:
    """Append-only ``predictions.jsonl`` that survives a kill.

    A run killed mid-write leaves at most one partial last line; it is cut
    off on open, and every complete row counts as done.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # concurrent episodes append from several threads
        if path.exists():
            good = 0
            with path.open("rb") as handle:
                for line in handle:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        break
                    self.rows[row["question_id"]] = row
                    good += len(line)
            with path.open("r+b") as handle:
                handle.truncate(good)

    def done(self, question_id: str) -> bool:
        return question_id in self.rows

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                self.rows[row["question_id"]] = row
            handle.flush()
            os.fsync(handle.fileno())


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    tmp.replace(path)


def execute(spec: RunSpec) -> Path:
    """Run (or resume, or skip) one run; returns its folder."""
    cfg, run_dir = spec.cfg, spec.run_dir
    metrics_path = run_dir / "metrics.json"
    if metrics_path.exists() and json.loads(metrics_path.read_text()).get("run", {}).get("config_hash") == (
        spec.config_hash
    ):
        log.info("finished run found at %s; nothing to do", run_dir)
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    seed_everything(int(cfg.seed))
    wall_start = time.perf_counter()

    episodes = load_episodes(
        cfg.dataset.name,
        cfg.paths.data_dir,
        variant=cfg.dataset.get("variant"),
        episodes=cfg.limit.episodes,
        items=cfg.limit["items"],
        questions=cfg.limit.questions,
        categories=cfg.limit.categories,
        episode_ids=cfg.limit.episode_ids,
    )
    workers = max(1, min(int(cfg.runner.concurrent_episodes), len(episodes)))
    backend = build_backend(cfg.model, concurrent=workers > 1, coalesce_wait_s=float(cfg.runner.coalesce_wait_s))
    embedder = build_embedder(cfg.embedder)
    if cfg.runner.warmup:
        # Loads the weights and compiles kernels outside every timed question.
        backend.generate(["Hello"], GenerationConfig(max_new_tokens=2))
        embedder.encode(["warm-up"])
    predictions = PredictionLog(run_dir / "predictions.jsonl")
    episode_log = _read_jsonl(run_dir / "episodes.jsonl")
    structure = {episode_id: record.get("structure", {}) for episode_id, record in episode_log.items()}
    lock = threading.Lock()

    def run_episode(episode: Episode) -> None:
        if all(predictions.done(q.id) for q in episode.questions):
            return
        llm = build_client(backend, cfg.model, cfg.cache)
        system: MemorySystem = instantiate(cfg.method.system, llm=llm, embedder=embedder)
        record = _prepare_memory(system, episode, cfg, run_dir, llm)
        with lock:
            if record is not None:
                episode_log[episode.id] = record
                _append_jsonl(run_dir / "episodes.jsonl", record)
            structure[episode.id] = system.describe()
        answerer = Answerer(llm, seed=int(cfg.seed), adversarial_temperature=cfg.answer.adversarial_temperature)
        _answer_episode(system, episode, answerer, llm, predictions, cfg)

    if workers == 1:
        for episode in episodes:
            run_episode(episode)
    else:
        # Episodes are independent streams; their LLM calls meet in shared batches.
        def scoped(episode: Episode) -> None:
            with backend.client():
                run_episode(episode)

        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(scoped, episodes))
        if batches := getattr(backend, "batches", 0):  # the coalescer's (or a wrapper's) counters
            log.info(
                "%d LLM requests of %d concurrent episodes went out in %d batches",
                backend.merged_requests,
                workers,
                batches,
            )

    rows = [predictions.rows[q.id] for ep in episodes for q in ep.questions if q.id in predictions.rows]
    settings = MetricSettings(
        bert_model=cfg.metrics.bert_model,
        adversarial_mode=cfg.metrics.adversarial_mode,
        bootstrap_samples=int(cfg.metrics.bootstrap_samples),
        seed=int(cfg.seed),
    )
    scored = score_rows(rows, settings)
    tmp = run_dir / "predictions.jsonl.tmp"
    tmp.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in scored))
    tmp.replace(run_dir / "predictions.jsonl")
    metrics = aggregate_rows(scored, settings)
    metrics["usage"] = _usage_summary(episodes, episode_log, scored)
    metrics["structure"] = {episode.id: structure[episode.id] for episode in episodes if episode.id in structure}
    metrics["run"] = _provenance(spec, backend, episodes, time.perf_counter() - wall_start)
    _write_json(metrics_path, metrics)
    _log_to_tracker(cfg, run_dir, metrics, scored)
    return run_dir


def ingestion_key(cfg: DictConfig) -> str:
    """Hash of everything that shapes an ingested memory, and nothing else.

    A method class lists its retrieval-only parameters in ``retrieval_params``
    (e.g. CLAG's ``retrieval``, everyone's ``retrieve_k``); runs that differ
    only in those, or in the question slice, share one memory snapshot, so
    retrieval-only variants (Table 7's global retrieval) never re-ingest.
    """
    system_cfg = OmegaConf.to_container(cfg.method.system, resolve=True)
    method_class = get_class(system_cfg["_target_"])
    retrieval_only = getattr(method_class, "retrieval_params", frozenset())
    payload = {
        "method": {k: v for k, v in system_cfg.items() if k not in retrieval_only},
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "embedder": OmegaConf.to_container(cfg.embedder, resolve=True),
        "seed": int(cfg.seed),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _snapshot_key(cfg: DictConfig, episode: Episode) -> str:
    items = json.dumps([asdict(item) for item in episode.items], ensure_ascii=False)
    return hashlib.sha256(f"{ingestion_key(cfg)}:{episode.id}:{items}".encode()).hexdigest()


def _prepare_memory(
    system: MemorySystem, episode: Episode, cfg: DictConfig, run_dir: Path, llm: LLMClient
) -> dict[str, Any] | None:
    """Load a matching memory snapshot if one exists, else ingest and save one.

    Looked up in order: this run's folder (a resumed run), the folder named by
    ``runner.reuse_memory_from``, and the snapshot index under the runs
    folder (any earlier run with the same ingestion key and items). Returns
    the ingestion record when ingestion ran now, else ``None``.
    """
    key = _snapshot_key(cfg, episode)
    index_entry = Path(cfg.paths.runs_dir) / "memory_index" / key
    sources = [run_dir / "memory" / episode.id]
    if cfg.runner.reuse_memory_from:
        explicit = Path(cfg.runner.reuse_memory_from) / "memory" / episode.id
        if (explicit / "COMPLETE").exists() and (explicit / "COMPLETE").read_text().strip() != key:
            raise RuntimeError(
                f"memory snapshot {explicit} was ingested with other data or ingestion settings; "
                "only retrieval-only parameters may differ"
            )
        sources.append(explicit)
    if index_entry.exists():
        sources.append(Path(index_entry.read_text().strip()))
    for source in sources:
        marker = source / "COMPLETE"
        if marker.exists() and marker.read_text().strip() == key:
            system.load(source)
            log.info("episode %s: memory loaded from %s (no ingestion calls)", episode.id, source)
            return None

    system.reset()
    before = llm.usage.snapshot()
    start = time.perf_counter()
    items = episode.items
    with tqdm(total=len(items), desc=f"ingest {episode.id}", disable=not cfg.runner.progress, leave=False) as bar:
        for offset in range(0, len(items), INGEST_CHUNK):
            chunk = items[offset : offset + INGEST_CHUNK]
            system.add_many(chunk)
            bar.update(len(chunk))
    system.finish_ingestion()
    seconds = time.perf_counter() - start
    usage = UsageMeter.diff(llm.usage.snapshot(), before)
    if cfg.runner.save_memory:
        target = run_dir / "memory" / episode.id
        system.save(target)
        (target / "COMPLETE").write_text(key)
        index_entry.parent.mkdir(parents=True, exist_ok=True)
        index_entry.write_text(str(target.resolve()))
    calls = sum(stage["calls"] for stage in usage.values())
    return {
        "episode_id": episode.id,
        "items": len(items),
        "ingest_s": seconds,
        "items_per_s": len(items) / seconds if seconds else None,
        "llm_calls": calls,
        "llm_calls_per_item": calls / len(items) if items else 0.0,
        "usage": usage,
        "structure": system.describe(),
    }


def _answer_episode(
    system: MemorySystem,
    episode: Episode,
    answerer: Answerer,
    llm: LLMClient,
    predictions: PredictionLog,
    cfg: DictConfig,
) -> None:
    """Retrieve and answer the episode's questions in fixed chunks.

    Chunks are cut from the episode's full question list, not from the
    pending ones, so a resumed run forms exactly the same answer batches.
    """
    size = max(1, int(cfg.runner.answer_batch_size))
    questions = episode.questions
    bar = tqdm(total=len(questions), desc=f"answer {episode.id}", disable=not cfg.runner.progress, leave=False)
    for offset in range(0, len(questions), size):
        chunk = questions[offset : offset + size]
        bar.update(len(chunk))
        if all(predictions.done(q.id) for q in chunk):
            continue
        contexts, retrieval = [], []
        for question in chunk:
            before = llm.usage.snapshot()
            start = time.perf_counter()
            context = system.retrieve(question)
            total_ms = (time.perf_counter() - start) * 1000
            contexts.append(context)
            retrieval.append((total_ms, UsageMeter.diff(llm.usage.snapshot(), before)))
        before = llm.usage.snapshot()
        start = time.perf_counter()
        answers = answerer.answer(chunk, [c.text for c in contexts])
        answer_ms = (time.perf_counter() - start) * 1000 / len(chunk)
        answer_usage = UsageMeter.diff(llm.usage.snapshot(), before)
        predictions.write(
            [
                _row(episode, q, c, a, total_ms, usage, answer_ms, answer_usage, len(chunk))
                for q, c, a, (total_ms, usage) in zip(chunk, contexts, answers, retrieval)
            ]
        )
    bar.close()


def _row(
    episode: Episode,
    question: Question,
    context,
    prediction: str,
    retrieve_total_ms: float,
    usage: dict[str, dict[str, int]],
    answer_ms: float,
    answer_usage: dict[str, dict[str, int]],
    chunk_size: int,
) -> dict[str, Any]:
    """One predictions.jsonl row.

    ``retrieval_ms`` excludes the keyword LLM call (as the authors time it);
    ``e2e_ms`` is keywords + retrieval + this question's share of its answer
    batch (exact with ``runner.answer_batch_size=1``). Answer tokens are the
    batch's, split evenly.
    """
    keywords_ms = context.timings_ms.get("keywords", 0.0)
    prompt_tokens = sum(s["prompt_tokens"] for s in usage.values())
    completion_tokens = sum(s["completion_tokens"] for s in usage.values())
    for stage in answer_usage.values():
        prompt_tokens += stage["prompt_tokens"] / chunk_size
        completion_tokens += stage["completion_tokens"] / chunk_size
    return {
        "question_id": question.id,
        "episode_id": episode.id,
        "question": question.text,
        "reference": question.reference,
        "answer": question.answer,
        "adversarial_answer": question.adversarial_answer,
        "category": question.category,
        "prediction": prediction,
        "retrieved_ids": context.source_ids,
        "evidence_ids": list(question.evidence_ids),
        "context_chars": len(context.text),
        "retrieval_ms": retrieve_total_ms - keywords_ms,
        "e2e_ms": retrieve_total_ms + answer_ms,
        "timings_ms": {**context.timings_ms, "answer": answer_ms},
        "usage": usage,
        "llm_calls": sum(s["calls"] for s in usage.values())
        + sum(s["calls"] for s in answer_usage.values()) / chunk_size,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "telemetry": context.telemetry,
    }


def _usage_summary(episodes: list[Episode], episode_log: dict[str, Any], rows: list[dict[str, Any]]) -> dict:
    """LLM calls and tokens per stage, for ingestion and for questions."""
    ingestion: dict[str, dict[str, int]] = {}
    items = 0
    for episode in episodes:
        record = episode_log.get(episode.id)
        if not record:
            continue
        items += record["items"]
        for stage, counts in record["usage"].items():
            row = ingestion.setdefault(stage, {})
            for key, value in counts.items():
                row[key] = row.get(key, 0) + value
    questions: dict[str, dict[str, float]] = {}
    for row in rows:
        for stage, counts in row.get("usage", {}).items():
            target = questions.setdefault(stage, {})
            for key, value in counts.items():
                target[key] = target.get(key, 0) + value
    ingest_calls = sum(s.get("calls", 0) for s in ingestion.values())
    return {
        "ingestion": ingestion,
        "questions": questions,
        "items": items,
        "llm_calls_per_item": ingest_calls / items if items else 0.0,
        "llm_calls_per_question": float(np.mean([r["llm_calls"] for r in rows])) if rows else 0.0,
        "ingest_s": sum(r.get("ingest_s", 0.0) for r in episode_log.values()),
    }


def _package_versions() -> dict[str, str]:
    names = [
        "torch",
        "transformers",
        "sentence-transformers",
        "faiss-cpu",
        "scikit-learn",
        "nltk",
        "bert-score",
        "hydra-core",
    ]
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def _git_hash() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _provenance(spec: RunSpec, backend: LLMBackend, episodes: list[Episode], wall_s: float) -> dict[str, Any]:
    cfg = spec.cfg
    return {
        "config_hash": spec.config_hash,
        "exp": cfg.exp,
        "method": cfg.method.name,
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "model_identity": backend.identity(),
        "generation": OmegaConf.to_container(cfg.model.generation, resolve=True),
        "concurrent_episodes": int(cfg.runner.concurrent_episodes),
        "seed": int(cfg.seed),
        "slice": OmegaConf.to_container(cfg.limit, resolve=True),
        "episodes": len(episodes),
        "questions": sum(len(e.questions) for e in episodes),
        "items": sum(len(e.items) for e in episodes),
        "input_hash": hashlib.sha256("".join(episode_fingerprint(e) for e in episodes).encode()).hexdigest(),
        "git": _git_hash(),
        "versions": _package_versions(),
        "python": platform.python_version(),
        "wall_s": wall_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _read_jsonl(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[row["episode_id"]] = row
    return out


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _log_to_tracker(cfg: DictConfig, run_dir: Path, metrics: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    if not cfg.logger.get("enabled"):
        return
    from clag.tracking import log_run

    log_run(cfg, run_dir, metrics, rows)
