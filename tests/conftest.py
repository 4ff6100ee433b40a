"""Shared test setup: the real data folder (CLAG_DATA_DIR), and offline, quiet libraries."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

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
                    "`CLAG_DATA_DIR=$PWD/data pytest ...` (see docs/running.md: Data)")
    path = Path(os.environ["CLAG_DATA_DIR"])
    if not (path / "locomo" / "locomo10.json").exists():
        pytest.fail(f"CLAG_DATA_DIR={path} does not hold the benchmark data: run `make data` "
                    "(see docs/running.md: Data)")
    return path


class SessionServer:
    """The session's one vLLM server (the offline model), started by ``python -m clag.llm.serve start``
    in a child process as soon as collection shows that a selected test will use it, so that its start
    (~3 min on 2 cores) overlaps the tests before them; stopped when the session ends, unless it was
    already running before the session. (A child, not a thread: the start imports and hashes while the
    tests run, and nothing of it must wait on the test process's locks.)"""

    # Eager mode: it starts ~100 s sooner on a CPU (no torch.compile warm-up); the tests time nothing.
    OVERRIDES = ("model=qwen2.5-0.5b", "model.serve.extra_args=[--enforce-eager]")
    NAME = "qwen2.5-0.5b"

    def __init__(self) -> None:
        self.starter: subprocess.Popen[str] | None = None
        self.output: IO[str] | None = None
        self.ours = False

    def start(self) -> None:
        from clag.llm import serve

        self.ours = serve.read_state(self.NAME) is None
        self.output = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty start never blocks on it
        self.starter = subprocess.Popen(
            [sys.executable, "-m", "clag.llm.serve", "start", *self.OVERRIDES, "--timeout", "900"],
            stdout=self.output, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def wait(self) -> object:
        """The running server's state; the start's last lines if it failed."""
        from clag.llm import serve

        if self.starter is None:
            self.start()
        self.starter.wait()
        state = serve.read_state(self.NAME)
        if self.starter.returncode or state is None:
            self.output.seek(0)
            raise serve.ServeError(" | ".join(self.output.read().strip().splitlines()[-3:]))
        return state

    def stop(self) -> None:
        if self.starter is None:
            return
        from clag.llm import serve

        if self.starter.poll() is None:  # still starting: end the starter, then the server it launched
            self.starter.terminate()
            self.starter.wait(timeout=60)
        if self.ours:
            serve.stop(self.NAME)


SESSION_SERVER = SessionServer()


def _uses_server(item: pytest.Item) -> bool:
    return "vllm_server" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that use the server run last (in their order), so its start overlaps all the others."""
    items.sort(key=_uses_server)


def pytest_collection_finish(session: pytest.Session) -> None:
    """After selection (``-m``, ``-k``): start the server now if any selected test will use it."""
    if any(_uses_server(item) for item in session.items):
        SESSION_SERVER.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    SESSION_SERVER.stop()


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[object]:
    """vLLM serving the offline model (engine=vllm), one per session (see :class:`SessionServer`;
    one already running is reused and left running). Tests marked ``vllm`` use it; when vLLM cannot
    be installed or started they fail with the reason, they never skip."""
    from clag.llm import serve

    try:
        state = SESSION_SERVER.wait()
    except serve.ServeError as err:
        pytest.fail(f"vLLM did not start (`make vllm` installs it): {err}")
    yield state
