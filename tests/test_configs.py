"""Every config composes and passes the schemas, every experiment expands, every method instantiates.

Composition catches typos in YAML and overrides long before a sweep fails
half-way on a cluster (the lightning-hydra-template habit); the schemas of
:mod:`clag.config_schema` catch a wrongly typed value in a config file the
same way they catch one on the command line.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from clag.config import CONFIG_DIR, compose_config
from clag.config_schema import SCHEMAS, ConfigError, validate_config

ROOT = Path(CONFIG_DIR).parent
GROUPS = ("method", "dataset", "engine", "model", "embedder", "logger", "scale", "experiment")
# The Hydra plugin behind each kind of launcher config (both installed by `make install`).
LAUNCHER_PLUGINS = {
    "parallel": "hydra_plugins.hydra_joblib_launcher",
    "cluster": "hydra_plugins.hydra_submitit_launcher",
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_composes_and_resolves(group):
    assert options(group), f"configs/{group}/ is empty"
    for option in options(group):
        cfg = compose_config([f"{group}={option}"])
        # Interpolations (paths, demo slices) must resolve without error.
        OmegaConf.to_container(cfg.method, resolve=True)
        OmegaConf.to_container(cfg.limit, resolve=True)
        assert cfg.method.name and cfg.dataset.name and cfg.model.name
        validate_config(cfg)  # every value a config file sets has the type and range its schema declares


@pytest.mark.parametrize("method", options("method"))
def test_every_method_targets_a_memory_system(method):
    cfg = compose_config([f"method={method}"])
    cls = get_class(cfg.method.system._target_)
    for name in ("reset", "add", "add_many", "finish_ingestion", "retrieve", "describe", "save", "load"):
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name}"
    # Retrieval-only parameters decide snapshot sharing; each must be a real, configured parameter.
    assert set(getattr(cls, "retrieval_params", ())) <= set(cfg.method.system), cls.__name__


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_is_a_sweep_with_its_own_name(experiment):
    cfg = compose_config([f"experiment={experiment}"], return_hydra_config=True)
    assert cfg.exp.startswith(("table", "reference")) or cfg.exp == "demo"
    params = cfg.hydra.sweeper.params
    assert params, f"experiment {experiment} sweeps nothing"


def test_demo_scale_slices_every_dataset():
    for dataset in options("dataset"):
        cfg = compose_config([f"dataset={dataset}", "scale=demo"])
        limit = OmegaConf.to_container(cfg.limit, resolve=True)
        assert limit["items"] and limit["episode_ids"], dataset


def test_table7_variants_set_only_their_switch():
    full = compose_config(["experiment=table7", "+variant=full"])
    evolution = compose_config(["experiment=table7", "+variant=global_evolution"])
    retrieval = compose_config(["experiment=table7", "+variant=global_retrieval"])
    assert (full.method.system.evolution_scope, full.method.system.retrieval) == ("local", "two_stage")
    assert evolution.method.system.evolution_scope == "global"
    assert retrieval.method.system.retrieval == "global"


def test_the_schemas_declare_every_key_of_the_default_config():
    """A key added to configs/config.yaml gets a type here too (unknown keys pass unchecked at run time)."""

    def undeclared(node: DictConfig, schema: type, prefix: str) -> list[str]:
        hints = typing.get_type_hints(schema)
        out = []
        for key in node:
            where = f"{prefix}.{key}"
            if key not in hints:
                out.append(where)
            elif dataclasses.is_dataclass(hints[key]) and isinstance(node[key], DictConfig):
                out += undeclared(node[key], hints[key], where)
        return out

    cfg = compose_config([])
    # The root holds the groups; the method's keys beside `name` are its system's typed parameters.
    missing = [key for group, schema in SCHEMAS.items() if group not in ("", "method")
               for key in undeclared(cfg[group], schema, group)]
    assert not missing, f"keys without a schema entry in clag/config_schema.py: {missing}"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("limit.questions=abc", "limit.questions: got 'abc', expected an integer or null"),
        ("runner.concurrent_episodes=-1", "runner.concurrent_episodes: got -1, expected an integer >= 1"),
        ("metrics.adversarial_mode=foo", "metrics.adversarial_mode: got 'foo', expected one of paper, official"),
        ("metrics.judge.prompts=[lenient,loose]", "metrics.judge.prompts"),
        ("limit.categories=[1,x]", "limit.categories: got [1, 'x'], expected a list of integers or null"),
        ("method.system.retrieve_k=many", "method.system.retrieve_k: got 'many', expected an integer"),
        ("+method.system.top_k=5", "method.system.top_k: not a parameter of baselines.rag.RagMemory"),
        ("method.system._target_=baselines.rag.Nope", "method.system._target_: cannot import 'baselines.rag.Nope'"),
        ("model.backend.batch_size=big", "model.backend.batch_size: got 'big', expected an integer"),
    ],
)
def test_a_wrong_value_is_one_line_naming_the_key_and_what_it_expects(override, named):
    with pytest.raises(ConfigError) as caught:
        validate_config(compose_config([override]))
    assert named in str(caught.value) and "\n" not in str(caught.value)


LAUNCHER_CONFIGS = [
    *(f"hydra/launcher/{p.stem}" for p in sorted((Path(CONFIG_DIR) / "hydra" / "launcher").glob("*.yaml"))),
    *(f"cluster/{p.stem}" for p in sorted((Path(CONFIG_DIR) / "cluster").glob("*.yaml"))),
]


@pytest.mark.parametrize("path", LAUNCHER_CONFIGS)
def test_every_launcher_config_composes(path):
    group, name = path.rsplit("/", 1)
    cfg = compose_config(["experiment=table9", f"{group}={name}"], return_hydra_config=True)
    launcher_cfg = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    plugin = LAUNCHER_PLUGINS["parallel" if group == "hydra/launcher" else "cluster"]
    assert launcher_cfg["_target_"].startswith(plugin), launcher_cfg  # the plugin is installed and chosen
    own = yaml.safe_load((Path(CONFIG_DIR) / f"{path}.yaml").read_text())
    own = own.get("hydra", {}).get("launcher", {}) if group == "cluster" else own
    for key, value in own.items():  # each value the file sets reaches the launcher (none is a typo the plugin drops)
        if key != "defaults":
            assert launcher_cfg[key] == value, key
    if group == "cluster":  # every job its own LLM cache, in its own output folder: no SQLite shared across machines
        assert cfg.cache._get_node("path")._value() == "${hydra:runtime.output_dir}/llm_cache.sqlite"


def experiment_names() -> dict[str, str]:
    """Experiment config name -> the ``exp`` it runs under."""
    return {name: compose_config([f"experiment={name}"]).exp for name in options("experiment")}


def test_every_exp_a_table_prefers_is_one_an_experiment_defines():
    defined = set(experiment_names().values())
    for path in sorted((Path(CONFIG_DIR) / "tables").glob("table*.yaml")):
        exps = yaml.safe_load(path.read_text()).get("exps", [])
        assert set(exps) <= defined, f"{path.name}: exps {sorted(set(exps) - defined)} match no experiment"


def test_every_experiment_the_makefile_runs_exists():
    named = set(re.findall(r"experiment=([\w$]+)", (ROOT / "Makefile").read_text()))
    loops = re.findall(r"for e in ([\w ]+); do", (ROOT / "Makefile").read_text())
    names = {n for n in named if not n.startswith("$")} | {n for loop in loops for n in loop.split()}
    assert names, "the Makefile runs no experiment?"
    assert names <= set(options("experiment")), sorted(names - set(options("experiment")))


def test_one_compose_helper():
    """Everything composes through clag.config.compose_config, so the config folder and Hydra's version are set once."""
    callers = [
        str(path.relative_to(ROOT))
        for folder in ("clag", "baselines", "scripts", "tests", "notebooks")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in (".py", ".ipynb") and path.name != "test_configs.py"
        and "initialize_config_dir" in path.read_text(encoding="utf-8")
    ]
    assert callers == ["clag/config.py"], callers


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_value_an_experiment_sweeps_passes_the_schemas(experiment):
    """Each swept value is checked as its job would check it (beside the first value of the other keys)."""
    params = compose_config([f"experiment={experiment}"], return_hydra_config=True).hydra.sweeper.params
    grid = {key: [v.strip() for v in str(values).split(",")] for key, values in params.items()}
    for key, values in grid.items():
        for value in values:
            job = {**{k: v[0] for k, v in grid.items()}, key: value}
            validate_config(compose_config([f"experiment={experiment}", *(f"{k}={v}" for k, v in job.items())]))
