"""The files of a run folder, read and written one way: JSON written atomically, JSONL logs that survive a kill.

Every JSONL file of a run is read one way (:func:`read_jsonl`): complete
lines are rows; a last line without its newline is a write cut off by a kill
and is dropped (the append logs cut it from the file, so the next row starts
on a fresh line); an unreadable line elsewhere is skipped with a warning and
left in the file.

Writes go through a temporary file and a rename (JSON, rewritten JSONL) or
are appended and synced per batch (:class:`JsonlLog`), so a reader never sees
half a file and a killed run keeps every row it synced.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as asked; the message is one line saying why and what to do."""


def _lines(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """``(line number, row)`` of every readable complete line, and the byte length of the complete lines."""
    rows: list[tuple[int, dict[str, Any]]] = []
    complete = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith(b"\n"):
                log.info("%s: dropping line %d, cut off by an interrupted write", path, number)
                break
            complete += len(line)
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict):
                rows.append((number, row))
            else:
                log.warning("%s: skipping unreadable line %d", path, number)
    return rows, complete


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's JSONL file under the one reading policy of this module ([] when absent)."""
    if not path.is_file():
        return []
    return [row for _, row in _lines(path)[0]]


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON through a temporary file, so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False, default=str))
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(path, err) from err


def rewrite_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Replace a JSONL file atomically (the scored predictions replace the streamed ones)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text("".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows))
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(path, err) from err


def write_error(path: Path, err: OSError) -> RunFolderError:
    return RunFolderError(
        f"could not write {path}: {err.strerror or err}; every row written before is intact, "
        "so free the space (or fix the folder) and run the same command again to resume"
    )


class JsonlLog:
    """An append-only JSONL log of one run, keyed by ``key``, that survives a kill.

    Rows are flushed and synced per batch; on open, a line cut off by a kill
    is cut from the file. Rows carry the run's ``config_hash``; a row of
    another hash means the folder mixes two configs, and is refused rather
    than adopted. Rows without one (written before the schema) count as the
    folder's, whose config was checked by :meth:`RunFolder.claim`.

    Raises:
        RunFolderError: On open, the file holds rows of another config; on
            write, the disk refused the row (full, read-only).
    """

    def __init__(self, path: Path, key: str, config_hash: str) -> None:
        self.path = path
        self.key = key
        self.config_hash = config_hash
        self.rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # concurrent episodes append from several threads
        if not path.exists():
            return
        found, complete = _lines(path)
        foreign = {row["config_hash"] for _, row in found if row.get("config_hash", config_hash) != config_hash}
        if foreign:
            raise RunFolderError(
                f"{path} holds rows of config {', '.join(sorted(h[:8] for h in foreign))}, this run is "
                f"{config_hash[:8]}: the folder mixes runs; use another run_dir or runner.on_config_mismatch=move_aside"
            )
        for number, row in found:
            if row.get(key) is None:
                log.warning("%s: skipping line %d, which has no %s", path, number, key)
            else:
                self.rows[str(row[key])] = row
        if complete < path.stat().st_size:
            with path.open("r+b") as handle:
                handle.truncate(complete)

    def done(self, key: str) -> bool:
        return key in self.rows

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append rows (each carrying this run's ``config_hash``) and sync them to disk."""
        with self._lock:
            try:
                with self.path.open("a", encoding="utf-8") as handle:
                    for row in rows:
                        handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
            except OSError as err:
                raise write_error(self.path, err) from err
            for row in rows:
                self.rows[str(row[self.key])] = row
