"""Findings: paired verdicts only where the interval excludes 0, and CLAG telemetry read from run folders."""

from __future__ import annotations

from pathlib import Path

from run_folders import write_run

from clag.records.runs import find_runs
from clag.tables.findings import (
    default_claims,
    evaluate,
    history_table,
    main,
    question_counts,
    reach_table,
    render,
    telemetry_table,
    verdict,
)

CLAG_DEFAULT = {"routing": "agentic", "evolution_scope": "local", "retrieval": "two_stage", "n_init": 3, "tau": 0.1}


def _run(root: Path, name: str, method: str, params: dict, f1: list[float], telemetry: list[dict] | None = None,
         structure: dict | None = None, dataset: str = "locomo", model: str = "qwen2.5-0.5b") -> None:
    config = {"exp": "reference", "method": {"name": method, "system": params}, "dataset": {"name": dataset},
              "model": {"name": model}}
    rows = [
        {"question_id": f"q{i}", "category": 4 if i < 8 else 5, "f1": value, "bleu1": value / 2,
         "telemetry": (telemetry or [{}])[0], "evidence_ids": ["D9:9"] if i % 3 == 0 else ["D1:1"],
         "r10": 0.0 if i % 3 == 0 else 1.0, "episode_id": "conv-26",
         "adversarial_official": None if i < 8 else float(method == "clag"),  # only CLAG abstains on category 5
         **({"j_lenient": float(value > 0.65), "judge": {}} if i < 8 else
            {"j_lenient": None, "judge": {"skipped": "category 5 is not judged on locomo"}})}  # as clag.judge does
        for i, value in enumerate(f1)
    ]
    run = {"method": method, "dataset": dataset, "model": model, "exp": "reference", "engine": "vllm",
           "dtype": "bfloat16", "hardware": {"cpu_model": "AMD EPYC", "gpu": []}}
    metrics = {"run": run, "structure": structure or {},
               "usage": {"ingestion": {"route": {"json_calls": 50, "parse_failures": 2}}, "questions": {}}}
    write_run(root / name, config, rows, metrics)


def test_verdicts_need_an_interval_that_excludes_zero(tmp_path: Path) -> None:
    clag_f1 = [0.6, 0.7, 0.5, 0.8, 0.6, 0.7, 0.9, 0.6, 0.7, 0.8, 0.6, 0.7]
    _run(tmp_path, "clag", "clag", CLAG_DEFAULT, clag_f1,
         telemetry=[{"selected": ["c1"], "mode": "cluster", "search_space": 30, "total_notes": 150}],
         structure={"conv-26": {"clusters": 4, "cluster_sizes": {"c1": 30, "c2": 70},
                                "cluster_members": {"c1": ["D1:1"], "c2": ["D9:9"]}, "routing": {"agentic_pick": 48,
                                "new_cluster_below_tau": 2}, "route_fallbacks_total": 1}})
    _run(tmp_path, "rag", "rag", {}, [v - 0.3 for v in clag_f1])  # CLAG ahead on every question
    _run(tmp_path, "amem", "amem", {}, [v + (0.05 if i % 2 else -0.05) for i, v in enumerate(clag_f1)])
    _run(tmp_path, "gam", "gam", {}, clag_f1[:10])  # two questions short
    _run(tmp_path, "clag_tau", "clag", {**CLAG_DEFAULT, "tau": 0.15}, clag_f1)  # a sensitivity run: never plain CLAG
    runs = find_runs(tmp_path)
    findings = {f.claim.label: f for f in evaluate(runs, default_claims(CLAG_DEFAULT), samples=2000)}
    pairs = {"CLAG vs rag on locomo", "CLAG vs amem on locomo", "CLAG vs gam on locomo"}
    paper, official = ", 1-5, category 5 as the paper scores it", ", 1-5, category 5 as LoCoMo scores it"
    assert set(findings) == {pair + tail for pair in pairs for tail in (", categories 1-4", paper, official)}
    assert list(findings)[0] == "CLAG vs rag on locomo, categories 1-4"  # categories 1-4 lead
    assert findings["CLAG vs rag on locomo" + paper].per_metric["f1"]["n"] == 12
    assert findings["CLAG vs rag on locomo, categories 1-4"].per_metric["f1"]["n"] == 8  # category 5 left out
    assert verdict(findings["CLAG vs rag on locomo" + paper].per_metric["f1"]) == "ahead"
    assert verdict(findings["CLAG vs amem on locomo" + paper].per_metric["f1"]) == "no difference shown"
    # Scored as LoCoMo scores category 5, CLAG's abstentions there make it ahead of A-mem: the verdicts differ.
    assert verdict(findings["CLAG vs amem on locomo" + official].per_metric["f1"]) == "ahead"
    assert findings["CLAG vs rag on locomo, categories 1-4"].per_metric["j_lenient"]["n"] == 8
    assert findings["CLAG vs rag on locomo" + paper].per_metric["j_lenient"] is None  # 1-5 would repeat 1-4's J

    table = telemetry_table(runs, CLAG_DEFAULT)
    assert "4.0 (4-4)" in table and "50.0 (max 70)" in table
    assert "agentic_pick 48, new_cluster_below_tau 2" in table and "1/50" in table
    assert "12/12" in table and "30 / 150" in table and "route 2/50" in table
    assert "| 8/0/4 of 12 |" in table and "| 100.0/—/0.0 |" in table  # evidence pruned away on 4: R@10 0 there
    assert "| locomo / agentic, local evolution, two_stage retrieval, tau=0.15 |" in table  # told from plain CLAG

    reach = reach_table(runs, CLAG_DEFAULT)  # the baselines over CLAG's groups; gam lacks two of them
    assert "| locomo | questions | 8 | 0 | 4 |" in reach and "| locomo | clag R@10 | 100.0 | — | 0.0 |" in reach
    assert "| locomo | rag R@10 | 100.0 | — | 0.0 |" in reach
    assert "| locomo | gam R@10 | 100.0 (6/8) | — | 0.0 |" in reach
    # F1 over the same groups without category 5 (questions 8-11): 5 with all of their evidence, 3 with none
    assert "| locomo | of them outside category 5 | 5 | 0 | 3 |" in reach
    assert "| locomo | clag F1 | 62.0 | — | 76.7 |" in reach and "| locomo | rag F1 | 32.0 | — | 46.7 |" in reach
    # J (the calibrated prompts render passes in) over the same groups, over the questions the judge scored
    judged = reach_table(runs, CLAG_DEFAULT, ["j_lenient"])
    assert "| locomo | clag j_lenient | 40.0 | — | 66.7 |" in judged
    assert "| locomo | rag j_lenient | 0.0 | — | 0.0 |" in judged
    assert "j_lenient" not in reach
    text = render(tmp_path)
    assert "| locomo | rag | 6 / 8 | " in text  # six of rag's eight category-4 answers are below F1 0.5 ...
    assert "| 6 (100%) |" in text  # ... and none of them had its evidence in the context (no retrieved ids)
    assert "models: qwen2.5-0.5b; computed with vllm bfloat16 on AMD EPYC" in text


def test_every_dataset_with_both_runs_gets_its_claims(tmp_path: Path) -> None:
    """HotpotQA's CLAG and RAG runs give a claim over all their questions; a baseline that did not run gives none."""
    f1 = [0.6, 0.7, 0.5, 0.8, 0.6, 0.7, 0.9, 0.6, 0.7, 0.8, 0.6, 0.7]
    _run(tmp_path, "clag", "clag", CLAG_DEFAULT, f1, dataset="hotpotqa")
    _run(tmp_path, "rag", "rag", {}, [v - 0.3 for v in f1], dataset="hotpotqa")
    findings = evaluate(find_runs(tmp_path), default_claims(CLAG_DEFAULT), samples=2000)
    assert [f.claim.label for f in findings] == ["CLAG vs rag on hotpotqa"]
    assert findings[0].per_metric["f1"]["n"] == 12 and verdict(findings[0].per_metric["f1"]) == "ahead"
    # a larger model's run (Table 6's) is left out of the findings: the claims stay the backbone's
    _run(tmp_path, "clag_large", "clag", CLAG_DEFAULT, [0.0] * 12, dataset="hotpotqa", model="qwen2.5-1.5b")
    text = render(tmp_path)
    assert "2 finished runs; models: qwen2.5-0.5b;" in text
    assert "| CLAG vs rag on hotpotqa | hotpotqa | Tables 1, 15 | 12 | +30.00" in text


def test_history_pairs_each_run_with_its_earlier_counterpart(tmp_path: Path) -> None:
    """A re-run against the first run: F1 over categories 1-4, temporal F1, date match, ISO answers, R@10."""

    def rows(f1: float, iso: bool) -> list[dict]:
        temporal = [
            {"question_id": f"t{i}", "category": 2, "f1": f1, "r10": 0.5, "date_match": float(not iso),
             "prediction": "2023-05-07" if iso and i < 3 else "7 May 2023"}
            for i in range(12)
        ]  # fmt: skip
        other = [{"question_id": f"o{i}", "category": 4, "f1": 0.5, "r10": 0.5, "prediction": "x"} for i in range(12)]
        return temporal + other

    for exp, f1, iso in (("first", 0.0, True), ("again", 0.5, False)):
        config = {"exp": exp, "method": {"name": "rag", "system": {}}, "dataset": {"name": "locomo"},
                  "model": {"name": "qwen2.5-0.5b"}}  # fmt: skip
        run = {"method": "rag", "dataset": "locomo", "model": "qwen2.5-0.5b", "exp": exp}
        write_run(tmp_path / exp / "rag", config, rows(f1, iso), {"run": run, "structure": {}})
    table = history_table(find_runs(tmp_path / "again"), find_runs(tmp_path / "first"), CLAG_DEFAULT)
    row = next(line for line in table.splitlines() if line.startswith("| locomo | rag |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "25.00 → 50.00"  # categories 1-4: half temporal (0 then 0.5), half 0.5
    assert cells[3].startswith("+25.00 [") and cells[4].startswith("+50.00 [")  # temporal alone: +50
    assert cells[5:7] == ["0.00 → 100.00", "3/12 → 0/12"] and cells[7].startswith("+0.00")
    out = tmp_path / "findings.md"
    assert main([str(tmp_path / "again"), "--previous", str(tmp_path / "first"), "--out", str(out)]) == 0
    assert "## History: against the earlier runs under" in out.read_text() and "3/12 → 0/12" in out.read_text()
    assert "## History" not in render(tmp_path / "again")
    assert history_table(find_runs(tmp_path / "again"), [], CLAG_DEFAULT) == "(no run has an earlier counterpart)"


def test_the_n_column_names_every_question_count_the_metrics_were_paired_over() -> None:
    assert question_counts({"f1": 60, "bleu1": 60}) == "60"
    assert question_counts({"f1": 60, "bleu1": 60, "j_lenient_dated": 59, "j_strict_dated": 59}) == (
        "60 (59 for j_lenient_dated, j_strict_dated)"
    )
    assert question_counts({}) == "—"
