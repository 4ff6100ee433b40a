"""The SQLite call cache: keys, persistence, and several processes writing at once."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest

from clag.llm import cache as cache_module
from clag.llm.base import Completion, GenerationConfig
from clag.llm.cache import CacheError, CallCache, default_cache_path

MODEL_A = {"backend": "transformers", "model": "a.gguf", "weights_sha256": "aa", "dtype": "bfloat16"}
MODEL_B = {**MODEL_A, "model": "b.gguf", "weights_sha256": "bb"}


def test_roundtrip_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "calls.sqlite"
    first = CallCache(path)
    key = first.key(MODEL_A, "hello", GenerationConfig())
    assert first.get(key) is None
    first.put(key, Completion("world", 3, 1))
    again = CallCache(path)  # a new process would open it the same way
    assert again.get(key) == Completion("world", 3, 1)
    assert len(again) == 1


def test_key_holds_model_prompt_every_setting_and_version(monkeypatch: pytest.MonkeyPatch) -> None:
    base = GenerationConfig()
    key = CallCache.key(MODEL_A, "p", base)
    assert key == CallCache.key(dict(MODEL_A), "p", GenerationConfig())  # stable
    assert key != CallCache.key(MODEL_B, "p", base)  # lm-eval issue #2715: models must not share answers
    assert key != CallCache.key({**MODEL_A, "dtype": "float32"}, "p", base)
    assert key != CallCache.key(MODEL_A, "p ", base)
    variants = {
        "max_new_tokens": 17,
        "temperature": 0.7,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
        "seed": 3,
        "json_schema": {"type": "object"},
    }
    keys = {CallCache.key(MODEL_A, "p", replace(base, **{name: value})) for name, value in variants.items()}
    assert len(keys) == len(variants) and key not in keys
    monkeypatch.setattr(cache_module, "CACHE_VERSION", cache_module.CACHE_VERSION + 1)
    assert CallCache.key(MODEL_A, "p", base) != key


def test_sampled_calls_cached_only_when_seeded() -> None:
    assert CallCache.cacheable(GenerationConfig(temperature=0.0))
    assert not CallCache.cacheable(GenerationConfig(temperature=0.7))
    assert CallCache.cacheable(GenerationConfig(temperature=0.7, seed=1))


def test_default_path_is_under_the_clag_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAG_CACHE_DIR", str(tmp_path))
    assert default_cache_path() == tmp_path / "llm_cache.sqlite"
    assert CallCache().path == tmp_path / "llm_cache.sqlite"


def test_put_many_writes_one_batch(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.sqlite")
    entries = [(cache.key(MODEL_A, f"p{i}", GenerationConfig()), Completion(f"t{i}", i, i)) for i in range(20)]
    cache.put_many(entries)
    cache.put_many([])
    assert len(cache) == 20
    assert cache.get(entries[7][0]) == Completion("t7", 7, 7)


def test_the_first_answer_stored_for_a_key_stays_and_is_returned_to_later_writers(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.sqlite")
    assert cache.put("k", Completion("first", 1, 1)) == Completion("first", 1, 1)
    stored = cache.put_many([("new", Completion("n", 2, 2)), ("k", Completion("second", 3, 3))])
    assert stored == [Completion("n", 2, 2), Completion("first", 1, 1)]
    assert cache.get("k") == Completion("first", 1, 1) and len(cache) == 2


def _writer(path: str, worker: int, count: int) -> None:
    cache = CallCache(path)
    for i in range(count):
        key = cache.key(MODEL_A, f"worker{worker}-prompt{i}", GenerationConfig())
        cache.put(key, Completion(f"answer {worker}/{i}", i, worker))
        assert cache.get(key) is not None


def test_concurrent_processes_lose_nothing(tmp_path: Path) -> None:
    """Four processes x 50 writes into one fresh file (a Hydra multirun sharing its cache)."""
    path = str(tmp_path / "shared.sqlite")
    context = multiprocessing.get_context("spawn")  # separate interpreters, as Hydra's launchers start them
    workers = [context.Process(target=_writer, args=(path, w, 50)) for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=120)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    cache = CallCache(path)
    assert len(cache) == 200
    for w in range(4):
        for i in (0, 25, 49):
            key = cache.key(MODEL_A, f"worker{w}-prompt{i}", GenerationConfig())
            assert cache.get(key) == Completion(f"answer {w}/{i}", i, w)


def _use_inherited(cache: CallCache, key: str) -> None:
    cache.put(key, Completion("from child", 1, 1))


def test_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "fork.sqlite")
    cache.put("parent", Completion("from parent", 1, 1))  # the parent's connection exists before the fork
    child = multiprocessing.get_context("fork").Process(target=_use_inherited, args=(cache, "child"))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert cache.get("child") == Completion("from child", 1, 1)
    assert cache.get("parent") == Completion("from parent", 1, 1)


@pytest.mark.parametrize("damage", ["text", "truncated", "folder"])
def test_an_unusable_cache_file_is_named_with_what_to_do_and_left_as_it_was(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "calls.sqlite"
    if damage == "text":
        path.write_text("these are notes, not a database\n" * 20)
    elif damage == "truncated":  # a real cache whose copy was cut short: only part of its first page
        cache = CallCache(tmp_path / "whole.sqlite")
        cache.put(cache.key(MODEL_A, "hello", GenerationConfig()), Completion("world", 3, 1))
        path.write_bytes((tmp_path / "whole.sqlite").read_bytes()[:100] + b"\0" * 50)
    else:
        path.mkdir()
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(CacheError) as caught:
        CallCache(path)
    message = str(caught.value)
    assert str(path) in message and "move it aside or delete it" in message and "\n" not in message
    assert "cache.enabled=false" in message
    assert (path.read_bytes() if path.is_file() else None) == before  # nothing written to the user's file
