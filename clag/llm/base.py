"""The one LLM backend protocol and the values that cross it.

Backends only turn prompts into text; caching, usage accounting and JSON
handling live in :class:`clag.llm.client.LLMClient`, so every backend gets
them for free and behaves the same.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class GenerationConfig:
    """Decoding settings; part of every cache key.

    Attributes:
        max_new_tokens: Completion budget (the authors use 1000 on a GPU).
        temperature: 0 means greedy decoding (our default for reproducibility).
        top_p: Nucleus sampling mass when temperature > 0.
        repetition_penalty: 1.0 is off; 1.1 stops the 0.5B stand-in from looping.
        seed: Sampling seed; a sampled call is cached only when seeded.
        json_schema: JSON schema for constrained decoding where the backend
            supports it (the authors pass one to SGLang on every call).
    """

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    json_schema: dict[str, Any] | None = None

    def key(self) -> dict[str, Any]:
        """A JSON-serialisable view for cache keys and run records."""
        return asdict(self)


@dataclass(frozen=True)
class Completion:
    """One generated answer with its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int


def row_seed(seed: int | None, prompt: str, bits: int = 63) -> int:
    """The sampling seed of one prompt: a pure function of (seed, prompt) when seeded.

    Every backend draws a prompt's sample from its own seed. One seed on every call would draw
    the same random numbers at the same positions of every reply: under a grammar that forces
    the same prefix (``{"should_evolve": ``), that number, not the prompt, decides the answer.
    ``bits`` fits the seed to the engine: torch takes 63, llama.cpp and vLLM's API 32 (the low
    bits of the 63-bit seed, so a 32-bit engine's seeds are those its recorded calls used).
    """
    if seed is None:
        return secrets.randbits(bits)
    digest = hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") >> 1) & ((1 << bits) - 1)


PROMPT_FORMATS = ("chat", "raw")


def check_prompt_format(prompt_format: str) -> str:
    """Validate a backend's ``prompt_format`` (see :class:`LLMBackend`)."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be 'chat' or 'raw', not {prompt_format!r}")
    return prompt_format


class LLMBackend(Protocol):
    """Batched generation from prompt strings.

    ``prompt_format`` decides how a prompt reaches the model: ``chat`` wraps
    it as one user message through the model's chat template (Qwen3: thinking
    off), ``raw`` sends the text as is (the authors' SGLang ``/generate``).
    """

    def identity(self) -> dict[str, Any]:
        """Everything that changes outputs for a fixed prompt (model id or file
        hash, revision, dtype, chat-template hash, prompt format)."""
        ...

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        """Generate one completion per prompt, in the order given.

        A backend that can fail part-way through a batch (a server going down
        between requests) attaches ``completed: dict[int, Completion]`` (by
        prompt index) to the exception it raises; the client caches those.
        """
        ...
