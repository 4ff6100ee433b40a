"""The CLAG paper's own numbers, read from ``results/paper/tableNN.csv``.

Tables are rendered with the paper's value beside ours, so the paper's numbers
are data, not constants scattered through renderers. The CSVs are checked
against the paper text by ``tests/test_paper_numbers.py``; their conventions
(method / dataset / model keys, metric names, variants) are in
``results/paper/README.md``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

PAPER_DIR = Path(__file__).resolve().parents[2] / "results" / "paper"
"""``results/paper`` of the repository this module was loaded from."""


@cache
def _read(number: int) -> pd.DataFrame:
    path = PAPER_DIR / f"table{number:02d}.csv"
    if not path.is_file():
        raise ValueError(f"the paper has Tables 1-16; no file {path}")
    # keep_default_na=False: an empty key column means "does not apply", not a missing value.
    frame = pd.read_csv(path, keep_default_na=False)
    if "value" in frame:
        frame["value"] = frame["value"].astype(float)
    return frame


def load_paper_table(number: int) -> pd.DataFrame:
    """One paper table as printed: long format for numeric tables, own columns for Tables 11-14.

    Args:
        number: the paper's table number, 1-16.

    Returns:
        A fresh copy (callers may modify it without touching the cached one).
    """
    return _read(number).copy()


def paper_value(table: int, method: str, dataset: str, model: str, metric: str, variant: str = "") -> float | None:
    """The number the paper prints in one cell, or None when the paper has no such cell.

    Keys are the harness's (``rag``, ``amem``, ``gam``, ``memoryos``, ``clag``;
    ``locomo``, ``hotpotqa``, ``bioasq``; ``qwen3-0.6b``, ``qwen3-8b``); an empty
    string matches a column that does not apply (e.g. Table 2's dataset).

    Raises:
        ValueError: for a text table (11-14), or if the keys match several cells.
    """
    frame = _read(table)
    if "value" not in frame:
        raise ValueError(f"Table {table} holds text, not values; use load_paper_table")
    hits = frame[
        (frame["method"] == method)
        & (frame["dataset"] == dataset)
        & (frame["model"] == model)
        & (frame["metric"] == metric)
        & (frame["variant"] == variant)
    ]
    if len(hits) > 1:
        raise ValueError(f"Table {table}: {len(hits)} cells match {method}/{dataset}/{model}/{metric}/{variant}")
    return None if hits.empty else float(hits["value"].iloc[0])
