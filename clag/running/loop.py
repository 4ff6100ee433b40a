"""The run loop: claim the folder, load the slice, build once, run the episodes (side by side or not), finish.

A finished run returns at once; a killed run, started again, keeps every
finished row and snapshot and redoes only what is missing (see
:mod:`clag.running.episode` for why that gives the same predictions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf

from clag.answer import Answerer
from clag.data import DatasetError, load_slice
from clag.llm.base import GenerationConfig, LLMBackend
from clag.memory.base import MemorySystem
from clag.records.files import JsonlLog
from clag.running.build import build_backend, build_client, build_embedder, seed_everything
from clag.running.episode import answer_episode, prepare_memory
from clag.running.folder import RunFolder
from clag.running.provenance import server_counters
from clag.running.results import finish_run
from clag.running.spec import RunSpec
from clag.types import Episode

log = logging.getLogger(__name__)


def execute(spec: RunSpec, wrap_backend: Callable[[LLMBackend], LLMBackend] | None = None) -> Path:
    """Run (or resume, or skip) one run; returns its folder.

    Args:
        spec: The run.
        wrap_backend: Applied to the built backend (outside the coalescer)
            before any call; the benchmark times calls with it.

    Raises:
        RunFolderError: The folder holds another config's run, another live
            process holds it, or the disk refused a write (the message is one
            line; finished rows are kept).
        DatasetError: The slice asks no question.
    """
    folder = RunFolder(spec.run_dir)
    if folder.is_finished(spec.config_hash):
        log.info("finished run found at %s; nothing to do", folder.path)
        return folder.path
    with folder.hold():
        return _execute_held(spec, folder, wrap_backend)


def _execute_held(spec: RunSpec, folder: RunFolder, wrap_backend: Callable[[LLMBackend], LLMBackend] | None) -> Path:
    """:func:`execute`'s body, with the folder held by this process."""
    cfg = spec.cfg
    if folder.is_finished(spec.config_hash):  # finished by another process since the check above
        return folder.path
    wall_start = time.perf_counter()
    episodes = load_slice(cfg)
    if not any(episode.questions for episode in episodes):
        raise DatasetError(
            f"the slice asks nothing: {len(episodes)} episode(s), 0 questions (limit: "
            f"{OmegaConf.to_container(cfg.limit, resolve=True)}); a run needs at least one question"
        )
    folder.claim(spec, on_mismatch=str(cfg.runner.get("on_config_mismatch", "refuse")))
    seed_everything(int(cfg.seed))

    workers = max(1, min(int(cfg.runner.concurrent_episodes), len(episodes)))
    backend = build_backend(cfg.model, concurrent=workers > 1, coalesce_wait_s=float(cfg.runner.coalesce_wait_s))
    if wrap_backend is not None:
        backend = wrap_backend(backend)
    embedder = build_embedder(cfg.embedder)
    if cfg.runner.warmup:
        # Loads the weights and compiles kernels outside every timed question.
        backend.generate(["Hello"], GenerationConfig(max_new_tokens=2))
        embedder.encode(["warm-up"])
    counters_at_start = server_counters(backend)  # after the warm-up: the run's own work only
    predictions = JsonlLog(folder.predictions, "question_id", spec.config_hash)
    episode_log = JsonlLog(folder.episodes, "episode_id", spec.config_hash)
    structure = {episode_id: record.get("structure", {}) for episode_id, record in episode_log.rows.items()}
    lock = threading.Lock()

    def run_episode(episode: Episode) -> None:
        if all(predictions.done(q.id) for q in episode.questions):
            return
        llm = build_client(backend, cfg.model, cfg.cache)
        system: MemorySystem = instantiate(cfg.method.system, llm=llm, embedder=embedder)
        record = prepare_memory(system, episode, cfg, folder.path, llm, spec.config_hash)
        if record is not None:
            episode_log.write([record])
        with lock:
            structure[episode.id] = system.describe()
        answerer = Answerer(
            llm,
            seed=int(cfg.seed),
            adversarial_temperature=cfg.answer.adversarial_temperature,
            json_instruction=bool(cfg.answer.json_instruction),
        )
        answer_episode(system, episode, answerer, llm, predictions, cfg)

    if workers == 1:
        for episode in episodes:
            run_episode(episode)
    else:
        # Episodes are independent streams; their LLM calls meet in shared batches (the coalescer's or a server's).
        def scoped(episode: Episode) -> None:
            client = getattr(backend, "client", None)
            with client() if client is not None else nullcontext():
                run_episode(episode)

        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            list(pool.map(scoped, episodes))
        except BaseException:  # an interrupt stops the run now, not after every episode in flight ends
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        if batches := getattr(backend, "batches", 0):  # the coalescer's (or a wrapper's) counters
            log.info(
                "%d LLM requests of %d concurrent episodes went out in %d batches",
                backend.merged_requests,
                workers,
                batches,
            )

    rows = [predictions.rows[q.id] for ep in episodes for q in ep.questions if q.id in predictions.rows]
    finish_run(spec, folder, rows, episodes, episode_log.rows, structure, backend, wall_start, counters_at_start)
    return folder.path
