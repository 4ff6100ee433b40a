"""The written result schema: what a run folder's files hold, key by key.

One definition for the writer (``clag.running``) and every reader (tables,
tracking, the notebook, the compare command), so a renamed key is a type
error in one place instead of a silent ``None`` in a table. The records stay
plain JSON dicts on disk; these ``TypedDict`` s name their keys and types.

``metrics.json`` carries ``schema_version``. History:

* 0 -- no ``schema_version`` key (runs before 2026-12-01); rows carry no
  ``config_hash`` and ``run`` has no ``hardware`` / ``engine`` / ``dtype``.
  Readers accept it: every key of version 1 that it has means the same.
* 1 -- this module: ``schema_version``; ``config_hash`` in every prediction
  row and episode record; ``run.hardware``, ``run.engine``, ``run.dtype``;
  ``overall_sets``; ``judge`` and the rows' ``j_*`` keys when a judge ran.

A reader meeting a version newer than :data:`SCHEMA_VERSION` refuses the run
(:func:`check_version`) rather than guess what its keys mean.

Annotations are evaluated (no ``from __future__ import annotations``) so that
``NotRequired`` keys are known to ``TypedDict`` at run time (``missing_keys``).
"""

from typing import Any, NotRequired, TypedDict

SCHEMA_VERSION = 1

# One stage's ``calls``, ``cache_hits``, ``prompt_tokens``, ... (``clag.llm.client.USAGE_FIELDS``).
StageUsage = dict[str, int]


class PredictionRow(TypedDict):
    """One line of ``predictions.jsonl``: one question, as written when it is answered.

    ``retrieval_ms`` leaves out the keyword LLM call (as the authors time
    retrieval); ``e2e_ms`` is keywords + retrieval + the question's share of
    its answer batch. Answer-call calls and tokens are the batch's, split
    evenly, so they may be fractions. ``answer_parsed`` says whether the answer
    reply was the JSON asked for (False: its raw text is the prediction); runs
    before 2026-12-03 lack it.
    """

    question_id: str
    episode_id: str
    config_hash: str
    question: str
    reference: str
    answer: str
    adversarial_answer: str | None
    category: int
    prediction: str
    answer_parsed: NotRequired[bool]
    retrieved_ids: list[str]
    evidence_ids: list[str]
    context_chars: int
    retrieval_ms: float
    e2e_ms: float
    timings_ms: dict[str, float]
    usage: dict[str, StageUsage]
    llm_calls: float
    prompt_tokens: float
    completion_tokens: float
    telemetry: dict[str, Any]


class ScoredRow(PredictionRow):
    """A prediction row after ``clag.metrics.score_rows``: what ``predictions.jsonl`` holds once the run is finished.

    Evidence keys are None for a question without gold evidence;
    ``adversarial_official`` is None outside LoCoMo's category 5; the judge's
    ``j_lenient`` / ``j_strict`` and their date-vetoed ``j_*_dated`` (``clag.metrics.judge``) are there only when
    a judge ran.
    """

    f1: float
    exact_match: float
    bleu1: float
    meteor: float
    rouge1: float
    rouge2: float
    rougeL: float
    bert_f1: float
    sbert: float
    f1_official: float
    adversarial_official: float | None
    date_match: NotRequired[float | None]  # clag.metrics.temporal; absent from runs scored before 2026-12-03
    date_status: NotRequired[str]
    j_lenient: NotRequired[float | None]
    j_strict: NotRequired[float | None]
    j_lenient_dated: NotRequired[float | None]  # the same under the date veto (clag.metrics.judge.date_vetoed)
    j_strict_dated: NotRequired[float | None]
    e_prec: float | None
    e_recall: float | None
    e_f1: float | None
    r5: float | None
    r10: float | None
    ndcg10: float | None


class EpisodeRecord(TypedDict):
    """One line of ``episodes.jsonl``: one episode's ingestion, written when it finishes."""

    episode_id: str
    config_hash: str
    items: int
    ingest_s: float
    items_per_s: float | None
    llm_calls: int
    llm_calls_per_item: float
    usage: dict[str, StageUsage]
    structure: dict[str, Any]


class Summary(TypedDict):
    """A mean with its seeded 95% bootstrap interval (``clag.metrics.summarize``)."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int


class Spread(TypedDict):
    """Mean and percentiles (``clag.metrics.spread``), for latencies."""

    mean: float | None
    p50: float | None
    p95: float | None
    n: int


class Usage(TypedDict):
    """LLM calls and tokens per stage, for ingestion and for questions."""

    ingestion: dict[str, StageUsage]
    questions: dict[str, dict[str, float]]
    items: int
    llm_calls_per_item: float
    llm_calls_per_question: float
    ingest_s: float


class Hardware(TypedDict):
    """Where a run was computed: int8 and bf16 kernels differ between CPUs, so results may too."""

    machine: str
    cpu_model: str
    cpu_count: int | None
    cpu_flags: list[str]
    gpu: list[str]


class EngineCounters(TypedDict):
    """``metrics.json`` ``run.engine_counters``: a served engine's own counters (vLLM's ``/metrics``),
    the difference between the run's start and end, so that a reader can see why one run was faster
    than another. Server-wide: sweep jobs sharing the server count in each other's deltas; a resumed
    run counts only its last process's part; a fully cached rerun that reaches no server has none."""

    requests: float
    prompt_tokens: float  # tokens prefilled, prefix-cache hits included
    generation_tokens: float
    prefix_cache_queries: float
    prefix_cache_hits: float
    prefix_cache_hit_rate: float | None


class RunInfo(TypedDict):
    """``metrics.json`` ``run``: what was run, on what, from which code and data."""

    config_hash: str
    exp: str
    method: str
    dataset: str
    model: str
    model_identity: dict[str, Any]
    engine: str
    dtype: str | None
    generation: dict[str, Any]
    concurrent_episodes: int
    seed: int
    slice: dict[str, Any]
    episodes: int
    questions: int
    items: int
    input_hash: str
    git: str
    versions: dict[str, str]
    python: str
    hardware: Hardware
    server: NotRequired[dict[str, str]]  # a served engine's own report (its version); absent in-process
    engine_counters: NotRequired[EngineCounters]  # a vLLM server's work while the run ran; absent in-process
    wall_s: float
    peak_rss_mb: float


class Evidence(TypedDict):
    """Evidence metrics over the questions that have gold evidence."""

    overall: dict[str, Summary]
    by_category: dict[str, dict[str, Summary]]
    n_with_evidence: int
    n_without_evidence: int


class JudgeCount(TypedDict):
    """One judge prompt's verdicts over the rows it judged."""

    judged: int
    correct: int
    wrong: int
    unclear: int  # neither label, or both: left out of ``j_<prompt>``, never scored wrong
    date_vetoed: NotRequired[int]  # CORRECT verdicts the date veto overruled (j_<prompt>_dated); from 2026-12-04


class Agreement(TypedDict):
    """Cohen's kappa of two raters over the rows both rated clearly (:func:`clag.metrics.cohen_kappa`)."""

    kappa: float | None
    agreement: float | None
    n: int


class JudgeSection(TypedDict):
    """``metrics.json`` ``judge``: who judged, with which prompts, and what came of it
    (:func:`clag.metrics.judge.judge_rows`)."""

    model: str
    params_b: float | None  # read from the model's name; None when it says none
    small: bool  # under 3B parameters: a rough check, not comparable with published J scores
    label: str  # the model and, for a small one, the warning, as tables print it
    model_identity: dict[str, Any]
    prompts: dict[str, dict[str, str]]  # prompt name -> {"sha256": hash of its template}
    counts: dict[str, JudgeCount]
    skipped: dict[str, Any]  # {"category": n, "no_gold": n, "categories": [...]}
    unclear_policy: str
    kappa: NotRequired[Agreement]  # lenient vs strict, when both ran
    kappa_by_category: NotRequired[dict[str, Agreement]]


class Metrics(TypedDict):
    """``metrics.json``, written last and atomically: a run is finished when it exists.

    ``overall`` and ``by_category`` (category label -> metric -> summary) hold
    the answer metrics, ``overall_sets`` the same over named category sets
    (LoCoMo ``1-4`` and ``1-5``; empty elsewhere); ``structure`` is each
    episode's ``describe()``; ``judge`` (:class:`JudgeSection`) only when a judge ran.
    """

    schema_version: int
    n: int
    overall: dict[str, Summary]
    by_category: dict[str, dict[str, Summary]]
    overall_sets: dict[str, dict[str, Summary]]
    evidence: Evidence
    latency: dict[str, Spread]
    context_chars: dict[str, float | int | None]
    settings: dict[str, Any]
    usage: Usage
    structure: dict[str, dict[str, Any]]
    run: RunInfo
    judge: NotRequired[JudgeSection]


class SchemaError(ValueError):
    """A run folder written by a newer schema than this code reads."""


def schema_version(metrics: dict[str, Any]) -> int:
    """The ``schema_version`` of a ``metrics.json`` (0: written before the schema existed)."""
    return int(metrics.get("schema_version", 0))


def check_version(metrics: dict[str, Any], where: str) -> None:
    """Refuse a ``metrics.json`` newer than this code, naming the file and both versions.

    Raises:
        SchemaError: ``schema_version`` is above :data:`SCHEMA_VERSION`.
    """
    found = schema_version(metrics)
    if found > SCHEMA_VERSION:
        raise SchemaError(f"{where}: result schema {found} is newer than this code's {SCHEMA_VERSION}; update clag")


def missing_keys(record: dict[str, Any], kind: type) -> list[str]:
    """Required keys of the ``TypedDict`` ``kind`` that ``record`` lacks (for tests and readers' checks)."""
    return sorted(key for key in kind.__required_keys__ if key not in record)  # type: ignore[attr-defined]
