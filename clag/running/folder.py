"""The run folder: whose run it holds, its JSONL logs, and its atomic JSON files.

A folder belongs to one config hash. The hash is written to ``run.json``
before the first row, and every prediction row and episode record carries it
too, so a folder cannot silently adopt another config's rows: opening a
folder that holds another config's run is refused with one line naming both
hashes and the keys that differ, unless the caller asked for the old run to
be moved aside first (``runner.on_config_mismatch=move_aside``).

A folder is used by one live process at a time (:meth:`RunFolder.hold`): the
holder keeps an exclusive ``flock`` on ``.<folder>.holder`` beside the folder
(beside, so that moving an old run aside keeps the lock) and writes its pid,
host and start time there; a second process is refused with one line naming the
holder. The kernel drops the lock when its process dies, however it dies, so
a holder that is gone is taken over with a note, never waited for. (``flock``
is local to one machine on some network filesystems: on a cluster, give each
job its own run folder, as a sweep does.)

Every JSONL file of a run is read one way (:func:`read_jsonl`): complete
lines are rows; a last line without its newline is a write cut off by a kill
and is dropped (the append logs cut it from the file, so the next row starts
on a fresh line); an unreadable line elsewhere is skipped with a warning and
left in the file.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from clag.running.spec import RunSpec, config_diff, hash_config, hashed_view
from clag.schema import SCHEMA_VERSION

log = logging.getLogger(__name__)

MISMATCH_POLICIES = ("refuse", "move_aside")
_SHOWN_KEYS = 8  # differing keys named in the one-line refusal before "+N more"


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
        raise _write_error(path, err) from err


def rewrite_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Replace a JSONL file atomically (the scored predictions replace the streamed ones)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text("".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows))
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, err) from err


def _write_error(path: Path, err: OSError) -> RunFolderError:
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
                raise _write_error(self.path, err) from err
            for row in rows:
                self.rows[str(row[self.key])] = row


class RunFolder:
    """The files of one run folder and the check that it holds this run's config only.

    Layout: ``run.json`` (config hash and schema version, written first),
    ``config.yaml`` (the resolved config), ``predictions.jsonl``,
    ``episodes.jsonl``, ``memory/<episode>/`` and, last, ``metrics.json``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marker = path / "run.json"
        self.config = path / "config.yaml"
        self.predictions = path / "predictions.jsonl"
        self.episodes = path / "episodes.jsonl"
        self.metrics = path / "metrics.json"

    def is_finished(self, config_hash: str) -> bool:
        """Whether ``metrics.json`` exists and was written by a run of ``config_hash``."""
        if not self.metrics.is_file():
            return False
        try:
            metrics = json.loads(self.metrics.read_text())
        except (OSError, json.JSONDecodeError):
            return False
        return metrics.get("run", {}).get("config_hash") == config_hash

    @contextmanager
    def hold(self) -> Iterator[None]:
        """This process's exclusive use of the folder for the duration of the block.

        Raises:
            RunFolderError: Another live process holds the folder (the line names it).
        """
        lock = self.path.parent / f".{self.path.name}.holder"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = lock.open("a+")
        except OSError as err:
            raise _write_error(lock, err) from err
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise RunFolderError(
                    f"{self.path} is in use by {holder}; wait for that run to end or stop it, "
                    "or give this run another run_dir"
                ) from None
            handle.seek(0)
            if previous := handle.read().strip():
                log.info("%s: taking over from %s, which is gone", self.path, previous)
            handle.seek(0)
            handle.truncate()
            started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            handle.write(f"pid {os.getpid()} on {socket.gethostname()} (since {started})")
            handle.flush()
            try:
                yield
            finally:
                handle.truncate(0)  # released in order: nothing to take over
        finally:
            handle.close()  # closing the file drops the lock

    def claim(self, spec: RunSpec, on_mismatch: str = "refuse") -> None:
        """Make the folder this run's: check whose run it holds, then write ``run.json`` and ``config.yaml``.

        Args:
            spec: The run.
            on_mismatch: ``refuse`` (raise) or ``move_aside`` (rename the old
                folder to ``<dir>.old-<hash8>`` and start empty) when the
                folder holds another config's run.

        Raises:
            RunFolderError: The folder holds another config's run and
                ``on_mismatch`` is ``refuse``, or ``on_mismatch`` is unknown.
        """
        if on_mismatch not in MISMATCH_POLICIES:
            raise RunFolderError(f"runner.on_config_mismatch={on_mismatch!r}: expected one of {MISMATCH_POLICIES}")
        stored = self._stored_hash(spec)
        if stored is not None and stored != spec.config_hash:
            if on_mismatch == "refuse":
                raise RunFolderError(self._refusal(spec, stored))
            aside = self._move_aside(stored)
            log.warning("%s held config %s; moved it to %s", self.path, stored[:8], aside)
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            write_json(self.marker, {"config_hash": spec.config_hash, "schema_version": SCHEMA_VERSION})
            self.config.write_text(OmegaConf.to_yaml(spec.cfg, resolve=True))
        except OSError as err:
            raise _write_error(self.config, err) from err

    def _stored_config(self) -> dict[str, Any] | None:
        if not self.config.is_file():
            return None
        try:
            loaded = yaml.safe_load(self.config.read_text())
        except (OSError, yaml.YAMLError):
            return None
        return hashed_view(loaded) if isinstance(loaded, dict) else None

    def _stored_hash(self, spec: RunSpec) -> str | None:
        """The config hash of the run the folder holds, None when it holds none.

        A folder with no result in it yet (a run that stopped before its first
        row or snapshot, e.g. on a data error) holds none. ``run.json`` says
        whose it is; a folder written before ``run.json`` existed is judged by
        its ``config.yaml``: the same config (compared key by key, both sides
        read back from YAML) is this run, anything else is another.
        """
        if not self._holds_results():
            return None
        if self.marker.is_file():
            try:
                return str(json.loads(self.marker.read_text())["config_hash"])
            except (OSError, json.JSONDecodeError, KeyError, TypeError):
                pass  # a damaged marker: judge by config.yaml as for an old folder
        stored = self._stored_config()
        if stored is None:
            return "unknown"  # results without a readable config
        if not config_diff(stored, _as_yaml(spec)):
            return spec.config_hash
        try:
            return str(json.loads(self.metrics.read_text())["run"]["config_hash"])
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            return hash_config(stored)

    def _holds_results(self) -> bool:
        logs = (self.predictions, self.episodes)
        return (
            self.metrics.exists()
            or (self.path / "memory").exists()
            or any(p.is_file() and p.stat().st_size for p in logs)
        )

    def _refusal(self, spec: RunSpec, stored: str) -> str:
        stored_config = self._stored_config()
        keys = config_diff(stored_config, _as_yaml(spec)) if stored_config is not None else []
        shown = ", ".join(keys[:_SHOWN_KEYS]) + (f" +{len(keys) - _SHOWN_KEYS} more" if len(keys) > _SHOWN_KEYS else "")
        return (
            f"run_dir {self.path} holds a run of config {stored[:8]}, this run is config {spec.config_hash[:8]}"
            f" (differing keys: {shown or 'unknown'}); use another run_dir, or pass runner.on_config_mismatch="
            "move_aside to rename the old run's folder first"
        )

    def _move_aside(self, stored: str) -> Path:
        base = self.path.with_name(f"{self.path.name}.old-{stored[:8]}")
        target, number = base, 1
        while target.exists():
            number += 1
            target = base.with_name(f"{base.name}-{number}")
        self.path.rename(target)
        return target


def _as_yaml(spec: RunSpec) -> dict[str, Any]:
    """The spec's hashed config as ``config.yaml`` would read back, so both sides of a comparison match in form."""
    return hashed_view(yaml.safe_load(OmegaConf.to_yaml(spec.cfg, resolve=True)))
