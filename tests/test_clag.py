"""CLAG decision paths with a scripted LLM and real MiniLM embeddings.

Three well-separated topics (cooking, football, astronomy) make the
geometry predictable; the scripted LLM decides every SLM choice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest
from test_agentic_core import Script, client, no_evolution, one_thread_embedder, topic_items

from clag.config import compose_config
from clag.embed import Embedder
from clag.llm.client import UsageMeter
from clag.memory.base import MemorySystem
from clag.memory.clag_method import ClagMemory, match_candidate
from clag.running.snapshots import ingestion_key
from clag.types import Question


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    yield from one_thread_embedder()


QUESTION = Question(id="q1", text="What sauce did Caroline make?", answer="tomato pasta sauce", category=4)


def clag(script: Script, embedder, **params) -> ClagMemory:
    settings = {"buffer_size": 6, "n_init": 3, "tau_split": 100, "consolidate_every": 1000, **params}
    return ClagMemory(client(script), embedder, **settings)


def calls(memory: ClagMemory, before: dict) -> dict[str, int]:
    return {stage: row["calls"] for stage, row in UsageMeter.diff(memory.llm.usage.snapshot(), before).items()}


def shown_indices(prompt: str) -> list[int]:
    return [int(i) for i in re.findall(r"^memory index:(\d+)\t", prompt, flags=re.MULTILINE)]


def test_cold_start_at_buffer_size_then_three_calls_per_item(embedder):
    memory = clag(Script(), embedder)
    assert isinstance(memory, MemorySystem)
    items = topic_items(9)
    per_item = []
    for item in items:
        before = memory.llm.usage.snapshot()
        memory.add(item)
        per_item.append(calls(memory, before))
    assert per_item[:5] == [{"note": 1, "evolve": 1}] * 5
    assert per_item[5] == {"note": 1, "evolve": 1, "profile": 3}  # the 6th note triggers the cold start
    assert per_item[6:] == [{"note": 1, "route": 1, "evolve": 1}] * 3
    state = memory.describe()
    assert state["events"][0] == {"event": "cold_start", "at_item": 6, "clusters": 3}
    assert state["clusters"] == 3 and sum(state["cluster_sizes"].values()) == 9
    assert sorted(s for members in state["cluster_members"].values() for s in members) == sorted(i.id for i in items)
    assert {p["source"] for p in state["profiles"].values()} == {"llm"}
    assert state["routing"] == {"agentic_pick": 3}
    # K-Means separates the three topics: every cluster holds one topic.
    for cluster in memory.clusters.clusters.values():
        assert len({i % 3 for i in cluster.members}) == 1


def test_router_sees_nearest_candidates_and_note_joins_the_pick(embedder):
    script = Script()
    memory = clag(script, embedder, k_route=2)
    memory.add_many(topic_items(7))  # item 6 is a cooking note
    prompt = script.prompts["route"][0]
    assert prompt.count("- cluster_id:") == 2 and "size: 2" in prompt and "representative notes:" in prompt
    first = re.search(r"- cluster_id: (cluster_\d+)", prompt).group(1)
    assert 6 in memory.clusters.clusters[first].members
    assert {i % 3 for i in memory.clusters.clusters[first].members} == {0}


def test_cosine_below_tau_opens_a_new_cluster_with_heuristic_profile(embedder):
    memory = clag(Script(), embedder, tau=0.99)
    memory.add_many(topic_items(8))
    state = memory.describe()
    assert state["routing"] == {"new_cluster_below_tau": 2}
    assert state["clusters"] == 5
    new = [e for e in state["events"] if e["event"] == "new_cluster"]
    assert [e["reason"] for e in new] == ["new_cluster_below_tau"] * 2 and new[0]["at_item"] == 7
    profile = state["profiles"][new[0]["cluster"]]
    assert profile["source"] == "heuristic" and profile["summary"].startswith("Cluster around:")


def test_new_cluster_profile_can_be_written_by_the_slm(embedder):
    memory = clag(Script(), embedder, tau=0.99, new_cluster_profile="llm")
    memory.add_many(topic_items(7))
    new = [e for e in memory.describe()["events"] if e["event"] == "new_cluster"][0]["cluster"]
    assert memory.describe()["profiles"][new] == {
        "summary": "Notes on one topic",
        "tags": ["topic", "notes", "memory"],
        "source": "llm",
    }
    assert memory.llm.usage.snapshot()["profile"]["calls"] == 4


@pytest.mark.parametrize(
    ("answer", "reason", "route_calls"),
    [({"reason": "x", "choice": "cluster_99"}, "not_a_candidate", 2), ("I pick the first one", "unparseable", 4)],
)
def test_invalid_route_falls_back_to_nearest_and_is_counted(embedder, answer, reason, route_calls):
    memory = clag(Script(route=lambda p, s: answer), embedder)
    memory.add_many(topic_items(8))
    state = memory.describe()
    assert state["routing"] == {"fallback_nearest": 2}
    assert state["route_fallbacks"] == {reason: 2} and state["route_fallbacks_total"] == 2
    assert state["clusters"] == 3
    # An unparseable answer costs the client's one retry per item.
    assert memory.llm.usage.snapshot()["route"]["calls"] == route_calls


def test_invalid_route_opens_a_new_cluster_as_the_authors_code(embedder):
    memory = clag(Script(route=lambda p, s: {"choice": "cluster_42"}), embedder, invalid_route="new_cluster")
    memory.add_many(topic_items(8))
    state = memory.describe()
    assert state["routing"] == {"new_cluster_invalid_pick": 2} and state["clusters"] == 5


def test_router_accepts_a_bare_cluster_number():
    assert match_candidate(" 2 ", ["cluster_1", "cluster_2"]) == "cluster_2"
    assert match_candidate("CLUSTER_1", ["cluster_1"]) == "cluster_1"
    assert match_candidate("cluster one", ["cluster_1"]) is None


def test_split_above_tau_split_and_profiles_rewritten(embedder):
    memory = clag(Script(), embedder, n_init=1, tau_split=8)
    memory.add_many(topic_items(12))
    assert memory.describe()["clusters"] == 1
    before = memory.llm.usage.snapshot()
    memory.finish_ingestion()
    state = memory.describe()
    split = [e for e in state["events"] if e["event"] == "split"]
    assert len(split) == 1 and split[0]["cluster"] == "cluster_0" and sum(split[0]["sizes"]) == 12
    assert state["clusters"] == 2 and state["consolidations"] == 1
    assert calls(memory, before) == {"profile": 2}
    for cid, cluster in memory.clusters.clusters.items():
        members = memory.core.vectors(cluster.members)
        assert np.allclose(memory.clusters.centroids[cid], members.mean(axis=0), atol=1e-6)
        assert set(cluster.reps) <= set(cluster.members) and len(cluster.reps) == 3


def test_consolidation_period_counts_notes_or_evolutions(embedder):
    by_notes = clag(Script(), embedder, consolidate_every=4, consolidate_counter="notes")
    by_notes.add_many(topic_items(12))
    assert by_notes.consolidations == 2  # at notes 8 and 12 (notes 4 came before the cold start)
    by_evolutions = clag(Script(), embedder, consolidate_every=4)
    by_evolutions.add_many(topic_items(12))
    assert by_evolutions.consolidations == 0  # the scripted evolution never says should_evolve


def test_local_evolution_sees_only_the_routed_cluster(embedder):
    script = Script()
    memory = clag(script, embedder, k_local=50)
    memory.add_many(topic_items(8))
    shown = shown_indices(script.prompts["evolve"][-1])
    routed = next(c for c in memory.clusters.clusters.values() if 7 in c.members)
    assert sorted(shown) == sorted(i for i in routed.members if i != 7)
    assert len(shown) < 7


def test_global_evolution_sees_the_whole_pool(embedder):
    script = Script()
    memory = clag(script, embedder, k_local=50, evolution_scope="global")
    memory.add_many(topic_items(8))
    assert sorted(shown_indices(script.prompts["evolve"][-1])) == list(range(7))


@pytest.mark.parametrize("routing", ["cosine", "kmeans"])
def test_non_agentic_routing_makes_no_route_call(embedder, routing):
    memory = clag(Script(), embedder, routing=routing, tau=0.99)
    memory.add_many(topic_items(9))
    memory.finish_ingestion()
    usage = memory.llm.usage.snapshot()
    assert "route" not in usage
    state = memory.describe()
    if routing == "cosine":  # the tau rule applies: nothing reaches 0.99
        assert state["routing"] == {"new_cluster_below_tau": 3} and state["clusters"] == 6
    else:  # nearest centroid, no tau rule, K-Means refit at consolidation
        assert state["routing"] == {"kmeans_nearest": 3} and state["clusters"] == 3
        assert [e["event"] for e in state["events"]] == ["cold_start", "refit"]


def test_picked_cluster_bounds_the_search_space(embedder):
    memory = clag(Script(), embedder)
    memory.add_many(topic_items(12))
    memory.finish_ingestion()
    before = memory.llm.usage.snapshot()
    context = memory.retrieve(QUESTION)
    assert calls(memory, before) == {"keywords": 1, "pick": 1}
    tele = context.telemetry
    (selected,) = tele["selected"]
    members = memory.clusters.clusters[selected].members
    assert tele["mode"] == "cluster" and tele["search_space"] == len(members) == 4 and tele["total_notes"] == 12
    assert len(tele["candidates"]) == 3 and len(tele["pruned"]) == 2
    assert {c["status"] for c in tele["candidates"]} == {"selected", "pruned"}
    assert {"summary", "tags", "size"} <= set(tele["candidates"][0])
    ranked = context.source_ids[: len(members)]
    assert {f"D1:{i}" for i in members} == set(ranked)
    assert context.source_ids[0] == "D1:3"  # the pasta-sauce note; the query's cluster is the cooking one
    assert set(context.timings_ms) == {"keywords", "pick", "search"}


def test_zero_clusters_picked_means_global_search(embedder):
    memory = clag(Script(pick=lambda p, s: {"reason": "none fit", "selected_clusters": []}), embedder, retrieve_k=5)
    memory.add_many(topic_items(12))
    memory.finish_ingestion()
    tele = memory.retrieve(QUESTION).telemetry
    assert tele["mode"] == "global" and tele["search_space"] == 12 and tele["selected"] == []
    assert len(tele["pruned"]) == 3 and tele["pick_fallback"] is None
    assert memory.describe()["picks"] == {"none": 1}


@pytest.mark.parametrize(("fallback", "mode"), [("global", "global"), ("nearest", "cluster")])
def test_invalid_pick_falls_back_and_is_counted(embedder, fallback, mode):
    memory = clag(
        Script(pick=lambda p, s: {"selected_clusters": ["the cooking one"]}), embedder, pick_fallback=fallback
    )
    memory.add_many(topic_items(12))
    memory.finish_ingestion()
    tele = memory.retrieve(QUESTION).telemetry
    assert tele["pick_fallback"] == "not_a_candidate" and tele["mode"] == mode
    assert memory.describe()["pick_fallbacks"] == {"not_a_candidate": 1}


def test_per_cluster_merge_keeps_selection_order(embedder):
    def pick_two(prompt: str, schema: dict) -> dict:
        return {"selected_clusters": schema["properties"]["selected_clusters"]["items"]["enum"][:2]}

    union = clag(Script(pick=pick_two), embedder, retrieve_k=3)
    union.add_many(topic_items(12))
    union.finish_ingestion()
    per_cluster = clag(Script(pick=pick_two), embedder, retrieve_k=3, merge="per_cluster")
    per_cluster.add_many(topic_items(12))
    per_cluster.finish_ingestion()
    first = union.retrieve(QUESTION).telemetry["selected"][0]
    ids = per_cluster.retrieve(QUESTION).source_ids[:3]
    assert {f"D1:{i}" for i in per_cluster.clusters.clusters[first].members} >= set(ids)
    assert union.retrieve(QUESTION).telemetry["search_space"] == 8


def test_before_cold_start_retrieval_is_global_without_pick(embedder):
    memory = clag(Script(), embedder, buffer_size=100)
    memory.add_many(topic_items(5))
    memory.finish_ingestion()
    before = memory.llm.usage.snapshot()
    context = memory.retrieve(QUESTION)
    assert calls(memory, before) == {"keywords": 1}
    assert context.telemetry["mode"] == "global" and context.timings_ms["pick"] == 0.0
    assert memory.describe()["clusters"] == 0


def test_incremental_centroids_move_on_each_join(embedder):
    fixed = clag(Script(), embedder)
    fixed.add_many(topic_items(6))
    start = {cid: c.copy() for cid, c in fixed.clusters.centroids.items()}
    fixed.add_many(topic_items(9)[6:])
    assert all(np.array_equal(start[cid], c) for cid, c in fixed.clusters.centroids.items())
    moving = clag(Script(), embedder, centroid_update="incremental")
    moving.add_many(topic_items(9))
    assert all(not np.allclose(start[cid], c) for cid, c in moving.clusters.centroids.items())


def assert_search_index_in_step(memory: ClagMemory) -> None:
    """The per-cluster search matrices hold exactly each cluster's members and their current vectors."""
    index = memory.clusters.index
    assert sorted(index.clusters) == sorted(memory.clusters.clusters)
    for cid, cluster in memory.clusters.clusters.items():
        assert index.members(cid) == [str(i) for i in cluster.members]
        query = memory.core.vectors(cluster.members[:1])[0]
        # same ranking as a search of the flat index restricted to the members
        expected = memory.core.search(query, 5, cluster.members)
        assert memory.clusters.search(query, 5, [cid]) == expected


@pytest.mark.parametrize("routing", ["agentic", "kmeans"])
def test_cluster_search_index_follows_joins_splits_refits_and_reloads(embedder, tmp_path, routing):
    memory = clag(
        Script(), embedder, n_init=2, tau_split=3, consolidate_every=4, consolidate_counter="notes", routing=routing
    )
    for item in topic_items(12):
        memory.add(item)
        if memory.clusters:
            assert_search_index_in_step(memory)
    memory.finish_ingestion()
    assert any(e["event"] == "split" for e in memory.clusters.events)
    assert_search_index_in_step(memory)
    memory.save(tmp_path)
    loaded = clag(Script(), embedder, n_init=2, tau_split=3, routing=routing)
    loaded.load(tmp_path)
    assert_search_index_in_step(loaded)


def test_add_equals_add_many(embedder):
    one = clag(Script(), embedder, tau_split=4)
    for item in topic_items(12):
        one.add(item)
    one.finish_ingestion()
    many = clag(Script(), embedder, tau_split=4)
    many.add_many(topic_items(12))
    many.finish_ingestion()
    assert one.core.notes == many.core.notes
    assert one.describe() == many.describe()


def test_save_load_round_trip_retrieves_identically(embedder, tmp_path):
    memory = clag(Script(), embedder, tau_split=4)
    memory.add_many(topic_items(12))
    memory.finish_ingestion()
    memory.save(tmp_path)
    assert {p.suffix for p in tmp_path.iterdir()} == {".json", ".npy"}
    loaded = clag(Script(), embedder, tau_split=4)
    loaded.load(tmp_path)
    assert loaded.describe() == memory.describe()
    a, b = memory.retrieve(QUESTION), loaded.retrieve(QUESTION)
    assert (a.text, a.source_ids, a.telemetry) == (b.text, b.source_ids, b.telemetry)


def test_loaded_memory_answers_with_global_retrieval_without_ingestion_calls(embedder, tmp_path):
    memory = clag(Script(), embedder)
    memory.add_many(topic_items(12))
    memory.finish_ingestion()
    memory.save(tmp_path)
    script = Script()
    variant = clag(script, embedder, retrieval="global")
    variant.load(tmp_path)
    context = variant.retrieve(QUESTION)
    assert script.calls == {"keywords": 1}
    assert context.telemetry["mode"] == "global" and context.telemetry["clusters"] == 3


def test_unknown_variant_is_rejected(embedder):
    with pytest.raises(ValueError, match="routing='semantic'; expected one of agentic, cosine, kmeans"):
        clag(Script(), embedder, routing="semantic")


def test_failed_profiles_fall_back_to_member_tags(embedder):
    memory = clag(
        Script(profile=lambda p, s: {"summary": "...your one-sentence summary here...", "tags": ["tag_1"]}), embedder
    )
    memory.add_many(topic_items(6))
    state = memory.describe()
    assert state["profile_fallbacks"] == 3
    for profile in state["profiles"].values():
        assert profile["source"] == "fallback" and profile["summary"].startswith("Memories related to: ")
        assert profile["tags"]


def test_evolution_links_and_rewrites_inside_the_cluster(embedder):
    def evolve(prompt: str, schema: dict) -> dict:
        shown = shown_indices(prompt)
        if not shown:
            return no_evolution()
        return {
            **no_evolution(),
            "should_evolve": True,
            "actions": ["strengthen", "update_neighbor"],
            "suggested_connections": shown[:1],
            "new_tags_neighborhood": [["rewritten"]],
            "new_context_neighborhood": ["Rewritten context"],
        }

    memory = clag(Script(evolve=evolve), embedder, consolidate_every=3)
    memory.add_many(topic_items(9))
    note = memory.core.notes[8]
    routed = next(c for c in memory.clusters.clusters.values() if 8 in c.members)
    assert note.links and set(note.links) <= set(routed.members)
    assert memory.core.notes[note.links[0]].tags == ["rewritten"]
    assert memory.consolidations == 1  # at evolutions 3 (before the cold start: a no-op) and 6


def test_retrieval_only_variants_share_the_ingested_snapshot():
    def key(*overrides: str) -> str:
        return ingestion_key(compose_config(["method=clag", *overrides]))

    base = key()
    assert key("method.system.retrieval=global") == base
    assert key("method.system.merge=per_cluster", "method.system.retrieve_k=5") == base
    assert key("method.system.tau=0.2") != base
    assert key("method.system.evolution_scope=global") != base
    served = key("engine=vllm")
    assert key("engine=vllm", "model.serve.chunked_prefill=true", "model.serve.kv_cache_gib=9") == served  # launch only
    assert key("engine=vllm", "model.backend.dtype=float32") != served
