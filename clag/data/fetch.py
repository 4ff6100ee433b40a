"""Download the benchmark files from their public sources and rebuild the derived BioASQ files.

For users with the network; everything here also works offline on a data
root that already holds the files (it then only verifies and builds). The
URLs are pinned to the commits named in ``data/README.md`` so that the sha256
values below keep matching; a file that does not match is never kept.

``--source`` replaces the public URLs with a mirror laid out like the data
root (a folder, or any ``file://`` / ``https://`` base URL): a lab's copy, or
a machine without the network that has the files elsewhere. The mirror's
files pass the same sha256 checks.

Run it as ``python scripts/fetch_data.py [--dest DIR] [--source DIR_OR_URL] [--check]``
(``make data`` does, into the folder the Makefile reads).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import logging
import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from clag.data import bioasq
from clag.data.loaders import DATA_DIR_ENV

logger = logging.getLogger(__name__)

_LOCOMO = "https://raw.githubusercontent.com/snap-research/LoCoMo/3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376"
_CLAG = "https://raw.githubusercontent.com/dmis-lab/CLAG/c938d721040f307d71afb64db7aa6aa23fcf89cf"
_MIRAGE = "https://raw.githubusercontent.com/Teddy-XiongGZ/MIRAGE/392943af99cd94cafd50a0de2e7fca24bbf65494"
_GOLDEN_DIR = "bioasq/Task10BGoldenEnriched"


@dataclass(frozen=True)
class DataFile:
    """A file of the data root and its expected sha256.

    Attributes:
        path: Path relative to the data root.
        sha256: Expected digest (from ``data/README.md``).
        url: Where to download it; empty for files built here.
    """

    path: str
    sha256: str
    url: str = ""


_GOLDEN_SHA256 = (
    "27fbc53bdcecf45e37a4fcdb996da6768251fa57dcdabc158ed11df061e9b3ee",
    "d4e51037d2821b3938e7e06a4f21da2d0abef501e7ac0e5cad4e676e3e2ac0b7",
    "3fe1ba47176e4956b4b6dd4610adc9cae7f7cb8059194aa2a495444f9fd8f71c",
    "3ea3a9a7fbaa19288fb0dfa2d36461161714695363bfd9c2d558a32b25e4c2ce",
    "ed5648fc222e4c24a5f63cb849b81d1e383f4834ad95fae5aa0a8e65d1f409e8",
    "bf59785a8293b3fac257125e6c82227ce47aecac824cfe8bb00bedc429ef8902",
)

#: Files downloaded as they are.
DOWNLOADS: tuple[DataFile, ...] = (
    DataFile("locomo/locomo10.json", "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
             f"{_LOCOMO}/data/locomo10.json"),
    DataFile("hotpotqa/hotpot_200.json", "a65710edf7aed9450bd9e48af94a389c23cae1f8a9caed847988c76202fd7d1e",
             f"{_CLAG}/data/hotpot_200.json"),
    *(
        DataFile(f"{_GOLDEN_DIR}/10B{n}_golden.json", digest,
                 f"{_MIRAGE}/rawdata/bioasq/Task10BGoldenEnriched/10B{n}_golden.json")
        for n, digest in enumerate(_GOLDEN_SHA256, start=1)
    ),
)

#: Files built from the golden files (``gold_context`` flag of :func:`clag.data.bioasq.build_chunked`).
DERIVED: dict[bool, DataFile] = {
    False: DataFile("bioasq/bioasq_chunked.json", "643532b7ed37a060f52cf2abdbb02fe4b86ddc84fac4bfa07479d8480acb8e57"),
    True: DataFile("bioasq/bioasq_chunked_gold_context.json",
                   "b7f84c0c718087cea96f92a680f05b10efe2c410a1805b27b451526c24ad21e5"),
}


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def check_file(root: Path, entry: DataFile) -> str | None:
    """``None`` if the file exists with the expected sha256, else a one-line problem."""
    path = root / entry.path
    if not path.is_file():
        return f"{entry.path}: missing"
    digest = sha256_bytes(path.read_bytes())
    if digest != entry.sha256:
        return f"{entry.path}: sha256 {digest} differs from the expected {entry.sha256}"
    return None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write via a temporary file, so a killed fetch never leaves a truncated data file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def source_url(entry: DataFile, source: str | Path | None = None) -> str:
    """Where to get ``entry``: its public URL, or the same relative path under the mirror ``source``.

    A folder becomes a ``file://`` URL, so one download path serves every mirror.
    """
    if source is None or str(source) == "":
        return entry.url
    text = str(source)
    base = text if "://" in text else Path(text).expanduser().resolve().as_uri()
    return f"{base.rstrip('/')}/{entry.path}"


def download(root: Path, entry: DataFile, timeout: float = 60.0, source: str | Path | None = None) -> str | None:
    """Download ``entry`` unless it is already present and valid; ``None`` on success, else the problem."""
    if check_file(root, entry) is None:
        logger.info("ok (present)  %s", entry.path)
        return None
    url = source_url(entry, source)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError is an OSError
        reason = getattr(exc, "reason", exc)
        return f"{entry.path}: could not download {url} ({reason})"
    digest = sha256_bytes(data)
    if digest != entry.sha256:
        return f"{entry.path}: downloaded file has sha256 {digest}, expected {entry.sha256}; not saved"
    _write_atomically(root / entry.path, data)
    logger.info("ok (fetched)  %s", entry.path)
    return None


def build_bioasq(root: Path) -> list[str]:
    """Rebuild the two chunked BioASQ files from the golden files in ``root``; returns problems."""
    golden = [root / entry.path for entry in DOWNLOADS if entry.path.startswith(_GOLDEN_DIR)]
    try:
        questions = bioasq.read_golden(golden)
    except ValueError as exc:
        return [str(exc)]
    problems = []
    for gold_context, entry in DERIVED.items():
        data = bioasq.dump_samples(bioasq.build_chunked(questions, gold_context=gold_context))
        _write_atomically(root / entry.path, data)
        if sha256_bytes(data) != entry.sha256:
            problems.append(f"{entry.path}: built, but its sha256 differs from the expected {entry.sha256}")
        else:
            logger.info("ok (built)    %s", entry.path)
    return problems


def fetch(root: Path, *, check_only: bool = False, timeout: float = 60.0,
          source: str | Path | None = None) -> list[str]:
    """Make ``root`` hold every file with the right sha256; returns the problems left (empty = done).

    With ``check_only`` nothing is downloaded or written: the files are only verified.
    ``source`` names a mirror to read instead of the public URLs (see :func:`source_url`).
    """
    if check_only:
        return [p for entry in (*DOWNLOADS, *DERIVED.values()) if (p := check_file(root, entry))]
    problems = [p for entry in DOWNLOADS if (p := download(root, entry, timeout, source))]
    golden_problems = [p for p in problems if p.startswith(_GOLDEN_DIR)]
    if golden_problems:
        problems += [f"{entry.path}: not built (golden files missing)" for entry in DERIVED.values()]
    elif any(check_file(root, entry) for entry in DERIVED.values()):
        problems += build_bioasq(root)
    else:
        logger.info("ok (present)  %s", ", ".join(entry.path for entry in DERIVED.values()))
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 = every file in place and verified)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path(os.environ.get(DATA_DIR_ENV) or "data"),
                        help=f"data root to fill (default: ${DATA_DIR_ENV} or ./data)")
    parser.add_argument("--source", help="mirror laid out like the data root (a folder or a file:// or https:// "
                        "base URL) to read instead of the public sources; its files are checked the same way")
    parser.add_argument("--check", action="store_true", help="only verify the files' sha256, no download")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per download")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        problems = fetch(args.dest, check_only=args.check, timeout=args.timeout, source=args.source)
    except OSError as exc:  # e.g. the destination is not writable
        problems = [f"cannot use {args.dest}: {exc}"]
    for problem in problems:
        logger.error("FAILED  %s", problem)
    if problems:
        logger.error("%d of %d files are not in place under %s", len(problems), len(DOWNLOADS) + len(DERIVED),
                     args.dest)
        return 1
    logger.info("all %d files verified under %s", len(DOWNLOADS) + len(DERIVED), args.dest)
    return 0
