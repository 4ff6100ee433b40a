"""The judge's calibration set: candidates of known verdict, acceptance per kind, the rule, the report.

Questions are real LoCoMo golds (conv-26); the judge is scripted, so the
tests check the set and the bookkeeping, not a model.
"""

from __future__ import annotations

import json

import pytest
from scripted_llm import ScriptedBackend

from clag.judge import calibrate, main
from clag.llm.client import LLMClient
from clag.metrics import judge_calibration as cal
from clag.metrics.judge import JudgeSettings
from clag.records.files import rewrite_jsonl

QUESTIONS = [
    # question_id, category, question, gold, adversarial answer
    ("conv-26:q0", 2, "When did Caroline go to the LGBTQ support group?", "7 May 2023", None),
    ("conv-26:q1", 2, "When did Melanie paint a sunrise?", "2022", None),
    ("conv-26:q2", 2, "When did Melanie run a charity race?", "The sunday before 25 May 2023", None),
    ("conv-26:q3", 1, "What fields would Caroline pursue in her educaton?", "Psychology, counseling", None),
    ("conv-26:q4", 1, "What did Caroline research?", "Adoption agencies", None),
    ("conv-26:q5", 5, "What did Caroline realize after her charity race?", "", "self-care is important"),
]


def rows() -> list[dict]:
    return [
        {"question_id": qid, "episode_id": "conv-26", "category": c, "question": q, "answer": gold,
         "adversarial_answer": adv, "prediction": "x"}
        for qid, c, q, gold, adv in QUESTIONS
    ]  # fmt: skip


def test_the_set_holds_each_kind_where_it_applies():
    items = cal.calibration_rows(rows())
    kinds = {(r["source_question_id"], r["kind"]) for r in items}
    for qid in ("conv-26:q0", "conv-26:q1", "conv-26:q2", "conv-26:q3", "conv-26:q4"):
        assert (qid, "gold") in kinds and (qid, "gold_long") in kinds
    # vague only where the gold names a day or a month: not for the year "2022"
    assert ("conv-26:q0", "vague") in kinds and ("conv-26:q1", "vague") not in kinds
    vague = next(r for r in items if r["kind"] == "vague" and r["source_question_id"] == "conv-26:q0")
    assert vague["prediction"] == "Sometime in 2023" and not vague["expected"]
    # near_date: the next day or month in LoCoMo's wording, for a gold naming one day or month
    near = {r["source_question_id"]: r["prediction"] for r in items if r["kind"] == "near_date"}
    assert near == {"conv-26:q0": "8 May 2023", "conv-26:q2": "22 May 2023"}  # the Sunday was 21 May
    # gold_iso: the same one-day or one-month gold in ISO 8601, a right answer in another format
    iso = {r["source_question_id"]: r["prediction"] for r in items if r["kind"] == "gold_iso"}
    assert iso == {"conv-26:q0": "2023-05-07", "conv-26:q2": "2023-05-21"}
    assert all(r["expected"] for r in items if r["kind"] == "gold_iso")
    # other_gold: same conversation and category, no shared content word, no day inside a dated gold
    other = next(r for r in items if r["kind"] == "other_gold" and r["source_question_id"] == "conv-26:q3")
    assert other["prediction"] == "Adoption agencies"
    assert all(r["prediction"] != r["answer"] for r in items if r["kind"] == "other_gold")
    adversarial = [r for r in items if r["kind"] == "adversarial"]
    assert len(adversarial) == 1 and adversarial[0]["answer"] == cal.NOT_MENTIONED
    assert adversarial[0]["prediction"] == "self-care is important" and not adversarial[0]["expected"]
    assert all(r["expected"] == (r["kind"] in cal.RIGHT_KINDS) for r in items)
    assert all(r["answer"] in r["prediction"] for r in items if r["kind"] == "gold_long")
    assert cal.calibration_rows(rows()) == items  # deterministic


def test_distinct_refuses_shared_words_and_days_inside_the_gold():
    assert not cal._distinct("7 May 2023", "May 2023")
    assert not cal._distinct("support group", "the LGBTQ support group")
    assert cal._distinct("Adoption agencies", "Psychology, counseling")


@pytest.mark.parametrize(
    ("rates", "kappa", "passes"),
    [
        ({"gold": 0.95, "gold_long": 0.9, "other_gold": 0.05, "vague": 0.1, "adversarial": 0.2}, 0.8, True),
        ({"gold": 0.95, "gold_long": 0.7, "other_gold": 0.05}, 0.8, False),  # rejects long right answers
        ({"gold": 0.95, "gold_long": 0.9, "other_gold": 0.5}, 0.8, False),  # accepts wrong facts
        ({"gold": 0.95, "gold_long": 0.9, "other_gold": 0.05}, 0.4, False),  # disagrees with itself
        ({"gold": 0.95, "gold_long": 0.9, "other_gold": 0.05}, None, False),
    ],
)
def test_the_rule(rates, kappa, passes):
    kinds = {kind: {"mean": rate, "expected": kind in cal.RIGHT_KINDS} for kind, rate in rates.items()}
    verdict, failed = cal.separates(kinds, kappa)
    assert verdict is passes and bool(failed) is not passes


def lenient_believer(prompt: str, config) -> str:
    """Accepts every answer but the vague one; its sampled run also rejects the adversarial one."""
    if "Sometime in" in prompt:
        return '{"reason": "too vague", "verdict": "WRONG"}'
    if config.temperature > 0 and cal.NOT_MENTIONED in prompt:
        return '{"reason": "not said", "verdict": "WRONG"}'
    return '{"reason": "fine", "verdict": "CORRECT"}'


def test_calibrate_writes_the_report_and_applies_the_rule(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rewrite_jsonl(run / "predictions.jsonl", rows())
    backend = ScriptedBackend(lenient_believer)
    settings = JudgeSettings(model="qwen2.5-1.5b", prompts=("lenient",))
    report = calibrate(run, tmp_path / "out", settings, LLMClient(backend, constrained_json=False))
    lenient = report["prompts"]["lenient"]
    assert lenient["kinds"]["gold"]["mean"] == 1.0 and lenient["kinds"]["vague"]["mean"] == 0.0
    assert lenient["kinds"]["other_gold"]["mean"] == 1.0  # every wrong fact accepted: the rule refuses it
    assert not lenient["passes"] and any("other_gold" in reason for reason in lenient["failed"])
    assert lenient["self_agreement"]["n"] == report["items"] == report["second_run"]["items"]  # all, under 200
    assert cal.passing_prompts(report) == frozenset()
    assert report["judge"]["small"] and "1.5B" in report["judge"]["label"]
    # the sampled run is a second call per item, at its own temperature and seed
    sampled = [config for _, config in backend.calls if config.temperature > 0]
    assert len(sampled) == report["items"] and {c.seed for c in sampled} == {1}
    items = [json.loads(line) for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    assert len(items) == report["items"] and all("sampled" in row for row in items)
    assert json.loads((tmp_path / "out" / "calibration.json").read_text())["prompts"]["lenient"]["passes"] is False
    # the date-vetoed variant is ruled on like a prompt: the veto rejects the near dates the lenient believer
    # accepts and the other golds that are dates, keeps the ISO form of the right day, and leaves the accepted
    # wrong facts without a date alone (so it fails too)
    dated = report["prompts"]["lenient_dated"]
    assert dated["kinds"]["near_date"]["mean"] == 0.0 and dated["kinds"]["gold_iso"]["mean"] == 1.0
    assert 0.0 < dated["kinds"]["other_gold"]["mean"] < 1.0 and not dated["passes"]
    text = (tmp_path / "out" / "calibration.md").read_text()
    assert "| lenient | other_gold | rejected |" in text and "fails" in text


def test_sampled_overrides_reach_the_sampled_pass_alone(tmp_path, monkeypatch):
    """The reference's served judge keeps one seed for all requests (its greedy calls' cache keys); its
    sampled pass is built with a seed per prompt, so that its draws are independent across items."""
    run = tmp_path / "run"
    run.mkdir()
    rewrite_jsonl(run / "predictions.jsonl", rows())
    backends: dict[tuple[str, ...], ScriptedBackend] = {}

    def client(settings: JudgeSettings) -> LLMClient:
        backends[settings.overrides] = ScriptedBackend(lenient_believer)
        return LLMClient(backends[settings.overrides], constrained_json=False)

    monkeypatch.setattr("clag.judge.named_judge_client", client)
    argv = [str(run), "--model", "qwen2.5-1.5b", "--prompts", "lenient", "--calibrate", str(tmp_path / "out"),
            "--override", "engine=vllm", "--sampled-override", "model.backend.seed_per_prompt=true"]  # fmt: skip
    assert main(argv) == 0
    greedy, sampled = backends[("engine=vllm",)], backends[("engine=vllm", "model.backend.seed_per_prompt=true")]
    assert {config.temperature for _, config in greedy.calls} == {0.0}
    assert {config.temperature for _, config in sampled.calls} == {0.7} and sampled.calls
    report = json.loads((tmp_path / "out" / "calibration.json").read_text())
    assert report["second_run"]["overrides"] == ["model.backend.seed_per_prompt=true"]
    assert "drawn with `model.backend.seed_per_prompt=true`." in (tmp_path / "out" / "calibration.md").read_text()
    with pytest.raises(ValueError, match="give no llm"):
        calibrate(run, tmp_path / "again", JudgeSettings(model="m"), client(JudgeSettings()), ["x=1"])


def test_calibrate_without_a_judge_model_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path), "--calibrate", str(tmp_path / "out")]) == 2
    assert "needs --model" in capsys.readouterr().err


def test_j_is_let_through_only_for_the_prompts_the_calibration_passes(tmp_path):
    runs = tmp_path / "reference" / "runs" / "reference"
    runs.mkdir(parents=True)
    metrics = ["f1", "bleu1", "j_lenient", "j_strict"]
    assert cal.find_report(runs) is None and cal.allowed_metrics(metrics, None) == ["f1", "bleu1"]
    assert "no judge calibration" in cal.judge_note(cal.find_report(runs))
    report = {"judge": {"label": "qwen2.5-1.5b judge (1.5B, small)"},
              "prompts": {"lenient": {"passes": False}, "strict": {"passes": True}}}  # fmt: skip
    (tmp_path / "reference" / "judge_calibration").mkdir()
    (tmp_path / "reference" / "judge_calibration" / "calibration.json").write_text(json.dumps(report))
    path, found = cal.find_report(runs)
    assert path.parent.parent == tmp_path / "reference" and found == report  # the nearest folder above the runs
    assert cal.allowed_metrics(metrics, found) == ["f1", "bleu1", "j_strict"]
    assert "lets through j_strict." in cal.judge_note(cal.find_report(runs))
    assert "no run here is judged yet" in cal.judge_note(cal.find_report(runs), judged=False)


def test_the_sampled_subset_keeps_its_items_when_kinds_are_added():
    items = [{"question_id": f"q{i}"} for i in range(50)]
    first = [items[i]["question_id"] for i in cal.sampled_subset(items, 10)]
    more = items + [{"question_id": f"new{i}"} for i in range(5)]
    second = [more[i]["question_id"] for i in cal.sampled_subset(more, 10)]
    assert len(first) == len(second) == 10 and len(set(first) & set(second)) >= 5
    assert cal.sampled_subset(items, 100) == list(range(50))
