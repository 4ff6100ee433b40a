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

The same rows merge the caches of a sweep run on a cluster: there every job
writes its own SQLite cache in its own output folder (``cluster=slurm``;
SQLite's locks do not hold over NFS, GPFS or Lustre, so no cache file is
shared between machines), and after the sweep one command folds every job's
cache into the main one. A key both hold keeps the main cache's answer (the
first stored wins, as for every write); such keys with another answer are
counted as conflicts, never silently swapped.

    python -m clag.llm.cache_shards import CACHE.sqlite SHARD_DIR
    python -m clag.llm.cache_shards export CACHE.sqlite SHARD_DIR
    python -m clag.llm.cache_shards merge CACHE.sqlite SWEEP_DIR   # every SWEEP_DIR/**/llm_cache.sqlite
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from clag.llm.base import Completion
from clag.llm.cache import CacheError, CallCache

log = logging.getLogger(__name__)

SHARD_GLOB = "shard-*.jsonl.gz"
JOB_CACHE = "llm_cache.sqlite"  # a sweep job's own cache, in its output folder (configs/cluster/)
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


@dataclass
class Merged:
    """What putting rows into a cache did.

    Attributes:
        read: Rows read from the source.
        new: Rows whose key the cache did not hold, now stored.
        conflicts: Keys the cache held with another completion; the cache's own was kept.
    """

    read: int = 0
    new: int = 0
    conflicts: int = 0

    def add(self, other: Merged) -> None:
        self.read += other.read
        self.new += other.new
        self.conflicts += other.conflicts


def put_all(cache: CallCache, entries: Iterable[tuple[str, Completion]]) -> Merged:
    """Store ``entries`` in batches; a key the cache already holds keeps its answer (the first stored wins)."""
    merged = Merged()
    before = len(cache)
    batch: list[tuple[str, Completion]] = []

    def flush() -> None:
        stored = cache.put_many(batch)
        merged.read += len(batch)
        merged.conflicts += sum(kept.text != offered.text for kept, (_, offered) in zip(stored, batch))
        batch.clear()

    for entry in entries:
        batch.append(entry)
        if len(batch) >= _BATCH:
            flush()
    flush()
    merged.new = len(cache) - before
    return merged


def import_shards(cache: CallCache, folder: Path) -> int:
    """Load every shard of ``folder`` into ``cache``; returns the rows read. A key the cache
    already holds keeps its answer (the first stored wins, as for every write)."""
    return put_all(cache, (entry for path in shard_paths(folder) for entry in read_shard(path))).read


def job_caches(folder: Path, main: Path) -> list[Path]:
    """The sweep jobs' own caches under ``folder`` (any depth), in path order, ``main`` left out."""
    return [path for path in sorted(Path(folder).rglob(JOB_CACHE)) if path.resolve() != Path(main).resolve()]


def merge_caches(cache: CallCache, sources: Sequence[Path]) -> tuple[dict[Path, Merged], dict[Path, str]]:
    """Fold each source cache into ``cache``; returns what each merge did, and the sources that could
    not be read with why (the others are merged all the same; a source is only read, never changed)."""
    done: dict[Path, Merged] = {}
    failed: dict[Path, str] = {}
    for source in sources:
        try:
            done[source] = put_all(cache, CallCache(source).entries())
        except CacheError as err:
            failed[source] = str(err)
    return done, failed


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
    parser.add_argument("action", choices=("import", "export", "merge"))
    parser.add_argument("cache", type=Path, help="the SQLite call cache (merge: the main one, written)")
    parser.add_argument("folder", type=Path, help=f"the folder of shard-*.jsonl.gz files (merge: of {JOB_CACHE} files)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cache = CallCache(args.cache)
        if args.action == "import":
            rows = import_shards(cache, args.folder)
            log.info("imported %d cached calls from %d shards of %s into %s (%d entries now)",
                     rows, len(shard_paths(args.folder)), args.folder, args.cache, len(cache))
        elif args.action == "export":
            target = export_shard(cache, args.folder)
            size = sum(p.stat().st_size for p in shard_paths(args.folder))
            dropped = cache.drop_stale_claims()
            log.info("%s; shards of %s: %.1f MB in all; %d stale claims dropped",
                     f"wrote {target}" if target else "nothing new to export", args.folder, size / 1e6, dropped)
        else:
            return _merge(cache, args.folder)
    except (ShardError, CacheError) as err:
        log.error("%s", err)
        return 2
    return 0


def _merge(cache: CallCache, folder: Path) -> int:
    """The ``merge`` action: one line per job cache and a total; 2 when a job cache could not be read."""
    sources = job_caches(folder, cache.path)
    if not sources:
        log.error("no %s under %s: give the sweep folder whose jobs wrote their own caches", JOB_CACHE, folder)
        return 2
    done, failed = merge_caches(cache, sources)
    total = Merged()
    for source, merged in done.items():
        total.add(merged)
        log.info("%s: %d calls, %d new, %d conflicting (kept the main cache's)",
                 source, merged.read, merged.new, merged.conflicts)
    for source, why in failed.items():
        log.error("%s: not merged: %s", source, why)
    log.info("merged %d of %d job caches into %s: %d new calls, %d conflicts; %d entries now",
             len(done), len(sources), cache.path, total.new, total.conflicts, len(cache))
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
