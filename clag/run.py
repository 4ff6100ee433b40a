"""Hydra entry point: one method x dataset x model run into a run folder.

    python -m clag.run method=clag dataset=locomo limit.episodes=1 limit.questions=20 run_dir=DIR
    python -m clag.run -m experiment=table10          # a sweep, one job per setting

The run folder holds the resolved ``config.yaml``, ``predictions.jsonl``
(streamed, one row per question), ``episodes.jsonl`` (ingestion usage and
structure per episode), a memory snapshot per episode and ``metrics.json``.
A finished run returns at once; a killed run resumes: finished questions
are kept, memory snapshots are reloaded, and every LLM call already made
comes from the cache, so the predictions equal an uninterrupted run's.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from clag.data import DatasetError
from clag.running.loop import execute
from clag.running.spec import RunSpec

log = logging.getLogger("clag.run")

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "configs")


def run_config(cfg: DictConfig) -> Path:
    """Run one resolved config; returns the run folder."""
    return execute(RunSpec.from_config(cfg))


def run_with_overrides(overrides: list[str]) -> Path:
    """Python API used by tests and notebooks: compose the config and run it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return run_config(cfg)


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> Any:
    start = time.perf_counter()
    try:
        run_dir = run_config(cfg)
    except DatasetError as err:
        log.error("%s", err)
        sys.exit(2)
    log.info("run folder: %s (%.1f s)", run_dir, time.perf_counter() - start)
    return str(run_dir)


if __name__ == "__main__":
    main()
