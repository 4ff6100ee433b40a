"""Local Hugging Face transformers backend: batched, optionally constrained generation.

One backend serves the paper's Qwen3 Hub models on a GPU and the offline
GGUF stand-in on this CPU. Design choices, and why:

* Weights are loaded once per process (module-level cache keyed by model,
  GGUF file, revision, dtype and device), lazily at the first generation, so
  several methods or sweeps in one process share them and a run answered
  entirely from the call cache never loads a model.
* A GGUF file's tokenizer and de-quantized float32 weights are saved beside
  it once (``<file>.tokenizer/``, ``<file>.float32/``): transformers parses
  the GGUF's metadata in Python on every load (~80-100 s for the 0.5B
  model), the saved checkpoint loads in ~5 s.
* Batching follows lm-evaluation-harness's ``Collator`` idea
  (``lm_eval/models/utils.py``): prompts are sorted by token length, longest
  first (an out-of-memory shows up on the first batch, and each batch pads
  little), split into ``batch_size`` batches, left-padded, and the outputs are
  put back in the caller's order.
* Sampling is our own Gumbel-max logits processor with one seeded
  ``torch.Generator`` per row, seeded from (``config.seed``, prompt): a seeded
  sampled answer depends on its prompt only, not on which other prompts share
  its batch, so the call cache and a resumed run stay consistent.
  (transformers' own sampling draws from the global torch RNG.)
* ``dtype: int8`` (CPU) loads float32 weights and converts every linear
  layer to PyTorch's dynamic int8 quantization (fbgemm kernels, one weight
  scale per output channel, activations quantized per call). Decoding on a
  CPU is bound by reading the weights: on an AVX2 CPU without native bf16 a
  0.5B model decodes ~3x faster at batch 1 and ~5x at batch 8 than in
  float32 (``make bench``). The offline GGUF weights are 4-bit already, so
  8 bits per channel adds little error; but activation scales are taken
  over the whole batch, so, as in bf16, a row's rounding depends on its
  batch-mates (float32 is exact under batching).
* ``dtype: auto`` (the offline models' setting) picks bf16 on a CPU with
  native bf16 (``avx512_bf16`` / ``amx_bf16`` in ``/proc/cpuinfo``) and int8
  elsewhere, since each is the faster path on its CPU; the resolved dtype is
  part of :meth:`TransformersBackend.identity`, so the call cache and the
  run's provenance name what ran, and two machines never share a cached call
  computed in another dtype.
* JSON-schema-constrained decoding uses xgrammar's transformers logits
  processor (``xgrammar.contrib.hf``), when the optional extra
  ``constrained`` is installed; without it the schema is ignored and
  ``identity()`` says ``constrained: false``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from clag.hardware import cpu_has_native_bf16
from clag.llm.base import Completion, GenerationConfig, check_prompt_format, row_seed
from clag.llm.json_parse import strip_think

log = logging.getLogger(__name__)

# Chat end-of-turn markers of common templates, used as stop ids when the
# tokenizer knows them (the GGUF Qwen tokenizer names only <|im_end|> as eos,
# while the model may also end with <|endoftext|>).
_END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first.

    The sort is stable, so equal lengths keep the caller's order and batches
    are the same on every run.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def _stamp(path: Path) -> str:
    """Size and mtime: what tells a memo beside a file that the file is unchanged."""
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def file_sha256(path: Path) -> str:
    """sha256 of a (large) file, memoised in a ``<file>.sha256`` sidecar.

    The sidecar records the file's size and mtime, so a replaced file is
    hashed again; where the folder is read-only the hash is recomputed.
    """
    stamp = _stamp(path)
    sidecar = path.with_name(path.name + ".sha256")
    try:
        digest, recorded = sidecar.read_text().strip().split(" ", 1)
        if recorded == stamp:
            return digest
    except (OSError, ValueError):
        pass
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            hasher.update(block)
    digest = hasher.hexdigest()
    try:
        sidecar.write_text(f"{digest} {stamp}\n")
    except OSError:
        log.debug("cannot write %s; the hash will be recomputed next time", sidecar)
    return digest


def memo_folder(path: Path, kind: str, save: Callable[[Path], None]) -> Path | None:
    """``<file>.<kind>/`` beside a GGUF file, written once by ``save`` and reused while the file is unchanged.

    transformers rebuilds a GGUF's tokenizer from its vocabulary and
    de-quantizes its weights on every load, parsing the file's metadata in
    Python each time (~80-100 s for the 0.5B model here); a saved copy loads
    in seconds. ``save`` writes into a temporary folder that is then renamed,
    so concurrent processes never read a half-written copy. ``None`` where
    the folder cannot be written (the caller then reads the GGUF itself).
    """
    memo = path.with_name(f"{path.name}.{kind}")
    stamp = _stamp(path)

    def valid() -> bool:
        try:
            return (memo / "stamp").read_text() == stamp
        except OSError:
            return False

    if valid():
        return memo
    try:
        scratch = Path(tempfile.mkdtemp(prefix=memo.name + ".", dir=path.parent))
    except OSError:
        log.debug("read-only folder: %s is read from %s on every load", kind, path)
        return None
    try:
        save(scratch)
        (scratch / "stamp").write_text(stamp)
        shutil.rmtree(memo, ignore_errors=True)
        scratch.rename(memo)
    except OSError as err:  # another process renamed its copy first, or the disk is full
        shutil.rmtree(scratch, ignore_errors=True)
        if not valid():
            log.warning("cannot save %s of %s (%s); it is rebuilt on every load", kind, path, err)
            return None
    return memo


def load_gguf_tokenizer(path: Path) -> Any:
    """The tokenizer of a GGUF file, through its saved copy ``<file>.tokenizer/``."""
    from transformers import AutoTokenizer

    def from_gguf() -> Any:
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)

    if folder := memo_folder(path, "tokenizer", lambda scratch: from_gguf().save_pretrained(scratch)):
        return AutoTokenizer.from_pretrained(folder)
    return from_gguf()


def dequantized_checkpoint(path: Path) -> Path | None:
    """The GGUF's weights de-quantized to float32 and saved as a transformers checkpoint
    ``<file>.float32/`` (about 5 bytes per parameter on disk: the GGUF's embedding
    and output matrices are stored untied), or ``None`` where it cannot be written."""
    import torch
    from transformers import AutoModelForCausalLM

    def save(folder: Path) -> None:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        # plain float32 tensors now: drop the GGUF quantizer, which refuses to serialise
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(folder)

    return memo_folder(path, "float32", save)


def _dir_fingerprint(path: Path) -> str:
    """Cheap identity of a local model folder: its file names and sizes (no reads)."""
    entries = sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*") if p.is_file())
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


@dataclass(frozen=True)
class ModelSource:
    """Where weights come from: a Hub id or a local folder, plus a GGUF file name in it."""

    location: str
    gguf_file: str | None = None

    @classmethod
    def resolve(cls, model: str, gguf_file: str | None = None) -> ModelSource:
        """Accept a Hub id, a local folder, a ``.gguf`` path or ``offline:<name>``."""
        if model.startswith("offline:"):
            from clag.assets import resolve_gguf

            path = resolve_gguf(model.removeprefix("offline:"))
            return cls(str(path.parent), path.name)
        if model.endswith(".gguf"):
            path = Path(model).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"GGUF file not found: {path}")
            return cls(str(path.parent), path.name)
        if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().is_dir():
            # a Hub id never starts like a path; without this, transformers reports it as a bad repo id
            raise FileNotFoundError(f"model folder not found: {Path(model).expanduser()} (model.backend.model)")
        return cls(model, gguf_file)

    @property
    def gguf_path(self) -> Path | None:
        """The local GGUF file, if the weights are one on this machine."""
        if self.gguf_file is None:
            return None
        path = Path(self.location).expanduser() / self.gguf_file
        return path if path.is_file() else None

    def fingerprint(self, revision: str | None) -> dict[str, Any]:
        """The weights' identity, portable across machines (no absolute paths)."""
        if self.gguf_path is not None:
            return {"model": self.gguf_file, "weights_sha256": file_sha256(self.gguf_path)}
        local = Path(self.location).expanduser()
        if local.is_dir():
            return {"model": local.name, "weights_fingerprint": _dir_fingerprint(local)}
        return {"model": self.location, "gguf_file": self.gguf_file, "revision": revision}


@dataclass
class LoadedModel:
    """A tokenizer and (lazily) its model, shared by every backend of the process."""

    tokenizer: Any
    dtype: str
    model: Any = None
    stop_ids: list[int] | None = None
    grammar_compiler: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_LOADED: dict[tuple[str, str | None, str | None, str, str], LoadedModel] = {}
_LOAD_LOCK = threading.Lock()


def _effective_dtype(dtype: str, device: str) -> str:
    """The dtype a backend really runs: ``auto`` chosen from the machine, ``bfloat16`` only where native.

    ``auto``: on the CPU, ``bfloat16`` with native bf16 (:func:`cpu_has_native_bf16`), else ``int8``
    (measured on an AVX-512 BF16 EPYC and an AVX2-only CPU: docs/throughput.md); on a GPU, ``bfloat16``
    where supported, else ``float16``.
    """
    import torch

    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if dtype == "auto":
        if cuda:
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        return "bfloat16" if cpu_has_native_bf16() else "int8" if device == "cpu" else "float32"
    if dtype != "bfloat16":
        return dtype
    if cuda:
        supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    elif device == "cpu":
        supported = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    else:
        supported = True
    if not supported:
        log.warning("bfloat16 is not supported natively on %s; using float32", device)
        return "float32"
    return dtype


def _quantize_linear_int8(model: Any) -> Any:
    """Every ``nn.Linear`` as a dynamically quantized int8 layer, one weight scale per output channel.

    ``torch.ao.quantization.quantize_dynamic`` is deprecated in favour of
    torchao, but it ships with torch and its fbgemm kernels are the fast
    path on x86 CPUs; the warning it prints is silenced here.
    """
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
        # in place: a copy would hold the float32 weights twice at the peak
        return torch.ao.quantization.quantize_dynamic(
            model, {torch.nn.Linear: qconfig}, dtype=torch.qint8, inplace=True
        )


def _constrained_library() -> str | None:
    """``xgrammar==<version>`` when the optional extra is installed, else ``None``."""
    try:
        import xgrammar  # noqa: F401
    except ImportError:
        return None
    return f"xgrammar=={metadata.version('xgrammar')}"


class SeededSampler:
    """Temperature / top-p sampling as a logits processor, by the Gumbel-max trick.

    Adding Gumbel noise to the (tempered, nucleus-masked) log-probabilities
    and taking the argmax samples exactly from the softmax; drawing the noise
    from one generator per row makes every row's sample independent of its
    batch. Used with ``do_sample=False`` so transformers takes the argmax.
    """

    def __init__(self, temperature: float, top_p: float, seeds: Sequence[int]) -> None:
        import torch

        self.temperature = temperature
        self.top_p = top_p
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            ordered, index = scores.sort(dim=-1, descending=True)
            probs = ordered.softmax(dim=-1)
            # drop a token when the mass before it already reaches top_p (the top token always stays)
            drop = probs.cumsum(dim=-1) - probs >= self.top_p
            scores = scores.scatter(-1, index, ordered.masked_fill(drop, float("-inf")))
        width = scores.shape[-1]
        exponential = torch.stack([torch.empty(width).exponential_(generator=g) for g in self.generators])
        return scores - exponential.clamp_min(1e-20).log().to(scores.device)


class PromptRepetitionPenalty:
    """transformers' repetition penalty, blind to the left padding of a batch.

    The stock processor penalises every id in ``input_ids``, padding
    included, so a batched prompt would see its pad (often an end-of-text
    id) penalised and an unbatched one not; this one starts each row where
    its prompt starts, so batching does not change the penalty.
    """

    def __init__(self, penalty: float, starts: Sequence[int]) -> None:
        self.penalty = penalty
        self.starts = list(starts)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row, start in enumerate(self.starts):
            ids = input_ids[row, start:]
            picked = scores[row].gather(0, ids)
            scores[row].scatter_(0, ids, torch.where(picked < 0, picked * self.penalty, picked / self.penalty))
        return scores


class TransformersBackend:
    """Batched generation with a local transformers model.

    Args:
        model: Hub id (``Qwen/Qwen3-0.6B``), local folder, ``.gguf`` path, or
            ``offline:<name>`` (``qwen2.5-0.5b``, ``qwen2.5-1.5b``,
            ``smollm2-135m``; see :func:`clag.assets.resolve_gguf`).
        gguf_file: GGUF file name inside ``model`` when ``model`` is a folder or Hub id.
        dtype: ``auto`` (chosen from the machine, see :func:`_effective_dtype`;
            the choice is the ``dtype`` of :meth:`identity`), ``bfloat16`` (falls
            back to ``float32`` without native support), ``float32``,
            ``float16``, or ``int8`` (CPU: float32 weights, linear layers
            dynamically quantized).
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (accelerate's device map).
        prompt_format: ``chat`` (one user message through the chat template)
            or ``raw`` (the text as is, like the authors' SGLang ``/generate``).
        enable_thinking: Passed to the chat template (Qwen3); off for the paper.
        batch_size: Prompts per forward pass.
        revision: Hub revision to pin.
        system_prompt: Optional system message for the chat format.
    """

    def __init__(
        self,
        model: str,
        gguf_file: str | None = None,
        dtype: str = "bfloat16",
        device: str = "cpu",
        prompt_format: str = "chat",
        enable_thinking: bool = False,
        batch_size: int = 8,
        revision: str | None = None,
        system_prompt: str | None = None,
    ) -> None:
        check_prompt_format(prompt_format)
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if dtype == "int8" and device != "cpu":
            raise ValueError(f"dtype int8 (dynamic quantization) runs on the CPU only, not on {device}")
        self.model_name = model
        self.source = ModelSource.resolve(model, gguf_file)
        self.dtype = dtype
        self.device = device
        self.prompt_format = prompt_format
        self.enable_thinking = enable_thinking
        self.batch_size = batch_size
        self.revision = revision
        self.system_prompt = system_prompt
        self._identity: dict[str, Any] | None = None
        self._resolved_dtype: str | None = None

    # -- loading -----------------------------------------------------------------

    def resolved_dtype(self) -> str:
        """The dtype that runs (``auto`` and unsupported ``bfloat16`` resolved on this machine), decided once."""
        if self._resolved_dtype is None:
            self._resolved_dtype = _effective_dtype(self.dtype, self.device)
        return self._resolved_dtype

    def _key(self) -> tuple[str, str | None, str | None, str, str]:
        return (self.source.location, self.source.gguf_file, self.revision, self.resolved_dtype(), self.device)

    def _loaded(self, with_model: bool) -> LoadedModel:
        """The shared tokenizer (and model if asked), loading what is missing once."""
        with _LOAD_LOCK:
            loaded = _LOADED.get(self._key())
            if loaded is None:
                loaded = LoadedModel(self._load_tokenizer(), self.resolved_dtype())
                _LOADED[self._key()] = loaded
            if with_model and loaded.model is None:
                loaded.model = self._load_model(loaded.dtype)
            return loaded

    def _load_tokenizer(self) -> Any:
        if self.source.gguf_path is not None:
            return load_gguf_tokenizer(self.source.gguf_path)
        from transformers import AutoTokenizer

        source = self.source
        return AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file, revision=self.revision)

    def _load_model(self, dtype: str) -> Any:
        import torch
        from transformers import AutoModelForCausalLM

        log.info("loading %s (%s, %s, %s)", self.model_name, self.source.gguf_file or "-", dtype, self.device)
        location, gguf_file = self.source.location, self.source.gguf_file
        if self.source.gguf_path is not None and (checkpoint := dequantized_checkpoint(self.source.gguf_path)):
            location, gguf_file = str(checkpoint), None
        model = AutoModelForCausalLM.from_pretrained(
            location,
            gguf_file=gguf_file,
            revision=self.revision,
            dtype=torch.float32 if dtype == "int8" else getattr(torch, dtype),
            device_map=self.device,
        ).eval()
        if dtype == "int8":
            model = _quantize_linear_int8(model)
        return model

    # -- identity ----------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """Model (file hash or id + revision), dtype, device type, prompt format,
        chat-template hash, thinking switch, system prompt and constrained library."""
        if self._identity is None:
            loaded = self._loaded(with_model=False)
            template = None
            if self.prompt_format == "chat":
                if not loaded.tokenizer.chat_template:
                    raise ValueError(f"{self.model_name} has no chat template; use prompt_format=raw")
                template = hashlib.sha256(loaded.tokenizer.chat_template.encode()).hexdigest()
            self._identity = {
                "backend": "transformers",
                **self.source.fingerprint(self.revision),
                "dtype": loaded.dtype,
                "device": self.device.split(":")[0],
                "prompt_format": self.prompt_format,
                "chat_template_sha256": template,
                "enable_thinking": self.enable_thinking,
                "system_prompt": self.system_prompt,
                "constrained": _constrained_library() or False,
            }
        return dict(self._identity)

    # -- generation --------------------------------------------------------------

    def _encode(self, tokenizer: Any, prompt: str) -> list[int]:
        if self.prompt_format == "raw":
            return tokenizer(prompt)["input_ids"]
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": prompt})
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=self.enable_thinking
        )
        # the rendered template already holds its special tokens (BOS included where the model uses one)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    @staticmethod
    def _stop_ids(loaded: LoadedModel) -> list[int]:
        """End-of-sequence ids from the generation config, the tokenizer and its chat markers."""
        if loaded.stop_ids is None:
            configured = loaded.model.generation_config.eos_token_id
            ids = set(configured if isinstance(configured, list) else [configured])
            ids.add(loaded.tokenizer.eos_token_id)
            vocab = loaded.tokenizer.get_vocab()
            ids.update(vocab[marker] for marker in _END_MARKERS if marker in vocab)
            loaded.stop_ids = sorted(i for i in ids if i is not None)
        return loaded.stop_ids

    def _grammar(self, loaded: LoadedModel, schema: dict[str, Any], stop_ids: list[int]) -> Any:
        """A fresh xgrammar logits processor for ``schema`` (one per generate call), or
        ``None`` when xgrammar cannot compile the schema (the call then runs unconstrained)."""
        import xgrammar
        from xgrammar.contrib.hf import LogitsProcessor

        if loaded.grammar_compiler is None:
            info = xgrammar.TokenizerInfo.from_huggingface(
                loaded.tokenizer, vocab_size=loaded.model.config.vocab_size, stop_token_ids=stop_ids
            )
            loaded.grammar_compiler = xgrammar.GrammarCompiler(info)
        try:
            # key order kept: properties are generated in the schema's order ("reason" before "choice")
            grammar = loaded.grammar_compiler.compile_json_schema(json.dumps(schema))
        except (RuntimeError, ValueError) as err:
            log.warning("xgrammar cannot compile a schema (%s); generating unconstrained", err)
            return None
        return LogitsProcessor(grammar)

    def generate(self, prompts: Sequence[str], config: GenerationConfig) -> list[Completion]:
        """One completion per prompt, in order; batched by length."""
        if not prompts:
            return []
        loaded = self._loaded(with_model=True)
        encoded = [self._encode(loaded.tokenizer, prompt) for prompt in prompts]
        seeds = [row_seed(config.seed, prompt) for prompt in prompts]
        results: list[Completion | None] = [None] * len(prompts)
        for batch in length_sorted_batches([len(ids) for ids in encoded], self.batch_size):
            outputs = self._generate_batch(loaded, [encoded[i] for i in batch], [seeds[i] for i in batch], config)
            for i, completion in zip(batch, outputs):
                results[i] = completion
        return [r for r in results if r is not None]

    def _generate_batch(
        self, loaded: LoadedModel, encoded: list[list[int]], seeds: list[int], config: GenerationConfig
    ) -> list[Completion]:
        import torch
        from transformers import GenerationConfig as HFGenerationConfig
        from transformers import LogitsProcessorList

        tokenizer, model = loaded.tokenizer, loaded.model
        stop_ids = self._stop_ids(loaded)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        attention = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):  # left padding: every prompt ends where generation starts
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1

        processors = LogitsProcessorList()
        if config.repetition_penalty != 1.0:
            processors.append(PromptRepetitionPenalty(config.repetition_penalty, [width - len(ids) for ids in encoded]))
        if config.json_schema and _constrained_library():
            if (grammar := self._grammar(loaded, config.json_schema, stop_ids)) is not None:
                processors.append(grammar)
        if config.temperature > 0:  # after the grammar mask, so the nucleus is taken over allowed tokens
            processors.append(SeededSampler(config.temperature, config.top_p, seeds))
        settings = HFGenerationConfig(
            max_new_tokens=config.max_new_tokens,
            do_sample=False,
            repetition_penalty=1.0,  # ours above; set so the model's generation_config cannot add its own
            eos_token_id=stop_ids,
            pad_token_id=pad,
        )
        with loaded.lock, torch.inference_mode():
            output = model.generate(
                input_ids=input_ids.to(model.device),
                attention_mask=attention.to(model.device),
                generation_config=settings,
                logits_processor=processors,
            )
        stops = set(stop_ids)
        completions = []
        for row, ids in enumerate(encoded):
            new = output[row, width:].tolist()
            end = next((k for k, token in enumerate(new) if token in stops), None)
            kept = new if end is None else new[:end]
            text = strip_think(tokenizer.decode(kept, skip_special_tokens=True))
            completions.append(Completion(text, len(ids), len(new) if end is None else end + 1))
        return completions
