"""The contract every method config must keep (docs/extending.md): the test a new method passes.

Each ``configs/method/*.yaml`` is instantiated as the runner does it, fed a few
real-looking LoCoMo turns through the :class:`clag.memory.base.MemorySystem`
calls in the runner's order, asked a question, saved, loaded into a fresh
instance and asked again. The scripted model answers ``{}`` to everything, so
every LLM-built structure falls back (counted by the client): the contract is
about the calls, the Context and the state round trip, not about answer quality,
which the end-to-end tests check with the real model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate
from sample_turns import ITEMS, QUESTION
from scripted_llm import ScriptedBackend

from clag.config import compose_config
from clag.embed import Embedder
from clag.llm.client import LLMClient
from clag.memory.base import MemorySystem
from clag.types import Context

METHODS = sorted(p.stem for p in (Path(__file__).parent.parent / "configs" / "method").glob("*.yaml"))


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


def build(method: str, embedder: Embedder) -> MemorySystem:
    cfg = compose_config([f"method={method}"])
    llm = LLMClient(ScriptedBackend(lambda prompt, config: "{}"))
    return instantiate(cfg.method.system, llm=llm, embedder=embedder)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_keeps_the_memory_system_contract(method: str, embedder: Embedder, tmp_path: Path) -> None:
    system = build(method, embedder)
    assert isinstance(system, MemorySystem)
    system.reset()
    system.add_many(ITEMS)
    system.finish_ingestion()
    context = system.retrieve(QUESTION)
    assert isinstance(context, Context) and isinstance(context.text, str)
    assert set(context.source_ids) <= {item.id for item in ITEMS}  # evidence metrics read these ids
    assert all(isinstance(ms, float) and ms >= 0 for ms in context.timings_ms.values())
    json.dumps(system.describe())  # metrics.json holds it
    json.dumps(context.telemetry)  # predictions.jsonl holds it

    system.save(tmp_path / "memory")
    reloaded = build(method, embedder)
    reloaded.reset()
    reloaded.load(tmp_path / "memory")
    again = reloaded.retrieve(QUESTION)
    assert again.source_ids == context.source_ids and again.text == context.text  # the state round-trips
