"""Unit tests of the shared agentic core (note construction, evolution rules,
link expansion, persistence) with a scripted LLM and the real MiniLM embedder.

``Script`` and ``topic_items`` are also used by ``test_amem.py`` and
``test_clag.py``: a scripted answer per LLM stage, recognised by the JSON
schema the client passes with every structured call.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from scripted_llm import ScriptedBackend

from clag.embed import Embedder
from clag.llm.base import GenerationConfig
from clag.llm.client import LLMClient
from clag.memory.agentic import AgenticCore, Note, clean_strings
from clag.types import Item

TOPICS = {
    "cooking": [
        "I baked sourdough bread with a crispy crust",
        "My tomato pasta sauce needed more garlic and basil",
        "We cooked a spicy chickpea curry for dinner",
        "The chocolate cake recipe uses brown butter",
        "I grilled salmon with lemon and dill",
        "Homemade dumplings take hours to fold",
        "She roasted vegetables with olive oil and rosemary",
        "The soup simmered with lentils and cumin",
    ],
    "football": [
        "The striker scored twice in the cup final",
        "Our goalkeeper saved a penalty in extra time",
        "The football league table changed after the derby",
        "The coach changed tactics at half time",
        "Fans sang in the stadium during the match",
        "The midfielder was sent off with a red card",
        "They won the championship on goal difference",
        "Training on the pitch was cancelled because of rain",
    ],
    "astronomy": [
        "I watched Jupiter's moons through my telescope",
        "The meteor shower peaked after midnight",
        "Saturn's rings were visible from the observatory",
        "We photographed the Andromeda galaxy",
        "A lunar eclipse turned the moon red",
        "The comet's tail pointed away from the sun",
        "Stargazing in the desert showed the Milky Way",
        "The astronomer explained how nebulae form stars",
    ],
}


def topic_items(count: int, topics: tuple[str, ...] = ("cooking", "football", "astronomy")) -> list[Item]:
    """``count`` items cycling through the topics, one sentence each."""
    items = []
    for i in range(count):
        topic = topics[i % len(topics)]
        text = TOPICS[topic][(i // len(topics)) % len(TOPICS[topic])]
        items.append(Item(id=f"D1:{i}", text=text, timestamp="1:56 pm on 8 May, 2023", speaker="Caroline"))
    return items


def stage_of(schema: dict[str, Any] | None) -> str:
    props = set((schema or {}).get("properties", {}))
    for stage, key in (
        ("evolve", "should_evolve"),
        ("note", "context"),
        ("route", "choice"),
        ("profile", "summary"),
        ("pick", "selected_clusters"),
        ("answer", "answer"),
        ("keywords", "keywords"),
    ):
        if key in props:
            return stage
    return "text"


def content_words(prompt: str) -> list[str]:
    text = prompt.split("Content:\n", 1)[1].split("says : ", 1)[1]
    return [w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3]


def default_answer(stage: str, prompt: str, schema: dict[str, Any]) -> Any:
    if stage == "note":
        words = content_words(prompt)
        return {"keywords": words[:3], "context": "A remark about " + " ".join(words[:4]), "tags": words[-2:]}
    if stage == "evolve":
        return no_evolution()
    if stage == "route":
        return {"reason": "closest topic", "choice": schema["properties"]["choice"]["enum"][0]}
    if stage == "profile":
        return {"summary": "Notes on one topic", "tags": ["topic", "notes", "memory"]}
    if stage == "pick":
        return {
            "reason": "relevant",
            "selected_clusters": schema["properties"]["selected_clusters"]["items"]["enum"][:1],
        }
    if stage == "keywords":
        return {"keywords": "pasta, garlic, sauce"}
    return {"answer": "unknown"}


def no_evolution() -> dict[str, Any]:
    return {
        "should_evolve": False,
        "actions": [],
        "suggested_connections": [],
        "tags_to_update": [],
        "new_context_neighborhood": [],
        "new_tags_neighborhood": [],
    }


class Script:
    """Scripted answers per stage; ``overrides`` maps a stage to ``fn(prompt, schema) -> dict | str``."""

    def __init__(self, **overrides: Callable[[str, dict[str, Any]], Any]) -> None:
        self.overrides = overrides
        self.calls: Counter[str] = Counter()
        self.prompts: dict[str, list[str]] = {}

    def __call__(self, prompt: str, config: GenerationConfig) -> str:
        schema = config.json_schema or {}
        stage = stage_of(schema)
        self.calls[stage] += 1
        self.prompts.setdefault(stage, []).append(prompt)
        fn = self.overrides.get(stage)
        out = fn(prompt, schema) if fn else default_answer(stage, prompt, schema)
        return out if isinstance(out, str) else json.dumps(out)


def client(script: Script) -> LLMClient:
    return LLMClient(ScriptedBackend(script), cache=None)


def one_thread_embedder() -> Iterator[Embedder]:
    """The real MiniLM on one torch thread: on the shared 2-core machine two
    threads under load are ~8x slower. Restores the thread count after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Embedder()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def embedder() -> Iterator[Embedder]:
    yield from one_thread_embedder()


def filled_core(embedder: Embedder, script: Script, count: int) -> AgenticCore:
    core = AgenticCore(client(script), embedder)
    for note in core.build_notes(topic_items(count)):
        core.commit(note, core.embed(note.document()))
    return core


def test_note_construction_fills_metadata_in_one_batched_call(embedder):
    script = Script()
    core = AgenticCore(client(script), embedder)
    notes = core.build_notes(topic_items(3))
    assert script.calls == {"note": 3}
    assert notes[0].content == "Speaker Carolinesays : I baked sourdough bread with a crispy crust"
    assert notes[0].keywords == ["baked", "sourdough", "bread"]
    assert notes[0].context.startswith("A remark about baked")
    assert notes[0].source_id == "D1:0" and notes[0].timestamp == "1:56 pm on 8 May, 2023"
    assert "content:Speaker Carolinesays" in notes[0].document() and "keywords: baked, sourdough" in notes[0].document()


def test_unusable_note_answer_falls_back_to_authors_defaults(embedder):
    script = Script(note=lambda p, s: {"keywords": ["keyword1", "keyword2"], "context": "", "tags": ["tag_1"]})
    core = AgenticCore(client(script), embedder)
    (note,) = core.build_notes(topic_items(1))
    assert (note.keywords, note.context, note.tags) == ([], "General", [])
    assert core.stats["note_fallbacks"] == 1
    assert script.calls["note"] == 2  # the client's one sampled retry


def test_strengthen_links_only_shown_neighbours_and_replaces_tags(embedder):
    answer = {**no_evolution(), "should_evolve": True, "actions": ["strengthen"]}
    answer["suggested_connections"] = [1, "4", 7, 99]
    answer["tags_to_update"] = ["kitchen", "tag_2"]
    core = filled_core(embedder, Script(evolve=lambda p, s: answer), 8)
    (note,) = core.build_notes(topic_items(1))
    assert core.evolve(note, [1, 4, 5]) is True
    assert note.links == [1, 4]
    assert note.tags == ["kitchen"]  # the placeholder tag is dropped
    assert core.stats["links_rejected"] == 2


def test_lenient_links_accept_any_existing_memory_index(embedder):
    answer = {**no_evolution(), "should_evolve": True, "actions": ["strengthen"], "suggested_connections": [0, 7, 8]}
    core = filled_core(embedder, Script(evolve=lambda p, s: answer), 8)
    core.strict_links = False
    (note,) = core.build_notes(topic_items(1))
    core.evolve(note, [3])
    assert note.links == [0, 7]


def test_update_neighbor_rewrites_neighbours_in_the_order_shown(embedder):
    answer = {**no_evolution(), "should_evolve": True, "actions": ["update_neighbor"]}
    answer["new_context_neighborhood"] = ["Bread baking at home"]  # shorter than the tag lists
    answer["new_tags_neighborhood"] = [["baking"], ["football", "cup"]]
    script = Script(evolve=lambda p, s: answer)
    core = filled_core(embedder, script, 6)
    before = core.notes[5].context, core.notes[5].tags
    (note,) = core.build_notes(topic_items(1))
    core.evolve(note, [0, 1, 5])
    assert (core.notes[0].context, core.notes[0].tags) == ("Bread baking at home", ["baking"])
    assert (
        core.notes[1].tags == ["football", "cup"]
        and core.notes[1].context == "A remark about striker scored twice final"
    )
    assert (core.notes[5].context, core.notes[5].tags) == before  # no third tag list: untouched
    assert core.stats["neighbours_updated"] == 2
    prompt = script.prompts["evolve"][0]
    assert prompt.index("memory index:0\t") < prompt.index("memory index:1\t") < prompt.index("memory index:5\t")
    assert "must each have exactly 3 entries" in prompt


def test_no_evolution_and_unusable_answers_change_nothing(embedder):
    core = filled_core(embedder, Script(evolve=lambda p, s: "not json at all"), 4)
    snapshot = [(n.context, list(n.tags)) for n in core.notes]
    (note,) = core.build_notes(topic_items(1))
    assert core.evolve(note, [0, 1]) is False
    assert core.stats["evolve_failures"] == 1 and core.stats["evolutions"] == 0
    assert [(n.context, n.tags) for n in core.notes] == snapshot and note.links == []


def test_search_scope_restricts_the_pool(embedder):
    core = filled_core(embedder, Script(), 9)
    query = core.embed("pasta sauce with garlic")
    assert core.search(query, 1) == [3]  # "My tomato pasta sauce needed more garlic"
    assert set(core.search(query, 5, scope=[2, 5, 8])) == {2, 5, 8}


def test_render_follows_each_note_with_its_links_lists_links_after_ranked_ids_and_counts_their_share(embedder):
    core = filled_core(embedder, Script(), 6)
    core.notes[0].links = [4, 5]
    core.notes[2].links = [0]
    text, ids, link_share = core.render([0, 2], link_limit=1)
    lines = text.splitlines()
    assert link_share == (len(lines[1]) + len(lines[3]) + 2) / len(text)  # lines 1 and 3 came by links
    assert len(lines) == 4
    assert lines[0].startswith("talk start time:1:56 pm on 8 May, 2023\tmemory content: Speaker Carolinesays : I baked")
    assert "memory keywords: ['baked', 'sourdough', 'bread']" in lines[0] and "memory tags:" in lines[0]
    assert "dumplings" not in text and "striker" not in lines[1]  # link limit 1: only note 4
    assert ids == ["D1:0", "D1:2", "D1:4"]


def test_refresh_reembeds_from_current_metadata(embedder):
    core = filled_core(embedder, Script(), 3)
    old = core.vectors([0])[0].copy()
    core.notes[0].context = "Astronomy and telescopes"
    core.refresh_embeddings()
    assert core.vectors([0])[0] @ old < 0.999
    assert core.stats["refreshes"] == 1 and len(core.index) == 3


def test_save_load_round_trip(embedder, tmp_path):
    core = filled_core(embedder, Script(), 5)
    core.notes[3].links = [1]
    core.stats["evolutions"] = 2
    core.save(tmp_path)
    other = AgenticCore(client(Script()), embedder)
    other.load(tmp_path)
    assert other.notes == core.notes and other.stats == core.stats
    query = core.embed("goalkeeper penalty")
    assert other.search(query, 5) == core.search(query, 5)
    assert other.render([3], 10) == core.render([3], 10)
    assert not list(tmp_path.glob("*.pkl"))


def test_clean_strings_drops_placeholders_and_duplicates():
    assert clean_strings(["a", " a ", "", "tag_1", 3, None, "b"]) == ["a", "3", "b"]
    assert clean_strings("not a list") == []
    assert Note(0, "x", "c", "t").line(with_index=True).startswith("memory index:0\t")
