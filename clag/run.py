"""Hydra entry point: one method x dataset x model run into a run folder.

    python -m clag.run method=clag dataset=locomo limit.episodes=1 limit.questions=20 run_dir=DIR
    python -m clag.run -m experiment=table10          # a sweep, one job per setting

The run folder holds the resolved ``config.yaml``, ``predictions.jsonl``
(streamed, one row per question), ``episodes.jsonl`` (ingestion usage and
structure per episode), a memory snapshot per episode and ``metrics.json``.
A finished run returns at once; a killed run resumes: finished questions
are kept, memory snapshots are reloaded, and every LLM call already made
comes from the cache, so the predictions equal an uninterrupted run's.

Bad input never ends in a traceback: a wrong config value, missing data, a
damaged cache file, a model file that is not there, a server that is down
or a refused run folder is reported in one line naming what is wrong and
what to do, with exit code 2; an interrupted run (Ctrl-C, or SIGTERM from a
scheduler) says how many questions it kept and exits with 130 / 143. In
every case what was finished stays: predictions are appended and synced one
answer batch at a time, memory snapshots count only once marked complete,
and the LLM cache commits each batch. ``hydra.verbose=clag.run`` logs the
traceback as well.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig

from clag.config import CONFIG_DIR, VERSION_BASE, compose_config
from clag.config_schema import ConfigError, validate_config
from clag.data import DatasetError
from clag.llm.cache import CacheError, CallNotCached
from clag.llm.openai_backend import ServerError
from clag.records.files import RunFolderError
from clag.running.loop import execute
from clag.running.spec import RunSpec

log = logging.getLogger("clag.run")

# Errors whose message is the whole story for the user (each says what is wrong and what to do).
USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    DatasetError,
    CacheError,
    CallNotCached,
    ServerError,
    RunFolderError,
    FileNotFoundError,
)
EXIT_BAD_INPUT = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's preemption or time limit), raised where the run is, like Ctrl-C."""


def run_config(cfg: DictConfig) -> Path:
    """Check one composed config against the schemas, then run it; returns the run folder."""
    validate_config(cfg)
    return execute(RunSpec.from_config(cfg))


def run_with_overrides(overrides: list[str]) -> Path:
    """Python API used by tests and notebooks: compose the config and run it."""
    return run_config(compose_config(overrides))


def user_error(err: BaseException) -> str | None:
    """The one line to show for a bad-input error, or ``None`` for a bug (which keeps its traceback).

    Hydra wraps errors raised while building a backend or method in an
    ``InstantiationException``; the cause is what the user needs to read.
    """
    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    if not isinstance(err, USER_ERRORS):
        return None
    return " ".join(str(err).split())


def kept_predictions(cfg: DictConfig) -> str:
    """``N questions kept in <folder>/predictions.jsonl`` for the interruption message."""
    try:
        path = RunSpec.from_config(cfg).run_dir / "predictions.jsonl"
        count = sum(1 for line in path.open("rb") if line.endswith(b"\n")) if path.exists() else 0
    except Exception:  # the message must not fail on an unusual config
        return "finished questions kept in the run folder"
    return f"{count} finished questions kept in {path}"


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread for the duration (so the run can report)."""

    def raise_terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread (a launcher's worker): keep the default
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_with_the_launcher(poll_s: float = 2.0) -> None:
    """In a sweep's worker process, stop the job as SIGTERM does once the sweep's own process is gone.

    A parent that ends on SIGTERM or Ctrl-C leaves through ``os._exit`` (see :func:`report_run`), which
    skips the joblib launcher's shutdown: its workers went on alone, still calling the server and holding
    their run folders (seen 2026-12-05, four jobs for 25 minutes). Loky gives a worker no sentinel on its
    parent, so a daemon thread polls the parent's pid. Outside a worker (a single run) it does nothing.
    """
    parent = multiprocessing.parent_process()
    if parent is None or any(t.name == "launcher-watch" for t in threading.enumerate()):
        return  # a single run, or a worker already watching (it runs job after job)

    def watch() -> None:
        while os.getppid() == parent.pid:
            time.sleep(poll_s)
        log.warning("the sweep's process %s is gone: stopping this job as SIGTERM would", parent.pid)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="launcher-watch").start()


def report_run(cfg: DictConfig) -> Path:
    """:func:`run_config` as the command line runs it: bad input and interrupts end in one line and an exit code.

    Raises:
        SystemExit: 2 for bad input, 130 for Ctrl-C, 143 for SIGTERM, after
            logging the one line; any other error is a bug and keeps its traceback.
    """
    _stop_with_the_launcher()
    try:
        with _sigterm_interrupts():
            return run_config(cfg)
    except KeyboardInterrupt as err:
        signame = "SIGTERM" if isinstance(err, Terminated) else "interrupt"
        log.error("%s: run stopped; %s; run the same command again to resume", signame, kept_predictions(cfg))
        code = 143 if isinstance(err, Terminated) else 130
        if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
            # Episodes still in flight in their threads would keep the process alive until they end. Leaving
            # them loses nothing finished: rows are synced per batch (a cut last line is dropped on resume),
            # a snapshot counts only with its COMPLETE marker, and SQLite rolls back an open write.
            logging.shutdown()
            os._exit(code)
        sys.exit(code)
    except Exception as err:
        message = user_error(err)
        if message is None:
            raise
        log.debug("traceback of the error below", exc_info=err)
        log.error("%s", message)
        sys.exit(EXIT_BAD_INPUT)


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=VERSION_BASE)
def main(cfg: DictConfig) -> Any:
    start = time.perf_counter()
    run_dir = report_run(cfg)
    log.info("run folder: %s (%.1f s)", run_dir, time.perf_counter() - start)
    return str(run_dir)


if __name__ == "__main__":
    main()
