"""A-mem and CLAG end to end with the real offline model on a tiny LoCoMo slice.

The slice is chosen so that every part of CLAG runs: the cold-start buffer
``n`` is lowered to 3, so the first 3 notes are buffered, K-Means makes 2
clusters, the last 2 notes are routed by the SLM, and ``tau_split=2`` forces
a split at the final consolidation. A-mem ingests the same first 3 items
first; CLAG's notes and its pre-clustering evolution calls are then the
same prompts and come from the call cache (that is why ``k_local`` equals
A-mem's ``k_neighbours`` here, and both are 1: evolution answers are the
longest of the run). A third run reloads CLAG's memory snapshot with
``retrieval=global`` and must answer without a single ingestion call.

The runs go through the session's vLLM server (``engine=vllm``, the
``vllm_server`` fixture), which decodes the evolution answers several times
faster than the in-process engine on a 2-core CPU; the transformers engine
keeps its own end-to-end runs (``tests/test_runner.py``, ``tests/test_schema.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clag.run import run_with_overrides

pytestmark = [pytest.mark.vllm, pytest.mark.model]

CLAG_ITEMS, AMEM_ITEMS, BUFFER = 5, 3, 3
SHARED = ["dataset=locomo", "model=qwen2.5-0.5b", "engine=vllm", "limit.episodes=1", "runner.progress=false"]
SMALL = ["method.system.k_local=1"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, vllm_server: Any) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("e2e_agentic")
    common = [*SHARED, f"cache.path={root / 'llm_cache.sqlite'}", f"paths.runs_dir={root}"]
    amem = run_with_overrides(
        [
            *common,
            "method=amem",
            f"limit.items={AMEM_ITEMS}",
            "limit.questions=1",
            "method.system.k_neighbours=1",
            f"run_dir={root / 'amem'}",
        ]
    )
    clag_overrides = [
        f"method.system.buffer_size={BUFFER}",
        "method.system.n_init=2",
        "method.system.tau_split=2",
        "method.system.k_route=2",
        *SMALL,
    ]
    clag = run_with_overrides(
        [
            *common,
            "method=clag",
            f"limit.items={CLAG_ITEMS}",
            "limit.questions=1",
            *clag_overrides,
            f"run_dir={root / 'clag'}",
        ]
    )
    reloaded = run_with_overrides(
        [
            *common,
            "method=clag",
            f"limit.items={CLAG_ITEMS}",
            "limit.questions=1",
            *clag_overrides,
            "method.system.retrieval=global",
            f"runner.reuse_memory_from={clag}",
            f"run_dir={root / 'clag_global'}",
        ]
    )
    return {"amem": amem, "clag": clag, "clag_global": reloaded}


def test_amem_two_calls_per_item_and_metrics(runs):
    (episode,) = read_jsonl(runs["amem"] / "episodes.jsonl")
    usage = episode["usage"]
    assert episode["items"] == AMEM_ITEMS and set(usage) == {"note", "evolve"}
    for stage in ("note", "evolve"):
        assert usage[stage]["json_calls"] == AMEM_ITEMS
        assert usage[stage]["calls"] == AMEM_ITEMS + usage[stage]["retries"]
    assert episode["structure"]["notes"] == AMEM_ITEMS
    metrics = json.loads((runs["amem"] / "metrics.json").read_text())
    assert metrics["n"] == 1 and metrics["overall"]["f1"]["n"] == 1
    assert metrics["usage"]["llm_calls_per_question"] >= 2
    (row,) = read_jsonl(runs["amem"] / "predictions.jsonl")
    assert set(row["usage"]) == {"keywords"} and row["telemetry"]["mode"] == "global"
    assert row["retrieved_ids"] and row["prediction"]


def test_clag_structure_and_calls_per_item(runs):
    (episode,) = read_jsonl(runs["clag"] / "episodes.jsonl")
    usage, structure = episode["usage"], episode["structure"]
    events = structure["events"]
    assert events[0] == {"event": "cold_start", "at_item": BUFFER, "clusters": 2}
    assert any(e["event"] == "split" for e in events)
    assert structure["clusters"] >= 2 and sum(structure["cluster_sizes"].values()) == CLAG_ITEMS
    assert all(p["summary"] and p["tags"] for p in structure["profiles"].values())
    # 2 calls per item before the cold start, 3 after, plus one profile per cluster at the
    # cold start and at the final consolidation; each failed JSON answer adds one retry.
    assert usage["note"]["json_calls"] == usage["evolve"]["json_calls"] == CLAG_ITEMS
    assert usage["route"]["json_calls"] == CLAG_ITEMS - BUFFER
    assert usage["profile"]["json_calls"] == 2 + structure["clusters"]
    for stage, row in usage.items():
        assert row["calls"] == row["json_calls"] + row["retries"], stage
    routed = sum(structure["routing"].values())
    assert routed == CLAG_ITEMS - BUFFER and structure["route_fallbacks_total"] == sum(
        structure["route_fallbacks"].values()
    )
    # A-mem's run already made the first notes' calls: CLAG found them in the cache.
    assert usage["note"]["cache_hits"] >= AMEM_ITEMS and usage["evolve"]["cache_hits"] >= 1


def test_clag_questions_carry_cluster_telemetry_and_metrics(runs):
    rows = read_jsonl(runs["clag"] / "predictions.jsonl")
    assert len(rows) == 1
    for row in rows:
        tele = row["telemetry"]
        assert row["usage"]["pick"]["json_calls"] == 1 and row["usage"]["keywords"]["json_calls"] == 1
        assert len(tele["candidates"]) == 2 and {c["status"] for c in tele["candidates"]} <= {"selected", "pruned"}
        assert tele["total_notes"] == CLAG_ITEMS and 0 < tele["search_space"] <= CLAG_ITEMS
        assert set(row["timings_ms"]) >= {"keywords", "pick", "search", "answer"}
        assert row["retrieved_ids"]
    metrics = json.loads((runs["clag"] / "metrics.json").read_text())
    assert metrics["n"] == 1 and metrics["overall"]["f1"]["n"] == 1
    assert metrics["structure"]["conv-26"]["clusters"] >= 2


def test_reloaded_memory_answers_with_global_retrieval_and_no_ingestion(runs):
    assert not (runs["clag_global"] / "episodes.jsonl").exists() or not read_jsonl(
        runs["clag_global"] / "episodes.jsonl"
    )
    rows = read_jsonl(runs["clag_global"] / "predictions.jsonl")
    assert len(rows) == 1
    for row in rows:
        assert set(row["usage"]) == {"keywords"}
        assert row["telemetry"]["mode"] == "global" and row["telemetry"]["clusters"] >= 2
    structure = json.loads((runs["clag_global"] / "metrics.json").read_text())["structure"]
    (episode_structure,) = structure.values()
    assert episode_structure["params"]["retrieval"] == "global" and episode_structure["clusters"] >= 2
