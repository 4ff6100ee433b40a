"""One episode's work: ingest its items (or load its snapshot), then answer its questions into the log.

Determinism is what makes resuming safe: items are added in fixed chunks,
and questions are answered in fixed chunks of the episode's full question
list (not of the pending ones), so a resumed run forms the same batches and
takes every LLM call it already made from the cache.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from omegaconf import DictConfig
from tqdm import tqdm

from clag.answer import Answerer, Reply
from clag.llm.client import LLMClient, UsageMeter
from clag.memory.base import MemorySystem
from clag.records.files import JsonlLog
from clag.records.schema import EpisodeRecord, PredictionRow, StageUsage
from clag.running.folder import RunFolder
from clag.running.snapshots import find_snapshot, save_snapshot
from clag.types import Context, Episode, Question

log = logging.getLogger(__name__)

INGEST_CHUNK = 16


def note_progress(path: Path, episode_id: str, items: int, of: int, config_hash: str) -> None:
    """Append one line to the run folder's ``ingest_progress.jsonl``: ``items`` of ``of`` ingested so far.

    Concurrent episodes append from their own threads; a line this short is
    written by one ``write`` call in append mode, so lines never interleave.
    """
    line = {"episode_id": episode_id, "items": items, "of": of, "config_hash": config_hash, "at": time.time()}
    with path.open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def prepare_memory(
    system: MemorySystem, episode: Episode, cfg: DictConfig, run_dir: Path, llm: LLMClient, config_hash: str
) -> EpisodeRecord | None:
    """Load a matching memory snapshot if one exists, else ingest (and save one), noting progress per chunk
    in ``run_dir``'s ``ingest_progress.jsonl`` (``clag.running.status`` reads it).

    Returns:
        The ingestion record when ingestion ran now, else None.
    """
    source = find_snapshot(cfg, episode, run_dir)
    if source is not None:
        system.load(source)
        log.info("episode %s: memory loaded from %s (no ingestion calls)", episode.id, source)
        return None
    system.reset()
    before = llm.usage.snapshot()
    start = time.perf_counter()
    items = episode.items
    progress = RunFolder(run_dir).progress
    with tqdm(total=len(items), desc=f"ingest {episode.id}", disable=not cfg.runner.progress, leave=False) as bar:
        for offset in range(0, len(items), INGEST_CHUNK):
            chunk = items[offset : offset + INGEST_CHUNK]
            system.add_many(chunk)
            bar.update(len(chunk))
            note_progress(progress, episode.id, offset + len(chunk), len(items), config_hash)
            if not cfg.runner.progress:  # a background run's log says how far each episode got
                log.info("episode %s: %d/%d items ingested", episode.id, offset + len(chunk), len(items))
    system.finish_ingestion()
    seconds = time.perf_counter() - start
    usage = UsageMeter.diff(llm.usage.snapshot(), before)
    if cfg.runner.save_memory:
        save_snapshot(system, cfg, episode, run_dir)
    calls = sum(stage["calls"] for stage in usage.values())
    return EpisodeRecord(
        episode_id=episode.id,
        config_hash=config_hash,
        items=len(items),
        ingest_s=seconds,
        items_per_s=len(items) / seconds if seconds else None,
        llm_calls=calls,
        llm_calls_per_item=calls / len(items) if items else 0.0,
        usage=usage,
        structure=system.describe(),
    )


def answer_episode(
    system: MemorySystem,
    episode: Episode,
    answerer: Answerer,
    llm: LLMClient,
    predictions: JsonlLog,
    cfg: DictConfig,
) -> None:
    """Retrieve and answer the episode's pending questions in fixed chunks, appending rows as each chunk ends."""
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
        replies = answerer.answer(chunk, [c.text for c in contexts], [c.answer_prompt for c in contexts])
        answer_ms = (time.perf_counter() - start) * 1000 / len(chunk)
        answer_usage = UsageMeter.diff(llm.usage.snapshot(), before)
        predictions.write(
            [
                prediction_row(
                    episode, q, c, a, total_ms, usage, answer_ms, answer_usage, len(chunk), predictions.config_hash
                )
                for q, c, a, (total_ms, usage) in zip(chunk, contexts, replies, retrieval)
            ]
        )
    bar.close()


def prediction_row(
    episode: Episode,
    question: Question,
    context: Context,
    reply: Reply,
    retrieve_total_ms: float,
    usage: dict[str, StageUsage],
    answer_ms: float,
    answer_usage: dict[str, StageUsage],
    chunk_size: int,
    config_hash: str,
) -> PredictionRow:
    """One ``predictions.jsonl`` row (see :class:`clag.records.schema.PredictionRow` for what each key means)."""
    keywords_ms = context.timings_ms.get("keywords", 0.0)
    prompt_tokens: float = sum(s["prompt_tokens"] for s in usage.values())
    completion_tokens: float = sum(s["completion_tokens"] for s in usage.values())
    for stage in answer_usage.values():
        prompt_tokens += stage["prompt_tokens"] / chunk_size
        completion_tokens += stage["completion_tokens"] / chunk_size
    return PredictionRow(
        question_id=question.id,
        episode_id=episode.id,
        config_hash=config_hash,
        question=question.text,
        reference=question.reference,
        answer=question.answer,
        adversarial_answer=question.adversarial_answer,
        category=question.category,
        prediction=reply.text,
        answer_parsed=reply.parsed,
        retrieved_ids=context.source_ids,
        evidence_ids=list(question.evidence_ids),
        context_chars=len(context.text),
        retrieval_ms=retrieve_total_ms - keywords_ms,
        e2e_ms=retrieve_total_ms + answer_ms,
        timings_ms={**context.timings_ms, "answer": answer_ms},
        usage=usage,
        llm_calls=sum(s["calls"] for s in usage.values()) + sum(s["calls"] for s in answer_usage.values()) / chunk_size,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        telemetry=context.telemetry,
    )
