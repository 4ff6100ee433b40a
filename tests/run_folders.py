"""A finished run folder written from its parts, for the report tests that read run folders
(test_findings.py, test_memory_telemetry.py, test_growth.py, test_latency_report.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def write_run(
    folder: Path, config: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any]
) -> Path:
    """``config.yaml``, ``predictions.jsonl`` and ``metrics.json`` under ``folder`` (made); returns it."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(dict(config)))
    (folder / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder
