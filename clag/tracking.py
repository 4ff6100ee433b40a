"""Weights & Biases logging of a finished run, offline by default.

Logs the resolved config, the metrics (flattened), per-category metrics as a
table, the predictions and CLAG's cluster telemetry, grouped by experiment.
It never needs the network (``mode: offline`` writes under the run folder;
``wandb sync`` uploads later) and never breaks a run: any tracker error is
logged and swallowed, and the W&B run is closed in ``finally``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from clag.records.schema import Metrics, ScoredRow

log = logging.getLogger(__name__)


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict as ``a/b/c`` keys (W&B summary style)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for key, child in value.items():
            out.update(flatten(child, f"{prefix}/{key}" if prefix else str(key)))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def _machine_tags(metrics: Metrics) -> list[str]:
    """``engine``, ``dtype`` and the CPU model or first GPU of a run, as W&B tags."""
    run = metrics["run"]
    hardware = run.get("hardware") or {}
    machine = (hardware.get("gpu") or [hardware.get("cpu_model")])[0]
    return [str(tag)[:64] for tag in (run.get("engine"), run.get("dtype"), machine) if tag]  # W&B caps tags at 64


def log_run(cfg: DictConfig, run_dir: Path, metrics: Metrics, rows: list[ScoredRow]) -> None:
    """Send one run to W&B; failures are logged, never raised.

    The keys read are those of :mod:`clag.records.schema`; the engine and the machine
    (``run.engine``, ``run.hardware``) become tags so W&B groups runs that may
    differ only because they ran elsewhere.
    """
    try:
        import wandb
    except ImportError:
        log.warning("wandb is not installed; skipping tracking")
        return
    run = None
    try:
        run = wandb.init(
            project=cfg.logger.project,
            entity=cfg.logger.get("entity"),
            group=cfg.exp,
            job_type=cfg.method.name,
            name=run_dir.name,
            dir=str(run_dir),
            mode=cfg.logger.mode,
            config=OmegaConf.to_container(cfg, resolve=True),
            tags=[cfg.dataset.name, cfg.method.name, cfg.model.name, *_machine_tags(metrics)],
            reinit="finish_previous",
        )
        run.summary.update({k: v for k, v in flatten(metrics).items() if not k.startswith("run/versions")})
        categories = metrics["by_category"]
        names = sorted({m for values in categories.values() for m in values})
        table = wandb.Table(columns=["category", *names])
        for category, values in sorted(categories.items()):
            table.add_data(category, *[values.get(m, {}).get("mean") for m in names])
        run.log({"by_category": table})
        columns = ["question_id", "category", "question", "reference", "prediction", "f1", "bleu1", "retrieved_ids"]
        predictions = wandb.Table(columns=columns)
        for row in rows:
            predictions.add_data(*[json.dumps(row.get(c)) if c == "retrieved_ids" else row.get(c) for c in columns])
        run.log({"predictions": predictions})
        if metrics.get("structure"):
            run.log({"structure": wandb.Html(f"<pre>{json.dumps(metrics['structure'], indent=1)[:200000]}</pre>")})
    except Exception as err:  # tracking must never break a finished run
        log.warning("W&B logging failed (%s); the run folder is complete", err)
    finally:
        if run is not None:
            run.finish()
