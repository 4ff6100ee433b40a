"""Every config composes, every experiment expands, and every method instantiates.

Composition catches typos in YAML and overrides long before a sweep fails
half-way on a cluster (the lightning-hydra-template habit).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class
from omegaconf import OmegaConf

from clag.run import CONFIG_DIR

GROUPS = ("method", "dataset", "model", "embedder", "logger", "scale", "experiment")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


def compose_config(overrides: list[str], return_hydra_config: bool = False):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=return_hydra_config)


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_composes_and_resolves(group):
    assert options(group), f"configs/{group}/ is empty"
    for option in options(group):
        cfg = compose_config([f"{group}={option}"])
        # Interpolations (paths, demo slices) must resolve without error.
        OmegaConf.to_container(cfg.method, resolve=True)
        OmegaConf.to_container(cfg.limit, resolve=True)
        assert cfg.method.name and cfg.dataset.name and cfg.model.name


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
    assert cfg.exp.startswith("table") or cfg.exp in ("demo", "reference")
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
