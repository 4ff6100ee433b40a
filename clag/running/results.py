"""The end of a run: score the rows, aggregate ``metrics.json``, write both, log to the tracker.

:func:`finish_run` is the one place a run's metrics are put together: every
part of ``metrics.json`` (answer and evidence metrics, usage, structure,
provenance) is added in :func:`build_metrics`, and ``metrics.json`` is
written last, atomically, since its presence is what marks a run finished.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from clag.llm.base import LLMBackend
from clag.metrics import MetricSettings, aggregate_rows, score_rows
from clag.metrics.judge import JudgeSettings, judge_rows
from clag.records.files import rewrite_jsonl, write_json
from clag.records.schema import SCHEMA_VERSION, EpisodeRecord, JudgeSection, Metrics, RunInfo, ScoredRow, Usage
from clag.running.build import judge_client
from clag.running.folder import RunFolder
from clag.running.provenance import provenance
from clag.running.spec import RunSpec
from clag.types import Episode


def metric_settings(cfg: DictConfig) -> MetricSettings:
    """The scoring settings of a run (``metrics.*``, seeded by the run's seed)."""
    return MetricSettings(
        bert_model=cfg.metrics.bert_model,
        adversarial_mode=cfg.metrics.adversarial_mode,
        bootstrap_samples=int(cfg.metrics.bootstrap_samples),
        seed=int(cfg.seed),
    )


def usage_summary(episodes: list[Episode], episode_log: dict[str, EpisodeRecord], rows: list[ScoredRow]) -> Usage:
    """LLM calls and tokens per stage, for ingestion and for questions."""
    ingestion: dict[str, dict[str, int]] = {}
    items = 0
    for episode in episodes:
        record = episode_log.get(episode.id)
        if not record:
            continue
        items += record["items"]
        for stage, counts in record["usage"].items():
            target = ingestion.setdefault(stage, {})
            for key, value in counts.items():
                target[key] = target.get(key, 0) + value
    questions: dict[str, dict[str, float]] = {}
    for row in rows:
        for stage, counts in row.get("usage", {}).items():
            totals = questions.setdefault(stage, {})
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
    ingest_calls = sum(s.get("calls", 0) for s in ingestion.values())
    return Usage(
        ingestion=ingestion,
        questions=questions,
        items=items,
        llm_calls_per_item=ingest_calls / items if items else 0.0,
        llm_calls_per_question=float(np.mean([r["llm_calls"] for r in rows])) if rows else 0.0,
        ingest_s=sum(r.get("ingest_s", 0.0) for r in episode_log.values()),
    )


def build_metrics(
    scored: list[ScoredRow],
    settings: MetricSettings,
    episodes: list[Episode],
    episode_log: dict[str, EpisodeRecord],
    structure: dict[str, dict[str, Any]],
    run: RunInfo,
    dataset: str | None = None,
) -> Metrics:
    """Every part of ``metrics.json``, in one place (``dataset`` selects LoCoMo's category-set means)."""
    return Metrics(
        schema_version=SCHEMA_VERSION,
        **aggregate_rows(scored, settings, dataset),  # type: ignore[typeddict-item]
        usage=usage_summary(episodes, episode_log, scored),
        structure={episode.id: structure[episode.id] for episode in episodes if episode.id in structure},
        run=run,
    )


def finish_run(
    spec: RunSpec,
    folder: RunFolder,
    rows: list[dict[str, Any]],
    episodes: list[Episode],
    episode_log: dict[str, EpisodeRecord],
    structure: dict[str, dict[str, Any]],
    backend: LLMBackend,
    wall_start: float,
    counters_at_start: dict[str, float],
) -> Metrics:
    """Score ``rows``, replace the streamed predictions by the scored ones, write ``metrics.json``, track.

    ``wall_start`` is the run's ``time.perf_counter()`` at its start: the
    recorded wall time includes scoring; ``counters_at_start`` the served
    engine's counters then (:func:`clag.running.provenance.server_counters`).
    """
    cfg = spec.cfg
    settings = metric_settings(cfg)
    scored: list[ScoredRow] = score_rows(rows, settings)  # type: ignore[assignment]
    scored, judge = judge_at_end(cfg, scored, backend)  # type: ignore[assignment]
    rewrite_jsonl(folder.predictions, scored)
    run = provenance(spec, backend, episodes, time.perf_counter() - wall_start, counters_at_start)
    metrics = build_metrics(scored, settings, episodes, episode_log, structure, run, str(cfg.dataset.name))
    if judge is not None:
        metrics["judge"] = judge
    write_json(folder.metrics, metrics)
    if cfg.logger.get("enabled"):
        from clag.tracking import log_run

        log_run(cfg, folder.path, metrics, scored)
    return metrics


def judge_at_end(
    cfg: DictConfig, scored: list[ScoredRow], backend: LLMBackend | None = None
) -> tuple[list[dict[str, Any]], JudgeSection | None]:
    """Judge a run's scored rows when ``metrics.judge.enabled`` (:mod:`clag.metrics.judge`).

    Returns the (judged) rows and the ``judge`` section of ``metrics.json``,
    or the rows unchanged and None when the judge is off. ``backend`` is the
    run's own, reused when the judge is the run's model.
    """
    run_cfg: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    settings = JudgeSettings.from_config((run_cfg.get("metrics") or {}).get("judge"))
    if not settings.enabled:
        return [dict(row) for row in scored], None
    llm, name = judge_client(settings, run_cfg, backend)
    return judge_rows(scored, llm, settings, str(run_cfg["dataset"]["name"]), name)
