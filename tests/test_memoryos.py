"""MemoryOS baseline: tiers, migration, segments, heat, promotion, eviction, persistence.

Unit tests drive the control flow with a scripted LLM (tests/scripted_llm.py)
and the real MiniLM embedder, so merge decisions use real cosines. The
end-to-end test runs the real offline model through ``clag.run``.
"""

from __future__ import annotations

import json
import math

import pytest
from scripted_llm import ScriptedBackend

from baselines.memoryos import MemoryOSMemory
from baselines.memoryos.prompts import clean_text, parse_bool, parse_facts, parse_topics
from baselines.memoryos.state import Heat, Segment, parse_timestamp
from clag.embed import Embedder
from clag.llm.client import LLMClient
from clag.types import Item, Question

DATE = "1:56 pm on 8 May, 2023"

#: Topic per keyword found in a page: (theme, keywords, summary).
TOPICS = {
    "paint": ("painting", ["painting", "art"], "Caroline talks about her painting hobby and her canvases."),
    "hik": ("hiking", ["hiking", "mountains"], "Melanie describes a weekend hiking trip in the mountains."),
    "cook": ("cooking", ["cooking", "recipes"], "They exchange recipes for cooking pasta and soup at home."),
}


CONTINUITY = "continue the same conversation thread"
META = ("running summary", "Summarise the conversation exchange")
PROFILE = ("Write a short profile", "updated profile")


def _topic_of(text: str) -> str | None:
    return next((key for key in TOPICS if key in text.lower()), None)


def scripted(prompt: str, _config) -> str:
    """A well-behaved model: topics by keyword, continuity when two pages share a topic."""
    if CONTINUITY in prompt:
        first, second = prompt.split("Second part:")
        return "true" if _topic_of(first) and _topic_of(first) == _topic_of(second) else "false"
    if any(marker in prompt for marker in META):
        return f"Summary: Thread about {_topic_of(prompt.rsplit('xchange:', 1)[1]) or 'small talk'}."
    if '"topics"' in prompt:
        key = _topic_of(prompt.split("Excerpt:")[1]) or "paint"
        theme, keywords, summary = TOPICS[key]
        return json.dumps({"topics": [{"theme": theme, "keywords": keywords, "summary": summary}]})
    if any(marker in prompt for marker in PROFILE):
        return "Caroline is a curious, warm person who paints landscapes and enjoys art classes."
    if '"user_facts"' in prompt:
        return json.dumps({"user_facts": ["Caroline paints landscapes.", "none"],
                           "assistant_facts": ["Melanie went hiking in May 2023."]})
    if "keywords" in prompt:
        return json.dumps({"keywords": "painting, art"})
    raise AssertionError(f"unexpected prompt: {prompt[:80]}")


def garbage(_prompt: str, _config) -> str:
    return "I am not sure what you mean"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def make(embedder: Embedder, respond=scripted, **params) -> tuple[MemoryOSMemory, ScriptedBackend]:
    backend = ScriptedBackend(respond)
    return MemoryOSMemory(LLMClient(backend), embedder, **params), backend


def pair(n: int, topic: str, session: str = "session_1", date: str = DATE) -> list[Item]:
    """One page worth of items: Caroline then Melanie on ``topic``."""
    return [
        Item(f"D{n}:1", f"I keep thinking about {topic} lately.", date, "Caroline", session),
        Item(f"D{n}:2", f"Tell me more about the {topic}!", date, "Melanie", session),
    ]


def stages(backend: ScriptedBackend) -> dict[str, int]:
    """Calls per prompt kind, from the backend's record."""
    out: dict[str, int] = {}
    for prompt, _ in backend.calls:
        kind = next(k for k, marker in (("continuity", CONTINUITY), ("meta", META[0]), ("meta", META[1]),
                                        ("summary", '"topics"'), ("profile", PROFILE[0]), ("profile", PROFILE[1]),
                                        ("facts", '"user_facts"'), ("keywords", "keywords")) if marker in prompt)
        out[kind] = out.get(kind, 0) + 1
    return out


# --- pure helpers ------------------------------------------------------------------------------------------


def test_parse_timestamp_reads_every_dataset_layout():
    assert parse_timestamp("1:56 pm on 8 May, 2023") == parse_timestamp("2023-05-08 13:56:00")
    assert parse_timestamp("10:37 am on 27 June, 2023") - parse_timestamp("2023-06-27 00:00:00") == 10 * 3600 + 37 * 60
    assert parse_timestamp("2020-01-01 00:00:00") == 1577836800.0
    assert parse_timestamp("2020-01-01T00:00:00+00:00") == 1577836800.0
    assert parse_timestamp("sometime last spring") is None
    assert parse_timestamp("") is None


def test_heat_is_eq4_with_recency_on_the_item_clock():
    heat = Heat(alpha=1.0, beta=1.0, gamma=1.0, tau_s=1e7)
    segment = Segment("s0", "summary", [], ["p0", "p1"], visits=2, length=3, last_visit=100.0)
    assert heat(segment, 100.0) == pytest.approx(2 + 3 + 1)
    assert heat(segment, 100.0 + 1e7) == pytest.approx(2 + 3 + math.exp(-1))
    locomo_eval = Heat(alpha=0.8, beta=0.8, gamma=0.0001, tau_s=3600)
    assert locomo_eval(segment, 100.0) == pytest.approx(0.8 * 2 + 0.8 * 3 + 0.0001)


def test_answer_parsers_are_tolerant():
    assert parse_bool("True.") is True and parse_bool("no, it changes topic") is False
    assert parse_bool("maybe") is None
    topics = parse_topics({"topics": [{"theme": "x", "keywords": "Art, art , Paint", "summary": " About art. "},
                                      {"theme": "y", "keywords": [], "summary": "your summary here"},
                                      "junk"]}, max_topics=2)
    assert topics == [("About art.", ["art", "paint"])]
    assert parse_topics(None, 2) == []
    assert parse_facts(["- Caroline paints.", "None.", "", "Caroline paints.", 3]) == ["Caroline paints.", "3"]
    assert clean_text(' Updated summary: "Caroline paints." ') == "Caroline paints."
    assert clean_text("Summary so far: Caroline paints.") == "Caroline paints."
    assert clean_text("None.") == "" and clean_text("Caroline: I paint.") == "Caroline: I paint."


# --- pages and the short-term queue ------------------------------------------------------------------------


def test_pages_pair_alternating_turns_within_a_session(embedder):
    memory, _ = make(embedder, short_term_capacity=50)
    items = [
        Item("D1:1", "hi", DATE, "Caroline", "session_1"),
        Item("D1:2", "hello", DATE, "Melanie", "session_1"),
        Item("D1:3", "one more", DATE, "Caroline", "session_1"),  # odd turn closes the session alone
        Item("D2:1", "I start this time", DATE, "Melanie", "session_2"),  # B opens: pairs with the next A
        Item("D2:2", "sure", DATE, "Caroline", "session_2"),
        Item("D2:3", "again", DATE, "Caroline", "session_2"),  # same speaker twice: a page each
        Item("D2:4", "twice", DATE, "Caroline", "session_2"),
    ]
    memory.add_many(items)
    assert [memory.pages[pid].item_ids for pid in memory.short_term] == [
        ["D1:1", "D1:2"], ["D1:3"], ["D2:1", "D2:2"], ["D2:3"], ["D2:4"]]
    single, _ = make(embedder, short_term_capacity=50, page_mode="item")
    single.add_many(items)
    assert len(single.short_term) == len(items)


def test_queue_overflow_migrates_the_oldest_pages_with_three_calls_each(embedder):
    memory, backend = make(embedder, short_term_capacity=2)
    for n, topic in enumerate(["painting", "hiking", "cooking", "painting", "hiking"], start=1):
        memory.add_many(pair(n, topic))
    assert [memory.pages[pid].item_ids[0] for pid in memory.short_term] == ["D4:1", "D5:1"]
    assert memory.describe()["pages"] == {"short_term": 2, "mid_term": 3}
    # The first page that ever migrates has no predecessor to be continuous with.
    assert stages(backend) == {"continuity": 2, "meta": 3, "summary": 3}
    assert memory.describe()["llm_requests"]["mid_term"] == {"continuity": 2, "meta": 3, "summary": 3}


def test_every_item_of_a_real_locomo_slice_is_accounted_for(embedder, data_dir):
    from clag.data import load_episodes

    episode = load_episodes("locomo", episodes=1, items=60)[0]
    memory, _ = make(embedder, short_term_capacity=3)
    memory.add_many(episode.items)
    memory.finish_ingestion()
    tiers = memory.item_tiers()
    assert set(tiers) == {item.id for item in episode.items}
    assert set(tiers.values()) == {"short_term", "mid_term"}
    counts = memory.describe()["items"]
    assert counts["short_term"] + counts["mid_term"] == 60 and counts["evicted"] == 0


# --- mid-term segments -------------------------------------------------------------------------------------


def test_same_topic_joins_a_segment_and_a_new_topic_opens_one(embedder):
    memory, _ = make(embedder, short_term_capacity=1)
    for n, topic in enumerate(["painting", "painting", "hiking", "hiking"], start=1):
        memory.add_many(pair(n, topic))
    members = {seg.summary: [memory.pages[p].item_ids[0] for p in seg.page_ids] for seg in memory.segments.values()}
    assert members == {TOPICS["paint"][2]: ["D1:1", "D2:1"], TOPICS["hik"][2]: ["D3:1"]}
    assert memory.describe()["merges"] == 1 and memory.describe()["segments_created"] == 2
    # An unreachable threshold opens a segment for every topic.
    strict, _ = make(embedder, short_term_capacity=1, segment_threshold=2.5)
    for n, topic in enumerate(["painting", "painting", "hiking"], start=1):
        strict.add_many(pair(n, topic))
    assert len(strict.segments) == 2 and strict.describe()["merges"] == 0


def test_continuous_pages_share_one_chain_summary(embedder):
    memory, backend = make(embedder, short_term_capacity=1)
    for n, topic in enumerate(["painting", "painting", "hiking", "cooking"], start=1):
        memory.add_many(pair(n, topic))
    first, second, third = (memory.pages[f"p{i}"] for i in range(3))
    assert first.chain == second.chain != third.chain
    assert memory.chain_meta[first.chain] == "Thread about paint."
    # The second page of the chain was summarised from the chain's summary so far.
    # (the chain's first page asks for a fresh summary, its "Summary:" label is dropped).
    meta_prompts = [p for p, _ in backend.calls if any(marker in p for marker in META)]
    assert "Summary so far" not in meta_prompts[0] and "Summary so far: Thread about paint." in meta_prompts[1]


def test_add_many_batches_but_equals_adding_one_by_one(embedder):
    items = [it for n, topic in enumerate(["painting", "painting", "hiking", "painting", "cooking", "hiking"], 1)
             for it in pair(n, topic, date=f"{n}:00 pm on {n} May, 2023")]
    one, one_backend = make(embedder, short_term_capacity=2)
    for item in items:
        one.add(item)
    many, many_backend = make(embedder, short_term_capacity=2)
    many.add_many(items)
    assert sorted(p for p, _ in one_backend.calls) == sorted(p for p, _ in many_backend.calls)
    assert {s.id: s.page_ids for s in one.segments.values()} == {s.id: s.page_ids for s in many.segments.values()}
    assert one.chain_meta == many.chain_meta and one.describe() == many.describe()


# --- heat, promotion, eviction -----------------------------------------------------------------------------


def test_hot_segment_is_promoted_to_long_term_and_its_heat_resets(embedder):
    memory, backend = make(embedder, short_term_capacity=1, promotion_threshold=5.0)
    for n in range(1, 5):  # three migrated pages: heat 3 pages + recency 1 = 4 < 5
        memory.add_many(pair(n, "painting"))
    (segment,) = memory.segments.values()
    assert memory.heat(segment, memory.clock) == pytest.approx(4.0)
    assert memory.describe()["promotions"] == 0
    memory.add_many(pair(5, "painting"))  # the fourth page brings heat to 5
    assert memory.describe()["promotions"] == 1
    assert (segment.length, segment.visits, len(segment.analyzed)) == (0, 0, 4)
    assert memory.heat(segment, memory.clock) == pytest.approx(1.0)
    assert memory.profile.startswith("Caroline is a curious")
    assert list(memory.user_facts.facts.values()) == ["Caroline paints landscapes."]
    assert list(memory.assistant_facts.facts.values()) == ["Melanie went hiking in May 2023."]
    assert stages(backend)["profile"] == 1 and stages(backend)["facts"] == 1
    assert memory.describe()["llm_requests"]["long_term"] == {"profile": 1, "facts": 1}
    # After the reset the segment needs four new pages to get hot again; the profile is then rewritten.
    memory.add_many(pair(6, "painting"))
    assert memory.describe()["promotions"] == 1
    memory.add_many([item for n in range(7, 10) for item in pair(n, "painting")])
    assert memory.describe()["promotions"] == 2 and len(segment.analyzed) == 8
    first, second = (p for p, _ in backend.calls if any(marker in p for marker in PROFILE))
    assert "Current profile" not in first and "(1:56 pm on 8 May, 2023) Caroline: I keep thinking" in first
    assert "Current profile:\nCaroline is a curious" in second


def test_recency_decays_with_item_timestamps_not_the_wall_clock(embedder):
    memory, _ = make(embedder, short_term_capacity=1)
    memory.add_many(pair(1, "painting", date="1:00 pm on 1 January, 2023"))
    memory.add_many(pair(2, "hiking", date="1:00 pm on 1 January, 2023"))
    (segment,) = memory.segments.values()
    assert memory.heat(segment, memory.clock) == pytest.approx(2.0)
    memory.add_many(pair(3, "hiking", date="2020-01-01 00:00:00"))  # older stamp: the clock never runs back
    memory.add_many([Item("D9:1", "undated cooking", "sometime", "Caroline", "session_9")])
    assert memory.clock == parse_timestamp("1:00 pm on 1 January, 2023")
    assert memory.describe()["fallbacks"]["timestamp"] == 1
    memory.add_many(pair(4, "cooking", date="1:00 pm on 27 April, 2023"))
    elapsed = parse_timestamp("1:00 pm on 27 April, 2023") - parse_timestamp("1:00 pm on 1 January, 2023")
    assert elapsed == pytest.approx(1e7, rel=0.01)  # about 116 days
    assert memory.heat(segment, memory.clock) == pytest.approx(1 + math.exp(-elapsed / 1e7))


@pytest.mark.parametrize(("eviction", "evicted_topic"), [("heat", "hiking"), ("lfu", "painting")])
def test_eviction_beyond_capacity(embedder, eviction, evicted_topic):
    memory, _ = make(embedder, short_term_capacity=1, mid_term_capacity=2, eviction=eviction)
    topics = ["painting", "painting", "hiking", "cooking", "cooking"]
    items = [it for n, topic in enumerate(topics, start=1) for it in pair(n, topic)]
    memory.add_many(items)
    # Heat: painting has 2 pages (heat 3), hiking 1 (heat 2) goes; LFU: nothing retrieved, the oldest goes.
    assert len(memory.segments) == 2 and memory.describe()["evictions"] == 1
    assert all(evicted_topic not in seg.keywords for seg in memory.segments.values())
    tiers = memory.item_tiers()
    assert set(tiers) == {item.id for item in items}
    gone = [item.id for item in items if evicted_topic in item.text]
    assert {tiers[item_id] for item_id in gone} == {"evicted"}
    assert memory.describe()["items"]["evicted"] == len(gone)


# --- retrieval ---------------------------------------------------------------------------------------------


def question(text: str = "What does Caroline paint?") -> Question:
    return Question("q1", text, "landscapes", 4, ("D1:1",))


def test_retrieve_ranks_mid_term_pages_then_short_term_newest_first(embedder):
    memory, backend = make(embedder, short_term_capacity=2)
    for n, topic in enumerate(["painting", "hiking", "painting", "cooking", "hiking"], start=1):
        memory.add_many(pair(n, topic))
    painting = next(s for s in memory.segments.values() if "painting" in s.keywords)
    context = memory.retrieve(question())
    # Mid-term pages first (the two painting pages lead), then the short-term queue, newest page first.
    assert sorted(context.source_ids[:4]) == ["D1:1", "D1:2", "D3:1", "D3:2"]
    assert context.source_ids[-4:] == ["D5:1", "D5:2", "D4:1", "D4:2"]
    assert set(context.source_ids[4:-4]) <= {"D2:1", "D2:2"}
    assert painting.visits == 1 and painting.retrievals == 1
    assert set(context.timings_ms) == {"keywords", "mid_term", "long_term", "short_term"}
    assert context.telemetry["query_keywords"] == ["painting", "art"]
    assert context.telemetry["segments_searched"] == 2 and context.telemetry["short_term_pages"] == 2
    assert context.text.startswith("Recent conversation:\n(1:56 pm on 8 May, 2023) Caroline: I keep thinking about"
                                   " cooking")
    assert "Relevant past conversations:" in context.text and "Thread summary: Thread about" in context.text
    assert memory.describe()["llm_requests"]["retrieval"] == {"keywords": 1}
    assert stages(backend)["keywords"] == 1


def test_retrieve_includes_profile_and_facts_after_promotion(embedder):
    memory, _ = make(embedder, short_term_capacity=1, promotion_threshold=3.0)
    for n in range(1, 4):
        memory.add_many(pair(n, "painting"))
    context = memory.retrieve(question())
    assert "Profile of Caroline:\nCaroline is a curious" in context.text
    assert "Facts about Caroline:\n- Caroline paints landscapes." in context.text
    assert "Facts about Melanie:\n- Melanie went hiking in May 2023." in context.text
    assert context.telemetry["facts"] == {"user": 1, "assistant": 1}
    empty, _ = make(embedder)
    nothing = empty.retrieve(question())
    assert (nothing.text, nothing.source_ids) == ("", [])


def test_own_answer_step_hands_memoryos_prompt_to_the_answerer(embedder):
    """answer_step=memoryos: the authors' one concise-answer prompt around the same context, no category-5 choice."""
    from clag.answer import ANSWER_SCHEMA, NOT_MENTIONED, Answerer

    memory, _ = make(embedder, short_term_capacity=1, answer_step="memoryos")
    for n, topic in enumerate(["painting", "hiking"], start=1):
        memory.add_many(pair(n, topic))
    trap = Question("q5", "What does Melanie paint?", "", 5, ("D1:1",), adversarial_answer="landscapes")
    context = memory.retrieve(trap)
    assert context.answer_prompt.startswith("You are Melanie, in a long conversation with Caroline.")
    assert context.text in context.answer_prompt and "15 July 2023" in context.answer_prompt
    assert NOT_MENTIONED not in context.answer_prompt
    shared, _ = make(embedder, short_term_capacity=1)
    shared.add_many(pair(1, "painting"))
    assert shared.retrieve(trap).answer_prompt is None

    backend = ScriptedBackend(lambda prompt, _config: json.dumps({"answer": "watercolours"}))
    predictions = Answerer(LLMClient(backend)).answer([trap, question()], [context.text, "ctx"],
                                                      [context.answer_prompt, None])
    assert [(reply.text, reply.parsed) for reply in predictions] == [("watercolours", True)] * 2
    sent = sorted(prompt for prompt, _ in backend.calls)  # the own prompt goes as is, the other keeps the shared one
    assert sent[0].startswith("Based on the context: ctx, write an answer") and sent[1] == context.answer_prompt
    assert ANSWER_SCHEMA["required"] == ["answer"]
    with pytest.raises(ValueError, match="answer_step"):
        make(embedder, answer_step="own")


def test_unusable_llm_answers_fall_back_and_are_counted(embedder):
    memory, backend = make(embedder, respond=garbage, short_term_capacity=1, promotion_threshold=3.0)
    items = [it for n in range(1, 6) for it in pair(n, "painting")]
    memory.add_many(items)
    fallbacks = memory.describe()["fallbacks"]
    assert fallbacks["continuity"] == 3 and fallbacks["summary"] == 4
    assert fallbacks["profile"] >= 1 and fallbacks["facts"] >= 1
    assert memory.profile == "" and len(memory.user_facts) == 0
    assert set(memory.item_tiers()) == {item.id for item in items}
    # The failed JSON calls were retried once by the client, and counted there too.
    usage = memory.llm.usage.snapshot()
    assert usage["summary"]["fallbacks"] == 4 and usage["summary"]["retries"] == 4
    context = memory.retrieve(question())
    assert context.telemetry["query_keywords"] == ["what does caroline paint?"]
    assert len(backend.calls) > 0


# --- persistence -------------------------------------------------------------------------------------------


def test_save_and_load_round_trip_the_whole_state(embedder, tmp_path):
    memory, _ = make(embedder, short_term_capacity=1, promotion_threshold=3.0, mid_term_capacity=2)
    for n, topic in enumerate(["painting", "painting", "painting", "hiking", "cooking", "cooking"], start=1):
        memory.add_many(pair(n, topic))
    memory.save(tmp_path)
    restored, backend = make(embedder, short_term_capacity=1, promotion_threshold=3.0, mid_term_capacity=2)
    restored.load(tmp_path)
    assert restored.describe() == memory.describe()
    assert restored.item_tiers() == memory.item_tiers()
    before, after = memory.retrieve(question()), restored.retrieve(question())
    assert (after.text, after.source_ids) == (before.text, before.source_ids)
    # Ingestion continues where it stopped: the next page chains onto the last migrated one.
    restored.add_many(pair(7, "hiking"))
    memory.add_many(pair(7, "hiking"))
    assert restored.describe() == memory.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        "memoryos.json", "segments.npy", "segments.ids.json", "pages.npy", "pages.ids.json",
        "user_facts.json", "user_facts.npy", "user_facts.ids.json",
        "assistant_facts.json", "assistant_facts.npy", "assistant_facts.ids.json"])


# --- configs -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "expected"), [
    ("memoryos", {"short_term_capacity": 7, "mid_term_capacity": 200, "eviction": "heat", "fact_threshold": 0.01,
                  "heat": Heat(1.0, 1.0, 1.0, 1e7)}),
    ("memoryos_locomo", {"short_term_capacity": 1, "mid_term_capacity": 2000, "eviction": "lfu",
                         "fact_threshold": 0.1, "heat": Heat(0.8, 0.8, 0.0001, 3600)}),
])
def test_configs_instantiate_the_paper_and_locomo_eval_presets(embedder, method, expected):
    import hydra

    from clag.config import compose_config

    cfg = compose_config([f"method={method}"])
    memory = hydra.utils.instantiate(cfg.method.system, llm=LLMClient(ScriptedBackend(scripted)), embedder=embedder)
    assert isinstance(memory, MemoryOSMemory) and cfg.method.name == method
    assert {key: getattr(memory, key) for key in expected} == expected
    assert (memory.segment_threshold, memory.promotion_threshold, memory.top_segments, memory.top_pages) == (
        0.6, 5.0, 5, 10)
    assert memory.max_new_tokens == {"continuity": 10, "meta": 100}
    assert memory.answer_step == "memoryos"  # scale=full, the paper's protocol: MemoryOS's own answer step
    demo = compose_config([f"method={method}", "scale=demo"])
    assert demo.method.system.answer_step == "shared"


# --- end to end with the real offline model ----------------------------------------------------------------


@pytest.mark.model
@pytest.mark.slow  # make test-all; make test: MemoryOS on the real model in test_vllm_engine.py
def test_end_to_end_run_on_a_real_locomo_slice(tmp_path, embedder):
    """12 LoCoMo turns (6 pages; a queue of 2 sends 4 to mid-term), 2 questions, the real 0.5B model.

    A promotion threshold of 3 (two pages in one segment) exercises the long-term tier on this slice.
    Run under ``flock /tmp/clag-model.lock``; 13 ingestion calls, 1-3 minutes on 2 CPU cores.
    """
    from clag.data import load_episodes
    from clag.run import run_with_overrides

    run_dir = run_with_overrides([
        "method=memoryos", "dataset=locomo", "model=qwen2.5-0.5b", "limit.episodes=1", "limit.items=12",
        "limit.questions=2", "runner.answer_batch_size=2", "runner.progress=false",
        "model.generation.max_new_tokens=160",
        "method.system.short_term_capacity=2", "method.system.promotion_threshold=3",
        f"run_dir={tmp_path / 'run'}", f"cache.path={tmp_path / 'cache.sqlite'}",
    ])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == metrics["n"] == 2
    assert 0.0 <= metrics["overall"]["f1"]["mean"] <= 1.0 and 0.0 <= metrics["evidence"]["overall"]["r10"]["mean"] <= 1
    for row in rows:
        assert row["retrieved_ids"] and row["context_chars"] > 0
        assert {"keywords", "mid_term", "long_term", "short_term"} <= row["timings_ms"].keys()
        assert row["telemetry"]["segments_searched"] >= 1 and row["telemetry"]["short_term_pages"] == 2

    structure = metrics["structure"]["conv-26"]
    assert structure["items"] == {"short_term": 4, "mid_term": 8, "evicted": 0}
    assert structure["pages"] == {"short_term": 2, "mid_term": 4}
    # Per-tier usage: every requested call reached the client under its stage name.
    usage = metrics["usage"]
    requests = structure["llm_requests"]
    assert requests["mid_term"] == {"continuity": 3, "meta": 4, "summary": 4}
    for stage, count in requests["mid_term"].items():
        assert usage["ingestion"][stage]["calls"] - usage["ingestion"][stage]["retries"] == count
    assert structure["promotions"] >= 1
    assert requests["long_term"] == {"profile": structure["promotions"], "facts": structure["promotions"]}
    assert usage["ingestion"]["facts"]["json_calls"] == structure["promotions"]
    assert usage["ingestion"]["profile"]["calls"] == structure["promotions"]
    assert usage["questions"]["keywords"]["calls"] == 2
    assert all(row["llm_calls"] >= 1.5 for row in rows)  # keywords + a share of the batched answer call

    # The saved snapshot accounts for every item of the slice.
    episode = load_episodes("locomo", episodes=1, items=12)[0]
    memory = MemoryOSMemory(LLMClient(ScriptedBackend(garbage)), embedder)
    memory.load(run_dir / "memory" / "conv-26")
    assert set(memory.item_tiers()) == {item.id for item in episode.items}
