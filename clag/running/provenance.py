"""Provenance: what a run was computed with, so a difference between two machines has a visible cause.

The same config gives different predictions on an AVX2 and an AVX-512 CPU
(int8 and bf16 kernels differ), on a GPU, or under another engine or dtype,
so ``metrics.json`` ``run`` records the CPU model and the instruction-set
flags that select those kernels, the GPUs torch sees, the engine and dtype,
the version of every package that changes results
(:data:`clag.versions.RESULT_PACKAGES`), and for a served engine the version
the server reports (``server``: vLLM lives in its own environment, so the
client's ``versions`` say ``absent`` for it) and the server's own counters
over the run (``engine_counters``: requests, tokens prefilled and generated,
prefix-cache hit rate), so that two runs' speeds can be compared by cause.
"""

from __future__ import annotations

import hashlib
import platform
import resource
import subprocess
from pathlib import Path

from omegaconf import OmegaConf

from clag.data import episode_fingerprint
from clag.hardware import hardware
from clag.llm.base import LLMBackend
from clag.llm.serve import engine_counters
from clag.records.schema import RunInfo
from clag.running.spec import RunSpec
from clag.types import Episode
from clag.versions import installed_versions


def git_hash() -> str:
    """HEAD of the checkout the code runs from, or ``unknown`` outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def server_counters(backend: LLMBackend) -> dict[str, float]:
    """A served backend's cumulative counters now (empty in-process or without a server)."""
    read = getattr(backend, "server_counters", None)
    return read() if callable(read) else {}


def provenance(
    spec: RunSpec, backend: LLMBackend, episodes: list[Episode], wall_s: float, counters_at_start: dict[str, float]
) -> RunInfo:
    """``metrics.json`` ``run``: the run's identity, slice, code, packages, machine, engine and cost
    (``counters_at_start``: :func:`server_counters` when the run began)."""
    cfg = spec.cfg
    identity = backend.identity()
    dtype = identity.get("dtype") or OmegaConf.select(cfg, "model.backend.dtype", default=None)
    server_info = getattr(backend, "server_info", None)
    server = server_info() if callable(server_info) else {}
    info = RunInfo(
        config_hash=spec.config_hash,
        exp=cfg.exp,
        method=cfg.method.name,
        dataset=cfg.dataset.name,
        model=cfg.model.name,
        model_identity=identity,
        # the engine group's name (transformers / vllm / llamacpp), else the backend's own word for itself
        engine=str(OmegaConf.select(cfg, "model.engine", default=None) or identity.get("backend", "unknown")),
        dtype=None if dtype is None else str(dtype),
        generation=OmegaConf.to_container(cfg.model.generation, resolve=True),  # type: ignore[typeddict-item]
        concurrent_episodes=int(cfg.runner.concurrent_episodes),
        seed=int(cfg.seed),
        slice=OmegaConf.to_container(cfg.limit, resolve=True),  # type: ignore[typeddict-item]
        episodes=len(episodes),
        questions=sum(len(e.questions) for e in episodes),
        items=sum(len(e.items) for e in episodes),
        input_hash=hashlib.sha256("".join(episode_fingerprint(e) for e in episodes).encode()).hexdigest(),
        git=git_hash(),
        versions=installed_versions(),
        python=platform.python_version(),
        hardware=hardware(),
        wall_s=wall_s,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    if server:
        info["server"] = server
    if counters := engine_counters(counters_at_start, server_counters(backend)):
        info["engine_counters"] = counters  # type: ignore[typeddict-item]
    return info
