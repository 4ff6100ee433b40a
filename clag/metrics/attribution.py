"""Why a wrong answer is wrong, read from ids alone: was the evidence stored, searched, retrieved?

The idea follows MemBase's error attribution, which sorts a memory system's
failures by stage; MemBase asks an LLM to judge each stage, this module reads
the ids every prediction row already carries (``evidence_ids``,
``retrieved_ids``, CLAG's picked clusters in ``telemetry``) and the memory's
contents where a method records them, so the attribution is exact and free.

Conventions:

* **Wrong** means token F1 below :data:`WRONG_BELOW` (0.5). LoCoMo's
  category 5 is left out: its reference is the adversarial trap (the paper's
  scoring), so its "wrong" says nothing about evidence.
* **Classes**, first match wins:

  1. :data:`FORM` -- the content is right in another form: the date-aware
     score (:mod:`clag.metrics.temporal`) matches where F1 does not;
  2. :data:`NO_EVIDENCE` -- the question has no gold evidence ids;
  3. :data:`NOT_IN_MEMORY` -- some evidence was never stored (a method that
     keeps no memory, or whose recorded memory lacks the item);
  4. :data:`PRUNED` -- CLAG searched only its picked clusters, and evidence
     it did not retrieve lay outside them;
  5. :data:`NOT_RETRIEVED` / :data:`PART_RETRIEVED` -- the evidence was in the
     searched memory but none / only part of it reached the answer's context
     (ranked out);
  6. :data:`ANSWERED_WRONG` -- every evidence item was in the context, and the
     answer was wrong all the same.

* ``retrieved_ids`` is what the answer's context held (for A-mem and CLAG,
  the retrieved notes and their linked neighbours).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from clag.metrics.scoring import category_number

WRONG_BELOW = 0.5
FORM = "right date, other form"
NO_EVIDENCE = "no gold evidence"
NOT_IN_MEMORY = "evidence never in memory"
PRUNED = "pruned by the cluster pick"
NOT_RETRIEVED = "in memory, not retrieved"
PART_RETRIEVED = "part of it retrieved"
ANSWERED_WRONG = "retrieved, answered wrong"
CLASSES = (FORM, NO_EVIDENCE, NOT_IN_MEMORY, PRUNED, NOT_RETRIEVED, PART_RETRIEVED, ANSWERED_WRONG)
UNSCORED_CATEGORIES = {"locomo": (5,)}
"""Per dataset, categories left out of the attribution (LoCoMo's adversarial trap)."""


def is_wrong(row: Mapping[str, Any], dataset: str | None) -> bool | None:
    """True when the row's answer is wrong (F1 below :data:`WRONG_BELOW`); None when the row is left out."""
    if category_number(row.get("category")) in UNSCORED_CATEGORIES.get(dataset or "", ()):
        return None
    return float(row.get("f1") or 0.0) < WRONG_BELOW


def attribute(row: Mapping[str, Any], memory: set[str] | None, searched: set[str] | None) -> str:
    """The class of one wrong answer (see the module's conventions).

    Args:
        row: A scored prediction row.
        memory: The ids the method's memory held in this episode; None when it keeps every item.
        searched: The ids the question's search was narrowed to (CLAG's picked clusters); None when
            the search covered all of memory.
    """
    if row.get("date_match") == 1.0:
        return FORM
    evidence = {str(i) for i in row.get("evidence_ids") or []}
    if not evidence:
        return NO_EVIDENCE
    if memory is not None and not evidence <= memory:
        return NOT_IN_MEMORY
    missing = evidence - {str(i) for i in row.get("retrieved_ids") or []}
    if not missing:
        return ANSWERED_WRONG
    if searched is not None and missing - searched:
        return PRUNED
    return NOT_RETRIEVED if missing == evidence else PART_RETRIEVED


def searched_ids(row: Mapping[str, Any], members: Mapping[str, Iterable[str]] | None) -> set[str] | None:
    """The ids a CLAG question searched: its picked clusters' members (None for a global search, or
    when the episode's cluster members were not recorded)."""
    telemetry = row.get("telemetry") or {}
    if not members or telemetry.get("mode") != "cluster":
        return None
    return {str(source) for cid in telemetry.get("selected") or [] for source in members.get(cid, [])}


def attribution(
    rows: Iterable[Mapping[str, Any]],
    dataset: str | None,
    memory: Mapping[str, set[str] | None],
    members: Mapping[str, Mapping[str, Iterable[str]]],
) -> Counter[str]:
    """Counts of :data:`CLASSES` over a run's wrong answers, plus ``"answered"`` (rows attributed or not)
    and ``"wrong"``. ``memory`` and ``members`` map an episode id to what :func:`attribute` and
    :func:`searched_ids` take (absent: every item kept; no clusters)."""
    counts: Counter[str] = Counter()
    for row in rows:
        wrong = is_wrong(row, dataset)
        if wrong is None:
            continue
        counts["answered"] += 1
        if wrong:
            episode = str(row.get("episode_id"))
            counts["wrong"] += 1
            counts[attribute(row, memory.get(episode), searched_ids(row, members.get(episode)))] += 1
    return counts
