"""Memory snapshots: an ingested memory saved once and loaded by every run that would ingest it the same way.

Ingestion is most of a run's LLM calls. A snapshot is keyed by everything
that shapes the ingested memory and nothing else (:func:`ingestion_key`), so
a resumed run, a retrieval-only variant and a sweep job all load it instead
of ingesting again. ``COMPLETE`` (holding the key) is written last: a
snapshot without it was cut off and is never loaded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from clag.memory.base import MemorySystem
from clag.records.files import RunFolderError
from clag.running.spec import hashed_view
from clag.types import Episode

MARKER = "COMPLETE"


def ingestion_key(cfg: DictConfig) -> str:
    """Hash of everything that shapes an ingested memory, and nothing else.

    A method class lists its retrieval-only parameters in ``retrieval_params``
    (e.g. CLAG's ``retrieval``, everyone's ``retrieve_k``); runs that differ
    only in those, or in the question slice, share one memory snapshot, so
    retrieval-only variants (Table 7's global retrieval) never re-ingest.
    """
    system_cfg = OmegaConf.to_container(cfg.method.system, resolve=True)
    method_class = get_class(system_cfg["_target_"])
    retrieval_only = getattr(method_class, "retrieval_params", frozenset())
    payload = {
        "method": {k: v for k, v in system_cfg.items() if k not in retrieval_only},
        # minus how the server is launched (UNHASHED, as for run folders): it shapes no answer
        "model": hashed_view({"model": OmegaConf.to_container(cfg.model, resolve=True)})["model"],
        "embedder": OmegaConf.to_container(cfg.embedder, resolve=True),
        "seed": int(cfg.seed),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def snapshot_key(cfg: DictConfig, episode: Episode) -> str:
    """:func:`ingestion_key` joined with the episode and its exact items."""
    items = json.dumps([asdict(item) for item in episode.items], ensure_ascii=False)
    return hashlib.sha256(f"{ingestion_key(cfg)}:{episode.id}:{items}".encode()).hexdigest()


def _index_entry(cfg: DictConfig, key: str) -> Path:
    return Path(cfg.paths.runs_dir) / "memory_index" / key


def find_snapshot(cfg: DictConfig, episode: Episode, run_dir: Path) -> Path | None:
    """The folder of a complete snapshot of this episode's memory, or None.

    Looked up in order: this run's folder (a resumed run), the folder named by
    ``runner.reuse_memory_from``, and the snapshot index under the runs
    folder (any earlier run with the same ingestion key and items).

    Raises:
        RuntimeError: ``runner.reuse_memory_from`` holds a snapshot of other
            data or ingestion settings (only retrieval-only parameters may differ).
    """
    key = snapshot_key(cfg, episode)
    sources = [run_dir / "memory" / episode.id]
    if cfg.runner.reuse_memory_from:
        explicit = Path(cfg.runner.reuse_memory_from) / "memory" / episode.id
        if (explicit / MARKER).exists() and (explicit / MARKER).read_text().strip() != key:
            raise RuntimeError(
                f"memory snapshot {explicit} was ingested with other data or ingestion settings; "
                "only retrieval-only parameters may differ"
            )
        sources.append(explicit)
    index_entry = _index_entry(cfg, key)
    if index_entry.exists():
        sources.append(Path(index_entry.read_text().strip()))
    for source in sources:
        marker = source / MARKER
        if marker.exists() and marker.read_text().strip() == key:
            return source
    return None


def save_snapshot(system: MemorySystem, cfg: DictConfig, episode: Episode, run_dir: Path) -> Path:
    """Save the ingested memory under the run folder, mark it complete and list it in the index.

    Raises:
        RunFolderError: The disk refused the snapshot; the run's rows are untouched.
    """
    key = snapshot_key(cfg, episode)
    target = run_dir / "memory" / episode.id
    index_entry = _index_entry(cfg, key)
    try:
        system.save(target)
        (target / MARKER).write_text(key)
        index_entry.parent.mkdir(parents=True, exist_ok=True)
        index_entry.write_text(str(target.resolve()))
    except OSError as err:
        raise RunFolderError(
            f"could not save the memory snapshot {target}: {err.strerror or err}; "
            "free the space and run the same command again to resume"
        ) from err
    return target
