"""Finished runs read back from their folders: the one reader of tables, ``clag.compare`` and the notebook.

A run is finished when its ``metrics.json`` exists (``clag.running.results``
writes it last, atomically). A :class:`RunRecord` holds its resolved
``config.yaml`` and ``metrics.json`` and reads ``predictions.jsonl`` on first
use, under the one reading policy of :mod:`clag.records.files`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clag.records.files import read_jsonl
from clag.records.schema import Metrics, RunInfo, SchemaError, ScoredRow, check_version

log = logging.getLogger(__name__)

# CPU flags that select different matmul kernels, named where a table says where it was computed.
_SHOWN_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


@dataclass
class RunRecord:
    """One finished run folder.

    Attributes:
        path: The run folder.
        config: The resolved ``config.yaml`` as a dict.
        metrics: ``metrics.json`` (keys: :class:`clag.records.schema.Metrics`; older runs may lack some).
    """

    path: Path
    config: dict[str, Any]
    metrics: Metrics
    mtime: float = 0.0
    _predictions: list[ScoredRow] | None = field(default=None, repr=False)

    @property
    def info(self) -> RunInfo:
        return self.metrics.get("run", {})  # type: ignore[return-value]

    @property
    def computed_on(self) -> str:
        """Engine, dtype and machine of the run, e.g. ``transformers int8 on AMD EPYC (avx2, avx512f)``.

        Predictions differ between CPUs with other kernels (AVX2 / AVX-512 /
        AMX), GPUs, engines and dtypes, so tables say where their numbers come from.
        """
        info = self.info
        hardware = info.get("hardware")
        if not hardware:
            return "machine not recorded"
        flags = [f for f in hardware.get("cpu_flags", []) if f in _SHOWN_CPU_FLAGS]
        machine = ", ".join(hardware.get("gpu") or []) or hardware.get("cpu_model", "?")
        if flags and not hardware.get("gpu"):
            machine += f" ({', '.join(flags)})"
        return f"{info.get('engine', '?')} {info.get('dtype') or ''} on {machine}".replace("  ", " ")

    def _key(self, name: str, config_path: tuple[str, ...]) -> str:
        value: Any = self.config
        for part in config_path:
            value = value.get(part) if isinstance(value, dict) else None
        return str(self.info.get(name) or value or "")

    @property
    def exp(self) -> str:
        return self._key("exp", ("exp",))

    @property
    def method(self) -> str:
        return self._key("method", ("method", "name"))

    @property
    def dataset(self) -> str:
        return self._key("dataset", ("dataset", "name"))

    @property
    def model(self) -> str:
        return self._key("model", ("model", "name"))

    @property
    def seed(self) -> int:
        return int(self.info.get("seed", self.config.get("seed", 0)) or 0)

    @property
    def params(self) -> dict[str, Any]:
        """``method.system`` of the resolved config: the variant values (routing, tau, ...)."""
        return dict((self.config.get("method") or {}).get("system") or {})

    @property
    def questions(self) -> int:
        return int(self.info.get("questions") or self.metrics.get("n") or 0)

    @property
    def episode_structures(self) -> list[dict[str, Any]]:
        """Each episode's memory structure as ``metrics.json`` records it (notes, links, clusters, ...)."""
        return [s for s in (self.metrics.get("structure") or {}).values() if isinstance(s, dict)]

    @property
    def is_sliced(self) -> bool:
        """True when any ``limit.*`` cut the data: such numbers are not the paper's setting."""
        return any(value is not None for value in (self.info.get("slice") or {}).values())

    @property
    def scale(self) -> str:
        """``full``, or for a sliced run its ``scale_name`` (``demo``, ``reference``), else ``sliced``."""
        if not self.is_sliced:
            return "full"
        name = self.config.get("scale_name")
        return str(name) if name and name != "full" else "sliced"

    def slice_text(self) -> str:
        """E.g. ``locomo: 1 episodes / 20 questions / 150 items (limit episodes=1, questions=20)``."""
        info = self.info
        limits = {k: v for k, v in (info.get("slice") or {}).items() if v is not None}
        text = (
            f"{self.dataset}: {info.get('episodes', '?')} episodes / {info.get('questions', '?')} questions"
            f" / {info.get('items', '?')} items"
        )
        if limits:
            text += " (limit " + ", ".join(f"{k}={v}" for k, v in sorted(limits.items())) + ")"
        else:
            text += " (full data)"
        return text

    @property
    def predictions(self) -> list[ScoredRow]:
        """Rows of ``predictions.jsonl``, read once under the run folder's one reading policy."""
        if self._predictions is None:
            self._predictions = read_jsonl(self.path / "predictions.jsonl")  # type: ignore[assignment]
        return self._predictions


def find_runs(runs_dir: Path) -> list[RunRecord]:
    """Every finished run under ``runs_dir`` (any depth), in path order.

    A ``metrics.json`` that does not parse (a copy in progress) or comes
    from a newer result schema is skipped with a warning rather than failing
    the whole rendering.
    """
    runs = []
    for metrics_path in sorted(Path(runs_dir).rglob("metrics.json")):
        folder = metrics_path.parent
        try:
            metrics = json.loads(metrics_path.read_text())
            check_version(metrics, str(metrics_path))
        except (OSError, json.JSONDecodeError, SchemaError) as err:
            log.warning("skipping %s: %s", metrics_path, err)
            continue
        config_path = folder / "config.yaml"
        config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
        runs.append(RunRecord(folder, config or {}, metrics, metrics_path.stat().st_mtime))
    return runs
