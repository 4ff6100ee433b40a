"""Means with bootstrap intervals, per category, and a paired test between runs.

With a 0.6B model a one-point difference may be noise, so every mean comes
with a seeded 95% percentile-bootstrap interval over questions, and two runs
on the same questions are compared with a paired bootstrap test. The overall
mean is the paper's micro mean over all questions, category 5 included.

LoCoMo's overall score circulates over two denominators: categories 1-5
(the CLAG paper's Table 1: each of its LoCoMo values is the question-weighted
mean of the five Table 3 categories) and 1-4 (mem0's "J" and most memory
papers since, which leave the adversarial category out). ``overall_sets``
gives both, so neither is mistaken for the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from clag.metrics.answer import ANSWER_KEYS
from clag.metrics.evidence import EVIDENCE_KEYS
from clag.metrics.scoring import category_label, category_number
from clag.metrics.settings import MetricSettings
from clag.metrics.temporal import TEMPORAL_KEYS

JUDGE_KEYS = ("j_lenient", "j_strict", "j_lenient_dated", "j_strict_dated")
"""LLM-judge accuracy per prompt and per date-vetoed variant (``clag.metrics.judge``); absent from rows until
a judge ran."""
SUMMARY_KEYS = ANSWER_KEYS + ("f1_official", "adversarial_official") + TEMPORAL_KEYS + JUDGE_KEYS
CATEGORY_SETS: dict[str, dict[str, tuple[int, ...]]] = {"locomo": {"1-4": (1, 2, 3, 4), "1-5": (1, 2, 3, 4, 5)}}
"""Per dataset, the category subsets whose overall means ``metrics.json`` reports under ``overall_sets``."""
MIN_INTERVAL_N = 10
"""Below this many questions a percentile interval is mostly noise (one question gives ``[x, x]``),
so printed results show ``n=K`` instead of it."""
LATENCY_KEYS = ("retrieval_ms", "e2e_ms")
_CHUNK = 256  # resamples drawn at a time, bounding memory to _CHUNK x n indices


def bootstrap_means(values: Sequence[float], samples: int, seed: int) -> np.ndarray:
    """Means of ``samples`` resamples (with replacement) of ``values``, reproducible by ``seed``."""
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, samples, _CHUNK):
        indices = rng.integers(0, len(data), size=(min(_CHUNK, samples - start), len(data)))
        means.append(data[indices].mean(axis=1))
    return np.concatenate(means)


def summarize(values: Sequence[float], samples: int = 1000, seed: int = 0) -> dict:
    """``{"mean", "ci_low", "ci_high", "n"}`` with a 95% percentile-bootstrap interval."""
    if not len(values):
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    low, high = np.percentile(bootstrap_means(values, samples, seed), [2.5, 97.5])
    return {"mean": float(np.mean(values)), "ci_low": float(low), "ci_high": float(high), "n": len(values)}


def format_estimate(summary: dict | None, scale: float = 100.0, signed: bool = False) -> str:
    """``mean [low, high]`` of a summary (or paired difference) for printing; ``mean (n=K)`` below
    :data:`MIN_INTERVAL_N` questions, ``-`` when there is no mean."""
    if not summary or summary.get("mean", summary.get("mean_diff")) is None:
        return "-"
    form = "{:+.2f}" if signed else "{:.2f}"
    text = form.format(scale * summary.get("mean", summary.get("mean_diff")))
    n = int(summary.get("n") or 0)
    if n < MIN_INTERVAL_N or summary.get("ci_low") is None:
        return f"{text} (n={n})"
    return f"{text} [{form.format(scale * summary['ci_low'])}, {form.format(scale * summary['ci_high'])}]"


def spread(values: Sequence[float]) -> dict:
    """``{"mean", "p50", "p95", "n"}`` (linear-interpolated percentiles), for latencies and sizes."""
    if not len(values):
        return {"mean": None, "p50": None, "p95": None, "n": 0}
    p50, p95 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95])
    return {"mean": float(np.mean(values)), "p50": float(p50), "p95": float(p95), "n": len(values)}


def paired_bootstrap(a: Sequence[float], b: Sequence[float], samples: int = 10000, seed: int = 0) -> dict:
    """Paired bootstrap test of mean(a) - mean(b) over the same questions.

    The p-value is two-sided: the share of resampled mean differences at
    least as far from the observed difference as the observed difference is
    from zero (the resampling distribution shifted to the null), with the
    usual +1 correction so it is never exactly 0.

    Raises:
        ValueError: The runs differ in length or are empty.
    """
    if len(a) != len(b):
        raise ValueError(f"paired runs must score the same questions: {len(a)} vs {len(b)} values")
    if not len(a):
        raise ValueError("paired_bootstrap needs at least one question")
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    observed = float(diff.mean())
    means = bootstrap_means(diff, samples, seed)
    low, high = np.percentile(means, [2.5, 97.5])
    extreme = int(np.sum(np.abs(means - observed) >= abs(observed) - 1e-12))
    return {
        "mean_a": float(np.mean(a)),
        "mean_b": float(np.mean(b)),
        "mean_diff": observed,
        "ci_low": float(low),
        "ci_high": float(high),
        "p_value": (extreme + 1) / (samples + 1),
        "n": len(diff),
        "samples": samples,
    }


def _values(rows: Iterable[dict], key: str) -> list[float]:
    return [float(row[key]) for row in rows if row.get(key) is not None]


def judge_skipped_some(rows: Iterable[dict]) -> bool:
    """Whether the judge skipped any of ``rows`` (LoCoMo's category 5, a question without a gold).

    A J over the rest would stand under a label that covers more questions than
    it scored (over categories 1-5 it would repeat the 1-4 value), so no J is
    reported for such a set. Unclear verdicts are not skips: they are counted
    in the judge section and left out of the mean.
    """
    return any("skipped" in (row.get("judge") or {}) for row in rows)


def _metric_table(rows: list[dict], keys: Sequence[str], settings: MetricSettings) -> dict:
    """Summary per metric over ``rows``; metrics no row carries, and J where the judge skipped some of
    ``rows``, are left out."""
    if judge_skipped_some(rows):
        keys = [key for key in keys if key not in JUDGE_KEYS]
    table = {}
    for key in keys:
        values = _values(rows, key)
        if values:
            table[key] = summarize(values, settings.bootstrap_samples, settings.seed)
    return table


def _by_category(rows: list[dict], keys: Sequence[str], settings: MetricSettings) -> dict:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        label = category_label(row.get("category"))
        if label is not None:
            groups.setdefault(label, []).append(row)
    numeric_first = sorted(groups, key=lambda label: (category_number(label) is None, category_number(label), label))
    return {label: _metric_table(groups[label], keys, settings) for label in numeric_first}


def answer_tables(rows: list[dict], settings: MetricSettings, dataset: str | None = None) -> dict:
    """``overall``, ``by_category`` and ``overall_sets`` of the answer (and judge) metrics.

    ``overall_sets`` maps each of the dataset's :data:`CATEGORY_SETS` (LoCoMo:
    ``"1-4"``, ``"1-5"``) to the metric table over the rows in those
    categories; it is empty for datasets without such sets.
    """
    sets = CATEGORY_SETS.get(dataset or "", {})
    return {
        "overall": _metric_table(rows, SUMMARY_KEYS, settings),
        "by_category": _by_category(rows, SUMMARY_KEYS, settings),
        "overall_sets": {
            name: _metric_table(
                [r for r in rows if category_number(r.get("category")) in wanted], SUMMARY_KEYS, settings
            )
            for name, wanted in sets.items()
        },
    }


def refresh_answer_tables(metrics: dict, rows: list[dict], dataset: str | None) -> None:
    """Recompute a finished run's answer tables from its (re-scored or judged) rows, in place, with the
    bootstrap samples and seed its ``metrics.json`` recorded, so new intervals sit beside the old ones."""
    recorded = metrics.get("settings") or {}
    bootstrap = MetricSettings(
        bootstrap_samples=int(recorded.get("bootstrap_samples", 1000)), seed=int(recorded.get("seed", 0))
    )
    metrics.update(answer_tables(rows, bootstrap, dataset))


def aggregate_rows(scored: list[dict], settings: MetricSettings, dataset: str | None = None) -> dict:
    """Aggregate scored rows (from ``score_rows``) into the run's ``metrics.json`` body.

    Args:
        scored: Rows from ``score_rows`` (with ``j_lenient`` / ``j_strict`` when a judge ran).
        settings: Bootstrap samples and seed, and the models to record.
        dataset: The run's dataset name; it selects the ``overall_sets``.

    Returns:
        ``overall`` and ``by_category`` (category label -> metric ->
        ``{"mean", "ci_low", "ci_high", "n"}``) for the answer metrics;
        ``overall_sets`` (see :func:`answer_tables`);
        ``evidence`` with the same over questions that have gold evidence,
        plus ``n_with_evidence`` / ``n_without_evidence``; ``latency``
        (``retrieval_ms`` and ``e2e_ms``: mean, p50, p95, n);
        ``context_chars`` (interval and spread); ``settings`` (models
        actually used, adversarial mode, bootstrap samples, seed).
    """
    with_evidence = [row for row in scored if row.get("e_f1") is not None]
    chars = _values(scored, "context_chars")
    return {
        "n": len(scored),
        **answer_tables(scored, settings, dataset),
        "evidence": {
            "overall": _metric_table(with_evidence, EVIDENCE_KEYS, settings),
            "by_category": _by_category(with_evidence, EVIDENCE_KEYS, settings),
            "n_with_evidence": len(with_evidence),
            "n_without_evidence": len(scored) - len(with_evidence),
        },
        "latency": {key: spread(_values(scored, key)) for key in LATENCY_KEYS},
        "context_chars": {**summarize(chars, settings.bootstrap_samples, settings.seed), **spread(chars)},
        "settings": settings.describe(),
    }
