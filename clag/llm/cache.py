"""Persistent SQLite cache of LLM calls, safe to share between processes.

The key holds the backend's identity (model id or file hash, revision,
dtype, chat-template hash, prompt format), the prompt, every generation
setting and a cache version, so two models never share answers (the
lm-evaluation-harness pitfall, its issue #2715) and a changed setting is a
miss. A killed run resumes from the cache with identical outputs.

The first answer stored for a key is its answer for good. Two runs sharing a
cache can send the same call at the same moment (A-mem and CLAG before
CLAG's cold start, or an ablation beside its parent), and a server whose batch
numerics change with what else is in flight can answer them differently;
the second writer then adopts the stored answer (:meth:`CallCache.put_many`
returns it), so every run's outputs are the ones a rerun replays.

Such a shared call is also generated once, not once per run: before a miss
goes to the backend the run *claims* its key (:meth:`CallCache.claim`), and a
run that finds the key claimed by a live process waits for its answer to
appear in the cache instead of decoding it again. A claim whose owner died
(same host) or that is older than :data:`CLAIM_TTL_S` is taken over, and a
claim is released when its answer is stored or its call failed, so a killed
run never blocks another. On a 2-core CPU this is most of the cost of a grid
whose runs share a cold start (the authors'-code A-mem and CLAG, Tables 9-10).

Several processes of a Hydra multirun write the same file: the database is
in WAL mode (readers never block the writer), every connection waits on a
busy lock instead of failing, each write is one short transaction, and a
process never reuses a connection it inherited through ``fork``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from clag.llm.base import Completion, GenerationConfig

CACHE_VERSION = 1
BUSY_TIMEOUT_S = 120.0
CLAIM_TTL_S = 3600.0
"""A claim older than this is taken over whoever holds it: longer than any one call takes here (a 1000-token
reply at ~1.5 tokens/s on a loaded CPU server is ~11 minutes), and the bound on a claim held by a process on
another host, whose liveness cannot be checked."""
DELETE_CLAIM = "DELETE FROM claims WHERE key = ? AND host = ? AND pid = ?"  # only its holder's: a newer claim stays


def default_cache_path() -> Path:
    """``<clag cache dir>/llm_cache.sqlite`` (the runner passes its own path from the config)."""
    from clag.assets import cache_dir

    return cache_dir() / "llm_cache.sqlite"


class CacheError(RuntimeError):
    """The cache file cannot be used (not SQLite, damaged, unreadable); the message says what to do.

    The cache only holds LLM completions: moving it aside costs repeated calls,
    never a finished prediction (those live in the run folder).
    """

    def __init__(self, path: Path, cause: BaseException) -> None:
        super().__init__(
            f"LLM cache {path} cannot be used ({cause}): move it aside or delete it (it only holds cached "
            "LLM calls; finished predictions in run folders are untouched), point cache.path elsewhere, "
            "or run with cache.enabled=false"
        )
        self.path = path


class CallNotCached(RuntimeError):
    """A call the cache lacks, in a run told to use the cache alone (``cache.only=true``).

    In a replay of a recorded run it marks where the replay leaves the
    recorded run's path: the recorded run got another answer for an earlier
    call than the cache holds, or made a call nobody cached.
    """


class CallCache:
    """Key-value store of completions in one SQLite file (WAL mode).

    Args:
        path: The database file; its folder is created if needed. ``None``
            means :func:`default_cache_path`.

    Raises:
        CacheError: The file is not a usable SQLite cache (checked on open, so
            a damaged file stops a run before any work, with one line).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._retry_locked(
                lambda db: db.execute(
                    "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, text TEXT NOT NULL,"
                    " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL)"
                )
            )
            self._retry_locked(
                lambda db: db.execute(
                    "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, host TEXT NOT NULL,"
                    " pid INTEGER NOT NULL, since REAL NOT NULL)"
                )
            )
            self._connect().execute("SELECT key, text, prompt_tokens, completion_tokens FROM calls LIMIT 1")
        except (sqlite3.DatabaseError, OSError) as err:
            raise CacheError(self.path, err) from err

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection, opened anew in a forked child."""
        db = getattr(self._local, "db", None)
        if db is None or self._local.pid != os.getpid():
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._local.db, self._local.pid = db, os.getpid()
            # switching to WAL needs a moment of exclusive access; SQLite may refuse it without
            # calling the busy handler while another process creates the file, hence the retry
            self._retry_locked(lambda conn: conn.execute("PRAGMA journal_mode=WAL"), db)
            db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _retry_locked(self, action: Any, db: sqlite3.Connection | None = None) -> Any:
        """Run ``action(db)``, retrying for up to the busy timeout while the file is locked."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                return action(db or self._connect())
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @staticmethod
    def cacheable(config: GenerationConfig) -> bool:
        """Greedy calls always; sampled calls only when seeded."""
        return config.temperature == 0 or config.seed is not None

    @staticmethod
    def key(identity: dict[str, Any], prompt: str, config: GenerationConfig) -> str:
        payload = {"v": CACHE_VERSION, "model": identity, "prompt": prompt, "gen": config.key()}
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str) -> Completion | None:
        row = (
            self._connect()
            .execute("SELECT text, prompt_tokens, completion_tokens FROM calls WHERE key = ?", (key,))
            .fetchone()
        )
        return Completion(*row) if row else None

    def put(self, key: str, completion: Completion) -> Completion:
        [stored] = self.put_many([(key, completion)])
        return stored

    def put_many(self, entries: Iterable[tuple[str, Completion]]) -> list[Completion]:
        """Store completions whose key is new, in one transaction (one fsync for a whole batch).

        Returns, per entry, the completion the cache holds for its key afterwards: the entry's own,
        or the one another writer stored first, which the caller must use in its place.
        """
        rows = [(key, c.text, c.prompt_tokens, c.completion_tokens) for key, c in entries]
        if not rows:
            return []

        def write(db: sqlite3.Connection) -> list[Completion]:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR IGNORE INTO calls VALUES (?, ?, ?, ?)", rows)
                select = "SELECT text, prompt_tokens, completion_tokens FROM calls WHERE key = ?"
                stored = [Completion(*db.execute(select, (row[0],)).fetchone()) for row in rows]
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return stored

        return self._retry_locked(write)

    def claim(self, keys: Iterable[str]) -> set[str]:
        """Claim the calls this process is about to generate; returns the keys it now holds.

        A key is not returned when its answer is already stored or a live
        process (this one's other threads included) holds it: the caller waits
        for that answer (:meth:`get`) and claims again, which succeeds once the
        holder released the key without an answer, died, or held it longer
        than :data:`CLAIM_TTL_S`.
        """
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return set()
        host, pid, now = socket.gethostname(), os.getpid(), time.time()

        def write(db: sqlite3.Connection) -> set[str]:
            db.execute("BEGIN IMMEDIATE")
            try:
                held = set()
                for key in wanted:
                    if db.execute("SELECT 1 FROM calls WHERE key = ?", (key,)).fetchone():
                        continue
                    holder = db.execute("SELECT host, pid, since FROM claims WHERE key = ?", (key,)).fetchone()
                    if holder is not None and not _stale(*holder, now):
                        continue
                    db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?)", (key, host, pid, now))
                    held.add(key)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return held

        return self._retry_locked(write)

    def release(self, keys: Iterable[str]) -> None:
        """Give up this process's claims on ``keys`` (their answers are stored, or their call failed)."""
        host, pid = socket.gethostname(), os.getpid()
        rows = [(key, host, pid) for key in keys]
        if rows:
            self._retry_locked(
                lambda db: db.executemany(DELETE_CLAIM, rows)
            )

    def drop_stale_claims(self) -> int:
        """Delete the claims :func:`_stale` would let a run take over (a process killed without its handler
        leaves them); returns how many. They never block a call, but an export says the cache is tidy."""
        now = time.time()

        def write(db: sqlite3.Connection) -> int:
            stale = [row for row in db.execute("SELECT key, host, pid, since FROM claims") if _stale(*row[1:], now)]
            db.executemany(DELETE_CLAIM, [row[:3] for row in stale])
            return len(stale)

        return self._retry_locked(write)

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def entries(self) -> Iterator[tuple[str, Completion]]:
        """Every stored call, by key (the export of :mod:`clag.llm.cache_shards`)."""
        rows = self._connect().execute("SELECT key, text, prompt_tokens, completion_tokens FROM calls ORDER BY key")
        for key, text, prompt_tokens, completion_tokens in rows:
            yield key, Completion(text, prompt_tokens, completion_tokens)


def _stale(host: str, pid: int, since: float, now: float) -> bool:
    """Whether a claim can be taken over: its process on this host is gone, or it is older than the TTL."""
    if now - since > CLAIM_TTL_S:
        return True
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
