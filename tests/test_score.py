"""The re-scoring command: per-row keys, the aggregate file, and errors naming the line."""

from __future__ import annotations

import json

import pytest

from clag.metrics.answer import token_f1
from clag.score import main

ROWS = [
    {
        "prediction": "Paris",
        "reference": "Paris, France",
        "category": 4,
        "retrieved_ids": ["D1:2", "D1:3"],
        "evidence_ids": ["D1:3"],
        "retrieval_ms": 12.0,
        "e2e_ms": 300.0,
        "context_chars": 900,
    },
    {
        "prediction": "Not mentioned in the conversation",
        "reference": "a red car",
        "category": 5,
        "adversarial_answer": "a red car",
        "evidence_ids": [],
    },
    {"prediction": "2022", "reference": 2022, "category": 2},
]
PER_ROW_KEYS = ("f1", "bleu1", "meteor", "bert_f1", "rougeL", "exact_match")


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_cli_writes_scored_rows_and_aggregate(tmp_path, capsys):
    source = _write(tmp_path / "preds.jsonl", [json.dumps(row) for row in ROWS] + [""])
    out = tmp_path / "scored.jsonl"
    assert main([str(source), "--out", str(out), "--bootstrap-samples", "100"]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == len(ROWS)
    for row, original in zip(scored, ROWS):
        assert all(0.0 <= row[key] <= 1.0 for key in PER_ROW_KEYS)
        assert row["f1"] == pytest.approx(token_f1(original["prediction"], str(original["reference"])))
    assert scored[0]["e_recall"] == 1.0 and scored[1]["adversarial_official"] == 1.0
    metrics = json.loads((tmp_path / "scored.metrics.json").read_text())
    assert set(metrics["overall"]) >= set(PER_ROW_KEYS) | {"f1_official", "rouge1", "rouge2", "sbert"}
    assert metrics["overall"]["f1"]["n"] == 3 and set(metrics["by_category"]) == {"2", "4", "5"}
    assert metrics["settings"]["bert_model"] == "offline:minilm"
    assert "overall" in capsys.readouterr().out


def test_cli_official_mode_and_default_paths(tmp_path):
    source = _write(tmp_path / "preds.jsonl", [json.dumps(row) for row in ROWS])
    assert main([str(source), "--adversarial-mode", "official", "--bootstrap-samples", "50"]) == 0
    scored = [json.loads(line) for line in (tmp_path / "preds.scored.jsonl").read_text().splitlines()]
    assert scored[1]["f1"] == 1.0  # category 5 abstention counts as correct
    metrics = json.loads((tmp_path / "preds.scored.metrics.json").read_text())
    assert metrics["settings"]["adversarial_mode"] == "official"


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"prediction": "a", "reference": ', "malformed JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"prediction": "a"}', "missing key(s) reference"),
    ],
)
def test_cli_names_the_malformed_line(tmp_path, capsys, bad_line, message):
    source = _write(tmp_path / "bad.jsonl", [json.dumps(ROWS[0]), "", bad_line])
    assert main([str(source)]) == 2
    error = capsys.readouterr().err
    assert f"bad.jsonl:3: {message}" in error
    assert not (tmp_path / "bad.scored.jsonl").exists()


def test_refresh_brings_an_old_run_up_to_date_in_place(tmp_path, capsys):
    """A run scored before the date-aware score gains it; its other scores stay; a second pass changes nothing."""
    run = tmp_path / "runs" / "reference" / "locomo" / "rag" / "qwen2.5-0.5b" / "seed0-abcd1234"
    run.mkdir(parents=True)
    rows = [
        {"question_id": "q0", "prediction": "2023-07-02", "reference": "2 July 2023", "category": 2, "f1": 0.0},
        {"question_id": "q1", "prediction": "8 May 2023", "reference": "7 May 2023", "category": 2, "f1": 0.67},
        {"question_id": "q2", "prediction": "Paris", "reference": "Paris", "category": 4, "f1": 1.0},
    ]
    _write(run / "predictions.jsonl", [json.dumps(row) for row in rows])
    settings = {"bootstrap_samples": 200, "seed": 0}
    metrics = {"schema_version": 1, "n": 3, "settings": settings, "run": {"dataset": "locomo"}, "usage": {"x": 1}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "config.yaml").write_text("dataset: {name: locomo}\n")
    assert main(["--refresh", str(tmp_path / "runs")]) == 0
    assert "1 of 1 finished runs re-aggregated" in capsys.readouterr().out
    scored = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert [(r["date_match"], r["date_status"]) for r in scored] == [
        (1.0, "matched"), (0.0, "other_date"), (None, "gold_not_a_date")
    ]  # fmt: skip
    assert [r["f1"] for r in scored] == [0.0, 0.67, 1.0]  # the other scores, as they were
    updated = json.loads((run / "metrics.json").read_text())
    assert updated["by_category"]["2"]["date_match"]["mean"] == 0.5 and updated["by_category"]["2"]["f1"]["n"] == 2
    assert updated["overall_sets"]["1-4"]["date_match"]["n"] == 2 and updated["usage"] == {"x": 1}
    assert main(["--refresh", str(tmp_path / "runs")]) == 0
    assert "0 of 1 finished runs" in capsys.readouterr().out
