"""llama.cpp backend (llama-cpp-python): fast single-stream decoding of GGUF files on CPU.

Optional extra ``llamacpp``; nothing in the default path imports it. On
this CPU it decodes ~2x faster than transformers one sequence at a time and
loads in well under a second (docs/throughput.md), but it
generates one prompt after another: transformers with batches is the faster
choice when many prompts arrive together. Build it with
``CMAKE_ARGS="-DGGML_NATIVE=OFF"``: a native build segfaults here on AMX.

JSON schemas become llama.cpp grammars (``response_format`` with a schema
for chat, ``LlamaGrammar.from_json_schema`` for raw prompts), so
constrained output always parses.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from clag.llm.base import Completion, GenerationConfig, check_prompt_format, row_seed
from clag.llm.json_parse import strip_think
from clag.llm.transformers_backend import ModelSource, file_sha256

log = logging.getLogger(__name__)

_MODELS: dict[tuple[str, int, int | None], tuple[Any, threading.Lock]] = {}
_LOAD_LOCK = threading.Lock()


class LlamaCppBackend:
    """Sequential generation with llama-cpp-python.

    Args:
        model: A ``.gguf`` path or ``offline:<name>`` (see :func:`clag.assets.resolve_gguf`).
        prompt_format: ``chat`` (the GGUF's chat template) or ``raw``.
        n_ctx: Context window in tokens.
        n_threads: CPU threads; ``None`` lets llama.cpp choose.
        system_prompt: Optional system message for the chat format.
    """

    def __init__(
        self,
        model: str,
        prompt_format: str = "chat",
        n_ctx: int = 8192,
        n_threads: int | None = None,
        system_prompt: str | None = None,
    ) -> None:
        check_prompt_format(prompt_format)
        source = ModelSource.resolve(model)
        if source.gguf_path is None:
            raise FileNotFoundError(f"llama.cpp needs a local .gguf file or offline:<name>, not {model!r}")
        self.path: Path = source.gguf_path
        self.prompt_format = prompt_format
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.system_prompt = system_prompt

    def _llama(self) -> tuple[Any, threading.Lock]:
        """The loaded model (once per process and setting) and the lock that serialises its use."""
        key = (str(self.path), self.n_ctx, self.n_threads)
        with _LOAD_LOCK:
            if key not in _MODELS:
                from llama_cpp import Llama

                llama = Llama(str(self.path), n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False)
                _MODELS[key] = (llama, threading.Lock())
            return _MODELS[key]

    def identity(self) -> dict[str, Any]:
        """File name and hash, llama.cpp version, prompt format, chat-template hash, system prompt."""
        template = None
        if self.prompt_format == "chat":
            text = self._llama()[0].metadata.get("tokenizer.chat_template", "")
            template = hashlib.sha256(text.encode()).hexdigest()
        return {
            "backend": "llama.cpp",
            "model": self.path.name,
            "weights_sha256": file_sha256(self.path),
            "llama_cpp_python": metadata.version("llama-cpp-python"),
            "prompt_format": self.prompt_format,
            "chat_template_sha256": template,
            "system_prompt": self.system_prompt,
            "constrained": "llama.cpp-grammar",
        }

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        """One completion per prompt, in order, one at a time."""
        llama, lock = self._llama()
        with lock:
            return [self._one(llama, prompt, config) for prompt in prompts]

    def _one(self, llama: Any, prompt: str, config: GenerationConfig) -> Completion:
        settings: dict[str, Any] = {
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "top_k": 0,  # llama.cpp's defaults (top_k 40, min_p 0.05) would differ from the other backends
            "min_p": 0.0,
            "repeat_penalty": config.repetition_penalty,
            "seed": row_seed(config.seed, prompt, bits=32),
        }
        if self.prompt_format == "chat":
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            messages.append({"role": "user", "content": prompt})
            if config.json_schema:
                settings["response_format"] = {"type": "json_object", "schema": config.json_schema}
            reply = llama.create_chat_completion(messages=messages, **settings)
            text = reply["choices"][0]["message"]["content"] or ""
        else:
            if config.json_schema:
                from llama_cpp import LlamaGrammar

                settings["grammar"] = LlamaGrammar.from_json_schema(json.dumps(config.json_schema), verbose=False)
            reply = llama.create_completion(prompt, **settings)
            text = reply["choices"][0]["text"]
        usage = reply.get("usage") or {}
        return Completion(strip_think(text), int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
