"""Typed schemas of the run config, checked before a run starts.

A mistyped override (``limit.questions=abc``, ``runner.concurrent_episodes=-1``,
``metrics.adversarial_mode=foo``) would otherwise surface as a traceback deep
in the runner, after the data and the model were loaded. Here each group is a
dataclass (types, and in field metadata the allowed range or choices), and
every ``_target_`` node (the method's system, the model's backend, the
embedder) is typed by its class's ``__init__`` annotations, so
``method.system.tau=abc`` is caught the same way.

The schemas are registered in Hydra's ConfigStore (group ``schema``) but are
not merged during composition: a composition error is reported by Hydra in
several lines with exit code 1 before our code runs, while
:func:`validate_config` gives one line that names the key, the value and
what it expects (the entry point exits with code 2). Groups stay open: a key
a schema does not declare is passed through unchecked, so new keys added in
YAML never break a run; ``tests/test_configs.py`` checks that every key of the
default config is declared. Defaults live in the YAML only (schema fields
are ``MISSING``), so no value is written twice.

Followed: Hydra's structured-config tutorial (schemas in a ConfigStore) and
lightning-hydra-template's habit of composing every config in tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from clag.metrics.judge import PROMPTS as JUDGE_PROMPTS
from clag.metrics.settings import ADVERSARIAL_MODES
from clag.running.folder import MISMATCH_POLICIES

# Optional[...] rather than `X | None`: OmegaConf reads the annotations of these dataclasses at run time.
# ruff: noqa: UP045


class ConfigError(ValueError):
    """A config value of the wrong type or outside its range; the message is one line naming the key."""


def _at_least(low: float) -> dict[str, Any]:
    return {"min": low}


def _one_of(*choices: str) -> dict[str, Any]:
    return {"choices": choices}


@dataclass
class LimitSchema:
    """``limit``: the data slice (null = no limit)."""

    episode_ids: Optional[list[str]] = MISSING
    episodes: Optional[int] = field(default=MISSING, metadata=_at_least(1))
    items: Optional[int] = field(default=MISSING, metadata=_at_least(1))
    questions: Optional[int] = field(default=MISSING, metadata=_at_least(0))
    categories: Optional[list[int]] = MISSING


@dataclass
class RunnerSchema:
    """``runner``: how questions and episodes are scheduled, and what is saved."""

    answer_batch_size: int = field(default=MISSING, metadata=_at_least(1))
    concurrent_episodes: int = field(default=MISSING, metadata=_at_least(1))
    coalesce_wait_s: float = field(default=MISSING, metadata=_at_least(0))
    save_memory: bool = MISSING
    reuse_memory_from: Optional[str] = MISSING
    on_config_mismatch: str = field(default=MISSING, metadata=_one_of(*MISMATCH_POLICIES))
    progress: bool = MISSING
    warmup: bool = MISSING


@dataclass
class JudgeSchema:
    """``metrics.judge``: the LLM judge at the end of a run (see :mod:`clag.metrics.judge`)."""

    enabled: bool = MISSING
    model: Optional[str] = MISSING
    prompts: list[str] = field(default=MISSING, metadata=_one_of(*JUDGE_PROMPTS))
    max_new_tokens: int = field(default=MISSING, metadata=_at_least(1))
    skip_categories: dict[str, list[int]] = MISSING
    overrides: list[str] = MISSING


@dataclass
class MetricsSchema:
    """``metrics``: scoring settings (see :class:`clag.metrics.MetricSettings`)."""

    bert_model: str = MISSING
    adversarial_mode: str = field(default=MISSING, metadata=_one_of(*ADVERSARIAL_MODES))
    bootstrap_samples: int = field(default=MISSING, metadata=_at_least(1))
    judge: JudgeSchema = MISSING


@dataclass
class CacheSchema:
    """``cache``: the SQLite LLM call cache."""

    enabled: bool = MISSING
    path: str = MISSING
    only: bool = False


@dataclass
class AnswerSchema:
    """``answer``: the shared answerer."""

    adversarial_temperature: Optional[float] = field(default=MISSING, metadata=_at_least(0))
    json_instruction: bool = MISSING


@dataclass
class MethodSchema:
    """``method``: common keys; ``system`` is typed by its ``_target_`` class."""

    name: str = MISSING


@dataclass
class RootSchema:
    """Top-level scalars of ``configs/config.yaml``."""

    exp: str = MISSING
    seed: int = MISSING
    run_dir: Optional[str] = MISSING


SCHEMAS: dict[str, type] = {
    "": RootSchema,
    "limit": LimitSchema,
    "runner": RunnerSchema,
    "metrics": MetricsSchema,
    "cache": CacheSchema,
    "answer": AnswerSchema,
    "method": MethodSchema,
}
# Nodes built by hydra.utils.instantiate: `_target_` must name a class, the other keys its parameters.
TARGET_NODES = ("method.system", "model.backend", "embedder")


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore as ``schema/<group>`` (idempotent)."""
    store = ConfigStore.instance()
    for group, schema in SCHEMAS.items():
        store.store(group="schema", name=group or "root", node=schema)


def validate_config(cfg: DictConfig) -> None:
    """Check the composed config against the schemas; raise :class:`ConfigError` on the first problem.

    Also registers the schemas (a process that validates can compose ``schema/<group>`` too).
    """
    register_schemas()
    for group, schema in SCHEMAS.items():
        node = OmegaConf.select(cfg, group) if group else cfg
        if isinstance(node, DictConfig):
            _check_node(node, schema, group)
    for dotted in TARGET_NODES:
        node = OmegaConf.select(cfg, dotted)
        if isinstance(node, DictConfig):
            _check_target(node, dotted)


def _values(node: DictConfig, prefix: str) -> dict[str, Any]:
    """The node's values, interpolations resolved (a broken interpolation is reported by key)."""
    try:
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        key = _join(prefix, str(getattr(err, "full_key", "") or ""))
        raise ConfigError(f"config key {key or '<root>'}: {_first_line(err)}") from None


def _check_node(node: DictConfig, schema: type, prefix: str) -> None:
    hints = typing.get_type_hints(schema)
    declared = {f.name: f for f in dataclasses.fields(schema)}
    if prefix:
        values = {k: v for k, v in _values(node, prefix).items() if k in declared}
    else:  # the root: only its declared scalars, not every group again
        values = {k: node[k] for k in declared if k in node and not OmegaConf.is_missing(node, k)}
    for key, value in values.items():
        where = _join(prefix, key)
        if dataclasses.is_dataclass(hints[key]) and isinstance(node[key], DictConfig):
            _check_node(node[key], hints[key], where)  # a nested group, open like its parent
            continue
        _check_type(schema, key, value, hints[key], where)
        _check_range(declared[key].metadata, value, hints[key], where)


def _check_type(schema: type, key: str, value: Any, expected: Any, where: str) -> None:
    try:
        OmegaConf.merge(OmegaConf.structured(schema), {key: value})
    except OmegaConfBaseException:
        raise ConfigError(f"config key {where}: got {value!r}, expected {_describe(expected)}") from None


def _check_range(metadata: typing.Mapping[str, Any], value: Any, expected: Any, where: str) -> None:
    if value is None:
        return
    if "min" in metadata and float(value) < metadata["min"]:
        kind = _describe(expected).removesuffix(" or null")
        raise ConfigError(f"config key {where}: got {value!r}, expected {kind} >= {metadata['min']}")
    if "choices" in metadata:
        bad = [v for v in value if v not in metadata["choices"]] if isinstance(value, list) else [value]
        if any(v not in metadata["choices"] for v in bad):
            what = "a list drawn from" if isinstance(value, list) else "one of"
            raise ConfigError(f"config key {where}: got {value!r}, expected {what} {', '.join(metadata['choices'])}")


def _check_target(node: DictConfig, prefix: str) -> None:
    """``_target_`` names an importable class; each other key is one of its typed parameters."""
    target = node.get("_target_")
    if not isinstance(target, str) or not target:
        raise ConfigError(f"config key {prefix}._target_: missing; expected the dotted path of a class")
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"config key {prefix}._target_: cannot import {target!r} ({err})") from None
    if not inspect.isclass(cls):
        raise ConfigError(f"config key {prefix}._target_: {target!r} is not a class")
    signature = inspect.signature(cls.__init__)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that cannot be resolved here leaves the parameters untyped
        hints = {}
    fields_ = []
    for key, value in _values(node, prefix).items():
        if key.startswith("_") and key.endswith("_"):  # _target_, _convert_, _partial_
            continue
        if key not in signature.parameters:
            if takes_any:
                continue
            known = ", ".join(p for p in signature.parameters if p != "self")
            raise ConfigError(f"config key {prefix}.{key}: not a parameter of {target} (parameters: {known})")
        expected = _omegaconf_type(hints.get(key, Any))
        fields_.append((key, expected, value))
    schema = dataclasses.make_dataclass(
        f"{cls.__name__}Params", [(key, expected, field(default=MISSING)) for key, expected, _ in fields_]
    )
    for key, expected, value in fields_:
        _check_type(schema, key, value, expected, f"{prefix}.{key}")


def _omegaconf_type(annotation: Any) -> Any:
    """The annotation if OmegaConf can check it (scalars, Optional, lists/dicts of them), else ``Any``."""
    scalars = (int, float, bool, str)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in scalars:
        return annotation
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _omegaconf_type(rest[0])
            return Optional[inner] if inner is not Any else Any
        return Any
    if origin is list and len(args) == 1 and args[0] in scalars:
        return list[args[0]]
    return Any


def _describe(annotation: Any) -> str:
    """``Optional[int]`` -> ``an integer or null``."""
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in names:
        return names[annotation]
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return " or ".join(_describe(a) for a in rest) + (" or null" if len(rest) < len(args) else "")
    if origin is list and args:
        return f"a list of {_bare(args[0])}s"
    if origin is dict and len(args) == 2:
        return f"a mapping of {_bare(args[0])}s to {_describe(args[1])}"
    return "a valid value"


def _bare(annotation: Any) -> str:
    return _describe(annotation).removeprefix("an ").removeprefix("a ")


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix and key else prefix or key


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
