"""The memory-growth report: checkpoints, fixed questions, the change of CLAG's gaps, the figure."""

from __future__ import annotations

from pathlib import Path

from run_folders import write_run

from clag.records.runs import find_runs
from clag.tables.growth import checkpoints, gap_change, main, trend

QUESTIONS = {150: 10, 300: 20, 1000: 30}  # each checkpoint asks more questions
F1 = {  # method -> checkpoint -> F1 of every question there
    "clag": {150: 0.2, 300: 0.4, 1000: 0.6},
    "amem": {150: 0.5, 300: 0.5, 1000: 0.5},
    "rag": {150: 0.3, 300: 0.5, 1000: 0.7},  # gains as much as CLAG: the gap holds
}


def _run(root: Path, method: str, turns: int) -> None:
    config = {"exp": "reference_growth", "method": {"name": method, "system": {}}, "dataset": {"name": "locomo"},
              "model": {"name": "qwen2.5-0.5b"}, "limit": {"items": turns}}  # fmt: skip
    notes = min(turns, 400)
    rows = [
        {"question_id": f"q{i}", "category": 1 + i % 4, "f1": F1[method][turns] + (0.05 if i % 2 else -0.05),
         "r10": 0.5, "telemetry": {"search_space": notes // 4} if method == "clag" else {}}
        for i in range(QUESTIONS[turns])
    ] + [{"question_id": "adv", "category": 5, "f1": 1.0, "r10": None, "telemetry": {}}]  # fmt: skip
    structure = {"conv-26": {"notes": notes, **({"clusters": notes // 50} if method == "clag" else {})}}
    metrics = {"run": {"method": method, "dataset": "locomo", "model": "qwen2.5-0.5b", "exp": "reference_growth"},
               "structure": structure}  # fmt: skip
    write_run(root / method / str(turns), config, rows, metrics)


def _fill(root: Path) -> None:
    for method in F1:
        for turns in QUESTIONS:
            _run(root, method, turns)


def test_the_gap_change_is_read_over_the_fixed_questions(tmp_path: Path) -> None:
    _fill(tmp_path)
    cells = checkpoints(find_runs(tmp_path))
    assert list(cells) == [150, 300, 1000] and set(cells[300]) == {"rag", "amem", "clag"}
    fixed = {f"q{i}" for i in range(10)}
    to_amem = gap_change(cells[150], cells[1000], "amem", fixed)
    to_rag = gap_change(cells[150], cells[1000], "rag", fixed)
    assert to_amem is not None and to_rag is not None
    assert abs(to_amem["mean_diff"] - 0.4) < 1e-9 and to_amem["n"] == 10  # (0.6 - 0.5) - (0.2 - 0.5)
    assert trend(to_amem).startswith("narrows")
    assert abs(to_rag["mean_diff"]) < 1e-9 and trend(to_rag).startswith("holds")
    assert trend(None) == "not measured"


def test_the_report_and_its_figure(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out" / "growth.md"
    _fill(runs)
    assert main([str(runs), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 150 | clag | 150 | 10 | 20.00 [" in text  # category 5 left out of the F1 (1-4)
    assert "| all | clag | 400 | 30 | 60.00 [" in text and "| 8.0 | 100 |" in text  # clusters, search space
    assert "fixed questions are the 10" in text
    assert "CLAG's gap to amem from 150 turns to all" in text and "**narrows" in text
    assert "CLAG's gap to rag" in text and "**holds" in text
    assert (out.parent / "growth.png").stat().st_size > 0 and "![memory growth](growth.png)" in text
