"""The numbers tables take from finished runs (:class:`clag.records.runs.RunRecord`).

Everything a table needs is read from the run folder:
the resolved ``config.yaml`` (method variant values under
``method.system``), ``metrics.json`` (means with bootstrap intervals,
latency, structure, provenance) and, for what ``metrics.json`` does not
summarise with an interval (latency), ``predictions.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clag.metrics.aggregate import CATEGORY_SETS, summarize
from clag.metrics.scoring import category_number
from clag.records.runs import RunRecord


@dataclass(frozen=True)
class Metric:
    """How to read one metric out of a run.

    Attributes:
        label: Column header, as the paper prints it.
        source: ``answer`` (``overall`` / ``by_category``), ``evidence``,
            ``latency`` (bootstrapped from ``predictions.jsonl``), ``chars``,
            ``clusters`` (``structure``, per episode) or ``config``
            (``method.system`` value).
        scale: Factor from our stored value to the paper's unit (fractions -> %).
        unit: The unit after scaling, for captions.
    """

    label: str
    source: str
    scale: float = 1.0
    unit: str = "%"


METRICS: dict[str, Metric] = {
    "f1": Metric("F1", "answer", 100),
    "bleu1": Metric("BLEU-1", "answer", 100),
    "meteor": Metric("METEOR", "answer", 100),
    "bert_f1": Metric("BERT-F1", "answer", 100),
    "rougeL": Metric("ROUGE-L", "answer", 100),
    "exact_match": Metric("EM", "answer", 100),
    "date_match": Metric("Date match (not in the paper)", "answer", 100),
    "j_lenient": Metric("J (lenient)", "answer", 100),
    "j_strict": Metric("J (strict)", "answer", 100),
    "j_lenient_dated": Metric("J (lenient, date veto)", "answer", 100),
    "j_strict_dated": Metric("J (strict, date veto)", "answer", 100),
    "e_prec": Metric("E-Prec", "evidence", 100),
    "e_recall": Metric("E-Recall", "evidence", 100),
    "e_f1": Metric("E-F1", "evidence", 100),
    "r5": Metric("R@5", "evidence", 100),
    "r10": Metric("R@10", "evidence", 100),
    "ndcg10": Metric("nDCG@10", "evidence", 100),
    "retrieval_ms": Metric("Retrieval (ms)", "latency", unit="ms per query"),
    "e2e_ms": Metric("End-to-End (ms)", "latency", unit="ms per query"),
    "context_chars": Metric("Chars", "chars", unit="characters of retrieved context per query"),
    "avg_clusters": Metric("Avg. # Clusters", "clusters", unit="clusters per episode (interval over episodes)"),
    **{
        key: Metric("Value", "config", unit="config value of the CLAG runs")
        for key in ("n", "n_init", "tau_split", "k_route", "tau", "k_local")
    },
}
"""Every metric a table spec may name."""

# Where a ``describe()`` reports its cluster count: CLAG's ``clusters``, or a
# ``n_clusters`` for methods that keep a list under ``clusters``.
_CLUSTER_COUNT_KEYS = ("n_clusters", "clusters")


@dataclass(frozen=True)
class Estimate:
    """A mean with its bootstrap 95% interval (interval None when not available)."""

    mean: float
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None

    def scaled(self, factor: float) -> Estimate:
        def scale(value: float | None) -> float | None:
            return None if value is None else value * factor

        return Estimate(self.mean * factor, scale(self.ci_low), scale(self.ci_high), self.n)


def _same(wanted: Any, actual: Any) -> bool:
    """Config values compare as numbers when both are numbers (``0.10`` == ``0.1``), else as text."""
    try:
        return math.isclose(float(wanted), float(actual), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return str(wanted).lower() == str(actual).lower()


def departures(run: RunRecord, defaults: dict[str, Any]) -> str:
    """``key=value`` for each of ``defaults`` that ``run`` sets otherwise (``tau=0.15``), comma-separated: what
    tells a sensitivity run from the default one in a report's labels. A key the run lacks is not a departure."""
    params = run.params
    return ", ".join(f"{key}={params[key]}" for key, value in defaults.items()
                     if key in params and not _same(value, params[key]))  # fmt: skip


def matches(run: RunRecord, method: str, dataset: str, models: list[str], where: dict[str, Any]) -> bool:
    """Whether ``run`` may fill a cell; empty ``dataset`` / ``models`` accept any.

    A ``where`` key the run's config lacks is not held against it: a method
    without the switch (RAG has no ``routing``) is simply that method.
    """
    if run.method != method or (dataset and run.dataset != dataset) or (models and run.model not in models):
        return False
    params = run.params
    return all(key not in params or _same(value, params[key]) for key, value in where.items())


def select_run(
    runs: list[RunRecord],
    method: str,
    dataset: str,
    models: list[str],
    where: dict[str, Any],
    exps: list[str],
) -> RunRecord | None:
    """The one run that fills a cell, or None.

    Among matching runs: the most preferred model (the paper's own before a
    stand-in), then the table's own experiment before others, then the run
    that explicitly sets more of the ``where`` keys, then the most questions,
    then the newest.
    """
    candidates = [run for run in runs if matches(run, method, dataset, models, where)]
    if not candidates:
        return None

    def rank(run: RunRecord) -> tuple:
        model_rank = models.index(run.model) if run.model in models else len(models)
        exp_rank = exps.index(run.exp) if run.exp in exps else len(exps)
        explicit = sum(key in run.params for key in where)
        return (model_rank, exp_rank, -explicit, -run.questions, -run.mtime)

    return min(candidates, key=rank)


def _category(variant: str) -> str | None:
    return variant.split("=", 1)[1] if variant.startswith("category=") else None


def category_set(variant: str) -> str | None:
    """``categories=1-4`` -> ``"1-4"``: a key of ``metrics.json`` ``overall_sets``."""
    return variant.split("=", 1)[1] if variant.startswith("categories=") else None


def _from_summary(entry: dict[str, Any] | None) -> Estimate | None:
    if not entry or entry.get("mean") is None:
        return None
    return Estimate(float(entry["mean"]), entry.get("ci_low"), entry.get("ci_high"), entry.get("n"))


def _bootstrap(values: list[float], run: RunRecord) -> Estimate | None:
    settings = run.metrics.get("settings") or {}
    if len(values) < 2:  # an interval from one value would look like certainty
        return Estimate(float(values[0]), None, None, len(values)) if values else None
    summary = summarize(values, int(settings.get("bootstrap_samples", 1000)), int(settings.get("seed", 0)))
    return _from_summary(summary)


def cluster_count(structure: dict[str, Any]) -> int | None:
    """Number of clusters in one episode's ``describe()`` dict, under any of the known key names."""
    for key in _CLUSTER_COUNT_KEYS:
        value = structure.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            return int(value)
        if isinstance(value, (list, dict)):
            return len(value)
    return None


def _set_from_rows(run: RunRecord, section: dict[str, Any], metric: str, wanted: tuple[int, ...]) -> Estimate | None:
    """A category set's mean for a run whose ``metrics.json`` predates ``overall_sets``: its overall
    when every question lies in the set, else bootstrapped from the rows in it."""
    rows = [r for r in run.predictions if category_number(r.get("category")) in wanted]
    if len(rows) == len(run.predictions):
        return _from_summary((section.get("overall") or {}).get(metric))
    return _bootstrap([float(r[metric]) for r in rows if r.get(metric) is not None], run)


def metric_value(run: RunRecord, metric: str, variant: str = "", config_key: str = "") -> Estimate | None:
    """Our value for ``metric`` in the paper's unit, or None when the run does not have it.

    Args:
        run: The run.
        metric: A key of :data:`METRICS`.
        variant: ``category=N`` selects a per-category value, ``categories=1-4``
            a category set's (``overall_sets``); other variants only name the
            run (already chosen by the caller).
        config_key: For ``config`` metrics, the ``method.system`` key.
    """
    spec = METRICS[metric]
    category = _category(variant)
    m = run.metrics
    estimate: Estimate | None = None
    if spec.source in ("answer", "evidence"):
        section = m if spec.source == "answer" else m.get("evidence", {})
        table = (section.get("by_category") or {}).get(category, {}) if category else section.get("overall", {})
        if (subset := category_set(variant)) is not None:
            table = (section.get("overall_sets") or {}).get(subset, {})
        estimate = _from_summary(table.get(metric))
        if estimate is None and subset is not None and spec.source == "answer":  # a run from before overall_sets
            estimate = _set_from_rows(run, section, metric, CATEGORY_SETS.get(run.dataset, {}).get(subset, ()))
    elif spec.source == "latency":
        rows = [r for r in run.predictions if category is None or str(r.get("category")) == category]
        values = [float(r[metric]) for r in rows if r.get(metric) is not None]
        estimate = _bootstrap(values, run) or _from_summary((m.get("latency") or {}).get(metric))
    elif spec.source == "chars":
        estimate = _from_summary(m.get("context_chars"))
    elif spec.source == "clusters":
        counts = [c for c in map(cluster_count, (m.get("structure") or {}).values()) if c is not None]
        estimate = _bootstrap([float(c) for c in counts], run)
    elif spec.source == "config":
        value = run.params.get(config_key or metric)
        estimate = Estimate(float(value)) if isinstance(value, (int, float)) else None
    return estimate.scaled(spec.scale) if estimate else None


def load_cluster_snapshot(memory_dir: Path) -> tuple[np.ndarray, list[str]] | None:
    """Note vectors and each note's cluster from a CLAG memory snapshot, for a 2-D picture.

    Reads the vector files in ``VectorIndex.save`` layout (``NAME.npy`` beside
    ``NAME.ids.json``; the largest one is the note index: CLAG's
    ``notes.npy``) and cluster membership from the JSON file that lists
    clusters with their ``members`` (CLAG's ``clusters.json``:
    ``{"clusters": [{"id", "members": [note ids]}, ...]}``; an id-keyed dict
    of ``{"members"}`` works too).

    Returns:
        ``(vectors, labels)`` for the notes that belong to a cluster, or None
        when the folder holds no such pair.
    """
    best: tuple[np.ndarray, list[str]] | None = None
    for ids_path in memory_dir.glob("*.ids.json"):
        vectors_path = ids_path.with_name(ids_path.name[: -len(".ids.json")] + ".npy")
        if vectors_path.is_file():
            ids = [str(i) for i in json.loads(ids_path.read_text())]
            if best is None or len(ids) > len(best[1]):
                best = (np.load(vectors_path), ids)
    if best is None:
        return None
    membership: dict[str, str] = {}
    for path in sorted(memory_dir.glob("*.json")):
        if path.name.endswith(".ids.json"):
            continue
        membership = _membership(json.loads(path.read_text()))
        if membership:
            break
    vectors, ids = best
    keep = [i for i, note_id in enumerate(ids) if note_id in membership]
    if not keep:
        return None
    return vectors[keep], [membership[ids[i]] for i in keep]


def _membership(value: Any) -> dict[str, str]:
    """note id -> cluster id from a clusters JSON, or {} when ``value`` is not one."""
    if isinstance(value, dict) and "clusters" in value:
        value = value["clusters"]
    if isinstance(value, dict):
        entries = [{"id": key, **entry} for key, entry in value.items() if isinstance(entry, dict)]
    elif isinstance(value, list):
        entries = [entry for entry in value if isinstance(entry, dict)]
    else:
        return {}
    out = {}
    for entry in entries:
        members = entry.get("members")
        cluster_id = entry.get("id", entry.get("cluster_id"))
        if isinstance(members, list) and cluster_id is not None:
            out.update({str(note): str(cluster_id) for note in members})
    return out


def machines(runs: Iterable[RunRecord]) -> str:
    """Where the runs were computed (each distinct :attr:`RunRecord.computed_on`), "; "-joined; "" for none."""
    return "; ".join(sorted({run.computed_on for run in runs}))


def provenance_notes(runs: Iterable[RunRecord]) -> list[str]:
    """Caption sentences naming where the runs were computed and, for sliced runs, their scale.

    Predictions move with the CPU's kernels, the engine and the dtype, and a
    slice is not the paper's setting, so every table built from runs says both.
    """
    runs = list(runs)
    notes = [f"Computed with {machines(runs)}."] if runs else []
    sliced = sorted({run.scale for run in runs if run.is_sliced})
    if sliced:
        notes.append(
            f"{' / '.join(scale.upper() for scale in sliced)} SCALE: our runs use a slice of the data (limit.*), "
            "not the paper's setting; differences from the paper are not evidence about the methods."
        )
    return notes


def report_main(
    argv: list[str] | None,
    prog: str,
    doc: str,
    render: Callable[[Path, Path | None], str],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> int:
    """The command line of a Markdown report over a runs folder: ``RUNS [--out FILE]``.

    ``render(runs, out)`` returns the Markdown (``out`` lets it write files beside it, e.g. a plot); it is
    written to ``--out`` (its folder made), or printed. ``parents`` hold a report's own options (parsed by the
    report itself; listed here so that ``--help`` shows them and they are accepted).
    """
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0], parents=list(parents))
    parser.add_argument("runs", type=Path, help="a runs folder (e.g. results/reference/runs)")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of printing it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    text = render(args.runs, args.out)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        logging.getLogger(prog).info("wrote %s", args.out)
    else:
        sys.stdout.write(text)
    return 0
