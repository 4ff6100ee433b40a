"""One query step for every method: ``timings_ms["keywords"]`` is the keyword LLM call and nothing else.

The runner subtracts that time from retrieval latency (Table 2), so a method
that also timed its query embedding there would look faster than it is. Each
method's retrieve is run with the shared step replaced by one that reports a
known time: the context must carry exactly that time.
"""

from __future__ import annotations

import sys

import pytest
from hydra.utils import get_class, instantiate
from sample_turns import ITEMS, QUESTION
from scripted_llm import ScriptedBackend

from clag.config import compose_config
from clag.embed import Embedder
from clag.llm.client import LLMClient

KEYWORD_MS = 123.0


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


@pytest.mark.parametrize(("method", "asks_keywords"), [("rag", True), ("amem", True), ("clag", True),
                                                       ("memoryos", True), ("gam", False)])
def test_keyword_timing_is_the_shared_keyword_call_alone(method, asks_keywords, embedder, monkeypatch) -> None:
    cfg = compose_config([f"method={method}"])
    module = sys.modules[get_class(cfg.method.system._target_).__module__]  # where retrieve looks it up
    calls = []

    def known_time(llm, question):
        calls.append(question)
        return "Caroline, support group", KEYWORD_MS

    if asks_keywords:
        monkeypatch.setattr(module, "timed_keywords", known_time)
    llm = LLMClient(ScriptedBackend(lambda prompt, config: "{}"))  # every memory operation falls back
    system = instantiate(cfg.method.system, llm=llm, embedder=embedder)
    system.reset()
    system.add_many(ITEMS)
    system.finish_ingestion()
    context = system.retrieve(QUESTION)
    if asks_keywords:
        assert calls == [QUESTION.text]
        assert context.timings_ms["keywords"] == KEYWORD_MS
    else:  # GAM plans its own queries; its whole retrieval counts as retrieval
        assert "keywords" not in context.timings_ms
