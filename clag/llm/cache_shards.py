"""Append-only, compressed shards of the LLM call cache, committed beside a long run.

The reference run takes many hours on a CPU and has to survive being stopped
anywhere, also on a fresh clone of another machine. Its only expensive state
is the LLM calls already made, and they sit in the SQLite call cache
(:class:`clag.llm.cache.CallCache`), keyed by a hash of model identity,
prompt and generation settings. So a shard holds just ``key -> completion``
rows (no prompts, no model weights): importing the shards into an empty cache
and rerunning replays every finished call from the cache, and the run goes
on from the first call nobody has made yet.

Shards are append-only (``shard-0001.jsonl.gz``, ``shard-0002...``): an
export writes only the keys no earlier shard holds, so committing progress
many times grows the repository by the cache's compressed size once, not
once per commit. Files are written deterministically (rows sorted by key,
gzip header without a timestamp), so exporting the same cache twice changes
nothing.

    python -m clag.llm.cache_shards import CACHE.sqlite SHARD_DIR
    python -m clag.llm.cache_shards export CACHE.sqlite SHARD_DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from clag.llm.base import Completion
from clag.llm.cache import CallCache

log = logging.getLogger(__name__)

SHARD_GLOB = "shard-*.jsonl.gz"
_BATCH = 2000


class ShardError(RuntimeError):
    """A shard file is unreadable; the message names it."""


def shard_paths(folder: Path) -> list[Path]:
    """The shards of a folder, in the order they were written."""
    return sorted(Path(folder).glob(SHARD_GLOB))


def read_shard(path: Path) -> Iterator[tuple[str, Completion]]:
    """Rows of one shard; a damaged file raises :class:`ShardError` naming it and the line."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    row = json.loads(line)
                    yield row["k"], Completion(row["t"], int(row["p"]), int(row["c"]))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                    raise ShardError(f"{path}: line {number} is not a cache row ({err})") from None
    except (OSError, EOFError) as err:
        raise ShardError(f"{path}: not a readable gzip file ({err}); restore it with git checkout") from None


def import_shards(cache: CallCache, folder: Path) -> int:
    """Load every shard of ``folder`` into ``cache``; returns the rows read. A key the cache
    already holds keeps its answer (the first stored wins, as for every write)."""
    total = 0
    for path in shard_paths(folder):
        batch: list[tuple[str, Completion]] = []
        for entry in read_shard(path):
            batch.append(entry)
            if len(batch) >= _BATCH:
                cache.put_many(batch)
                total += len(batch)
                batch = []
        cache.put_many(batch)
        total += len(batch)
    return total


def export_shard(cache: CallCache, folder: Path) -> Path | None:
    """Write the cache's rows that no shard of ``folder`` holds yet into a new shard.

    Returns the new shard's path, or ``None`` when there was nothing new.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    existing = shard_paths(folder)
    known = {key for path in existing for key, _ in read_shard(path)}
    fresh = [(key, completion) for key, completion in cache.entries() if key not in known]
    if not fresh:
        return None
    number = int(existing[-1].name.split("-")[1].split(".")[0]) + 1 if existing else 1
    target = folder / f"shard-{number:04d}.jsonl.gz"
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
        for key, completion in fresh:
            row = {"k": key, "t": completion.text, "p": completion.prompt_tokens, "c": completion.completion_tokens}
            handle.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clag.llm.cache_shards", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("import", "export"))
    parser.add_argument("cache", type=Path, help="the SQLite call cache")
    parser.add_argument("folder", type=Path, help="the folder of shard-*.jsonl.gz files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cache = CallCache(args.cache)
    try:
        if args.action == "import":
            rows = import_shards(cache, args.folder)
            log.info("imported %d cached calls from %d shards of %s into %s (%d entries now)",
                     rows, len(shard_paths(args.folder)), args.folder, args.cache, len(cache))
        else:
            target = export_shard(cache, args.folder)
            size = sum(p.stat().st_size for p in shard_paths(args.folder))
            log.info("%s; shards of %s: %.1f MB in all", f"wrote {target}" if target else "nothing new to export",
                     args.folder, size / 1e6)
    except ShardError as err:
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
