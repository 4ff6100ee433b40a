"""The machine the harness runs on: CPU model and flags, GPUs, native bf16.

One reader of ``/proc/cpuinfo`` for everything that depends on the CPU: the
dtype the transformers engine picks (``dtype: auto``), the dtype vLLM is
served in, and the provenance of every run (int8 and bf16 kernels differ
between CPUs, so results may too).
"""

from __future__ import annotations

import os
import platform
import sys
from functools import cache
from pathlib import Path

from clag.records.schema import Hardware

#: ``/proc/cpuinfo`` flags of a CPU that computes bf16 natively (AVX-512 BF16 dot products, AMX tiles).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# CPU flags that decide which matmul kernels run (x86 SIMD, VNNI, bf16, AMX; ARM NEON/SVE).
_KERNEL_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4", "asimd", "sve", "bf16", "i8mm")


@cache
def _proc_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: no model name, no flags
        return ""


def cpu_model_and_flags(cpuinfo: str | None = None) -> tuple[str, frozenset[str]]:
    """The first processor's model name and flags (Linux; elsewhere the platform's name and none)."""
    text = _proc_cpuinfo() if cpuinfo is None else cpuinfo
    model, flags = platform.processor() or platform.machine(), frozenset[str]()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "hardware", "cpu model") and value.strip():
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = frozenset(value.split())
        if flags and name == "":  # the first processor's block is enough
            break
    return model, flags


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has bf16 instructions.

    oneDNN also "supports" bf16 on plain AVX-512 by converting to float32,
    which is slower than int8 there; only these flags make bf16 the fast path.
    Unreadable (not Linux) counts as no.
    """
    return bool(cpu_model_and_flags(cpuinfo)[1] & NATIVE_BF16_FLAGS)


def gpus() -> list[str]:
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
    """The machine a run was computed on, with the flags that pick its kernels."""
    model, flags = cpu_model_and_flags()
    kernel_flags = sorted(flag for flag in flags if flag.startswith(_KERNEL_FLAG_PREFIXES))
    return Hardware(
        machine=platform.machine(), cpu_model=model, cpu_count=os.cpu_count(), cpu_flags=kernel_flags, gpu=gpus()
    )
