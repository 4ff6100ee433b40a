"""The OpenAI-compatible backend over real HTTP against a scripted localhost server."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clag.llm.base import GenerationConfig, row_seed
from clag.llm.client import LLMClient
from clag.llm.openai_backend import OpenAICompatibleBackend, ServerError

SECRET = "sk-test-do-not-leak-0123456789"


class ScriptedServer:
    """A threaded HTTP server answering in the OpenAI format and recording every request.

    The reply to a prompt is ``reply:<prompt>``; a prompt starting with
    ``slow`` is answered late, so that out-of-order completion shows up.
    ``fail_first`` requests get HTTP 503 before the server recovers; a prompt
    starting with ``refuse`` always gets HTTP 400. A request asking to ``stream`` is
    answered as vLLM streams: server-sent events of a few characters each, then
    the usage; ``drip`` prompts come 0.15 s a chunk, and a ``cut`` prompt's first
    reply breaks off with an error event.
    """

    def __init__(self, fail_first: int = 0, status: int = 503) -> None:
        self.requests: list[dict] = []
        self.fail_first = fail_first
        self.status = status
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                if self.path == "/version":
                    self._send(200, {"version": "9.9.9-scripted"})
                elif self.path == "/metrics":  # Prometheus text, as vLLM writes it
                    text = (
                        "# HELP vllm:request_success_total Count of successfully processed requests.\n"
                        f'vllm:request_success_total{{model_name="m"}} {len(server.requests)}.0\n'
                        f'vllm:prompt_tokens_total{{model_name="m"}} {10 * len(server.requests)}.0\n'
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    failing = len(server.requests) <= server.fail_first
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
                time.sleep(0.3 if prompt.startswith("slow") else 0.05)
                with server.lock:
                    server.in_flight -= 1
                if failing or prompt.startswith("refuse"):
                    self._send(400 if prompt.startswith("refuse") else server.status, {"error": "warming up"})
                    return
                text = f"reply:{prompt}"
                if body.get("stream"):
                    self._stream(body, prompt, text)
                    return
                choice = {"message": {"role": "assistant", "content": text}} if "messages" in body else {"text": text}
                usage = {"prompt_tokens": len(prompt), "completion_tokens": len(text), "total_tokens": 0}
                self._send(200, {"choices": [{"index": 0, **choice, "finish_reason": "stop"}], "usage": usage})

            def _stream(self, body: dict, prompt: str, text: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chat = "messages" in body
                pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
                cut = prompt.startswith("cut") and sum(r["body"].get("prompt") == prompt for r in server.requests) == 1
                for index, piece in enumerate(pieces):
                    if cut and index == 2:
                        self._event({"error": {"message": "engine restarted", "code": 500}})
                        return
                    last = index == len(pieces) - 1
                    choice = {"delta": {"content": piece}} if chat else {"text": piece}
                    self._event({"choices": [{"index": 0, **choice, "finish_reason": "stop" if last else None}]})
                    time.sleep(0.15 if prompt.startswith("drip") else 0)
                usage = {"prompt_tokens": len(prompt), "completion_tokens": len(text), "total_tokens": 0}
                self._event({"choices": [], "usage": usage})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, payload: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAG_TEST_KEY", SECRET)


def backend(url: str, **kwargs) -> OpenAICompatibleBackend:
    made = OpenAICompatibleBackend(url, "Qwen/Qwen3-0.6B", api_key_env="CLAG_TEST_KEY", **kwargs)
    made.backoff_s = 0.01
    return made


def test_chat_requests_keep_order_run_concurrently_and_parse_usage(server: ScriptedServer) -> None:
    prompts = ["slow first", "second", "slow third", "fourth", "fifth"]
    completions = backend(server.url, max_concurrency=4).generate(prompts, GenerationConfig(max_new_tokens=9))
    assert [c.text for c in completions] == [f"reply:{p}" for p in prompts]
    assert [(c.prompt_tokens, c.completion_tokens) for c in completions] == [
        (len(p), len(p) + len("reply:")) for p in prompts
    ]
    assert 2 <= server.max_in_flight <= 4  # concurrent, within the limit
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["model"] == "Qwen/Qwen3-0.6B"
    assert request["body"]["max_tokens"] == 9 and request["body"]["temperature"] == 0.0
    assert request["headers"]["Authorization"] == f"Bearer {SECRET}"


def test_raw_format_uses_completions_with_the_prompt_as_is(server: ScriptedServer) -> None:
    [completion] = backend(server.url + "/v1/", prompt_format="raw").generate(["Text: go"], GenerationConfig())
    assert completion.text == "reply:Text: go"
    assert server.requests[0]["path"] == "/v1/completions"
    assert server.requests[0]["body"]["prompt"] == "Text: go" and "messages" not in server.requests[0]["body"]


def test_schema_seed_penalty_and_extra_body_reach_the_server(server: ScriptedServer) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    config = GenerationConfig(temperature=0.7, seed=11, repetition_penalty=1.1, json_schema=schema)
    made = backend(server.url, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    made.generate(["q"], config)
    body = server.requests[0]["body"]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema, "strict": True},
    }
    assert (body["seed"], body["repetition_penalty"], body["temperature"]) == (row_seed(11, "q") & 0xFFFFFFFF, 1.1, 0.7)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


def test_row_seed_is_a_function_of_seed_and_prompt() -> None:
    assert row_seed(1, "a") == row_seed(1, "a")
    assert len({row_seed(1, "a"), row_seed(2, "a"), row_seed(1, "b")}) == 3
    assert 0 <= row_seed(1, "a") < 2**63
    assert row_seed(None, "a") != row_seed(None, "a")  # unseeded: fresh randomness
    # a 32-bit engine takes the low bits of the same seed, seeded or not
    assert row_seed(1, "a", bits=32) == row_seed(1, "a") & 0xFFFFFFFF
    assert all(0 <= row_seed(None, "a", bits=32) < 2**32 for _ in range(20))


def test_each_prompt_samples_from_its_own_seed_and_one_seed_for_all_is_named_in_no_identity(
    server: ScriptedServer,
) -> None:
    """Sampled replies are independent draws; one seed on every request (the committed reference's calls)
    keeps the identity, hence the cache keys, those calls were recorded under."""
    prompts = ["first", "second", "third"]
    config = GenerationConfig(temperature=0.7, seed=5)
    per_prompt, shared = backend(server.url), backend(server.url, seed_per_prompt=False)
    per_prompt.generate(prompts, config)
    seeds = {request["body"]["messages"][0]["content"]: request["body"]["seed"] for request in server.requests}
    assert seeds == {prompt: row_seed(5, prompt) & 0xFFFFFFFF for prompt in prompts} and len(set(seeds.values())) == 3
    assert per_prompt.request_body("first", config)["seed"] == seeds["first"]  # a pure function of (seed, prompt)
    assert [shared.request_body(prompt, config)["seed"] for prompt in prompts] == [5, 5, 5]
    assert per_prompt.identity() == {**shared.identity(), "seed_per_prompt": True}
    assert "seed_per_prompt" not in shared.identity()


def test_defaults_send_no_optional_fields(server: ScriptedServer) -> None:
    backend(server.url).generate(["q"], GenerationConfig())
    body = server.requests[0]["body"]
    assert not {"seed", "repetition_penalty", "response_format"} & body.keys()


def test_a_streamed_reply_is_the_unstreamed_one_and_only_silence_times_out(server: ScriptedServer) -> None:
    prompts = ["slow first", "second", "a reply long enough to come in many chunks"]
    whole = backend(server.url).generate(prompts, GenerationConfig())
    for prompt_format in ("chat", "raw"):
        streamed = backend(server.url, stream=True, prompt_format=prompt_format).generate(prompts, GenerationConfig())
        assert streamed == whole
    assert server.requests[-1]["body"]["stream"] is True
    assert server.requests[-1]["body"]["stream_options"] == {"include_usage": True}
    # 0.15 s between chunks, ~2 s in all: a 0.5 s timeout bounds the silence, not the reply.
    [dripped] = backend(server.url, stream=True, timeout_s=0.5).generate(["drip" * 10], GenerationConfig())
    assert dripped.text == "reply:" + "drip" * 10
    # A reply broken off by an error event is sent again, like a 5xx.
    [cut] = backend(server.url, stream=True, prompt_format="raw").generate(["cut short"], GenerationConfig())
    assert cut.text == "reply:cut short"
    assert sum(r["body"].get("prompt") == "cut short" for r in server.requests) == 2


def test_a_streamed_reply_without_usage_is_one_clear_error(server: ScriptedServer) -> None:
    made = backend(server.url, stream=True)
    events = [b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}\n', b"data: [DONE]\n"]
    with pytest.raises(ServerError, match="without its usage chunk"):
        made._assemble(events)


def test_think_blocks_are_stripped(server: ScriptedServer) -> None:
    [completion] = backend(server.url, prompt_format="raw").generate(["<think>hmm</think>answer"], GenerationConfig())
    assert completion.text == "reply:answer"


def test_server_errors_are_retried_with_backoff() -> None:
    with ScriptedServer(fail_first=2) as running:
        [completion] = backend(running.url).generate(["q"], GenerationConfig())
        assert completion.text == "reply:q"
        assert len(running.requests) == 3


def test_client_errors_fail_at_once_naming_the_url() -> None:
    with ScriptedServer(fail_first=5, status=400) as running:
        with pytest.raises(ServerError, match=r"127\.0\.0\.1:\d+/v1/chat/completions answered HTTP 400"):
            backend(running.url).generate(["q"], GenerationConfig())
        assert len(running.requests) == 1


def test_a_batch_failing_part_way_keeps_what_was_answered(server: ScriptedServer, tmp_path) -> None:
    """A server failing between a batch's requests: the error carries the answered ones and the
    client caches them, so a resumed run never sends them again."""
    from clag.llm.cache import CallCache

    cache = CallCache(tmp_path / "cache.sqlite")
    client = LLMClient(backend(server.url), cache, GenerationConfig(), {})
    with pytest.raises(ServerError) as error:
        client.generate(["a", "refuse this", "b"], "answer")
    assert sorted(error.value.completed) == [0, 2]
    assert len(cache) == 2
    sent = len(server.requests)
    assert client.generate(["a", "b"], "answer") == ["reply:a", "reply:b"]
    assert len(server.requests) == sent  # both from the cache


def test_unreachable_server_names_the_url_and_never_the_key(caplog: pytest.LogCaptureFixture) -> None:
    with ScriptedServer() as closed:  # bind a port, then free it so nothing listens there
        url = closed.url
    made = backend(url)
    made.max_retries = 2
    with caplog.at_level(logging.DEBUG), pytest.raises(ServerError) as error:
        made.generate(["q"], GenerationConfig())
    assert url in str(error.value) and "after 3 attempts" in str(error.value)
    assert SECRET not in str(error.value) and SECRET not in caplog.text


def test_identity_holds_no_key_and_no_url(server: ScriptedServer) -> None:
    made = backend(server.url, extra_body={"top_k": 20})
    identity = json.dumps(made.identity())
    assert SECRET not in identity and "127.0.0.1" not in identity and "CLAG_TEST_KEY" not in identity
    assert made.identity() == {
        "backend": "openai-compatible",
        "model": "Qwen/Qwen3-0.6B",
        "weights": None,
        "dtype": None,
        "prompt_format": "chat",
        "extra_body": {"top_k": 20},
        "seed_per_prompt": True,
    }


def test_identity_tells_apart_two_models_served_under_one_name(server: ScriptedServer) -> None:
    """The served name is the same; the weights' hash (or Hub revision) and the dtype are not."""
    offline = backend(server.url, weights="offline:qwen2.5-0.5b", dtype="bfloat16").identity()
    smaller = backend(server.url, weights="offline:smollm2-135m", dtype="bfloat16").identity()
    in_float32 = backend(server.url, weights="offline:qwen2.5-0.5b", dtype="float32").identity()
    pinned = backend(server.url, weights="Qwen/Qwen3-0.6B", revision="abc123", dtype="bfloat16").identity()
    assert offline["model"] == smaller["model"] == in_float32["model"] == pinned["model"]
    assert len(offline["weights"]["weights_sha256"]) == 64
    assert offline["weights"] != smaller["weights"] and offline["dtype"] != in_float32["dtype"]
    assert pinned["weights"] == {"model": "Qwen/Qwen3-0.6B", "gguf_file": None, "revision": "abc123"}
    assert len({json.dumps(i, sort_keys=True) for i in (offline, smaller, in_float32, pinned)}) == 4


def test_no_server_for_the_model_is_one_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CLAG_CACHE_DIR", str(tmp_path))  # no state file of a started server there
    made = OpenAICompatibleBackend(None, "qwen2.5-0.5b")
    with pytest.raises(ServerError, match="no vLLM server is running for model 'qwen2.5-0.5b'; start one"):
        made.generate(["q"], GenerationConfig())


def test_served_backends_batch_on_the_server_so_the_runner_adds_no_coalescer() -> None:
    from omegaconf import OmegaConf

    from clag.running.build import build_backend

    assert OpenAICompatibleBackend.serves_concurrently
    config = OmegaConf.create(
        {
            "backend": {
                "_target_": "clag.llm.openai_backend.OpenAICompatibleBackend",
                "base_url": "http://127.0.0.1:9",
                "model": "m",
            }
        }
    )
    assert isinstance(build_backend(config, concurrent=True), OpenAICompatibleBackend)


def test_no_key_in_the_environment_sends_no_header(server: ScriptedServer, monkeypatch) -> None:
    monkeypatch.delenv("CLAG_TEST_KEY")
    backend(server.url).generate(["q"], GenerationConfig())
    assert "Authorization" not in server.requests[0]["headers"]


def test_behind_the_client_a_rerun_is_served_from_the_cache(server: ScriptedServer, tmp_path) -> None:
    from clag.llm.cache import CallCache

    client = LLMClient(backend(server.url), CallCache(tmp_path / "c.sqlite"))
    first = client.generate(["a", "b"], stage="answer")
    again = LLMClient(backend(server.url), CallCache(tmp_path / "c.sqlite")).generate(["a", "b"], stage="answer")
    assert first == again == ["reply:a", "reply:b"]
    assert len(server.requests) == 2


@pytest.mark.parametrize("overrides", [["engine=vllm"], ["model=qwen3-0.6b", "engine=vllm"], ["model=authors_sglang"]])
def test_served_model_configs_instantiate_to_json_ready_backends(overrides: list[str], server: ScriptedServer) -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from clag.config import compose_config

    config = compose_config([*overrides, f"model.backend.base_url={server.url}"]).model
    made = instantiate(config.backend)
    json.dumps(made.identity())  # part of every cache key
    generation = GenerationConfig(**OmegaConf.to_container(config.generation))
    [completion] = made.generate(["q"], generation)
    assert completion.text == "reply:q"
    raw = config.prompt_format == "raw"
    assert server.requests[0]["path"] == ("/v1/completions" if raw else "/v1/chat/completions")
    assert server.requests[0]["body"]["model"] == ("Qwen/Qwen3-0.6B" if raw else config.name)


def test_authors_preset_follows_the_authors_temperatures() -> None:
    """dmis-lab/CLAG: get_completion's default 0.7, routing 0.2, cluster profiles 0.3, category 5 at 0.5."""
    from clag.config import compose_config

    cfg = compose_config(["model=authors_sglang"])
    assert cfg.model.engine == "vllm" and cfg.model.prompt_format == "raw" and not cfg.model.backend.extra_body
    assert cfg.model.generation.temperature == 0.7 and cfg.model.generation.max_new_tokens == 1000
    assert cfg.model.stage_settings.route.temperature == 0.2
    assert cfg.model.stage_settings.profile.temperature == 0.3
    assert cfg.answer.adversarial_temperature == 0.5


def test_the_server_reports_its_version_once_the_run_reached_it(server: ScriptedServer) -> None:
    served = backend(server.url)
    assert served.server_info() == {}  # nothing contacted yet (a fully cached rerun needs no server)
    served.generate(["hello"], GenerationConfig(max_new_tokens=4))
    assert served.server_info() == {"version": "9.9.9-scripted"}


def test_the_engine_counters_are_the_server_s_work_between_two_scrapes(server: ScriptedServer) -> None:
    from clag.llm.serve import engine_counters

    served = backend(server.url)
    before = served.server_counters()
    served.generate(["a", "b", "c"], GenerationConfig(max_new_tokens=4))
    counters = engine_counters(before, served.server_counters())
    assert counters["requests"] == 3 and counters["prompt_tokens"] == 30
    assert counters["prefix_cache_queries"] == 0 and counters["prefix_cache_hit_rate"] is None  # not exposed here
    hits = engine_counters({"vllm:prefix_cache_queries_total": 100.0}, {"vllm:prefix_cache_queries_total": 300.0,
                                                                        "vllm:prefix_cache_hits_total": 50.0})
    assert hits["prefix_cache_hit_rate"] == 0.25


def test_no_server_means_no_counters_and_no_failure() -> None:
    from clag.llm.serve import engine_counters

    nowhere = OpenAICompatibleBackend(None, "a-model-nobody-serves")
    assert nowhere.server_counters() == {}  # no server started for it: the run is not failed for counters
    assert engine_counters({}, {"vllm:request_success_total": 1.0}) == {}
