"""Table specs: which runs and which metric fill each cell of a paper table.

One YAML file per paper table lives in ``configs/tables/`` (``tableNN.yaml``),
beside ``defaults.yaml`` (the paper-backbone -> offline stand-in map and the
CLAG defaults of Table 8 that a "plain CLAG" cell requires). A table is rows x
column groups x metrics; a cell's keys are merged from the table, its group
and its row (row wins):

* ``method``, ``dataset``, ``variant``: the paper's keys, used to look the
  paper's number up (:func:`clag.tables.paper.paper_value`); ``variant``
  ``category=N`` also selects our per-category value, and ``categories=1-4``
  our mean over a category set (``metrics.json`` ``overall_sets``).
* ``paper_variant``: the paper's variant key when it differs from ours
  (Table 1's LoCoMo column is the paper's overall, ours ``categories=1-5``).
* ``run_dataset``: the dataset our run must have when it differs from the
  paper's key (Table 2 prints no dataset; ours is measured on LoCoMo);
  ``""`` accepts any dataset.
* ``where``: filters on the run's ``method.system.*`` config (``routing``,
  ``evolution_scope``, ``retrieval``, ``n_init``, ``tau``), merged over the
  CLAG defaults for CLAG cells.
* ``metric``: a key of :data:`clag.tables.collect.METRICS` (from the table's
  ``metrics`` list or a group's own, or set on a row as in Table 8).

Following the lightning-hydra-template idea of experiment files that set
only deltas, a spec states what differs from the defaults, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

SPEC_DIR = Path(__file__).resolve().parents[2] / "configs" / "tables"
"""``configs/tables`` of the repository this module was loaded from."""

METHOD_ROWS: tuple[dict[str, str], ...] = (
    {"label": "RAG", "method": "rag"},
    {"label": "A-mem", "method": "amem"},
    {"label": "GAM", "method": "gam"},
    {"label": "MemoryOS", "method": "memoryos"},
    {"label": "CLAG", "method": "clag"},
)
"""The paper's five methods in its row order; a spec says ``rows: methods``."""

REFERENCE_ROWS: tuple[dict[str, str], ...] = (
    {"label": "Full context (not in the paper)", "method": "full_context"},
    {"label": "No memory (not in the paper)", "method": "no_memory"},
)
"""The literature's reference baselines (``baselines/reference.py``), appended by ``reference_rows: true``."""

_CELL_KEYS = ("method", "dataset", "variant", "paper_variant", "run_dataset", "metric", "config_key")


@dataclass(frozen=True)
class Cell:
    """One cell of a paper table: where the paper's number is and how to find ours."""

    row: str
    group: str
    metric: str
    method: str
    dataset: str
    variant: str = ""
    run_dataset: str = ""
    where: dict[str, Any] = field(default_factory=dict)
    config_key: str = ""
    paper_variant: str = ""


@dataclass(frozen=True)
class TableSpec:
    """A paper table as rows x column groups x metrics.

    Attributes:
        number: The paper's table number.
        title: Short title for captions and the index.
        model: The paper's backbone key (``qwen3-0.6b``); ``""`` when the
            table is model-free (Table 8).
        rows: Row dicts (``label`` plus cell keys).
        groups: Column-group dicts (``label`` plus cell keys); one unnamed
            group when the table has no column groups.
        metrics: Metric keys shown in every group (a group's own ``metrics`` list replaces them there).
        exps: Experiment names whose runs are preferred for this table.
        defaults: Cell keys shared by every cell.
        notes: Extra caption sentences (known paper typos, protocol notes).
        plot: Name of a plot drawn from this table (see ``clag.tables.plots``).
        significance: Method whose paired difference from every other row is
            tested on the same questions and marked (``clag``); "" = none.
    """

    number: int
    title: str
    model: str
    rows: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    metrics: list[str | None]
    exps: list[str] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    plot: str = ""
    significance: str = ""

    def cells(self, clag_default: dict[str, Any]) -> list[Cell]:
        """Every cell in row-major order, with CLAG cells held to the CLAG defaults."""
        out = []
        for row in self.rows:
            for group in self.groups:
                for metric in group.get("metrics") or self.metrics:
                    keys: dict[str, Any] = {"metric": metric}
                    where: dict[str, Any] = {}
                    for source in (self.defaults, group, row):
                        keys.update({k: v for k, v in source.items() if k in _CELL_KEYS and v is not None})
                        where.update(source.get("where") or {})
                    if keys.get("method") == "clag":
                        where = {**clag_default, **where}
                    dataset = str(keys.get("dataset", ""))
                    variant = str(keys.get("variant", ""))
                    out.append(
                        Cell(
                            row=str(row["label"]),
                            group=str(group.get("label", "")),
                            metric=str(keys["metric"]),
                            method=str(keys.get("method", "")),
                            dataset=dataset,
                            variant=variant,
                            run_dataset=str(keys.get("run_dataset", dataset)),
                            where=where,
                            config_key=str(keys.get("config_key", "")),
                            paper_variant=str(keys.get("paper_variant", variant)),
                        )
                    )
        return out


@dataclass(frozen=True)
class Defaults:
    """``configs/tables/defaults.yaml``: the shared choices behind every table.

    Attributes:
        stand_ins: Paper backbone -> our model names in order of preference
            (the paper's own model first, then the offline stand-ins).
        clag_default: The ``method.system`` values of plain CLAG (Table 8).
        cases: Settings of Tables 11-14 (see ``clag.tables.cases``).
    """

    stand_ins: dict[str, list[str]]
    clag_default: dict[str, Any]
    cases: dict[str, Any]

    def models_for(self, paper_model: str) -> list[str]:
        """Our model names that may stand in for ``paper_model``; empty = any model."""
        if not paper_model:
            return []
        return list(self.stand_ins.get(paper_model, [paper_model]))


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"no table spec at {path}")
    return yaml.safe_load(path.read_text()) or {}


@cache
def load_defaults(spec_dir: Path = SPEC_DIR) -> Defaults:
    """Read ``defaults.yaml``."""
    raw = _read_yaml(spec_dir / "defaults.yaml")
    return Defaults(stand_ins=raw["stand_ins"], clag_default=raw["clag_default"], cases=raw.get("cases", {}))


def load_spec(number: int, spec_dir: Path = SPEC_DIR) -> TableSpec:
    """Read ``tableNN.yaml``; ``rows: methods`` expands to the paper's five methods, and
    ``reference_rows: true`` appends the full-context and no-memory rows."""
    raw = _read_yaml(spec_dir / f"table{number:02d}.yaml")
    rows = raw.get("rows", "methods")
    rows = [dict(row) for row in METHOD_ROWS] if rows == "methods" else list(rows)
    if raw.get("reference_rows"):
        rows += [dict(row) for row in REFERENCE_ROWS]
    return TableSpec(
        number=int(raw["number"]),
        title=str(raw["title"]),
        model=str(raw.get("model", "")),
        rows=rows,
        groups=list(raw.get("groups") or [{"label": ""}]),
        metrics=list(raw.get("metrics") or [None]),
        exps=[str(e) for e in raw.get("exps", [])],
        defaults=dict(raw.get("defaults") or {}),
        notes=[str(n) for n in raw.get("notes", [])],
        plot=str(raw.get("plot", "")),
        significance=str(raw.get("significance", "")),
    )


def compare_numbers(spec_dir: Path = SPEC_DIR) -> list[int]:
    """Numbers of the tables rendered side by side with the paper (those with a spec file)."""
    return sorted(int(path.stem[5:]) for path in spec_dir.glob("table[0-9][0-9].yaml"))
