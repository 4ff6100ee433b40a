"""Shared batches for concurrent episodes.

Memory streams (LoCoMo conversations, HotpotQA / BioASQ samples) are
independent, but each one calls the LLM one small request at a time: a
note, then an evolution, then a route. Run episodes in threads and put this
wrapper in front of the backend: calls that arrive together with the same
generation settings are merged into one batched ``generate``, so a CPU or
GPU decodes several streams for the price of one. Each caller gets exactly
its own completions back.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clag.llm.base import Completion, GenerationConfig, LLMBackend


@dataclass
class _Request:
    prompts: list[str]
    config: GenerationConfig
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Completion] | None = None
    error: BaseException | None = None


class CoalescingBackend:
    """Merges concurrent ``generate`` calls into shared backend batches.

    A call waits until every active client thread is waiting too (or
    ``max_wait_s`` passes), then one thread runs all pending requests that
    share its generation settings as one batch. Clients announce themselves
    with :meth:`client` so the wrapper knows how many to wait for.

    Args:
        backend: The real backend.
        max_wait_s: Longest wait for other clients before generating alone. It
            must cover the work a client does between two calls (parsing,
            embedding, search, a cache write: ~0.1 s here); shorter, and the
            first caller goes alone while the rest queue behind it.
    """

    def __init__(self, backend: LLMBackend, max_wait_s: float = 1.0) -> None:
        self.backend = backend
        self.max_wait_s = max_wait_s
        self._lock = threading.Condition()
        self._pending: list[_Request] = []
        self._clients = 0
        self._busy = False
        self.batches = 0
        self.merged_requests = 0

    def identity(self) -> dict[str, Any]:
        return self.backend.identity()

    def client(self) -> _ClientScope:
        """Context manager marking one episode thread as an active client."""
        return _ClientScope(self)

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        request = _Request(list(prompts), config)
        with self._lock:
            self._pending.append(request)
            self._lock.notify_all()
            self._lock.wait_for(lambda: request.done.is_set() or self._ready(), timeout=self.max_wait_s)
            while not request.done.is_set():
                if not self._busy:
                    batch = self._take_batch(request.config)
                    self._busy = True
                    self._lock.release()
                    try:
                        self._run(batch)
                    finally:
                        self._lock.acquire()
                        self._busy = False
                        self._lock.notify_all()
                else:
                    self._lock.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _ready(self) -> bool:
        return not self._busy and len(self._pending) >= max(1, self._clients)

    def _take_batch(self, config: GenerationConfig) -> list[_Request]:
        batch = [r for r in self._pending if r.config == config]
        self._pending = [r for r in self._pending if r.config != config]
        return batch

    def _run(self, batch: list[_Request]) -> None:
        prompts = [p for request in batch for p in request.prompts]
        try:
            completions = self.backend.generate(prompts, batch[0].config)
        except BaseException as err:  # handed to every waiting caller, raised there
            for request in batch:
                request.error = err
                request.done.set()
            return
        self.batches += 1
        self.merged_requests += len(batch)
        offset = 0
        for request in batch:
            request.result = completions[offset : offset + len(request.prompts)]
            offset += len(request.prompts)
            request.done.set()


class _ClientScope:
    def __init__(self, owner: CoalescingBackend) -> None:
        self.owner = owner

    def __enter__(self) -> None:
        with self.owner._lock:
            self.owner._clients += 1

    def __exit__(self, *exc: object) -> None:
        with self.owner._lock:
            self.owner._clients -= 1
            self.owner._lock.notify_all()
