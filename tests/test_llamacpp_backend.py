"""The optional llama.cpp backend on the smallest shipped GGUF (skipped without llama-cpp-python)."""

from __future__ import annotations

import json

import pytest

from clag.llm.base import GenerationConfig

pytest.importorskip("llama_cpp")

from clag.llm.llamacpp_backend import LlamaCppBackend  # noqa: E402

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}}, "required": ["answer"]}


@pytest.mark.model
@pytest.mark.parametrize("prompt_format", ["chat", "raw"])
def test_greedy_in_order_and_constrained_json(prompt_format: str) -> None:
    backend = LlamaCppBackend("offline:smollm2-135m", prompt_format=prompt_format, n_ctx=1024)
    prompts = ["The capital of France is", "The three primary colors are"]  # a raw prompt must invite a continuation
    first = backend.generate(prompts, GenerationConfig(max_new_tokens=12))
    again = backend.generate(prompts[::-1], GenerationConfig(max_new_tokens=12))
    assert [c.text for c in first] == [c.text for c in again[::-1]]  # greedy, order kept
    assert all(c.prompt_tokens > 0 and 0 < c.completion_tokens <= 12 for c in first)
    [constrained] = backend.generate(["Is Paris in France? Reply in JSON."], GenerationConfig(json_schema=SCHEMA))
    assert json.loads(constrained.text)["answer"] in ("yes", "no")
    identity = backend.identity()
    assert identity["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and len(identity["weights_sha256"]) == 64
    assert (identity["chat_template_sha256"] is None) == (prompt_format == "raw")
