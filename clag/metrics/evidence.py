"""Evidence metrics: do the retrieved source ids contain the gold evidence?

Conventions follow BEIR (``beir/retrieval/evaluation.py``, which defers to
pytrec_eval) with binary relevance:

* R@k = |gold in the top k| / |gold| (the denominator is every gold id, not
  min(k, |gold|)).
* nDCG@k = DCG@k / IDCG@k with gain 1 / log2(rank + 1), rank from 1; the
  ideal ranking puts min(k, |gold|) gold ids first.
* A run is a set of ids, so a repeated retrieved id counts once, at its best
  rank (our lists are ranked, so that is its first occurrence).

E-Prec, E-Recall and E-F1 compare the whole retrieved set with the gold set,
per question, and are averaged over questions (Table 4's E-F1 is lower than
the F1 of its mean precision and recall, so it is a per-question mean). With
ten retrieved ids, E-Recall equals R@10, as in Table 4.

Questions with no gold evidence have no value (``None``) and are counted
apart by the aggregate, not scored as zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

EVIDENCE_KEYS = ("e_prec", "e_recall", "e_f1", "r5", "r10", "ndcg10")


def _ranked_unique(ids: Iterable) -> list[str]:
    return list(dict.fromkeys(str(key) for key in ids))


def recall_at(ranked: list[str], gold: set[str], k: int) -> float:
    """Share of the gold ids found among the first ``k`` retrieved."""
    return len(gold.intersection(ranked[:k])) / len(gold)


def ndcg_at(ranked: list[str], gold: set[str], k: int) -> float:
    """Binary-relevance nDCG@k."""
    dcg = sum(1.0 / math.log2(rank + 2) for rank, key in enumerate(ranked[:k]) if key in gold)
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(k, len(gold))))
    return dcg / ideal


def evidence_scores(retrieved_ids: Iterable | None, evidence_ids: Iterable | None) -> dict[str, float | None]:
    """Every evidence metric of one question; all ``None`` when it has no gold evidence.

    Args:
        retrieved_ids: Source ids of the retrieved context, best first (None = nothing retrieved).
        evidence_ids: Gold evidence ids (LoCoMo ``dia_id``s, HotpotQA sentence ids, ...).
    """
    gold = set(_ranked_unique(evidence_ids or ()))
    if not gold:
        return dict.fromkeys(EVIDENCE_KEYS)
    ranked = _ranked_unique(retrieved_ids or ())
    hits = len(gold.intersection(ranked))
    precision = hits / len(ranked) if ranked else 0.0
    recall = hits / len(gold)
    return {
        "e_prec": precision,
        "e_recall": recall,
        "e_f1": 2 * precision * recall / (precision + recall) if hits else 0.0,
        "r5": recall_at(ranked, gold, 5),
        "r10": recall_at(ranked, gold, 10),
        "ndcg10": ndcg_at(ranked, gold, 10),
    }
