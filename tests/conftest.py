"""Shared test setup: the real data folder (CLAG_DATA_DIR), and offline, quiet libraries."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/scripted_llm.py

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
# Runs and the snapshot index of the tests never land in the user's runs/ folder.
os.environ.setdefault("CLAG_RUNS_DIR", tempfile.mkdtemp(prefix="clag-test-runs-"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data root, from CLAG_DATA_DIR (``make test`` exports it; CI sets its own)."""
    if not os.environ.get("CLAG_DATA_DIR"):
        pytest.fail("CLAG_DATA_DIR is not set: run the tests with `make test`, or `make data` and then "
                    "`CLAG_DATA_DIR=$PWD/data pytest ...` (see README: Data)")
    path = Path(os.environ["CLAG_DATA_DIR"])
    if not (path / "locomo" / "locomo10.json").exists():
        pytest.fail(f"CLAG_DATA_DIR={path} does not hold the benchmark data: run `make data` (see README: Data)")
    return path


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[object]:
    """vLLM serving the offline model (engine=vllm), started once per session and stopped after it
    (one already running is reused and left running). Eager mode: it starts ~100 s sooner on a CPU
    (no torch.compile warm-up) and the tests time nothing. Tests marked ``vllm`` use it; when vLLM
    cannot be installed or started they fail with the reason, they never skip."""
    from clag.llm import serve

    spec = serve.compose_spec(["model=qwen2.5-0.5b", "model.serve.extra_args=[--enforce-eager]"])
    try:
        with serve.VLLMServer(spec, timeout_s=900) as server:
            yield server.state
    except serve.ServeError as err:
        pytest.fail(f"vLLM did not start (`make vllm` installs it): {err}")
