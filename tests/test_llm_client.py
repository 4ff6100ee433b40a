"""LLMClient control flow: cache first, per-stage usage, JSON retry and fallback.

A scripted backend stands in for the model: these tests check bookkeeping,
not model quality.
"""

from __future__ import annotations

import multiprocessing
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from scripted_llm import ScriptedBackend

from clag.answer import question_keywords
from clag.llm.base import Completion, GenerationConfig
from clag.llm.cache import CLAIM_TTL_S, CallCache, CallNotCached
from clag.llm.client import LLMClient, UsageMeter

ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


class NamedBackend(ScriptedBackend):
    """A scripted backend with a chosen identity, to tell two models apart."""

    def __init__(self, name: str, respond=lambda prompt, config: f"echo {prompt}") -> None:
        super().__init__(respond)
        self.name = name

    def identity(self) -> dict:
        return {"backend": "scripted", "model": self.name}


@pytest.fixture
def cache(tmp_path: Path) -> CallCache:
    return CallCache(tmp_path / "calls.sqlite")


def test_second_call_is_answered_from_the_cache(cache: CallCache) -> None:
    backend = NamedBackend("m1")
    client = LLMClient(backend, cache)
    assert client.generate(["a", "b"], stage="note") == ["echo a", "echo b"]
    assert client.generate(["b", "c", "a"], stage="note") == ["echo b", "echo c", "echo a"]
    assert [prompt for prompt, _ in backend.calls] == ["a", "b", "c"]  # only the miss reached the model
    usage = client.usage.snapshot()["note"]
    assert usage["calls"] == 5 and usage["cache_hits"] == 2


def test_a_resumed_process_reuses_the_file(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    LLMClient(NamedBackend("m1"), CallCache(path)).generate(["a"], stage="answer")
    backend = NamedBackend("m1", respond=lambda prompt, config: "different")
    assert LLMClient(backend, CallCache(path)).generate(["a"], stage="answer") == ["echo a"]
    assert backend.calls == []


def test_a_call_another_run_stored_meanwhile_takes_its_answer(cache: CallCache) -> None:
    """Two sweep jobs share a cache and send the same prompt at once; a server whose numerics depend
    on its batch answers them differently. The second to finish must adopt the first's answer, or a
    rerun from the cache would not reproduce its predictions (the flaky vLLM rerun of 2026-12-02)."""
    backend = NamedBackend("m1")

    def answer_while_the_other_run_finishes(prompt: str, config: GenerationConfig) -> str:
        # a run whose claim had expired, or one from before claims, stores its answer while this call is in flight
        cache.put(cache.key(backend.identity(), prompt, config), Completion("first answer", 1, 2))
        return "second answer"

    late = LLMClient(NamedBackend("m1", respond=answer_while_the_other_run_finishes), cache)
    assert late.generate(["q"], stage="answer") == ["first answer"]
    backend = NamedBackend("m1", respond=lambda prompt, config: "never asked")
    assert LLMClient(backend, cache).generate(["q"], stage="answer") == ["first answer"]
    assert backend.calls == []


def test_a_call_another_live_run_is_generating_is_awaited_not_generated_again(cache: CallCache) -> None:
    """A-mem and CLAG before CLAG's cold start send the same calls: the second waits for the first's answer."""
    backend = NamedBackend("m1", respond=lambda prompt, config: "never asked")
    key = cache.key(backend.identity(), "q", GenerationConfig())
    assert cache.claim([key]) == {key}  # a live run (this process stands in for it) is generating "q"
    assert cache.claim([key]) == set()  # ... so nobody else gets it
    threading.Timer(0.3, cache.put, (key, Completion("the other run's answer", 1, 4))).start()
    client = LLMClient(backend, cache)
    assert client.generate(["q"], stage="note") == ["the other run's answer"] and backend.calls == []
    assert client.usage.snapshot()["note"]["cache_hits"] == 0  # awaited: the call this run would have made


def test_a_claim_released_unanswered_or_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "calls.sqlite")
    backend = NamedBackend("m1", respond=lambda prompt, config: f"own {prompt}")
    given_up, orphaned = (cache.key(backend.identity(), q, GenerationConfig()) for q in ("q1", "q2"))
    cache.claim([given_up])
    threading.Timer(0.3, cache.release, ([given_up],)).start()  # its run's call failed
    dead_pid = _pid_of_an_ended_process()
    with sqlite3.connect(cache.path) as db:  # a run killed mid-call left its claim behind
        db.execute("INSERT INTO claims VALUES (?, ?, ?, ?)", (orphaned, socket.gethostname(), dead_pid, time.time()))
    assert LLMClient(backend, cache).generate(["q1", "q2"], stage="note") == ["own q1", "own q2"]
    assert cache.claim([given_up, orphaned]) == set()  # answered now, so nothing left to claim


def test_an_export_drops_the_claims_of_dead_processes_and_keeps_the_live_ones(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "calls.sqlite")
    live, orphaned, expired = (cache.key({"m": 1}, q, GenerationConfig()) for q in ("q1", "q2", "q3"))
    cache.claim([live])
    dead_pid = _pid_of_an_ended_process()
    with sqlite3.connect(cache.path) as db:
        db.execute("INSERT INTO claims VALUES (?, ?, ?, ?)", (orphaned, socket.gethostname(), dead_pid, time.time()))
        long_ago = time.time() - 2 * CLAIM_TTL_S  # another host's claim: stale only once it expired
        db.execute("INSERT INTO claims VALUES (?, ?, ?, ?)", (expired, "another-host", 1, long_ago))
    assert cache.drop_stale_claims() == 2
    with sqlite3.connect(cache.path) as db:
        assert [key for (key,) in db.execute("SELECT key FROM claims")] == [live]
    assert cache.drop_stale_claims() == 0


def _pid_of_an_ended_process() -> int:
    dead = multiprocessing.get_context("spawn").Process(target=int)
    dead.start()
    dead.join()
    assert dead.pid is not None
    return dead.pid


def _ask_at_once(path: str, barrier: Any, log: str, out: str) -> None:
    def respond(prompt: str, config: GenerationConfig) -> str:
        with open(log, "a") as handle:
            handle.write(prompt + "\n")
        time.sleep(1.0)
        return f"answer to {prompt}"

    client = LLMClient(NamedBackend("m1", respond=respond), CallCache(path))
    barrier.wait()
    Path(out).write_text("|".join(client.generate(["shared", f"own {out[-1]}"], stage="evolve")))


def test_two_processes_asking_one_call_at_once_generate_it_once(tmp_path: Path) -> None:
    """Two sweep jobs sharing a cache (Hydra's processes) ask the same call at the same moment."""
    context = multiprocessing.get_context("spawn")
    barrier, log, path = context.Barrier(2), str(tmp_path / "generated.log"), str(tmp_path / "calls.sqlite")
    jobs = [context.Process(target=_ask_at_once, args=(path, barrier, log, f"{tmp_path}/out{w}")) for w in range(2)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=120)
    assert [job.exitcode for job in jobs] == [0, 0]
    assert sorted(Path(log).read_text().split("\n")[:-1]) == ["own 0", "own 1", "shared"]  # "shared" once
    assert [(tmp_path / f"out{w}").read_text() for w in range(2)] == [
        f"answer to shared|answer to own {w}" for w in range(2)
    ]


def test_a_cache_only_client_answers_hits_and_stops_at_the_first_miss(cache: CallCache) -> None:
    LLMClient(NamedBackend("m1"), cache).generate(["a"], stage="note")
    backend = NamedBackend("m1")
    replaying = LLMClient(backend, cache, cache_only=True)
    assert replaying.generate(["a"], stage="note") == ["echo a"]
    with pytest.raises(CallNotCached, match=r"stage 'evolve': 1 call\(s\) not in the LLM cache .* begins 'b'"):
        replaying.generate(["a", "b"], stage="evolve")
    assert backend.calls == [] and len(cache) == 1


def test_models_never_share_answers(cache: CallCache) -> None:
    LLMClient(NamedBackend("m1"), cache).generate(["a"], stage="note")
    other = NamedBackend("m2", respond=lambda prompt, config: "m2 says hi")
    assert LLMClient(other, cache).generate(["a"], stage="note") == ["m2 says hi"]
    assert len(other.calls) == 1


def test_changed_setting_is_a_miss(cache: CallCache) -> None:
    backend = NamedBackend("m1")
    client = LLMClient(backend, cache)
    client.generate(["a"], stage="note")
    client.generate(["a"], stage="note", max_new_tokens=7)
    assert len(backend.calls) == 2 and backend.calls[1][1].max_new_tokens == 7


def test_sampled_calls_are_cached_only_when_seeded(cache: CallCache) -> None:
    backend = NamedBackend("m1")
    client = LLMClient(backend, cache)
    client.generate(["a"], stage="note", temperature=0.7)
    client.generate(["a"], stage="note", temperature=0.7)
    assert len(backend.calls) == 2
    client.generate(["a"], stage="note", temperature=0.7, seed=5)
    client.generate(["a"], stage="note", temperature=0.7, seed=5)
    assert len(backend.calls) == 3


def test_repeated_prompt_in_one_call_is_generated_once(cache: CallCache) -> None:
    backend = NamedBackend("m1")
    client = LLMClient(backend, cache)
    assert client.generate(["a", "b", "a"], stage="answer") == ["echo a", "echo b", "echo a"]
    assert [prompt for prompt, _ in backend.calls] == ["a", "b"]
    unseeded = client.generate(["x", "x"], stage="answer", temperature=1.0)  # independent samples: both run
    assert len(unseeded) == 2 and len(backend.calls) == 4


def test_stage_settings_and_overrides_layer_in_order() -> None:
    backend = NamedBackend("m1")
    client = LLMClient(
        backend,
        defaults=GenerationConfig(max_new_tokens=100, temperature=0.0),
        stage_settings={"note": {"temperature": 0.7, "seed": 1}},
    )
    client.generate(["a"], stage="note")
    client.generate(["a"], stage="note", temperature=0.2)
    client.generate(["a"], stage="answer")
    configs = [config for _, config in backend.calls]
    assert (configs[0].temperature, configs[0].seed, configs[0].max_new_tokens) == (0.7, 1, 100)
    assert configs[1].temperature == 0.2
    assert configs[2].temperature == 0.0 and configs[2].seed is None


def test_json_retry_then_fallback_are_counted(cache: CallCache) -> None:
    def respond(prompt: str, config: GenerationConfig) -> str:
        if prompt == "good":
            return '{"answer": "Paris"}'
        if prompt == "fixed-on-retry" and config.temperature > 0:
            return '{"answer": "Rome"}'
        return '{"answer": "your answer here"}'

    backend = NamedBackend("m1", respond)
    client = LLMClient(backend, cache)
    values = client.generate_json(["good", "fixed-on-retry", "hopeless"], stage="pick", schema=ANSWER)
    assert values == [{"answer": "Paris"}, {"answer": "Rome"}, None]
    usage = client.usage.snapshot()["pick"]
    assert (usage["json_calls"], usage["parse_failures"], usage["retries"], usage["fallbacks"]) == (3, 2, 2, 1)
    retry_config = backend.calls[-1][1]
    assert retry_config.temperature == 0.7 and retry_config.seed is not None  # seeded, so cached and repeatable
    assert backend.calls[0][1].json_schema == ANSWER  # constrained decoding asked for


def test_the_authors_acceptance_keeps_placeholder_echoes_and_never_retries(cache: CallCache) -> None:
    def respond(prompt: str, config: GenerationConfig) -> str:
        return {"good": '{"answer": "Paris"}', "echo": '{"answer": "your answer here"}'}.get(prompt, "no json")

    backend = NamedBackend("m1", respond)
    ours = LLMClient(backend, cache)
    values = ours.generate_json(["good", "echo", "prose"], stage="note", schema=ANSWER)
    assert values == [{"answer": "Paris"}, None, None]
    assert ours.usage.snapshot()["note"]["placeholder_echoes"] == 2  # the echo and its retry, each refused
    calls = len(backend.calls)
    authors = LLMClient(backend, cache, json_retry=False, accept_placeholders=True)
    values = authors.generate_json(["good", "echo", "prose"], stage="note", schema=ANSWER)
    assert values == [{"answer": "Paris"}, {"answer": "your answer here"}, None]
    usage = authors.usage.snapshot()["note"]
    assert (usage["placeholder_echoes"], usage["parse_failures"], usage["retries"], usage["fallbacks"]) == (1, 1, 0, 1)
    assert len(backend.calls) == calls  # all three answered from the cache: no retry was asked


def test_a_free_retry_stage_asks_again_without_the_grammar_that_forced_a_whitespace_run() -> None:
    def respond(prompt: str, config: GenerationConfig) -> str:  # under the grammar: "{" and whitespace to the budget
        if config.json_schema is not None:
            return "{" + " \n" * 7
        return {"plain": "\nRome\n\nExplanation: the context says so", "json": '{"answer": "Oslo"}'}[prompt]

    backend = NamedBackend("m1", respond)
    defaults = GenerationConfig(max_new_tokens=6)
    ours = LLMClient(backend, defaults=defaults, reject_truncated_json=True, free_retry_stages=["answer"])
    replies = ours.generate_json_with_text(["plain", "json"], stage="answer", schema=ANSWER)
    assert [(value, text.strip()) for value, text in replies] == [
        (None, "Rome"),
        ({"answer": "Oslo"}, '{"answer": "Oslo"}'),
    ]
    assert [config.json_schema for _, config in backend.calls] == [ANSWER, ANSWER, None, None]
    assert ours.usage.snapshot()["answer"]["fallbacks"] == 1  # "Rome", the free reply's first line, is what
    # the answerer keeps: free, the model runs on past its answer
    other_stage = LLMClient(backend, defaults=defaults, reject_truncated_json=True, free_retry_stages=["answer"])
    other_stage.generate_json(["plain"], stage="keywords", schema=ANSWER)
    assert backend.calls[-1][1].json_schema == ANSWER  # only the named stages retry free


@pytest.mark.parametrize("reject", [False, True])
def test_a_reply_cut_off_at_its_budget_is_counted_and_rejected_when_asked(reject: bool) -> None:
    def respond(prompt: str, config: GenerationConfig) -> str:  # the scripted backend counts words as tokens
        return '{"answer": "Rome"}' if config.temperature > 0 else '{"answer": "Paris is the capital of'

    backend = NamedBackend("m1", respond)
    client = LLMClient(backend, defaults=GenerationConfig(max_new_tokens=6), reject_truncated_json=reject)
    [value] = client.generate_json(["q"], stage="evolve", schema=ANSWER)
    usage = client.usage.snapshot()["evolve"]
    assert usage["truncated"] == 1  # the first reply used all 6 tokens: cut off, counted either way
    if reject:  # never accepted after repair: retried, and the retry's whole reply is taken
        assert value == {"answer": "Rome"} and (usage["parse_failures"], usage["retries"]) == (1, 1)
    else:  # the committed reference's behaviour: json_repair closes the string and the half answer is kept
        assert value == {"answer": "Paris is the capital of"} and usage["retries"] == 0


def test_json_with_text_returns_the_raw_answer_for_fallbacks() -> None:
    client = LLMClient(NamedBackend("m1", respond=lambda prompt, config: "Paris, I think"))
    [(value, text)] = client.generate_json_with_text(["q"], stage="answer", schema=ANSWER)
    assert value is None and text == "Paris, I think"


def test_unconstrained_client_sends_no_schema() -> None:
    backend = NamedBackend("m1", respond=lambda prompt, config: '{"answer": "x"}')
    LLMClient(backend, constrained_json=False).generate_json(["q"], stage="answer", schema=ANSWER)
    assert backend.calls[0][1].json_schema is None


def test_token_usage_is_summed_per_stage() -> None:
    client = LLMClient(NamedBackend("m1", respond=lambda prompt, config: "one two three"))
    client.generate(["a b", "c"], stage="note")
    client.generate(["d"], stage="answer")
    usage = client.usage.snapshot()
    assert (usage["note"]["prompt_tokens"], usage["note"]["completion_tokens"]) == (3, 6)
    assert usage["answer"]["calls"] == 1


def test_usage_diff_drops_idle_stages() -> None:
    meter = UsageMeter()
    meter.add("note", calls=2)
    before = meter.snapshot()
    meter.add("answer", calls=1, prompt_tokens=5)
    assert UsageMeter.diff(meter.snapshot(), before) == {
        "answer": {
            "calls": 1,
            "cache_hits": 0,
            "prompt_tokens": 5,
            "completion_tokens": 0,
            "json_calls": 0,
            "parse_failures": 0,
            "retries": 0,
            "fallbacks": 0,
            "truncated": 0,
            "placeholder_echoes": 0,
        }
    }


def test_backend_returning_too_few_completions_is_an_error() -> None:
    class Broken(NamedBackend):
        def generate(self, prompts, config):
            return super().generate(prompts, config)[:-1]

    with pytest.raises(RuntimeError, match="2 prompts"):
        LLMClient(Broken("m1")).generate(["a", "b"], stage="note")


def test_the_keyword_step_never_takes_its_prompts_example_as_the_query() -> None:
    """A model that echoes "keyword1, keyword2, keyword3" is retried once, then the question itself is the query."""
    backend = ScriptedBackend(lambda prompt, config: '{"keywords": "keyword1, keyword2, keyword3"}')
    client = LLMClient(backend)
    assert question_keywords(client, ["Where did Caroline go?"]) == ["Where did Caroline go?"]
    usage = client.usage.snapshot()["keywords"]
    assert (usage["parse_failures"], usage["retries"], usage["fallbacks"]) == (1, 1, 1)
    assert len(backend.calls) == 2 and backend.calls[1][1].temperature > 0  # the retry is sampled
