"""Shared test setup: the real data folder (CLAG_DATA_DIR), and offline, quiet libraries."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
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
                    "`CLAG_DATA_DIR=$PWD/data pytest ...` (see docs/running.md: Data)")
    path = Path(os.environ["CLAG_DATA_DIR"])
    if not (path / "locomo" / "locomo10.json").exists():
        pytest.fail(f"CLAG_DATA_DIR={path} does not hold the benchmark data: run `make data` (see docs/running.md: Data)")
    return path


class SessionServer:
    """The session's one vLLM server (the offline model), started in a thread as soon as collection
    shows that a test will use it, so that its start (~2-3 min on 2 cores) overlaps the tests before
    them; stopped when the session ends, unless it was already running before the session."""

    def __init__(self) -> None:
        self.server: object | None = None
        self.thread: threading.Thread | None = None
        self.error: Exception | None = None

    def start(self) -> None:
        from clag.llm import serve

        # Eager mode: it starts ~100 s sooner on a CPU (no torch.compile warm-up); the tests time nothing.
        spec = serve.compose_spec(["model=qwen2.5-0.5b", "model.serve.extra_args=[--enforce-eager]"])
        self.server = serve.VLLMServer(spec, timeout_s=900)

        def enter() -> None:
            try:
                self.server.__enter__()
            except serve.ServeError as err:
                self.error = err

        self.thread = threading.Thread(target=enter, name="vllm-session-server", daemon=True)
        self.thread.start()

    def wait(self) -> object:
        """The running server's state; the start's error re-raised."""
        if self.thread is None:
            self.start()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.server.state

    def stop(self) -> None:
        if self.thread is None:
            return
        from clag.llm import serve

        if self.server.started or self.thread.is_alive():  # ours, or still starting: its state file names it
            serve.stop(self.server.spec.name)
        self.thread.join(timeout=60)


SESSION_SERVER = SessionServer()


def pytest_collection_finish(session: pytest.Session) -> None:
    """After selection (``-m``, ``-k``): start the server now if any selected test will use it."""
    if any("vllm_server" in getattr(item, "fixturenames", ()) for item in session.items):
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
