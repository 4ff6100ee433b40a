"""The memory-telemetry report: what the agentic memories' calls did, read from run folders."""

from __future__ import annotations

from pathlib import Path

from run_folders import write_run

from clag.records.runs import find_runs
from clag.tables.memory_telemetry import authors_code_table, main, memory_stats, stage_counters
from clag.tables.specs import load_defaults


def _run(
    root: Path, method: str, exp: str, telemetry: list[dict], usage: dict, variant: str | None = None, f1: float = 0.5,
    system: dict | None = None, model: str = "qwen2.5-0.5b",
) -> None:
    config = {"exp": exp, "method": {"name": method, "system": system or {}}, "dataset": {"name": "locomo"},
              "model": {"name": model}, "variant_name": variant}  # fmt: skip
    rows = [{"question_id": f"q{i}", "category": 4, "f1": f1, "telemetry": t} for i, t in enumerate(telemetry)]
    structure = {"conv-26": {"notes": 100, "evolutions": 90, "links": 200}, "conv-30": {"notes": 50, "evolutions": 0,
                 "links": 10}}  # fmt: skip
    metrics = {"run": {"method": method, "dataset": "locomo", "model": model, "exp": exp},
               "structure": structure, "usage": {"ingestion": usage, "questions": {}},
               "overall_sets": {"1-4": {"f1": {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 40}}}}  # fmt: skip
    write_run(root / exp / method / (variant or "full") / model / str(system), config, rows, metrics)


def test_memory_stats_and_counters_come_from_the_run_folder(tmp_path: Path) -> None:
    telemetry = [
        {"clusters": 3, "mode": "cluster", "search_space": 40, "link_share": 0.5},
        {"clusters": 3, "mode": "global", "search_space": 150, "link_share": 0.25},
    ]
    usage = {"evolve": {"calls": 10, "truncated": 3, "placeholder_echoes": 1, "parse_failures": 4, "fallbacks": 2},
             "note": {"calls": 5, "parse_failures": 0, "fallbacks": 0}}  # an older run: no truncated / echoes
    _run(tmp_path, "clag_authors_code", "reference_authors_code", telemetry, usage)
    _run(tmp_path, "rag", "reference", [{}], {})  # not an agentic memory: left out
    [run] = [r for r in find_runs(tmp_path) if r.method != "rag"]
    stats = memory_stats(run)
    assert stats["notes"] == 150 and stats["evolution_rate"] == 0.6 and stats["links_per_note"] == 210 / 150
    assert (stats["link_share"], stats["pick_rate"], stats["search_space"]) == (0.375, 0.5, 95)
    assert stage_counters(run, "evolve") == "10: 3 / 1 / 4 / 2"
    assert stage_counters(run, "note") == "5: — / — / 0 / 0"
    assert stage_counters(run, "pick") == ""


def test_the_report_lists_each_agentic_run_and_its_variant(tmp_path: Path, capsys) -> None:
    _run(tmp_path, "clag", "reference", [{"clusters": 3, "mode": "cluster", "search_space": 40}], {},
         variant="routing_cosine")  # fmt: skip
    _run(tmp_path, "amem", "reference_corrected", [{"link_share": 0.1}], {})
    _run(tmp_path, "gam", "reference", [{}], {})
    _run(tmp_path, "clag", "reference_corrected", [{}], {}, system={"tau": 0.15, "routing": "agentic"})  # Table 10
    assert main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| locomo | clag (routing_cosine) | qwen2.5-0.5b | reference | 50.00 [40.00, 60.00] |" in text
    assert "| locomo | clag (tau=0.15) | qwen2.5-0.5b | reference_corrected |" in text  # only the setting it departs in
    assert "| locomo | amem | qwen2.5-0.5b | reference_corrected |" in text and "gam" not in text
    assert "| 10% | — | — |" in text  # A-mem: a link share, no pick


def test_the_authors_code_run_is_paired_with_each_base_run_that_answered_its_questions(tmp_path: Path) -> None:
    _run(tmp_path, "clag_authors_code", "reference_authors_code", [{}] * 12, {}, f1=0.25)
    _run(tmp_path, "clag", "reference_corrected", [{}] * 13, {}, f1=0.5)  # answered all twelve and one more
    _run(tmp_path, "clag", "reference_growth", [{}] * 11, {}, f1=0.5)  # answered eleven of them: not comparable
    _run(tmp_path, "clag", "reference", [{}] * 12, {}, variant="routing_cosine")  # an ablation: never the base
    _run(tmp_path, "clag", "reference_corrected", [{}] * 12, {}, system={"n_init": 5})  # nor a sensitivity run
    _run(tmp_path, "clag", "reference_corrected", [{}] * 12, {}, model="qwen2.5-1.5b")  # nor another model's
    table = authors_code_table(find_runs(tmp_path), load_defaults().clag_default)
    [row] = [line for line in table.splitlines() if "−" in line]
    assert row.startswith("| locomo | clag_authors_code − clag | reference_corrected | 12 | -25.00 [-25.00, -25.00] |")
    assert row.endswith("| - | - | - |")  # no temporal question, no evidence ids in these rows
