"""OpenAI-compatible HTTP backend for served models (vLLM, SGLang, llama.cpp server).

Users with GPUs serve the model once and let many runs share it: the server
batches the concurrent requests this client sends (a thread pool, order
kept). ``chat`` prompts go to ``/v1/chat/completions`` as one user message;
``raw`` prompts go to ``/v1/completions`` as is, which is what the authors'
SGLang ``/generate`` calls do (``SGLangController.get_completion`` in
dmis-lab/CLAG ``CLAG_memory.py``). A JSON schema travels as OpenAI's
``response_format: {"type": "json_schema", ...}``, which vLLM, SGLang and
llama.cpp's server turn into guided decoding.

With ``stream`` the reply comes as server-sent events and is assembled here,
so that ``timeout_s`` bounds the silence between tokens rather than the whole
reply: a busy CPU server with dozens of streams can take longer than any fixed
timeout over one 1000-token reply, and a timed-out request is thrown away and
sent again from the start. The assembled reply is the same text and usage.

The API key is read from the environment at request time and never kept in
``identity()``, a log line or an error message.

A served name says nothing about the weights behind it, so the cache
identity also holds the weights' fingerprint (the GGUF's sha256 or the Hub
id and revision, as the transformers backend records them) and the dtype:
two models served under one name never share cached answers. With
``base_url`` unset the server is the one :mod:`clag.llm.serve` started for
the model's name, found when the first request goes out (so a rerun served
from the cache needs no server).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from clag.llm.base import Completion, GenerationConfig, check_prompt_format, row_seed
from clag.llm.json_parse import strip_think

log = logging.getLogger(__name__)


class StreamError(ConnectionError):
    """A streamed reply that the server broke off with an error event (retried like a dropped connection)."""


class ServerError(RuntimeError):
    """The server could not be reached or refused a request; the message names the URL.

    Raised from :meth:`OpenAICompatibleBackend.generate`, it carries ``completed``: the
    completions (by prompt index) that the server had answered before, so none is lost.
    """

    completed: dict[int, Completion]


def weights_fingerprint(weights: str, revision: str | None) -> dict[str, Any]:
    """The weights' identity as the transformers backend records it (GGUF sha256, folder, Hub revision)."""
    from clag.llm.transformers_backend import ModelSource

    return ModelSource.resolve(weights).fingerprint(revision)


class OpenAICompatibleBackend:
    """Concurrent requests to an OpenAI-compatible completion server.

    Args:
        base_url: Server root, with or without ``/v1`` (``http://localhost:8000``);
            ``None``: the server :mod:`clag.llm.serve` runs for ``model``.
        model: Model name the server serves (part of the cache identity).
        weights: What the server loaded (``offline:<name>``, a ``.gguf`` path, a
            folder or a Hub id); its fingerprint joins the identity. ``None``
            for a server whose weights are unknown (the name alone then).
        revision: Hub revision of ``weights``.
        dtype: The server's dtype; ``auto`` means what :func:`clag.llm.serve.native_dtype`
            picks on this machine (the server it starts uses the same rule).
        api_key_env: Name of the environment variable holding the API key
            (local servers usually need none).
        prompt_format: ``chat`` or ``raw`` (see the module docstring).
        max_concurrency: Requests in flight at once.
        timeout_s: Per-request timeout; with ``stream``, the longest silence allowed between two
            chunks of a reply (a stalled server), not the time the whole reply takes.
        stream: Ask for the reply as server-sent events with a final usage chunk (vLLM, SGLang).
            It changes no answer, so it is no part of the identity (nor of a run's hash).
        extra_body: Fields merged into every request (e.g. vLLM's
            ``chat_template_kwargs: {enable_thinking: false}``); part of the
            identity, so never put secrets here.
        disable_any_whitespace: The server forbids free whitespace in guided JSON (a server-wide
            vLLM setting, :class:`clag.llm.serve.ServerSpec`); joins the identity when set, and a
            server :mod:`clag.llm.serve` started with another setting is refused. A server at
            ``base_url`` cannot be checked: it must be started to match.
        seed_per_prompt: A seeded request carries its prompt's own seed (:func:`~clag.llm.base.row_seed`,
            as the in-process backends draw), so that sampled replies are independent. Off, every
            request carries ``config.seed`` itself, as the committed reference's calls did: a grammar
            that forces one prefix then puts the same random number at the same decision in every
            reply (0 of 750 notes evolved, docs/reference.md). It joins the identity when set, so the
            calls recorded without it keep their keys.
    """

    max_retries = 4  # attempts after the first, on connection errors, 429 and 5xx
    backoff_s = 1.0  # first wait; doubled per attempt
    serves_concurrently = True  # the server batches concurrent requests itself: no coalescer in front

    def __init__(
        self,
        base_url: str | None,
        model: str,
        weights: str | None = None,
        revision: str | None = None,
        dtype: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        prompt_format: str = "chat",
        max_concurrency: int = 8,
        timeout_s: float = 120,
        extra_body: dict | None = None,
        disable_any_whitespace: bool = False,
        stream: bool = False,
        seed_per_prompt: bool = True,
    ) -> None:
        check_prompt_format(prompt_format)
        self.base_url = base_url
        self.model = model
        self.weights = weights
        self.revision = revision
        self.dtype = dtype
        self.api_key_env = api_key_env
        self.prompt_format = prompt_format
        self.max_concurrency = max(1, max_concurrency)
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self.disable_any_whitespace = disable_any_whitespace
        self.stream = stream
        self.seed_per_prompt = seed_per_prompt
        self._root: str | None = None
        self._identity: dict[str, Any] | None = None

    @property
    def root(self) -> str:
        """The server's root URL, resolved once (through :mod:`clag.llm.serve` when ``base_url`` is unset)."""
        if self._root is None:
            base_url = self.base_url
            if base_url is None:
                from clag.llm.serve import ServeError, running_url

                try:
                    base_url = running_url(self.model, self.disable_any_whitespace, self.dtype)
                except ServeError as err:
                    raise ServerError(str(err)) from err
            self._root = base_url.rstrip("/").removesuffix("/v1")
        return self._root

    @property
    def url(self) -> str:
        """The completions endpoint."""
        return f"{self.root}/v1/chat/completions" if self.prompt_format == "chat" else f"{self.root}/v1/completions"

    def identity(self) -> dict[str, Any]:
        """Served name, weights fingerprint, dtype, prompt format and extra request
        fields; no URL (a cache stays valid when the same model is served
        elsewhere) and no key."""
        if self._identity is None:
            dtype = self.dtype
            if dtype == "auto":
                from clag.llm.serve import native_dtype

                dtype = native_dtype()
            self._identity = {
                "backend": "openai-compatible",
                "model": self.model,
                "weights": weights_fingerprint(self.weights, self.revision) if self.weights else None,
                "dtype": dtype,
                "prompt_format": self.prompt_format,
                "extra_body": self.extra_body,
            }
            if self.disable_any_whitespace:  # only when set: the committed calls' keys stay
                self._identity["disable_any_whitespace"] = True
            if self.seed_per_prompt:  # likewise: the calls recorded with one seed for all keep their keys
                self._identity["seed_per_prompt"] = True
        return dict(self._identity)

    def server_info(self) -> dict[str, str]:
        """The engine version the server reports (vLLM's and SGLang's ``GET /version``), for provenance.

        The client's environment does not hold the served engine (vLLM lives in its own venv),
        so only the server can say which version answered. Empty when this run never reached a
        server (a fully cached rerun) or the server has no such endpoint.
        """
        if self._root is None:
            return {}
        try:
            with urllib.request.urlopen(f"{self._root}/version", timeout=5) as response:
                reported = json.load(response)
        except (OSError, ValueError):
            return {}
        version = reported.get("version") if isinstance(reported, dict) else None
        return {"version": str(version)} if version else {}

    def server_counters(self) -> dict[str, float]:
        """The server's cumulative Prometheus counters (``GET /metrics``), for a run's engine counters.

        Resolves the server as a request would, but never fails a run: empty when no server is
        running or it exposes no ``/metrics`` (llama.cpp's server without ``--metrics``).
        """
        from clag.llm.serve import server_metrics

        try:
            return server_metrics(self.root)
        except (ServerError, OSError, ValueError):
            return {}

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        """One completion per prompt, in order, ``max_concurrency`` requests at a time."""
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            futures = [pool.submit(self._complete, prompt, config) for prompt in prompts]
        completed: dict[int, Completion] = {}
        failure: ServerError | None = None
        for index, future in enumerate(futures):
            try:
                completed[index] = future.result()
            except ServerError as err:
                failure = failure or err
        if failure is not None:
            failure.completed = completed  # answered before the failure: the client caches them (base.py)
            raise failure
        return [completed[index] for index in range(len(prompts))]

    def request_body(self, prompt: str, config: GenerationConfig) -> dict[str, Any]:
        """The JSON body for one prompt (public so that tests and users can inspect it)."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
        }
        if self.prompt_format == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if config.seed is not None:  # 32 bits: what llama.cpp's server takes, and vLLM and SGLang too
            body["seed"] = row_seed(config.seed, prompt, bits=32) if self.seed_per_prompt else config.seed
        if config.repetition_penalty != 1.0:  # a vLLM / SGLang extension of the OpenAI API
            body["repetition_penalty"] = config.repetition_penalty
        if config.json_schema:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": config.json_schema, "strict": True},
            }
        if self.stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return {**body, **self.extra_body}

    def _complete(self, prompt: str, config: GenerationConfig) -> Completion:
        reply = self._post(self.request_body(prompt, config))
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] if self.prompt_format == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError) as err:
            raise ServerError(f"unexpected reply from {self.url}: {json.dumps(reply)[:300]}") from err
        usage = reply.get("usage") or {}
        return Completion(
            strip_think(text or ""), int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        )

    def _assemble(self, events: Any) -> dict[str, Any]:
        """One reply in the non-streamed shape from the server-sent events of a streamed one."""
        key = "content" if self.prompt_format == "chat" else "text"
        pieces: list[str] = []
        usage: dict[str, Any] | None = None
        finish = None
        for raw in events:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data:"))
            if "error" in chunk:
                raise StreamError(f"error mid-reply: {json.dumps(chunk['error'])[:300]}")
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                part = (choice.get("delta") or {}).get(key) if key == "content" else choice.get(key)
                pieces.append(part or "")
                finish = choice.get("finish_reason") or finish
        if usage is None:
            raise ServerError(f"{self.url} streamed a reply without its usage chunk: set stream=false for it")
        text = "".join(pieces)
        choice = {"message": {"role": "assistant", "content": text}} if key == "content" else {"text": text}
        return {"choices": [{"index": 0, **choice, "finish_reason": finish}], "usage": usage}

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries on connection errors, 429 and 5xx; other errors raise at once."""
        headers = {"Content-Type": "application/json"}
        if key := os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode("utf-8")
        problem = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return self._assemble(response) if body.get("stream") else json.loads(response.read())
            except urllib.error.HTTPError as err:
                detail = err.read()[:300].decode("utf-8", "replace")
                if err.code != 429 and err.code < 500:
                    raise ServerError(f"{self.url} answered HTTP {err.code}: {detail}") from err
                problem = f"HTTP {err.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as err:
                # a reply cut off mid-stream, or broken off with an error event (an engine restart), too
                problem = str(getattr(err, "reason", err)) or type(err).__name__
            except json.JSONDecodeError as err:
                raise ServerError(f"{self.url} answered with invalid JSON: {err}") from err
            log.warning(
                "request to %s failed (%s); attempt %d of %d", self.url, problem, attempt + 1, 1 + self.max_retries
            )
        raise ServerError(
            f"OpenAI-compatible server at {self.url} is unreachable or failing after "
            f"{self.max_retries + 1} attempts ({problem}); is it running?"
        )
