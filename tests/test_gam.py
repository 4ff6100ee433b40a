"""GAM baseline: paging, memos, the research loop, its fallbacks and bounds, save/load.

The loop is driven by a scripted backend (control flow only); searches use
the real MiniLM embedder and BM25. The end-to-end test at the bottom runs
the real offline model through the runner.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from scripted_llm import ScriptedBackend

from baselines.gam import GamMemory
from baselines.gam.prompts import render_abstracts
from baselines.gam.search import PageIndex
from clag.embed import Embedder
from clag.llm.client import LLMClient
from clag.types import Item, Question

# First words of each prompt (see baselines/gam/prompts.py).
OPENINGS = {
    "memo": "You write the long-term memory abstract",
    "plan": "You plan retrieval",
    "integrate": "You merge newly retrieved evidence",
    "check": "You judge whether",
    "requests": "You write follow-up retrieval questions",
}

SESSIONS = {
    "session_1": [
        ("Caroline", "I went to the LGBTQ support group yesterday and it was so powerful."),
        ("Melanie", "That sounds amazing, I am proud of you for going."),
    ],
    "session_2": [
        ("Melanie", "I painted a sunrise over the lake last weekend."),
        ("Caroline", "Your painting sounds beautiful, do you paint often?"),
        ("Melanie", "Every Sunday morning, it keeps me calm."),
    ],
    "session_3": [
        ("Caroline", "I am researching adoption agencies because I want to build a family."),
        ("Melanie", "Adoption is a wonderful way to start a family."),
    ],
}
QUESTION = Question(id="q1", text="What did Caroline research?", answer="adoption agencies", category=4)


def make_items() -> list[Item]:
    items = []
    for number, (session, turns) in enumerate(SESSIONS.items(), 1):
        for turn, (speaker, text) in enumerate(turns, 1):
            items.append(Item(f"D{number}:{turn}", text, f"day {number}", speaker, session))
    return items


def stage_of(prompt: str) -> str:
    return next(stage for stage, opening in OPENINGS.items() if prompt.startswith(opening))


class Script:
    """Replies per stage; a list is consumed in order and its last reply repeats."""

    def __init__(self, **replies: str | list[str] | Callable[[str], str]) -> None:
        defaults = {
            "memo": "An abstract.",
            "plan": json.dumps(
                {
                    "info_needs": ["what Caroline researched"],
                    "tools": ["keyword", "vector"],
                    "keyword_collection": ["Caroline adoption"],
                    "vector_queries": ["What is Caroline researching?"],
                    "page_index": [],
                }
            ),
            "integrate": '{"content": "Caroline is researching adoption agencies."}',
            "check": '{"enough": true}',
            "requests": '{"new_requests": ["Which adoption agencies did Caroline look at?"]}',
        }
        self.replies = {**defaults, **replies}
        self.stages: list[str] = []
        self.prompts: list[str] = []

    def __call__(self, prompt: str, config) -> str:
        stage = stage_of(prompt)
        self.stages.append(stage)
        self.prompts.append(prompt)
        reply = self.replies[stage]
        if callable(reply):
            return reply(prompt)
        if isinstance(reply, list):
            return reply.pop(0) if len(reply) > 1 else reply[0]
        return reply

    def prompts_of(self, stage: str) -> list[str]:
        return [p for p, s in zip(self.prompts, self.stages) if s == stage]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def build(embedder: Embedder, script: Script, items: list[Item] | None = None, **params) -> GamMemory:
    memory = GamMemory(LLMClient(ScriptedBackend(script), cache=None), embedder, **params)
    for item in make_items() if items is None else items:
        memory.add(item)
    memory.finish_ingestion()
    return memory


def research_stages(script: Script) -> list[str]:
    return [stage for stage in script.stages if stage != "memo"]


# ---- ingestion ----


def test_pages_follow_sessions_and_memos_see_earlier_abstracts(embedder):
    script = Script(memo=lambda prompt: f"Abstract number {prompt.count('Page ')}.")
    memory = build(embedder, script)
    assert [page.item_ids for page in memory.pages] == [["D1:1", "D1:2"], ["D2:1", "D2:2", "D2:3"], ["D3:1", "D3:2"]]
    assert script.stages == ["memo", "memo", "memo"]
    memos = script.prompts_of("memo")
    assert "(no pages yet)" in memos[0]
    assert f"Page 0: {memory.pages[0].abstract}" in memos[1]
    assert f"Page 1: {memory.pages[1].abstract}" in memos[2]
    assert memory.pages[2].text.startswith("=== Page 2, session_3, date day 3 ===")
    assert "Caroline (D3:1): I am researching adoption agencies" in memory.pages[2].text
    assert memory.describe()["pages"] == 3
    assert memory.describe()["mean_page_items"] == pytest.approx(7 / 3)


def test_single_session_is_packed_by_token_budget(embedder):
    items = [Item(f"0:{i}", "word " * 30, "2020-01-01", "System", "session_0") for i in range(10)]
    items.insert(5, Item("0:big", "long " * 200, "2020-01-01", "System", "session_0"))
    memory = build(embedder, Script(), items=items, page_tokens=100)
    # 30 words ~ 152 chars ~ 39 estimated tokens: two items per 100-token page; the oversize item stands alone.
    assert [page.item_ids for page in memory.pages] == [
        ["0:0", "0:1"],
        ["0:2", "0:3"],
        ["0:4"],
        ["0:big"],
        ["0:5", "0:6"],
        ["0:7", "0:8"],
        ["0:9"],
    ]
    assert [i for page in memory.pages for i in page.item_ids] == [item.id for item in items]


def test_failed_memo_falls_back_to_page_start_and_is_counted(embedder):
    memory = build(embedder, Script(memo=["", "A fine abstract.", "your summary here"]))
    assert memory.memo_failures == 2
    assert memory.pages[0].abstract.startswith("Caroline (D1:1): I went to the LGBTQ support group")
    assert len(memory.pages[0].abstract) <= 200
    assert memory.pages[1].abstract == "A fine abstract."
    assert memory.describe()["memo_failures"] == 2


def test_abstract_list_is_capped_but_keeps_every_page():
    text = render_abstracts(["x" * 500] * 30, max_chars=3000)
    assert len(text) <= 3000
    assert all(f"Page {i}: " in text for i in range(30))
    assert render_abstracts(["short"], 3000) == "Page 0: short"
    assert render_abstracts(["x" * 500] * 30, max_chars=None).count("x" * 500) == 30  # GAM: uncapped


# ---- research loop ----


def test_early_stop_when_reflection_says_enough(embedder):
    script = Script()
    memory = build(embedder, script)
    context = memory.retrieve(QUESTION)
    assert research_stages(script) == ["plan", "integrate", "check"]
    assert context.text == "Caroline is researching adoption agencies."
    assert context.telemetry["iterations"] == 1
    assert context.telemetry["stop_reason"] == "enough"
    assert context.telemetry["llm_calls"] == 3
    assert context.telemetry["tool_calls"] == {"keyword": 1, "vector": 1}
    assert context.telemetry["fallbacks"] == {}
    # BM25 and MiniLM both rank the adoption session first.
    assert context.telemetry["pages_read"][0] == 2
    assert context.source_ids[:2] == ["D3:1", "D3:2"]
    assert set(context.timings_ms) == {"plan", "search", "integrate", "reflect"}
    assert all(value >= 0 for value in context.timings_ms.values())
    integrate = script.prompts_of("integrate")[0]
    assert "1. [keyword] === Page 2" in integrate and "QUESTION:\nWhat did Caroline research?" in integrate


def test_max_iterations_reached_uses_follow_ups_and_stays_in_bound(embedder):
    script = Script(check='{"enough": false}')
    memory = build(embedder, script)
    context = memory.retrieve(QUESTION)
    assert research_stages(script) == ["plan", "integrate", "check", "requests"] * 2 + ["plan", "integrate"]
    assert context.telemetry["iterations"] == 3
    assert context.telemetry["stop_reason"] == "max_iters"
    assert context.telemetry["llm_calls"] == memory.call_bound["logical"] == 10
    # The planner works on the follow-up request, integration on the original question.
    plans = script.prompts_of("plan")
    assert "QUESTION:\nWhat did Caroline research?" in plans[0]
    assert "QUESTION:\nWhich adoption agencies did Caroline look at?" in plans[1]
    assert all("QUESTION:\nWhat did Caroline research?" in p for p in script.prompts_of("integrate"))
    # The running summary is carried into the next integrate call.
    assert "CURRENT SUMMARY (may be empty or incomplete):\nCaroline is researching" in script.prompts_of("integrate")[1]


@pytest.mark.parametrize("max_iters", [1, 2, 3])
@pytest.mark.parametrize("integrate", [True, False])
def test_calls_per_question_within_bound_even_when_every_json_fails(embedder, max_iters, integrate):
    script = Script(plan="not json", integrate="nope", check='{"enough": false}')
    memory = build(embedder, script, max_iters=max_iters, integrate=integrate)
    backend = memory.llm.backend
    before = len(backend.calls)
    context = memory.retrieve(QUESTION)
    backend_calls = len(backend.calls) - before
    assert context.telemetry["llm_calls"] == memory.call_bound["logical"]
    assert backend_calls <= memory.call_bound["backend"]
    # Plan and integrate fail every round (one retry each), reflection succeeds.
    assert backend_calls == context.telemetry["llm_calls"] + max_iters * (2 if integrate else 1)
    assert memory.call_bound["logical"] == (4 if integrate else 3) * max_iters - 2


def test_bad_plan_json_falls_back_to_the_question(embedder):
    script = Script(plan="I think we should search for adoption.")
    memory = build(embedder, script)
    context = memory.retrieve(QUESTION)
    assert context.telemetry["fallbacks"] == {"plan": 1}
    assert context.telemetry["rounds"][0]["keywords"] == [QUESTION.text]
    assert context.telemetry["rounds"][0]["vector_queries"] == [QUESTION.text]
    assert research_stages(script) == ["plan", "plan", "integrate", "check"]  # one retry, then the fallback
    assert memory.llm.usage.snapshot()["plan"]["fallbacks"] == 1
    assert context.source_ids and context.text


def test_plan_without_usable_query_counts_as_empty(embedder):
    empty = {"info_needs": [], "tools": ["keyword"], "keyword_collection": [], "vector_queries": [], "page_index": []}
    script = Script(plan=json.dumps(empty))
    context = build(embedder, script).retrieve(QUESTION)
    assert context.telemetry["fallbacks"] == {"plan_empty": 1}
    assert context.telemetry["tool_calls"] == {"keyword": 1, "vector": 1}


def test_bad_integrate_json_keeps_the_evidence_and_goes_on(embedder):
    script = Script(integrate="{content: ", check='{"enough": false}')
    memory = build(embedder, script, max_iters=2, summary_max_chars=4000)
    context = memory.retrieve(QUESTION)
    assert context.telemetry["fallbacks"] == {"integrate": 2}
    assert (
        research_stages(script) == ["plan", "integrate", "integrate", "check", "requests", "plan"] + ["integrate"] * 2
    )
    assert "I am researching adoption agencies" in context.text
    assert len(context.text) <= memory.summary_max_chars


@pytest.mark.parametrize("failing", ["check", "requests"])
def test_bad_reflect_json_stops_the_loop(embedder, failing):
    script = Script(**{"check": '{"enough": false}', failing: "maybe"})
    context = build(embedder, script).retrieve(QUESTION)
    assert context.telemetry["stop_reason"] == "reflect_failed"
    assert context.telemetry["fallbacks"] == {"reflect": 1}
    assert context.telemetry["iterations"] == 1
    assert context.text == "Caroline is researching adoption agencies."


def test_no_follow_up_questions_stops(embedder):
    script = Script(check='{"enough": false}', requests='{"new_requests": []}')
    context = build(embedder, script).retrieve(QUESTION)
    assert context.telemetry["stop_reason"] == "no_requests"
    assert context.telemetry["fallbacks"] == {}


def test_page_index_hits_map_to_item_ids_in_plan_order(embedder):
    plan = {"info_needs": ["x"], "tools": ["page_index"], "keyword_collection": ["ignored"], "vector_queries": []}
    script = Script(plan=json.dumps({**plan, "page_index": [2, "0", 7, 2]}))
    context = build(embedder, script).retrieve(QUESTION)
    assert context.telemetry["rounds"][0]["page_ids"] == [2, 0]  # invalid and repeated ids dropped
    assert context.telemetry["tool_calls"] == {"page_index": 1}
    assert context.source_ids == ["D3:1", "D3:2", "D1:1", "D1:2"]


def test_evidence_cap_limits_pages_read(embedder):
    script = Script(
        plan=json.dumps(
            {
                "info_needs": ["x"],
                "tools": ["page_index"],
                "keyword_collection": [],
                "vector_queries": [],
                "page_index": [0, 1, 2],
            }
        )
    )
    uncapped = build(embedder, Script(plan=script.replies["plan"]))
    assert uncapped.retrieve(QUESTION).telemetry["pages_read"] == [0, 1, 2]  # GAM's default: every hit page whole
    memory = build(embedder, script, evidence_max_chars=300)
    context = memory.retrieve(QUESTION)
    assert context.telemetry["pages_read"] == [0]
    evidence = script.prompts_of("integrate")[0].split("NEW EVIDENCE (retrieved pages):\n")[1].split("\n\nCURRENT")[0]
    assert len(evidence) <= 300


def test_no_integrate_mode_hands_over_the_hits(embedder):
    script = Script()
    memory = build(embedder, script, integrate=False)
    context = memory.retrieve(QUESTION)
    assert "integrate" not in research_stages(script)
    assert context.text.startswith("1. [keyword] === Page 2")
    assert "Caroline (D3:1)" in context.text


def test_bm25_scores_terms_present_in_most_pages(embedder):
    index = PageIndex(embedder)
    for text in ["painting the lake", "painting a sunrise", "adoption agencies"]:
        index.add(text)
    # "paint" is in 2 of 3 pages: Okapi idf would go negative, Lucene's stays positive.
    hits = index.keyword("paintings", 5)
    assert sorted(page for page, _ in hits) == [0, 1]
    assert all(score > 0 for _, score in hits)
    assert index.keyword("agency", 5)[0][0] == 2
    assert index.keyword("the of", 5) == []


def test_stage_token_caps_and_temperature_reach_the_backend(embedder):
    caps = {"memo": 11, "plan": 22, "integrate": 33, "reflect": 44}
    script = Script(check='{"enough": false}')
    memory = build(embedder, script, max_iters=2, max_new_tokens=caps, temperature=0.3, seed=7)
    memory.retrieve(QUESTION)
    configs = [config for _, config in memory.llm.backend.calls]
    stages = ["reflect" if stage in ("check", "requests") else stage for stage in script.stages]
    assert [config.max_new_tokens for config in configs] == [caps[stage] for stage in stages]
    assert {(config.temperature, config.seed) for config in configs} == {(0.3, 7)}


def test_empty_memory_returns_empty_context(embedder):
    script = Script()
    memory = GamMemory(LLMClient(ScriptedBackend(script), cache=None), embedder)
    context = memory.retrieve(QUESTION)
    assert context.text == "" and context.source_ids == []
    assert context.telemetry["stop_reason"] == "no_pages"
    assert script.stages == []


def test_save_load_round_trip_needs_no_llm(embedder, tmp_path: Path):
    memory = build(embedder, Script(memo=lambda p: f"Abstract of {p.count('Page ')} earlier."))
    memory.add(Item("D4:1", "A turn still in the open page.", "day 4", "Caroline", "session_4"))
    memory.save(tmp_path)

    def refuse(prompt, config):
        raise AssertionError("load must not call the LLM")

    restored = GamMemory(LLMClient(ScriptedBackend(refuse), cache=None), embedder)
    restored.load(tmp_path)
    assert restored.pages == memory.pages
    assert restored.describe() == memory.describe()
    assert [item.id for item in restored._buffer] == ["D4:1"]
    assert restored.index.dense.ids == memory.index.dense.ids
    assert restored.index.vector(["adoption"], 3) == memory.index.vector(["adoption"], 3)
    assert restored.index.keyword("adoption", 3) == memory.index.keyword("adoption", 3)
    # Same research on both.
    for system in (memory, restored):
        system.llm = LLMClient(ScriptedBackend(Script()), cache=None)
    assert restored.retrieve(QUESTION).source_ids == memory.retrieve(QUESTION).source_ids


# ---- end to end, real offline model ----

GAM_STAGES = ("plan", "integrate", "reflect")


@pytest.mark.model
@pytest.mark.slow  # make test-all; make test: GAM on the real model in test_vllm_engine.py
def test_end_to_end_on_a_small_locomo_slice(tmp_path, data_dir):
    """Two questions over 20 LoCoMo turns, two research rounds, small completion caps (~2 min on CPU)."""
    from clag.run import run_with_overrides

    max_iters = 2
    run_dir = run_with_overrides(
        [
            "method=gam", "dataset=locomo", "model=qwen2.5-0.5b", "limit.episodes=1", "limit.items=20",
            "limit.questions=2", f"method.system.max_iters={max_iters}", "method.system.max_new_tokens.memo=64",
            "method.system.max_new_tokens.plan=160", "method.system.max_new_tokens.integrate=128",
            "method.system.max_new_tokens.reflect=48", "runner.progress=false",
            f"run_dir={tmp_path / 'run'}", f"cache.path={tmp_path / 'cache.sqlite'}",
        ]
    )  # fmt: skip
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    structure = metrics["structure"]["conv-26"]
    bound = structure["call_bound_per_question"]
    assert bound == {"logical": 4 * max_iters - 2, "backend": 2 * (4 * max_iters - 2)}
    assert structure["pages"] == metrics["usage"]["ingestion"]["memo"]["calls"] >= 1
    assert 0.0 <= metrics["overall"]["f1"]["mean"] <= 1.0
    assert set(metrics["usage"]["questions"]) >= set(GAM_STAGES)
    assert len(rows) == 2
    for row in rows:
        assert {"plan", "search", "integrate", "reflect", "answer"} <= row["timings_ms"].keys()
        assert row["retrieval_ms"] >= sum(row["timings_ms"][stage] for stage in ("plan", "integrate", "reflect"))
        assert row["telemetry"]["llm_calls"] <= bound["logical"]
        assert sum(row["usage"][stage]["calls"] for stage in GAM_STAGES if stage in row["usage"]) <= bound["backend"]
        assert row["retrieved_ids"] and row["context_chars"] > 0
        assert 0.0 <= row["f1"] <= 1.0
