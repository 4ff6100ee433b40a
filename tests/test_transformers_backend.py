"""The transformers backend: batching helpers, seeded sampling, identity, and one real model.

The model tests load the shipped SmolLM2-135M GGUF once, in float32: it is
the smallest real model here, and in float32 a left-padded batch gives the
same greedy tokens as one prompt at a time (in bfloat16 a near-tie can flip
after a dozen tokens, which is numerics, not a batching bug).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from clag.hardware import cpu_has_native_bf16
from clag.llm.base import GenerationConfig
from clag.llm.json_parse import strip_think
from clag.llm.transformers_backend import (
    ModelSource,
    PromptRepetitionPenalty,
    SeededSampler,
    TransformersBackend,
    _effective_dtype,
    dequantized_checkpoint,
    file_sha256,
    length_sorted_batches,
    memo_folder,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>\nlet me see\n</think>\n\nParis", "Paris"),
        ("<think></think>Paris", "Paris"),
        ("Paris<think>extra</think> and Rome", "Paris and Rome"),
        ("<think>cut off by max_new_tokens", ""),
        ("Paris", "Paris"),
    ],
)
def test_strip_think(text: str, expected: str) -> None:
    assert strip_think(text) == expected


def test_length_sorted_batches_cover_every_index_longest_first() -> None:
    lengths = [5, 9, 1, 9, 3, 7, 2]
    batches = length_sorted_batches(lengths, 3)
    assert batches == [[1, 3, 5], [0, 4, 6], [2]]  # ties keep the caller's order
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert length_sorted_batches([4, 4], 8) == [[0, 1]]


def test_seeded_sampler_rows_do_not_depend_on_their_batch() -> None:
    logits = torch.randn(3, 50)
    together = SeededSampler(1.0, 1.0, [7, 8, 9])(None, logits).argmax(-1)
    alone = SeededSampler(1.0, 1.0, [8])(None, logits[1:2]).argmax(-1)
    assert together[1] == alone[0]


def test_seeded_sampler_samples_the_softmax() -> None:
    logits = torch.tensor([[0.0, torch.log(torch.tensor(3.0))]])  # p = 0.25, 0.75
    picks = [int(SeededSampler(1.0, 1.0, [seed])(None, logits).argmax()) for seed in range(2000)]
    assert abs(sum(picks) / len(picks) - 0.75) < 0.04


def test_seeded_sampler_top_p_keeps_the_nucleus_only() -> None:
    logits = torch.tensor([[5.0, 4.0, 0.0, -1.0]])  # the first two hold ~98% of the mass
    picks = {int(SeededSampler(1.0, 0.9, [seed])(None, logits).argmax()) for seed in range(300)}
    assert picks == {0, 1}
    assert {int(SeededSampler(1.0, 0.01, [s])(None, logits).argmax()) for s in range(50)} == {0}


def test_repetition_penalty_ignores_left_padding() -> None:
    pad = 0
    scores = torch.tensor([[2.0, 1.0, -1.0, 0.5], [2.0, 1.0, -1.0, 0.5]])
    input_ids = torch.tensor([[pad, pad, 1, 2], [1, 2, 2, 2]])  # row 0 is padded; both prompts hold ids 1 and 2
    penalised = PromptRepetitionPenalty(2.0, [2, 0])(input_ids, scores.clone())
    assert penalised.tolist() == [[2.0, 0.5, -2.0, 0.5]] * 2  # the pad id 0 is not penalised


def test_file_sha256_is_memoised_and_refreshed_when_the_file_changes(tmp_path: Path) -> None:
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert file_sha256(weights) == expected
    sidecar = tmp_path / "m.gguf.sha256"
    assert sidecar.read_text().split()[0] == expected
    stat = weights.stat()
    sidecar.write_text(f"{'0' * 64} {stat.st_size} {stat.st_mtime_ns}\n")
    assert file_sha256(weights) == "0" * 64  # read from the sidecar, not recomputed
    weights.write_bytes(b"abcd")
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert file_sha256(weights) == "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589"


def test_memo_folder_is_written_once_and_rebuilt_when_the_file_changes(tmp_path: Path) -> None:
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"abc")
    calls: list[Path] = []

    def save(folder: Path) -> None:
        calls.append(folder)
        (folder / "data").write_text(str(len(calls)))

    memo = memo_folder(weights, "float32", save)
    assert memo == tmp_path / "m.gguf.float32" and (memo / "data").read_text() == "1"
    assert memo_folder(weights, "float32", save) == memo and len(calls) == 1  # reused, not rebuilt
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert (memo_folder(weights, "float32", save) / "data").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "m.gguf.float32"]  # no scratch left

    def full_disk(folder: Path) -> None:
        raise OSError("No space left on device")

    assert memo_folder(weights, "tokenizer", full_disk) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "m.gguf.float32"]


def test_model_source_resolution(tmp_path: Path) -> None:
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"x")
    assert ModelSource.resolve(str(weights)) == ModelSource(str(tmp_path), "tiny.gguf")
    assert ModelSource.resolve("Qwen/Qwen3-0.6B") == ModelSource("Qwen/Qwen3-0.6B")
    hub = ModelSource.resolve("Qwen/Qwen3-0.6B").fingerprint("abc123")
    assert hub == {"model": "Qwen/Qwen3-0.6B", "gguf_file": None, "revision": "abc123"}
    gguf = ModelSource.resolve(str(weights)).fingerprint(None)
    assert gguf["model"] == "tiny.gguf" and len(gguf["weights_sha256"]) == 64 and str(tmp_path) not in json.dumps(gguf)
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        ModelSource.resolve(str(tmp_path / "missing.gguf"))


def test_bad_arguments_fail_early() -> None:
    with pytest.raises(ValueError, match="prompt_format"):
        TransformersBackend("Qwen/Qwen3-0.6B", prompt_format="jinja")
    with pytest.raises(ValueError, match="batch_size"):
        TransformersBackend("Qwen/Qwen3-0.6B", batch_size=0)
    with pytest.raises(ValueError, match="CPU only"):
        TransformersBackend("Qwen/Qwen3-0.6B", dtype="int8", device="cuda")


EPYC_FLAGS = "flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16 vaes\n"
AVX2_FLAGS = "flags\t\t: fpu sse2 avx2 fma\n"
XEON_AMX_FLAGS = "processor\t: 0\nflags\t\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n"


def test_native_bf16_is_read_from_the_cpu_flags() -> None:
    assert cpu_has_native_bf16(EPYC_FLAGS) and cpu_has_native_bf16(XEON_AMX_FLAGS)
    assert not cpu_has_native_bf16(AVX2_FLAGS)
    assert not cpu_has_native_bf16("model name\t: avx512_bf16 in a name, not a flag\n")


@pytest.mark.parametrize(("cpuinfo", "expected"), [(EPYC_FLAGS, "bfloat16"), (AVX2_FLAGS, "int8")])
def test_auto_dtype_on_the_cpu_follows_native_bf16(cpuinfo: str, expected: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolved dtype, not ``auto``, is what the identity (cache key, provenance) carries."""
    import clag.llm.transformers_backend as backend_module

    monkeypatch.setattr(backend_module, "cpu_has_native_bf16", lambda: cpu_has_native_bf16(cpuinfo))
    assert _effective_dtype("auto", "cpu") == expected
    assert _effective_dtype("float32", "cpu") == "float32" and _effective_dtype("int8", "cpu") == "int8"
    assert TransformersBackend("offline:smollm2-135m", dtype="auto").identity()["dtype"] == expected  # tokenizer only


# -- the real (smallest) model ---------------------------------------------------------

PROMPTS = [
    "What is the capital of France? Answer in one word.",
    "Name three primary colors.",
    "Write a haiku about the sea, then explain it in two sentences.",
]


@pytest.fixture(scope="module")
def small() -> TransformersBackend:
    backend = TransformersBackend("offline:smollm2-135m", dtype="float32", batch_size=8)
    backend.generate(["Hi"], GenerationConfig(max_new_tokens=1))  # load once for the module
    return backend


@pytest.mark.model
def test_batched_greedy_equals_one_at_a_time_in_order(small: TransformersBackend) -> None:
    config = GenerationConfig(max_new_tokens=16, repetition_penalty=1.1)  # the configs' default penalty
    batched = small.generate(PROMPTS, config)
    single = [small.generate([prompt], config)[0] for prompt in PROMPTS]
    assert [c.text for c in batched] == [c.text for c in single]
    assert len({c.text for c in batched}) == 3  # three different answers, each at its prompt's place
    assert all(0 < c.completion_tokens <= 16 for c in batched)
    assert [c.prompt_tokens for c in batched] == [c.prompt_tokens for c in single]  # padding not counted
    small.batch_size = 2  # two batches of uneven length, same answers
    try:
        assert [c.text for c in small.generate(PROMPTS, config)] == [c.text for c in batched]
    finally:
        small.batch_size = 8


@pytest.mark.model
def test_seeded_sampling_repeats_and_ignores_the_batch(small: TransformersBackend) -> None:
    config = GenerationConfig(max_new_tokens=12, temperature=0.9, seed=4)
    together = small.generate(PROMPTS, config)
    alone = small.generate(PROMPTS[2:], config)
    assert together[2].text == alone[0].text
    other_seed = small.generate(PROMPTS, GenerationConfig(max_new_tokens=12, temperature=0.9, seed=5))
    assert [c.text for c in other_seed] != [c.text for c in together]


@pytest.mark.model
def test_identity_is_stable_and_complete(small: TransformersBackend) -> None:
    identity = small.identity()
    again = TransformersBackend("offline:smollm2-135m", dtype="float32").identity()
    assert identity == again
    assert identity["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert len(identity["weights_sha256"]) == 64 and len(identity["chat_template_sha256"]) == 64
    assert (identity["dtype"], identity["prompt_format"], identity["enable_thinking"]) == ("float32", "chat", False)
    raw = TransformersBackend("offline:smollm2-135m", dtype="float32", prompt_format="raw").identity()
    assert raw["chat_template_sha256"] is None and raw != identity


@pytest.mark.model
def test_schema_constrained_output_is_valid_json(small: TransformersBackend) -> None:
    pytest.importorskip("xgrammar")
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
    }
    [completion] = small.generate(
        ["Is Paris in France? Reply in JSON."], GenerationConfig(max_new_tokens=24, json_schema=schema)
    )
    assert json.loads(completion.text)["answer"] in ("yes", "no")
    assert small.identity()["constrained"].startswith("xgrammar==")


@pytest.mark.model
def test_int8_quantized_model_answers_like_float32(small: TransformersBackend) -> None:
    """dtype=int8: every linear layer quantized, its own cache identity, same greedy answer to a plain question."""
    import torch

    quantized = TransformersBackend("offline:smollm2-135m", dtype="int8")
    config = GenerationConfig(max_new_tokens=10)
    answer = quantized.generate(PROMPTS[:1], config)[0].text
    assert "paris" in answer.lower() and "paris" in small.generate(PROMPTS[:1], config)[0].text.lower()
    model = quantized._loaded(with_model=True).model
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert quantized.identity()["dtype"] == "int8" and quantized.identity() != small.identity()


@pytest.mark.model
@pytest.mark.slow  # make test-all: exact but long; make test's vLLM server loads it
def test_dequantized_checkpoint_holds_exactly_the_gguf_weights(tmp_path: Path) -> None:
    """The saved float32 checkpoint that replaces the slow GGUF parse on every later load."""
    import shutil

    from transformers import AutoModelForCausalLM

    from clag.assets import resolve_gguf

    gguf = Path(shutil.copy(resolve_gguf("smollm2-135m"), tmp_path))
    folder = dequantized_checkpoint(gguf)
    assert folder == tmp_path / f"{gguf.name}.float32"
    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    direct = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf.name, dtype=torch.float32).state_dict()
    assert saved.keys() == direct.keys()
    assert all(torch.equal(saved[name], direct[name]) for name in direct)
    written = (folder / "model.safetensors").stat().st_mtime_ns
    assert dequantized_checkpoint(gguf) == folder and (folder / "model.safetensors").stat().st_mtime_ns == written
