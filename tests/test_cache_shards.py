"""Committed cache shards: append-only export, lossless import, deterministic bytes, clear damage errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from clag.llm.base import Completion
from clag.llm.cache import CallCache
from clag.llm.cache_shards import ShardError, export_shard, import_shards, main, read_shard, shard_paths


def _fill(cache: CallCache, keys: range) -> None:
    cache.put_many([(f"k{i:03d}", Completion(f"answer é {i}", i, 2 * i)) for i in keys])


def test_export_writes_only_new_keys_and_import_restores_every_row(tmp_path: Path) -> None:
    source = CallCache(tmp_path / "a.sqlite")
    shards = tmp_path / "shards"
    _fill(source, range(5))
    first = export_shard(source, shards)
    assert first is not None and first.name == "shard-0001.jsonl.gz"
    assert export_shard(source, shards) is None  # nothing new: no second copy of the same rows
    _fill(source, range(5, 8))
    second = export_shard(source, shards)
    assert second is not None and second.name == "shard-0002.jsonl.gz"
    assert [key for key, _ in read_shard(second)] == ["k005", "k006", "k007"]

    target = CallCache(tmp_path / "b.sqlite")
    assert import_shards(target, shards) == 8
    assert dict(target.entries()) == dict(source.entries())


def test_the_same_cache_exports_to_identical_bytes(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.sqlite")
    _fill(cache, range(3))
    one = export_shard(cache, tmp_path / "x")
    two = export_shard(cache, tmp_path / "y")
    assert one is not None and two is not None
    assert one.read_bytes() == two.read_bytes()


def test_a_damaged_shard_is_named_and_the_cli_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "shard-0001.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ShardError, match="shard-0001.jsonl.gz"):
        import_shards(CallCache(tmp_path / "d.sqlite"), shards)
    with gzip.open(shards / "shard-0002.jsonl.gz", "wt") as handle:
        handle.write('{"k": "a"}\n')
    assert [p.name for p in shard_paths(shards)] == ["shard-0001.jsonl.gz", "shard-0002.jsonl.gz"]
    (shards / "shard-0001.jsonl.gz").unlink()
    assert main(["import", str(tmp_path / "e.sqlite"), str(shards)]) == 2
    assert "shard-0002.jsonl.gz: line 1 is not a cache row" in caplog.text
