"""A scripted LLM backend for unit tests of parsing and control flow only.

End-to-end tests and every reported number use the real offline model;
this stand-in only lets tests drive a method down a chosen decision path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from clag.llm.base import Completion, GenerationConfig


class ScriptedBackend:
    """Answers prompts with ``respond(prompt, config)`` and records every call."""

    def __init__(self, respond: Callable[[str, GenerationConfig], str]) -> None:
        self.respond = respond
        self.calls: list[tuple[str, GenerationConfig]] = []

    def identity(self) -> dict:
        return {"backend": "scripted"}

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        out = []
        for prompt in prompts:
            self.calls.append((prompt, config))
            text = self.respond(prompt, config)
            out.append(Completion(text, len(prompt.split()), len(text.split())))
        return out
