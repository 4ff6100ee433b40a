#!/usr/bin/env python
"""Download LoCoMo, HotpotQA and the BioASQ golden files, verify them, build the BioASQ chunked files.

Usage: ``python scripts/fetch_data.py [--dest DIR] [--source MIRROR] [--check]`` (default DIR:
``$CLAG_DATA_DIR`` or ``./data``). Exits non-zero, naming each file it could
not get or verify. The work is done by :mod:`clag.data.fetch`.
"""

import sys
from pathlib import Path

# Let the script run from a checkout where the package is not installed yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clag.data.fetch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
