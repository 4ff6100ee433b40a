"""Benchmark data: loaders into the shared Episode schema, and the BioASQ derivation.

``load_episodes(name, data_dir, variant=..., episodes=..., items=...,
questions=..., categories=...)`` is what the runner calls; see
:mod:`clag.data.loaders`.
"""

from clag.data.loaders import (
    DATA_DIR_ENV,
    DATASETS,
    DatasetError,
    DatasetSpec,
    Source,
    dataset_path,
    episode_fingerprint,
    load_episodes,
    load_slice,
)

__all__ = [
    "DATA_DIR_ENV",
    "DATASETS",
    "DatasetError",
    "DatasetSpec",
    "Source",
    "dataset_path",
    "episode_fingerprint",
    "load_episodes",
    "load_slice",
]
