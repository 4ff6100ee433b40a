"""The run spec: a resolved config, the hash that names what it computes, and its folder.

The hash covers every key that can change a prediction or a metric and
leaves out those that only say where things go or how they are shown
(:data:`UNHASHED`), so the same run always lands in (and resumes from) the
same folder, and a folder can tell whether a run is its own. A setting added
after runs were committed is hashed only where it departs from the value those
runs were computed with (:data:`ADDED_LATER`), so adding it renames no folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Keys that do not change what a run computes, left out of the run's hash.
UNHASHED = (
    "paths",
    "logger",
    "run_dir",
    "runner.progress",
    "runner.reuse_memory_from",
    "runner.warmup",
    "runner.on_config_mismatch",
    "cache",
    "hydra",
    "model.backend.stream",  # how a reply travels (streamed or whole), not what it says
    "model.serve",  # how clag.llm.serve launches the server (KV-cache size, cores); the served
    # identity (name, weights hash, dtype) is in model.backend, and a prompt the server cannot
    # take fails loudly rather than changing an answer
)


# Settings added after runs were committed, with the value every earlier run was computed with: left out
# of the hash at that value, hashed as any key otherwise.
ADDED_LATER: dict[str, Any] = {
    "answer.json_instruction": True,
    "model.reject_truncated_json": False,
    "metrics.judge.overrides": [],
    "model.backend.disable_any_whitespace": False,
    "model.json_retry": True,
    "model.accept_placeholders": False,
    "model.free_retry_stages": [],
    "model.backend.seed_per_prompt": False,
}


_ANY = object()


def _drop(tree: dict[str, Any], dotted: str, value: Any = _ANY) -> None:
    """Remove the key ``dotted`` from ``tree`` (given ``value``: only where it holds that value)."""
    node: Any = tree
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.get(key, {}) if isinstance(node, dict) else {}
    if isinstance(node, dict) and leaf in node and (value is _ANY or node[leaf] == value):
        del node[leaf]


def hashed_view(container: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config the hash covers, as plain JSON values."""
    trimmed = json.loads(json.dumps(container, default=str))
    for dotted in UNHASHED:
        _drop(trimmed, dotted)
    for dotted, earlier in ADDED_LATER.items():
        _drop(trimmed, dotted, earlier)
    # A method's own prompt format (configs/method/*.yaml) is hashed only where it overrides the model's:
    # the backend's resolved prompt_format already says what the calls use, and runs from before the key
    # keep their folders.
    _drop(trimmed, "method.prompt_format", trimmed.get("model", {}).get("prompt_format"))
    return trimmed


def hash_config(container: dict[str, Any]) -> str:
    """SHA-256 of :func:`hashed_view` with sorted keys."""
    return hashlib.sha256(json.dumps(hashed_view(container), sort_keys=True).encode()).hexdigest()


def config_diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the keys whose values differ between two configs (added and removed keys included)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(path)
            else:
                out.extend(config_diff(old[key], new[key], path))
        return out
    return [] if old == new else [prefix or "<root>"]


@dataclass
class RunSpec:
    """A resolved config plus the folder it writes to.

    Attributes:
        cfg: The composed config.
        run_dir: ``run_dir`` when given, else the hash-named folder under the runs folder.
        config_hash: :func:`hash_config` of the resolved config.
    """

    cfg: DictConfig
    run_dir: Path
    config_hash: str

    @classmethod
    def from_config(cls, cfg: DictConfig) -> RunSpec:
        config_hash = hash_config(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))
        if cfg.get("run_dir"):
            return cls(cfg=cfg, run_dir=Path(cfg.run_dir), config_hash=config_hash)
        run_dir = (
            Path(cfg.paths.runs_dir)
            / cfg.exp
            / cfg.dataset.name
            / cfg.method.name
            / cfg.model.name
            / f"seed{cfg.seed}-{config_hash[:8]}"
        )
        return cls(cfg=cfg, run_dir=run_dir, config_hash=config_hash)
