"""Unit tests of the vLLM server's launch settings (clag/llm/serve.py); no server is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from clag.config import compose_config
from clag.llm import serve
from clag.llm.serve import ServerSpec, default_reserved_cpus, scheduler_args, server_env
from clag.running.spec import RunSpec


def test_small_machines_reserve_no_core_for_the_scheduler() -> None:
    assert default_reserved_cpus(2) == 0
    assert default_reserved_cpus(4) == 0
    assert default_reserved_cpus(32) is None  # vLLM's own default


def test_the_reserved_cores_reach_the_server_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr(serve, "has_gpu", lambda: False)
    assert server_env(Path("/nonexistent"), 2, reserved_cpus=1)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 64)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in server_env(Path("/nonexistent"), 2)


def test_a_user_set_reserved_core_count_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "3")
    monkeypatch.setattr(serve, "has_gpu", lambda: False)
    assert server_env(Path("/nonexistent"), 2, reserved_cpus=0)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "3"


def test_a_cpu_server_waits_for_a_long_step_unless_the_user_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full 32k-token prefill step outlasts vLLM's 300 s on 2 cores; a GPU keeps vLLM's own timeout."""
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", raising=False)
    monkeypatch.setattr(serve, "has_gpu", lambda: False)
    assert server_env(Path("/nonexistent"), 2)["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "3600"
    monkeypatch.setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "600")
    assert server_env(Path("/nonexistent"), 2)["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "600"
    monkeypatch.delenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS")
    monkeypatch.setattr(serve, "has_gpu", lambda: True)
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in server_env(Path("/nonexistent"), 2)


def test_chunked_prefill_is_off_on_a_cpu_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "has_gpu", lambda: False)
    assert scheduler_args(None, 32768) == ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "32768"]
    assert scheduler_args(True, 32768) == []
    monkeypatch.setattr(serve, "has_gpu", lambda: True)
    assert scheduler_args(None, 8192) == []  # vLLM's own default on a GPU
    assert scheduler_args(False, 8192)[-1] == "8192"  # the step budget holds the longest prompt


def test_the_server_spec_reads_the_engine_config() -> None:
    cfg = compose_config(["engine=vllm", "model.serve.reserved_cpus=1", "model.serve.kv_cache_gib=3"])
    spec = ServerSpec.from_model_config(cfg.model)
    assert (spec.reserved_cpus, spec.kv_cache_gib, spec.name) == (1, 3.0, cfg.model.name)
    default = ServerSpec.from_model_config(compose_config(["engine=vllm"]).model)
    assert (default.reserved_cpus, default.chunked_prefill) == (None, None)
    chunked = compose_config(["engine=vllm", "model.serve.chunked_prefill=true"]).model
    assert ServerSpec.from_model_config(chunked).chunked_prefill is True


def test_the_server_launch_settings_do_not_rename_the_run_folder() -> None:
    overrides = ["engine=vllm", "method=rag", "dataset=bioasq"]
    base = RunSpec.from_config(compose_config(overrides)).config_hash
    relaunched = compose_config([*overrides, "model.serve.kv_cache_gib=9", "model.serve.reserved_cpus=1"])
    assert RunSpec.from_config(relaunched).config_hash == base
    assert RunSpec.from_config(compose_config([*overrides, "model.backend.dtype=float32"])).config_hash != base


def test_a_server_with_another_json_whitespace_setting_or_dtype_is_refused() -> None:
    cfg = compose_config(["engine=vllm", "model.backend.disable_any_whitespace=true"])
    spec = ServerSpec.from_model_config(cfg.model)
    assert spec.disable_any_whitespace
    free = serve.ServerState("m", 1, 8000, "bfloat16", "log", "dir", 0.0, ["--block-size", "32"])
    strict = serve.ServerState("m", 1, 8000, "bfloat16", "log", "dir", 0.0, list(serve.NO_WHITESPACE_ARGS))
    serve.check_server(free, False, "bfloat16")
    serve.check_server(strict, True)
    with pytest.raises(serve.ServeError, match="allows free JSON whitespace"):
        serve.check_server(free, True)
    with pytest.raises(serve.ServeError, match="forbids free JSON whitespace"):
        serve.check_server(strict, False)
    with pytest.raises(serve.ServeError, match=r"runs bfloat16 \(the run: float32\)"):
        serve.check_server(free, False, "float32")


def test_the_whitespace_setting_joins_the_identity_only_when_set() -> None:
    from clag.llm.openai_backend import OpenAICompatibleBackend

    plain = OpenAICompatibleBackend("http://x", "m", dtype="bfloat16").identity()
    strict = OpenAICompatibleBackend("http://x", "m", dtype="bfloat16", disable_any_whitespace=True).identity()
    assert "disable_any_whitespace" not in plain and strict == {**plain, "disable_any_whitespace": True}


@pytest.fixture
def dying_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """``serve.start`` with an engine that prints its arguments and exits 3; returns the state folder."""
    fake_python = tmp_path / "venv" / "bin" / "python"
    fake_python.parent.mkdir(parents=True)
    fake_python.write_text('#!/bin/sh\necho "engine died: $*"\nexit 3\n')
    fake_python.chmod(0o755)
    monkeypatch.setattr(serve, "state_dir", lambda: tmp_path)
    monkeypatch.setattr(serve, "install", lambda: fake_python)
    monkeypatch.setattr(serve, "model_location", lambda weights: weights)
    return tmp_path


def test_a_restart_appends_to_the_log_and_keeps_the_last_servers(dying_engine: Path) -> None:
    """Two servers of one name in turn (the reference's, then the test suite's) share one log file."""
    spec = ServerSpec.from_model_config(compose_config(["engine=vllm"]).model)
    for port in (5001, 5002):
        with pytest.raises(serve.ServeError, match=f"engine died: .*--port {port}"):
            serve.start(spec, port=port)
    log = (dying_engine / f"{spec.name}.log").read_text()
    assert log.count("starting vLLM") == 2
    assert log.index("--port 5001") < log.index("on port 5002") < log.index("--port 5002")


def test_bf16_pinned_on_a_cpu_without_it_is_warned_about(
    dying_engine: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Table 6 pins bfloat16; on an AVX2-only CPU that is emulated, and the session should know."""
    monkeypatch.setattr(serve, "has_gpu", lambda: False)
    spec = ServerSpec.from_model_config(compose_config(["engine=vllm", "model.backend.dtype=bfloat16"]).model)
    for native, warned in ((True, False), (False, True)):
        monkeypatch.setattr(serve, "cpu_has_native_bf16", lambda native=native: native)
        caplog.clear()
        with pytest.raises(serve.ServeError, match="--dtype bfloat16"):
            serve.start(spec, port=5003)
        assert ("emulated" in caplog.text) is warned
