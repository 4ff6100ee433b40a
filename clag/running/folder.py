"""The run folder: whose run it holds and who is using it.

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

Its files are read and written by :mod:`clag.records.files`.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from clag.records.files import RunFolderError, write_error, write_json
from clag.records.schema import SCHEMA_VERSION
from clag.running.spec import RunSpec, config_diff, hash_config, hashed_view

log = logging.getLogger(__name__)

MISMATCH_POLICIES = ("refuse", "move_aside")
_SHOWN_KEYS = 8  # differing keys named in the one-line refusal before "+N more"


class RunFolder:
    """The files of one run folder and the check that it holds this run's config only.

    Layout: ``run.json`` (config hash and schema version, written first),
    ``config.yaml`` (the resolved config), ``predictions.jsonl``,
    ``episodes.jsonl``, ``memory/<episode>/`` and, last, ``metrics.json``;
    ``ingest_progress.jsonl`` says how far each episode's ingestion has come
    while it runs (an episode's ingestion is recorded in ``episodes.jsonl`` only
    when it ends, hours later for an agentic memory on a CPU).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marker = path / "run.json"
        self.config = path / "config.yaml"
        self.predictions = path / "predictions.jsonl"
        self.episodes = path / "episodes.jsonl"
        self.metrics = path / "metrics.json"
        self.progress = path / "ingest_progress.jsonl"

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
            raise write_error(lock, err) from err
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
            raise write_error(self.config, err) from err

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
