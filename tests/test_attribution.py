"""Failure attribution from ids: each class on a hand-made row, the counts over a run, what is left out."""

from __future__ import annotations

from clag.metrics.attribution import (
    ANSWERED_WRONG,
    FORM,
    NO_EVIDENCE,
    NOT_IN_MEMORY,
    NOT_RETRIEVED,
    PART_RETRIEVED,
    PRUNED,
    attribute,
    attribution,
    is_wrong,
    searched_ids,
)


def row(evidence: list[str], retrieved: list[str], **more: object) -> dict[str, object]:
    return {"episode_id": "conv-26", "category": 1, "f1": 0.0, "evidence_ids": evidence, "retrieved_ids": retrieved,
            **more}  # fmt: skip


MEMBERS = {"cluster_0": ["D1:1", "D1:2"], "cluster_1": ["D2:1", "D2:2"]}
PICKED = {"mode": "cluster", "selected": ["cluster_0"]}


def test_each_class_on_its_own_row() -> None:
    assert attribute(row(["D1:1"], [], date_match=1.0), None, None) == FORM  # right date, F1 0
    assert attribute(row([], ["D1:1"]), None, None) == NO_EVIDENCE
    assert attribute(row(["D1:1"], []), set(), None) == NOT_IN_MEMORY  # no memory at all
    assert attribute(row(["D2:1"], ["D1:1"]), None, {"D1:1", "D1:2"}) == PRUNED  # outside the picked cluster
    assert attribute(row(["D1:2"], ["D1:1"]), None, {"D1:1", "D1:2"}) == NOT_RETRIEVED  # inside it, ranked out
    assert attribute(row(["D1:1", "D1:2"], ["D1:1"]), None, None) == PART_RETRIEVED
    assert attribute(row(["D1:1", "D1:2"], ["D1:2", "D1:1", "D3:3"]), None, None) == ANSWERED_WRONG


def test_what_counts_as_wrong() -> None:
    assert is_wrong({"f1": 0.49, "category": 1}, "locomo") is True
    assert is_wrong({"f1": 0.5, "category": 1}, "locomo") is False
    assert is_wrong({"f1": 0.0, "category": 5}, "locomo") is None  # the adversarial trap is left out
    assert is_wrong({"f1": 0.0, "category": 5}, "bioasq") is True


def test_a_global_search_or_unrecorded_members_search_everything() -> None:
    assert searched_ids({"telemetry": PICKED}, MEMBERS) == {"D1:1", "D1:2"}
    assert searched_ids({"telemetry": {"mode": "global", "selected": []}}, MEMBERS) is None
    assert searched_ids({"telemetry": PICKED}, None) is None


def test_counts_over_a_run() -> None:
    rows = [
        row(["D2:1"], ["D1:1"], telemetry=PICKED),  # pruned
        row(["D1:2"], ["D1:1"], telemetry=PICKED),  # ranked out inside the pick
        row(["D1:1"], ["D1:1"], telemetry=PICKED, f1=0.8),  # right: not attributed
        row(["D1:1"], [], category=5),  # adversarial: left out
    ]
    counts = attribution(rows, "locomo", {}, {"conv-26": MEMBERS})
    assert counts == {"answered": 3, "wrong": 2, PRUNED: 1, NOT_RETRIEVED: 1}
