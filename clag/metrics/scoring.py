"""Per-question scores of prediction rows: answer, LoCoMo official and evidence metrics.

A row is a dict with at least ``prediction`` and ``reference`` (optional
``category``, ``retrieved_ids``, ``evidence_ids``, ``adversarial_answer``,
``context_chars``, ``retrieval_ms``, ``e2e_ms``); scoring returns new dicts
with the metric keys added and every input key kept.
"""

from __future__ import annotations

from typing import Any

from clag.metrics.answer import (
    ANSWER_KEYS,
    abstains,
    bert_f1,
    lexical_scores,
    official_f1,
    sbert_cosine,
)
from clag.metrics.evidence import evidence_scores
from clag.metrics.settings import MetricSettings
from clag.metrics.temporal import date_match

ADVERSARIAL = 5


def answer_text(value: Any) -> str:
    """The text the authors score: falsy values (None, "", 0) are empty, others ``str(value).strip()``.

    The authors test ``not prediction`` before stringifying, so an integer
    answer such as 2022 is scored as "2022" while 0 counts as empty. A
    whitespace-only value is empty here too: the authors would still run
    SBERT on it (every other metric gives them 0), but bert-score fails on "".
    """
    return str(value).strip() if value else ""


def category_number(value: Any) -> int | None:
    """A row's category as an int (``5``, ``"5"``, ``5.0`` -> 5); None when absent or not numeric."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def category_label(value: Any) -> str | None:
    """The key of a row's category in per-category tables (``"5"``; free-form labels kept)."""
    number = category_number(value)
    if number is not None:
        return str(number)
    return None if value is None else str(value)


def date_scores(row: dict) -> dict[str, float | str | None]:
    """``date_match`` and ``date_status`` of one row: its prediction against the gold answer (``answer``
    where the row keeps it apart from the scored ``reference``, as category 5 does)."""
    when, status = date_match(answer_text(row["prediction"]), answer_text(row.get("answer", row["reference"])))
    return {"date_match": when, "date_status": status}


def score_rows(rows: list[dict], settings: MetricSettings) -> list[dict]:
    """Add per-question metric keys to each row (new dicts, same order).

    Keys added: the headline answer metrics ``f1``, ``exact_match``,
    ``bleu1``, ``meteor``, ``rouge1``, ``rouge2``, ``rougeL``, ``bert_f1``,
    ``sbert``; LoCoMo's ``f1_official``; ``adversarial_official`` (category
    5 only, else None); ``date_match`` and ``date_status``, the date-aware
    score of :mod:`clag.metrics.temporal` (None and ``gold_not_a_date`` where
    the gold answer names no date); the evidence keys (None without gold
    evidence).

    For category 5, ``settings.adversarial_mode`` picks what the headline
    keys hold: ``paper`` = the metrics against the row's ``reference`` (the
    trap answer, as the authors score it); ``official`` = LoCoMo's
    abstention rule (1 when the prediction says "not mentioned" / "no
    information available", else 0) in every headline key.

    BERTScore and SBERT run once over all scorable pairs (both sides
    non-empty); empty pairs score 0 like every other metric.

    Raises:
        ValueError: A row lacks ``prediction`` or ``reference``.
    """
    for index, row in enumerate(rows):
        missing = [key for key in ("prediction", "reference") if key not in row]
        if missing:
            raise ValueError(f"row {index} lacks {', '.join(missing)}")
    pairs = [(answer_text(row["prediction"]), answer_text(row["reference"])) for row in rows]
    scorable = [index for index, (prediction, reference) in enumerate(pairs) if prediction and reference]
    predictions = [pairs[index][0] for index in scorable]
    references = [pairs[index][1] for index in scorable]
    model_type, num_layers = settings.bert_spec()
    neural = dict.fromkeys(range(len(rows)), (0.0, 0.0))
    neural.update(
        zip(
            scorable,
            zip(
                bert_f1(predictions, references, model_type, num_layers),
                sbert_cosine(predictions, references, settings.sbert_model),
            ),
        )
    )
    scored = []
    for index, (row, (prediction, reference)) in enumerate(zip(rows, pairs)):
        category = category_number(row.get("category"))
        scores: dict[str, float] = lexical_scores(prediction, reference)
        scores["bert_f1"], scores["sbert"] = neural[index]
        adversarial = abstains(prediction) if category == ADVERSARIAL else None
        if adversarial is not None and settings.adversarial_mode == "official":
            scores = dict.fromkeys(ANSWER_KEYS, adversarial)
        scored.append(
            {
                **row,
                **scores,
                **date_scores(row),
                "f1_official": official_f1(prediction, reference, category),
                "adversarial_official": adversarial,
                **evidence_scores(row.get("retrieved_ids"), row.get("evidence_ids")),
            }
        )
    return scored
