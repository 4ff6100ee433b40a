"""What this CPU can do for LLM serving at best, measured with the project's own torch (issue 27).

Two rates are measured, each the best of a few timed rounds on an idle machine:

- the sustained matrix-multiply rate (GFLOP/s) in bfloat16, float32 and int8
  (torch's dynamically quantized linear, the transformers engine's ``int8``),
  at the shape of a prefill step: 512 tokens through a model's MLP projection;
- the memory bandwidth (GB/s): reading (a sum) and copying a 1 GiB buffer,
  far beyond every cache.

From them and a model's config (read from its own files) follow two ceilings:

- **prefill**, compute-bound: ``tokens/s = F / flops_per_token(context)``;
- **decode** at ``B`` streams, bound by compute or by reading the weights
  (and each stream's KV cache) once per step:
  ``tokens/s = min(F / flops, B * BW / bytes_per_step)``.

And for a workload of ``P`` prompt tokens prefilled (prefix-cache hits
excluded) and ``C`` generated the shortest wall time these rates allow,
``P * prefill_flops / F + C / decode_ceiling``, beside which a measured wall
time is a fraction of the ceiling. A peak rate is the best seen: a busy
machine only lowers it, so a run that measures twice keeps the higher.

Assumptions (the report repeats them): FLOPs per token are ``2 x`` the linear
layers' weights (q, k, v, o, gate, up, down) plus attention's ``4 x layers x
context x heads x head_dim``; the LM head (``2 x vocab x hidden``) counts for
generated tokens only, since vLLM computes logits for a sequence's last token
alone; embeddings are a lookup. Bytes per decode step are the linear layers'
and the LM head's weights in the dtype plus each stream's KV cache read once.
Peak rates are those torch reaches on one large matmul on all cores: an
engine's own kernels could beat them a little, so fractions near 1 are
possible, not above it by much. Nothing here models the scheduler, the
sampler, tokenisation or HTTP.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "int8": 1}
PREFILL_TOKENS = 512  # rows of the timed matmul: a prefill step's tokens
BANDWIDTH_BYTES = 1 << 30
CONTEXTS = (256, 1024, 4096)  # the context lengths the ceilings are tabulated at
STREAMS = (1, 8, 16, 32)


@dataclass(frozen=True)
class ModelShape:
    """The few numbers of a decoder's config that set its FLOPs and bytes per token."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_hf_config(cls, name: str, config: Any) -> ModelShape:
        heads = int(config.num_attention_heads)
        return cls(
            name=name,
            hidden=int(config.hidden_size),
            intermediate=int(config.intermediate_size),
            layers=int(config.num_hidden_layers),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),
            vocab=int(config.vocab_size),
        )

    @property
    def linear_params(self) -> int:
        """Weights of the attention and MLP projections of every layer (biases and norms ignored)."""
        attention = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp)

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    def flops_per_token(self, context: int, generated: bool) -> float:
        """FLOPs of one token at position ``context``; ``generated`` adds the LM head."""
        attention = 4 * self.layers * context * self.heads * self.head_dim
        return 2 * self.linear_params + attention + (2 * self.head_params if generated else 0)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def decode_step_bytes(self, streams: int, context: int, dtype_bytes: int) -> float:
        """Bytes one decode step of ``streams`` sequences reads: the weights once, each KV cache once."""
        weights = (self.linear_params + self.head_params) * dtype_bytes
        return weights + streams * context * self.kv_bytes_per_token(dtype_bytes)


def prefill_ceiling(shape: ModelShape, gflops: float, context: int) -> float:
    """Prompt tokens/s at most, a prompt of ``context`` tokens (mean position ``context / 2``)."""
    return gflops * 1e9 / shape.flops_per_token(context // 2, generated=False)


def decode_ceiling(shape: ModelShape, gflops: float, gbps: float, streams: int, context: int, dtype: str) -> float:
    """Generated tokens/s at most with ``streams`` sequences of ``context`` tokens decoding together."""
    compute = gflops * 1e9 / shape.flops_per_token(context, generated=True)
    memory = streams * gbps * 1e9 / shape.decode_step_bytes(streams, context, DTYPE_BYTES[dtype])
    return min(compute, memory)


def workload_floor_s(
    shape: ModelShape,
    gflops: float,
    gbps: float,
    prompt_tokens: int,
    completion_tokens: int,
    calls: int,
    streams: int,
    dtype: str = "bfloat16",
    cached_tokens: int = 0,
) -> float:
    """The shortest wall time the measured rates allow for a workload's tokens.

    Its calls' mean prompt sets the context (prefill at half of it, decode at
    prompt plus half the completion); decoding runs ``streams`` sequences at
    once; ``cached_tokens`` of the prompts came from the engine's prefix cache
    and cost no prefill. A lower bound for this work: any schedule on this CPU
    is at least this slow (an engine that caches more does less work).
    """
    prompt = prompt_tokens / calls
    completion = completion_tokens / calls
    prefilled = prompt_tokens - cached_tokens
    prefill_s = prefilled * shape.flops_per_token(int(prompt // 2), generated=False) / (gflops * 1e9)
    decode_rate = decode_ceiling(shape, gflops, gbps, streams, int(prompt + completion / 2), dtype)
    return prefill_s + completion_tokens / decode_rate


# -- measurement ---------------------------------------------------------------------------------


def best_seconds(work: Callable[[], object], rounds: int, min_s: float = 1.0) -> float:
    """Seconds per call of ``work``: the best of ``rounds`` rounds of enough calls for ``min_s`` each."""
    work()  # warm-up: kernels chosen, pages touched
    start = time.perf_counter()
    work()
    once = max(time.perf_counter() - start, 1e-6)
    repeats = max(1, int(min_s / once))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            work()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def matmul_gflops(dtype: str, k: int, n: int, m: int = PREFILL_TOKENS, rounds: int = 3) -> float:
    """Sustained GFLOP/s of ``(m x k) @ (k x n)`` in ``dtype`` (int8: torch's dynamic quantized linear)."""
    import torch

    if dtype == "int8":
        linear = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)), {torch.nn.Linear}, dtype=torch.qint8
        )
        x = torch.randn(m, k)

        def work() -> object:
            with torch.inference_mode():
                return linear(x)
    else:
        torch_dtype = getattr(torch, dtype)
        a, b = torch.randn(m, k, dtype=torch_dtype), torch.randn(k, n, dtype=torch_dtype)

        def work() -> object:
            return a @ b

    return 2 * m * k * n / best_seconds(work, rounds) / 1e9


def memory_gbps(nbytes: int = BANDWIDTH_BYTES, rounds: int = 3) -> dict[str, float]:
    """Read (sum of a float32 buffer) and copy bandwidth in GB/s; a copy moves its bytes twice."""
    import torch

    source = torch.ones(nbytes // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    read = nbytes / best_seconds(lambda: source.sum(), rounds) / 1e9
    copy = 2 * nbytes / best_seconds(lambda: target.copy_(source), rounds) / 1e9
    return {"read_gbps": read, "copy_gbps": copy}


@functools.cache
def model_shape(model: str) -> ModelShape:
    """The shape of a configured model (``configs/model/<model>.yaml``), read from its own files once
    per process (a GGUF's metadata is parsed in Python: seconds, and every report render asks)."""
    from transformers import AutoConfig

    from clag.config import compose_config
    from clag.llm.transformers_backend import ModelSource

    weights = str(compose_config([f"model={model}"]).model.weights)
    source = ModelSource.resolve(weights)
    if source.gguf_path is not None:
        config = AutoConfig.from_pretrained(source.gguf_path.parent, gguf_file=source.gguf_path.name)
    else:
        config = AutoConfig.from_pretrained(source.location)
    return ModelShape.from_hf_config(model, config)


def measure(shape: ModelShape, rounds: int = 3) -> dict[str, Any]:
    """The CPU's rates at this model's MLP shape (hidden -> intermediate)."""
    import torch

    rates = {
        f"{dtype}_gflops": matmul_gflops(dtype, shape.hidden, shape.intermediate, rounds=rounds)
        for dtype in ("bfloat16", "float32", "int8")
    }
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), **rates, **memory_gbps(rounds=rounds)}


def ceiling_rows(shape: ModelShape, rates: dict[str, Any], dtype: str = "bfloat16") -> list[dict[str, Any]]:
    """Prefill and decode ceilings of ``shape`` at each context and stream count, in ``dtype``."""
    gflops, gbps = rates[f"{dtype}_gflops"], rates["read_gbps"]
    rows = []
    for context in CONTEXTS:
        row: dict[str, Any] = {"model": shape.name, "dtype": dtype, "context": context,
                               "prefill_tok_s": prefill_ceiling(shape, gflops, context)}  # fmt: skip
        for streams in STREAMS:
            row[f"decode_{streams}_tok_s"] = decode_ceiling(shape, gflops, gbps, streams, context, dtype)
        rows.append(row)
    return rows


def engine_rows(model: str, shape: ModelShape, rates: dict[str, Any]) -> list[dict[str, Any]]:
    """The in-process engine (transformers, the model's ``dtype: auto``) measured against the ceilings:
    prefill of one ~1,000-token prompt, and decoding 64 tokens at 1 and 8 sequences (short prompts).
    vLLM's rate is the fixed workload's (``benchmarks.workload``): a served engine needs minutes to start."""
    from benchmarks.throughput import LLM_PROMPTS, _compose
    from clag.llm.base import GenerationConfig
    from clag.running.build import build_backend

    backend = build_backend(_compose([f"model={model}", "engine=transformers"]).model)
    backend.generate(["Hello"], GenerationConfig(max_new_tokens=2))  # load and warm up, untimed
    dtype = str(backend.identity().get("dtype"))
    long_prompt = " ".join(f"On day {i} the team met at the old library to plan the trip." for i in range(70))
    rows = []
    for label, prompts, new_tokens in (("prefill, 1 prompt", [long_prompt], 1),
                                       ("decode, 1 sequence", list(LLM_PROMPTS[:1]), 64),
                                       ("decode, 8 sequences", list(LLM_PROMPTS[:8]), 64)):  # fmt: skip
        start = time.perf_counter()
        done = backend.generate(prompts, GenerationConfig(max_new_tokens=new_tokens))
        seconds = time.perf_counter() - start
        prompt_tokens = sum(c.prompt_tokens for c in done)
        if new_tokens == 1:
            rate, ceiling = prompt_tokens / seconds, prefill_ceiling(shape, rates[f"{dtype}_gflops"], prompt_tokens)
        else:
            context = prompt_tokens // len(prompts) + new_tokens // 2
            rate = sum(c.completion_tokens for c in done) / seconds
            ceiling = decode_ceiling(shape, rates[f"{dtype}_gflops"], rates["read_gbps"], len(prompts), context, dtype)
        rows.append({"engine": f"transformers {dtype}", "measured": label, "tok_s": rate, "ceiling_tok_s": ceiling,
                     "fraction": rate / ceiling})  # fmt: skip
    return rows


def run(models: list[str], rounds: int = 3, engines: bool = True) -> dict[str, Any]:
    """Rates measured once (at the first model's MLP shape), every model's ceilings from them, and the
    in-process engine on the first model as a fraction of its ceilings."""
    from benchmarks.throughput import machine_info

    shapes = [model_shape(model) for model in models]
    rates = measure(shapes[0], rounds)
    rows = [row for shape in shapes for dtype in ("bfloat16", "int8") for row in ceiling_rows(shape, rates, dtype)]
    results = {"machine": machine_info(), "rates": rates, "shapes": [asdict(s) for s in shapes], "ceilings": rows}
    results["engines"] = engine_rows(models[0], shapes[0], rates) if engines else []
    return results


def render(results: dict[str, Any]) -> str:
    """The ceiling section of a report, in Markdown."""
    rates, machine = results["rates"], results["machine"]
    lines = [
        f"Measured with torch {rates['torch']} on {rates['threads']} threads, {machine['cpu']} "
        f"({machine['cores']} cores), load {machine['loadavg'][0]:.2f} at the start, {machine['date']}.",
        "",
        "| rate | measured |",
        "|---|---|",
        f"| bf16 matmul ({PREFILL_TOKENS} x hidden x intermediate) | {rates['bfloat16_gflops']:.0f} GFLOP/s |",
        f"| float32 matmul | {rates['float32_gflops']:.0f} GFLOP/s |",
        f"| int8 dynamic-quantized linear | {rates['int8_gflops']:.0f} GFLOP/s |",
        f"| memory read (1 GiB sum) | {rates['read_gbps']:.1f} GB/s |",
        f"| memory copy (1 GiB) | {rates['copy_gbps']:.1f} GB/s |",
        "",
        "| model | dtype | context | prefill tok/s | " + " | ".join(f"decode x{s} tok/s" for s in STREAMS) + " |",
        "|---" * (4 + len(STREAMS)) + "|",
    ]
    for row in results["ceilings"]:
        decode = " | ".join(f"{row[f'decode_{s}_tok_s']:.0f}" for s in STREAMS)
        lines.append(f"| {row['model']} | {row['dtype']} | {row['context']} | {row['prefill_tok_s']:.0f} | {decode} |")
    if results.get("engines"):
        lines += ["", f"| engine ({results['shapes'][0]['name']}) | measured | tok/s | ceiling tok/s | fraction |",
                  "|---|---|---|---|---|"]
        for row in results["engines"]:
            lines.append(f"| {row['engine']} | {row['measured']} | {row['tok_s']:.1f} | "
                         f"{row['ceiling_tok_s']:.0f} | {row['fraction']:.0%} |")
    lines += ["", "Assumptions: " + " ".join(__doc__.split("Assumptions (the report repeats them): ")[1].split())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-0.5b"], help="configs/model names")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-engines", dest="engines", action="store_false", help="rates and ceilings only")
    parser.add_argument("--out", type=Path, default=Path("results/bench/ceiling"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    results = run(args.models, args.rounds, args.engines)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "raw.json").write_text(json.dumps(results, indent=2))
    (args.out / "report.md").write_text("# The CPU's ceiling\n\n" + render(results))
    log.info("report: %s", args.out / "report.md")
    return results


if __name__ == "__main__":
    main()
