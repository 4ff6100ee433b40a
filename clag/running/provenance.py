"""Provenance: what a run was computed with, so a difference between two machines has a visible cause.

The same config gives different predictions on an AVX2 and an AVX-512 CPU
(int8 and bf16 kernels differ), on a GPU, or under another engine or dtype,
so ``metrics.json`` ``run`` records the CPU model and the instruction-set
flags that select those kernels, the GPUs torch sees, the engine and dtype,
and the version of every package that changes results
(:data:`clag.versions.RESULT_PACKAGES`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from clag.data import episode_fingerprint
from clag.llm.base import LLMBackend
from clag.running.spec import RunSpec
from clag.schema import Hardware, RunInfo
from clag.types import Episode
from clag.versions import installed_versions

# CPU flags that decide which matmul kernels run (x86 SIMD, VNNI, bf16, AMX; ARM NEON/SVE).
_KERNEL_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4", "asimd", "sve", "bf16", "i8mm")


def _cpuinfo() -> tuple[str, list[str]]:
    """CPU model name and kernel-relevant flags from ``/proc/cpuinfo`` (Linux; elsewhere the platform's name)."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model, flags
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "hardware", "cpu model") and value.strip():
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = sorted(flag for flag in value.split() if flag.startswith(_KERNEL_FLAG_PREFIXES))
        if flags and model and name == "":  # the first processor's block is enough
            break
    return model, flags


def _gpus() -> list[str]:
    """Names of the CUDA devices torch sees; [] without torch, CUDA or a GPU."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return []
    try:
        if not torch.cuda.is_available():
            return []
        return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
    except Exception:  # a broken driver must not fail a finished run
        return []


def hardware() -> Hardware:
    """The machine a run was computed on."""
    model, flags = _cpuinfo()
    return Hardware(machine=platform.machine(), cpu_model=model, cpu_count=os.cpu_count(), cpu_flags=flags, gpu=_gpus())


def git_hash() -> str:
    """HEAD of the checkout the code runs from, or ``unknown`` outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(spec: RunSpec, backend: LLMBackend, episodes: list[Episode], wall_s: float) -> RunInfo:
    """``metrics.json`` ``run``: the run's identity, slice, code, packages, machine, engine and cost."""
    cfg = spec.cfg
    identity = backend.identity()
    dtype = identity.get("dtype") or OmegaConf.select(cfg, "model.backend.dtype", default=None)
    return RunInfo(
        config_hash=spec.config_hash,
        exp=cfg.exp,
        method=cfg.method.name,
        dataset=cfg.dataset.name,
        model=cfg.model.name,
        model_identity=identity,
        engine=str(identity.get("backend", "unknown")),
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
