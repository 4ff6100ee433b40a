"""CoalescingBackend: concurrent episode threads share backend batches."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from scripted_llm import ScriptedBackend

from clag.llm.base import GenerationConfig
from clag.llm.coalesce import CoalescingBackend


class CountingBackend(ScriptedBackend):
    """Records the size of every batch it is asked to generate."""

    def __init__(self) -> None:
        super().__init__(lambda prompt, config: f"echo:{prompt}")
        self.batch_sizes: list[int] = []

    def generate(self, prompts, config):
        self.batch_sizes.append(len(prompts))
        return super().generate(prompts, config)


def run_clients(backend: CoalescingBackend, clients: int, calls: int) -> list[list[str]]:
    config = GenerationConfig(max_new_tokens=8)
    registered = threading.Barrier(clients)

    def client(index: int) -> list[str]:
        with backend.client():
            registered.wait()  # all episode threads are running before the first call
            return [backend.generate([f"c{index}-{step}"], config)[0].text for step in range(calls)]

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(client, range(clients)))


def test_each_client_gets_its_own_answers_and_calls_are_merged():
    inner = CountingBackend()
    backend = CoalescingBackend(inner, max_wait_s=1.0)
    results = run_clients(backend, clients=4, calls=5)
    assert results == [[f"echo:c{i}-{s}" for s in range(5)] for i in range(4)]
    assert sum(inner.batch_sizes) == 20
    assert max(inner.batch_sizes) > 1  # the point of the wrapper
    assert len(inner.batch_sizes) < 20


def test_different_settings_are_never_mixed_in_one_batch():
    seen: list[set[int]] = []

    class Recording(CountingBackend):
        def generate(self, prompts, config):
            seen.append({config.max_new_tokens})
            return super().generate(prompts, config)

    backend = CoalescingBackend(Recording(), max_wait_s=0.5)
    barrier = threading.Barrier(2)

    def client(tokens: int) -> str:
        with backend.client():
            barrier.wait()
            return backend.generate([f"t{tokens}"], GenerationConfig(max_new_tokens=tokens))[0].text

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(client, [4, 8])) == ["echo:t4", "echo:t8"]
    assert all(len(s) == 1 for s in seen)


def test_backend_errors_reach_the_caller():
    def fail(prompt, config):
        raise RuntimeError("server down")

    backend = CoalescingBackend(ScriptedBackend(fail), max_wait_s=0.01)
    with pytest.raises(RuntimeError, match="server down"):
        backend.generate(["x"], GenerationConfig())
