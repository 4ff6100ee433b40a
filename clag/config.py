"""Where the Hydra configs live, and the one way to compose them outside ``python -m clag.run``.

Tests, the tables' failure judge, the benchmark and notebooks compose the
same config the command line does, through :func:`compose_config`, so a
change of config folder or Hydra version is made once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "configs")
VERSION_BASE = "1.3"


def compose_config(overrides: Sequence[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The composed ``configs/config.yaml`` with ``overrides``, as ``python -m clag.run`` would see it.

    Works inside a running Hydra app too (the tables' judge, a notebook after a
    run): Hydra's global state is set aside for the composition and restored.
    ``return_hydra_config`` keeps the ``hydra`` node (sweeper params, launcher).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=VERSION_BASE):
            return compose(config_name="config", overrides=list(overrides), return_hydra_config=return_hydra_config)
    finally:
        restore_gh_from_backup(backup)
