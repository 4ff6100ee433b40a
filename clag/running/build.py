"""Backends, LLM clients (the run's and the judge's) and embedders, each built once and shared.

Model weights are the expensive part of a run: a backend loads them once per
process (the backend's own memo), an embedder is kept per setting here, and
every episode gets its own :class:`LLMClient` (its own usage meter) over the
shared backend and cache.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from clag.embed import Embedder
from clag.llm.base import GenerationConfig, LLMBackend
from clag.llm.cache import CallCache
from clag.llm.client import LLMClient
from clag.llm.coalesce import CoalescingBackend
from clag.metrics.judge import JudgeSettings

_EMBEDDERS: dict[str, Embedder] = {}


def seed_everything(seed: int) -> None:
    """One seed for python, numpy and torch (K-Means takes it from the method config)."""
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # torch is a dependency; guard only for exotic installs
        pass


def build_embedder(cfg: DictConfig) -> Embedder:
    """One embedder per process and setting, shared by methods and sweeps."""
    key = json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True)
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = instantiate(cfg)
    return _EMBEDDERS[key]


def build_backend(model_cfg: DictConfig, concurrent: bool = False, coalesce_wait_s: float = 1.0) -> LLMBackend:
    """The configured backend, behind a :class:`CoalescingBackend` when episodes run concurrently.

    A backend that sets ``serves_concurrently`` (a server that batches the
    requests it receives itself) gets no coalescer: holding calls back to
    merge them would only add the wait.
    """
    backend = instantiate(model_cfg.backend)
    if concurrent and not getattr(backend, "serves_concurrently", False):
        return CoalescingBackend(backend, max_wait_s=coalesce_wait_s)
    return backend


def build_client(backend: LLMBackend, model_cfg: DictConfig, cache_cfg: DictConfig) -> LLMClient:
    """A client (own usage meter) over a shared backend and cache."""
    cache = CallCache(cache_cfg.path) if cache_cfg.enabled else None
    generation = GenerationConfig(**OmegaConf.to_container(model_cfg.generation, resolve=True))
    stage_settings = (
        OmegaConf.to_container(model_cfg.stage_settings, resolve=True) if "stage_settings" in model_cfg else {}
    )
    return LLMClient(
        backend,
        cache,
        generation,
        stage_settings,
        constrained_json=bool(model_cfg.get("constrained_json", True)),
        cache_only=bool(cache_cfg.get("only", False)),
        reject_truncated_json=bool(model_cfg.get("reject_truncated_json", False)),
        json_retry=bool(model_cfg.get("json_retry", True)),
        accept_placeholders=bool(model_cfg.get("accept_placeholders", False)),
        free_retry_stages=tuple(model_cfg.get("free_retry_stages") or ()),
    )


def client_for_model(name: str, overrides: Sequence[str] = ()) -> LLMClient:
    """A client of ``configs/model/<name>.yaml`` (with Hydra ``overrides``, e.g. ``engine=vllm``), built
    exactly as a run of that model builds it (the LLM judge's and the failure classifier's, when they are
    not the run's own model)."""
    from clag.config import compose_config

    cfg = compose_config([f"model={name}", *overrides])
    return build_client(build_backend(cfg.model), cfg.model, cfg.cache)


def judge_client(
    settings: JudgeSettings, run_cfg: Mapping[str, Any], backend: LLMBackend | None = None
) -> tuple[LLMClient, str]:
    """The LLM judge's client and model name: the run's own model (``backend`` reused when given), else
    ``settings.model``.

    Raises:
        RuntimeError: The named judge model cannot be built.
    """
    own = str((run_cfg.get("model") or {}).get("name", ""))
    if settings.model in (None, own):
        model_cfg = OmegaConf.create(dict(run_cfg["model"]))
        cache_cfg = OmegaConf.create(dict(run_cfg["cache"]))
        return build_client(backend or build_backend(model_cfg), model_cfg, cache_cfg), own
    return named_judge_client(settings), str(settings.model)


def named_judge_client(settings: JudgeSettings) -> LLMClient:
    """The client of the judge ``settings.model`` names (with ``settings.overrides``).

    Raises:
        RuntimeError: It cannot be built.
    """
    try:
        return client_for_model(str(settings.model), settings.overrides)
    except Exception as err:  # any failure to build a model (missing weights, a server that is down)
        raise RuntimeError(f"judge model {settings.model!r} cannot be built: {err}") from err
