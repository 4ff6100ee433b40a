"""The LLM judge: verdict parsing, unclear-verdict accounting, kappa, a run folder judged in place, the real model.

Control flow runs on the scripted LLM; one test judges real LoCoMo rows with
the offline 0.5B model (marked ``model``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from scripted_llm import ScriptedBackend
from sklearn.metrics import cohen_kappa_score

from clag.judge import judge_run, main
from clag.llm.client import LLMClient
from clag.metrics import cohen_kappa
from clag.metrics.judge import (
    CORRECT,
    UNCLEAR,
    WRONG,
    JudgeSettings,
    date_vetoed,
    format_judge,
    judge_prompt,
    judge_rows,
    model_label,
    parse_verdict,
)
from clag.records.schema import JudgeCount, JudgeSection, missing_keys

ROWS = [
    # question, gold answer, prediction, category
    ("When did Caroline go to the support group?", "7 May 2023", "On 7 May 2023", 2),
    ("What did Melanie paint?", "a sunrise", "She painted a lake at sunrise", 4),
    ("Where did Caroline move from?", "Sweden", "Norway", 1),
    ("What is Caroline's identity?", "transgender woman", "maybe a woman, or a man", 4),
    ("Would Caroline pursue writing?", "Likely no", "I cannot tell", 3),
    ("What did Caroline adopt?", "", "a dog", 5),  # LoCoMo adversarial: skipped
]


def rows() -> list[dict]:
    return [
        {
            "question_id": f"q{i}",
            "question": q,
            "answer": gold,
            "reference": gold or "trap",
            "prediction": p,
            "category": c,
            "f1": 0.5,
        }
        for i, (q, gold, p, c) in enumerate(ROWS)
    ]


def scripted_judge(prompt: str, _config) -> str:
    """Lenient: right on q0, q1; wrong on q2; both labels on q3 (unclear); prose on q4 (clear). Strict: q0 only."""
    strict = "Grade strictly" in prompt
    if "support group" in prompt:
        return '{"reason": "same date", "verdict": "CORRECT"}'
    if "paint" in prompt:
        return (
            '{"reason": "key fact differs", "verdict": "WRONG"}'
            if strict
            else '{"reason": "topic", "verdict": "CORRECT"}'
        )
    if "move from" in prompt:
        return '{"reason": "another country", "verdict": "WRONG"}'
    if "identity" in prompt:
        return "It could be CORRECT or WRONG, hard to say." if not strict else '{"verdict": "WRONG"}'
    if "writing" in prompt:
        return "The answer is incorrect." if strict else "Not sure."
    raise AssertionError(f"unexpected judge prompt: {prompt[:80]}")


def client(respond=scripted_judge) -> tuple[LLMClient, ScriptedBackend]:
    backend = ScriptedBackend(respond)
    return LLMClient(backend, constrained_json=False), backend


@pytest.mark.parametrize(
    ("value", "text", "expected"),
    [
        ({"verdict": "CORRECT"}, "", CORRECT),
        ({"verdict": "wrong", "reason": "x"}, "", WRONG),  # any case
        (None, '{"reason": "dates match", "verdict": "CORRECT"', CORRECT),  # broken JSON: the text decides
        (None, "The answer is incorrect.", WRONG),  # "incorrect" is WRONG, not CORRECT
        (None, "CORRECT", CORRECT),
        (None, "Partly correct, partly wrong.", UNCLEAR),  # both labels
        (None, "I am not sure.", UNCLEAR),  # neither
        ({"verdict": "PARTIAL"}, "PARTIAL", UNCLEAR),
        ({"verdict": "maybe"}, '{"reason": "It is correct", "verdict": "maybe"}', CORRECT),
    ],
)
def test_parse_verdict(value, text, expected):
    assert parse_verdict(value, text) == expected


def test_prompts_carry_the_inputs_and_differ_in_their_rule():
    lenient = judge_prompt("lenient", "Q?", "gold", "pred")
    strict = judge_prompt("strict", "Q?", "gold", "pred")
    for prompt in (lenient, strict):
        assert "Question: Q?" in prompt and "Gold answer: gold" in prompt and "Assistant's answer: pred" in prompt
        assert prompt.rstrip().endswith("Never give both labels.")
    assert "generously" in lenient and "strictly" in strict


def test_unclear_verdicts_are_counted_and_left_out_never_scored_wrong():
    llm, backend = client()
    judged, summary = judge_rows(rows(), llm, JudgeSettings(), "locomo", "qwen2.5-0.5b")
    assert [r["j_lenient"] for r in judged] == [1.0, 1.0, 0.0, None, None, None]
    assert [r["j_strict"] for r in judged] == [1.0, 0.0, 0.0, 0.0, 0.0, None]
    assert summary["counts"]["lenient"] == {"judged": 5, "correct": 2, "wrong": 1, "unclear": 2, "date_vetoed": 0}
    assert summary["counts"]["strict"] == {"judged": 5, "correct": 1, "wrong": 4, "unclear": 0, "date_vetoed": 0}
    # no answer names a date outside its gold's: the date-vetoed variants equal the prompts
    assert all(r[f"j_{name}_dated"] == r[f"j_{name}"] for r in judged for name in ("lenient", "strict"))
    assert judged[0]["judge"]["date"] == "matched" and "date" not in judged[1]["judge"]
    assert summary["skipped"] == {"category": 1, "no_gold": 0, "categories": [5]}
    assert (
        judged[3]["judge"]["lenient"]["verdict"] == UNCLEAR
        and "CORRECT or WRONG" in judged[3]["judge"]["lenient"]["raw"]
    )
    assert "skipped" in judged[5]["judge"]
    first = [config for _, config in backend.calls if config.temperature == 0.0]
    assert len(first) == 10  # 5 rows x 2 prompts; the adversarial row was never sent
    assert len(backend.calls) == 13  # the 3 replies without JSON were retried once (the client's rule)
    # Kappa over the 3 rows both prompts judged clearly: lenient (1, 1, 0) vs strict (1, 0, 0).
    assert summary["kappa"]["n"] == 3
    assert summary["kappa"]["kappa"] == pytest.approx(cohen_kappa_score([1, 1, 0], [1, 0, 0]))
    assert summary["small"] and "0.5B" in summary["label"]
    assert judged[0]["f1"] == 0.5  # every input key kept
    # The section is what the schema says it is: every key typed, none beyond them.
    assert missing_keys(dict(summary), JudgeSection) == []
    assert set(summary) <= set(JudgeSection.__annotations__)
    assert missing_keys(summary["counts"]["lenient"], JudgeCount) == []


@pytest.mark.parametrize(
    ("verdict", "status", "expected"),
    [
        (1.0, "other_date", 0.0),  # CORRECT, but the answer names another date: overruled
        (1.0, "matched", 1.0),
        (1.0, "no_date_in_prediction", 1.0),  # no date named: the judge decides
        (1.0, "gold_not_a_date", 1.0),
        (0.0, "matched", 0.0),  # the veto never turns WRONG into CORRECT
        (None, "other_date", None),  # an unclear verdict stays unclear
    ],
)
def test_the_date_veto_only_takes_a_correct_away(verdict, status, expected):
    assert date_vetoed(verdict, status) == expected


def test_a_judge_that_accepts_any_date_is_overruled_on_real_locomo_golds():
    """LoCoMo's own golds (conv-26): a next-day answer, a vague year, an ISO form of the right day, a
    relative gold answered with its day; the judge accepts all four, the veto keeps the right two."""
    data = [
        {"question_id": "a", "question": "When did Caroline go to the LGBTQ support group?", "answer": "7 May 2023",
         "prediction": "8 May 2023", "category": 2},
        {"question_id": "b", "question": "When did Caroline go to the LGBTQ support group?", "answer": "7 May 2023",
         "prediction": "Sometime in 2023", "category": 2},
        {"question_id": "c", "question": "When did Caroline go to the LGBTQ support group?", "answer": "7 May 2023",
         "prediction": "2023-05-07", "category": 2},
        {"question_id": "d", "question": "When did Melanie run a charity race?",
         "answer": "The sunday before 25 May 2023", "prediction": "On 21 May 2023", "category": 2},
    ]  # fmt: skip
    llm, _ = client(lambda prompt, _config: '{"reason": "same time", "verdict": "CORRECT"}')
    judged, summary = judge_rows(data, llm, JudgeSettings(prompts=("strict",)), "locomo", "qwen2.5-1.5b")
    assert [r["j_strict"] for r in judged] == [1.0, 1.0, 1.0, 1.0]
    assert [r["j_strict_dated"] for r in judged] == [0.0, 0.0, 1.0, 1.0]
    assert summary["counts"]["strict"]["date_vetoed"] == 2
    assert [r["judge"]["date"] for r in judged] == ["other_date", "other_date", "matched", "matched"]
    assert "2 CORRECT overruled by the date veto" in format_judge({"judge": summary})


def test_rows_without_a_gold_answer_are_skipped_and_counted():
    llm, _ = client()
    data = rows()[:2]
    data[1]["answer"] = ""
    judged, summary = judge_rows(data, llm, JudgeSettings(prompts=("lenient",)), "hotpotqa", "qwen2.5-0.5b")
    assert summary["skipped"]["no_gold"] == 1 and judged[1]["j_lenient"] is None
    assert "kappa" not in summary  # one prompt: nothing to agree with


def test_kappa_against_a_hand_computed_value():
    a = [1, 1, 0, 0, 1, 0, 1, 1]
    b = [1, 0, 0, 0, 1, 1, 1, 1]
    # p_o = 6/8; each rater says 1 five times of 8: p_e = (5*5 + 3*3) / 64 = 34/64; kappa = (48-34)/(64-34) = 7/15
    result = cohen_kappa(a, b)
    assert result["agreement"] == pytest.approx(0.75)
    assert result["kappa"] == pytest.approx(7 / 15, abs=1e-12)
    assert result["kappa"] == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert cohen_kappa([1, 1], [1, 1]) == {"kappa": None, "agreement": 1.0, "n": 2}  # chance agreement 1: undefined
    assert cohen_kappa([], [])["kappa"] is None
    with pytest.raises(ValueError):
        cohen_kappa([1], [1, 0])


def test_model_labels_mark_small_judges():
    assert model_label("qwen2.5-0.5b")["params_b"] == 0.5 and model_label("qwen2.5-0.5b")["small"]
    assert model_label("smollm2-135m")["params_b"] == pytest.approx(0.135)
    assert not model_label("qwen3-8b")["small"] and model_label("qwen3-8b")["params_b"] == 8
    assert model_label("openai")["params_b"] is None and "size unknown" in model_label("openai")["label"]


def test_settings_from_the_config_block():
    settings = JudgeSettings.from_config(
        {
            "enabled": True,
            "model": None,
            "prompts": ["strict"],
            "max_new_tokens": 64,
            "skip_categories": {"locomo": [5]},
        }
    )
    assert settings == JudgeSettings(enabled=True, prompts=("strict",), max_new_tokens=64)
    with pytest.raises(ValueError, match="judge prompts"):
        JudgeSettings(prompts=("harsh",))


def write_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump({"dataset": {"name": "locomo"}, "model": {"name": "qwen2.5-0.5b"}})
    )
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows()))
    metrics = {
        "n": 6,
        "overall": {"f1": {"mean": 0.5}},
        "settings": {"bootstrap_samples": 200, "seed": 0},
        "run": {"config_hash": "abc"},
    }
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


def test_a_run_folder_is_judged_in_place(tmp_path):
    folder = write_run(tmp_path / "run")
    llm, _ = client()
    metrics = judge_run(folder, JudgeSettings(), llm=llm)
    saved = json.loads((folder / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    assert saved["run"] == {"config_hash": "abc"}  # still the same finished run
    one_to_four = saved["overall_sets"]["1-4"]
    assert one_to_four["j_lenient"]["mean"] == pytest.approx(2 / 3) and one_to_four["j_lenient"]["n"] == 3
    assert one_to_four["j_strict"]["mean"] == pytest.approx(1 / 5) and one_to_four["j_strict"]["n"] == 5
    assert "j_lenient" in saved["by_category"]["2"]
    assert "j_strict" not in saved["overall"]  # category 5 was skipped: no J stands for all six questions
    assert saved["overall_sets"]["1-5"]["f1"]["n"] == 6 and saved["overall_sets"]["1-4"]["f1"]["n"] == 5
    judged = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    assert [r["j_lenient"] for r in judged] == [1.0, 1.0, 0.0, None, None, None]
    report = format_judge(saved)
    assert "0.5B" in report and "2 unclear (left out)" in report and "kappa" in report
    assert "(n=3)" in report  # fewer than 10 questions: no interval


def test_cli_names_a_folder_that_is_no_run(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a finished run folder" in err[0]


@pytest.mark.model
@pytest.mark.slow  # make test-all; make test judges with the real model at a run's end in test_compare.py
def test_real_judge_on_locomo_rows(tmp_path, data_dir):
    """Four real LoCoMo questions, gold copied vs an unrelated answer, judged by the 0.5B model with both prompts."""
    from omegaconf import OmegaConf

    from clag.config import compose_config
    from clag.data import load_episodes
    from clag.running.build import judge_client

    [episode] = load_episodes("locomo", data_dir, episode_ids=["conv-26"], items=40)
    picked = [q for q in episode.questions if q.category in (2, 4)][:2]
    data = []
    for q in picked:
        for kind, prediction in (("copy", q.answer), ("unrelated", "a blue bicycle")):
            data.append(
                {
                    "question_id": f"{q.id}:{kind}",
                    "question": q.text,
                    "answer": q.answer,
                    "prediction": prediction,
                    "category": q.category,
                }
            )
    cfg = compose_config(["model=qwen2.5-0.5b", f"cache.path={tmp_path}/cache.sqlite"])
    llm, name = judge_client(JudgeSettings(), OmegaConf.to_container(cfg, resolve=True))
    judged, summary = judge_rows(data, llm, JudgeSettings(), "locomo", name)
    for name_ in ("lenient", "strict"):
        count = summary["counts"][name_]
        assert count["correct"] + count["wrong"] + count["unclear"] == count["judged"] == 4
    for row in judged:
        for prompt in ("lenient", "strict"):
            record = row["judge"][prompt]
            assert record["verdict"] in (CORRECT, WRONG, UNCLEAR)
            assert row[f"j_{prompt}"] == {CORRECT: 1.0, WRONG: 0.0, UNCLEAR: None}[record["verdict"]]
    # No assertion that the verdicts are right: on these rows (and on 8 such on 2026-12-01) the 0.5B judge was
    # near chance (it called "a blue bicycle" correct for a date), which is why its numbers carry this label.
    assert summary["label"].startswith("qwen2.5-0.5b judge (0.5B, small")
    assert summary["model_identity"]["backend"] and summary["kappa"]["n"] <= 4
    again, _ = judge_rows(data, llm, JudgeSettings(), "locomo", name)
    assert again == judged  # cached and greedy: the same verdicts
    assert llm.usage.snapshot()["judge_lenient"]["cache_hits"] == 4


def test_the_runners_hook_judges_only_when_enabled():
    from clag.config import compose_config
    from clag.running.results import judge_at_end

    backend = ScriptedBackend(scripted_judge)
    off = compose_config(["dataset=locomo", "cache.enabled=false"])
    on = compose_config(["dataset=locomo", "cache.enabled=false", "metrics.judge.enabled=true"])
    same, summary = judge_at_end(off, rows(), backend)
    assert summary is None and same == rows() and not backend.calls
    judged, summary = judge_at_end(on, rows(), backend)  # the run's own model: its backend is reused
    assert [r["j_lenient"] for r in judged] == [1.0, 1.0, 0.0, None, None, None]
    assert summary["model"] == "qwen2.5-0.5b" and summary["model_identity"] == {"backend": "scripted"}
