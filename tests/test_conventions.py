"""The calling-convention switches of issue 29 and their report: hashes, prompts, date forms."""

from __future__ import annotations

from omegaconf import OmegaConf

from clag.answer import answer_prompt
from clag.config import compose_config
from clag.running.spec import ADDED_LATER, hash_config
from clag.tables.conventions import date_forms
from clag.types import Question


def _hash(overrides: list[str]) -> str:
    return hash_config(OmegaConf.to_container(compose_config(overrides), resolve=True))


def test_a_setting_added_later_renames_no_folder_at_its_old_value_and_does_at_a_new_one() -> None:
    assert ADDED_LATER == {
        "answer.json_instruction": True,
        "model.reject_truncated_json": False,
        "metrics.judge.overrides": [],
        "model.backend.disable_any_whitespace": False,
        "model.json_retry": True,
        "model.accept_placeholders": False,
        "model.free_retry_stages": [],
        "model.backend.seed_per_prompt": False,
    }
    for engine in ("transformers", "vllm"):
        # a defect's fix changed a default (one seed on every served request): the committed runs' value
        committed = [f"engine={engine}", *(["model.backend.seed_per_prompt=false"] if engine == "vllm" else [])]
        base = compose_config(committed)
        plain = _hash(committed)
        container = OmegaConf.to_container(base, resolve=True)
        for dotted, earlier in ADDED_LATER.items():
            *parents, leaf = dotted.split(".")
            node = container
            for key in parents:
                node = node[key]
            if leaf not in node:
                continue  # a backend key of the served engine only
            assert node[leaf] == earlier, dotted  # today's default is the committed runs' value
            del node[leaf]
        assert hash_config(container) == plain  # the committed runs' configs lack these keys: same hash
    assert _hash(["answer.json_instruction=false"]) != _hash([])
    assert _hash(["model.reject_truncated_json=true"]) != _hash([])
    assert _hash(["engine=vllm", "model.backend.disable_any_whitespace=true"]) != _hash(["engine=vllm"])
    assert _hash(["engine=vllm"]) != _hash(["engine=vllm", "model.backend.seed_per_prompt=false"])


def test_the_reference_keeps_one_seed_for_its_recorded_calls_and_the_authors_code_run_does_not() -> None:
    assert compose_config(["experiment=reference_corrected"]).model.backend.seed_per_prompt is False
    assert compose_config(["experiment=reference_growth"]).model.backend.seed_per_prompt is False
    assert compose_config(["experiment=reference_authors_code"]).model.backend.seed_per_prompt is True


def test_a_methods_own_prompt_format_is_used_and_hashed_only_where_it_overrides_the_models() -> None:
    for engine in ("transformers", "vllm"):
        chat = compose_config([f"engine={engine}", "method=memoryos"])
        assert chat.method.prompt_format == "chat" and chat.model.backend.prompt_format == "chat"
        container = OmegaConf.to_container(chat, resolve=True)
        del container["method"]["prompt_format"]  # as MemoryOS runs were configured before the key existed
        assert hash_config(container) == _hash([f"engine={engine}", "method=memoryos"])
        raw = [f"engine={engine}", "method=memoryos", "model.prompt_format=raw"]
        assert compose_config(raw).model.backend.prompt_format == "chat"  # the method's own wins ...
        assert _hash(raw) != _hash([*raw, "method.prompt_format=raw"])  # ... and names another run
        rag = compose_config([f"engine={engine}", "method=rag", "model.prompt_format=raw"])
        assert rag.model.backend.prompt_format == "raw"  # a method without its own takes the model's


def test_each_convention_is_one_change_and_the_authors_model_takes_their_answer_prompt() -> None:
    reference = compose_config(["+convention=reference"])
    for name, key, value in [
        ("raw_prompt", "model.prompt_format", "raw"),
        ("schema_only", "answer.json_instruction", False),
        ("free_decoding", "model.constrained_json", False),
    ]:
        cfg = compose_config([f"+convention={name}"])
        assert OmegaConf.select(cfg, key) == value != OmegaConf.select(reference, key), name
    authors = compose_config(["model=authors_sglang"])
    assert authors.answer.json_instruction is False and authors.model.prompt_format == "raw"


def test_the_answer_prompt_ends_at_short_answer_without_the_json_sentence() -> None:
    for category in (1, 2, 4, 5):
        question = Question("q", "When did Caroline go?", "7 May 2023", category, adversarial_answer="Paris")
        ours, theirs = answer_prompt(question, "ctx"), answer_prompt(question, "ctx", json_instruction=False)
        assert ours.startswith(theirs) and theirs.endswith("Short answer:")
        assert ours[len(theirs):] == '\nReply with a JSON object {"answer": "..."}.'


def test_date_forms_tell_iso_dates_from_other_dates_and_none() -> None:
    answers = ["2023-05-14", "On 2023-5-7, before 9 June 2023", "14 May 2023", "the week before 9 June 2023",
               "last week", "Not mentioned"]  # fmt: skip
    assert date_forms(answers) == (2, 2, 2)
