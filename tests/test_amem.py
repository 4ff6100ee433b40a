"""A-mem baseline: 2 LLM calls per item, global evolution, top-k plus links."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_agentic_core import Script, client, no_evolution, one_thread_embedder, topic_items

from baselines.amem import AMemMemory
from clag.embed import Embedder
from clag.memory.base import MemorySystem
from clag.types import Question


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    yield from one_thread_embedder()


QUESTION = Question(id="q1", text="What sauce did Caroline make?", answer="tomato pasta sauce", category=4)


def linking_script() -> Script:
    """Evolution links each new note to the first neighbour shown."""

    def evolve(prompt: str, schema: dict) -> dict:
        shown = [
            int(line.split("\t")[0].split(":")[1]) for line in prompt.splitlines() if line.startswith("memory index:")
        ]
        if not shown:
            return no_evolution()
        return {**no_evolution(), "should_evolve": True, "actions": ["strengthen"], "suggested_connections": shown[:1]}

    return Script(evolve=evolve)


def test_two_calls_per_item_and_global_neighbours(embedder):
    script = Script()
    memory = AMemMemory(client(script), embedder, k_neighbours=5)
    assert isinstance(memory, MemorySystem)
    memory.add_many(topic_items(9))
    assert script.calls == {"note": 9, "evolve": 9}  # the first note's evolution call sees no neighbour
    assert "memory index:" not in script.prompts["evolve"][0]
    last = script.prompts["evolve"][-1]
    assert last.count("memory index:") == 5
    # Global scope: the neighbours of a football note include other topics.
    assert any(word in last for word in ("baked", "Jupiter", "pasta", "meteor"))


def test_retrieval_adds_linked_notes_and_costs_one_call(embedder):
    script = linking_script()
    memory = AMemMemory(client(script), embedder, retrieve_k=2)
    memory.add_many(topic_items(6))
    assert memory.describe()["links"] == 5
    before = sum(script.calls.values())
    context = memory.retrieve(QUESTION)
    assert sum(script.calls.values()) - before == 1 and script.calls["keywords"] == 1
    assert context.source_ids[0] == "D1:3"  # "My tomato pasta sauce ..." ranks first for "pasta, garlic, sauce"
    ranked = [int(i.split(":")[1]) for i in context.source_ids[:2]]
    linked = [memory.core.notes[i].source_id for r in ranked for i in memory.core.notes[r].links]
    assert linked and context.source_ids[2:] == [i for i in dict.fromkeys(linked) if i not in context.source_ids[:2]]
    assert context.text.count("talk start time:") == 2 + len(linked)
    assert set(context.timings_ms) == {"keywords", "search"}
    assert context.telemetry["search_space"] == 6


def test_consolidation_reembeds_every_n_evolutions(embedder):
    memory = AMemMemory(client(linking_script()), embedder, consolidate_every=2)
    memory.add_many(topic_items(7))
    assert memory.core.stats["evolutions"] == 6
    assert memory.core.stats["refreshes"] == 3


def test_add_equals_add_many_and_save_load_retrieves_identically(embedder, tmp_path):
    one = AMemMemory(client(linking_script()), embedder)
    for item in topic_items(8):
        one.add(item)
    many = AMemMemory(client(linking_script()), embedder)
    many.add_many(topic_items(8))
    assert one.core.notes == many.core.notes
    many.save(tmp_path)
    loaded = AMemMemory(client(linking_script()), embedder)
    loaded.load(tmp_path)
    a, b = many.retrieve(QUESTION), loaded.retrieve(QUESTION)
    assert (a.text, a.source_ids) == (b.text, b.source_ids)
    assert loaded.describe() == many.describe()
