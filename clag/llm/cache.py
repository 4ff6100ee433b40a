"""Persistent SQLite cache of LLM calls, safe to share between processes.

The key holds the backend's identity (model id or file hash, revision,
dtype, chat-template hash, prompt format), the prompt, every generation
setting and a cache version, so two models never share answers (the
lm-evaluation-harness pitfall, its issue #2715) and a changed setting is a
miss. A killed run resumes from the cache with identical outputs.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from clag.llm.base import Completion, GenerationConfig

CACHE_VERSION = 1


class CallCache:
    """Key-value store of completions in one SQLite file (WAL mode).

    Args:
        path: The database file; its folder is created if needed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, text TEXT NOT NULL,"
                " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

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
        row = self._connect().execute(
            "SELECT text, prompt_tokens, completion_tokens FROM calls WHERE key = ?", (key,)
        ).fetchone()
        return Completion(*row) if row else None

    def put(self, key: str, completion: Completion) -> None:
        self._connect().execute(
            "INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?)",
            (key, completion.text, completion.prompt_tokens, completion.completion_tokens),
        )

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]
