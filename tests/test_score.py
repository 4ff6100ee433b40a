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
