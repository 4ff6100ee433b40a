"""Paired comparison of runs, the tables' significance marks, LoCoMo's two denominators, clag.compare on real runs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_tables import write_run

from clag.compare import compare_runs, load_run, main, paired_difference
from clag.metrics import MetricSettings, aggregate_rows, paired_bootstrap
from clag.metrics.temporal import GOLD_NOT_A_DATE, date_match
from clag.records.runs import find_runs
from clag.tables.paper import load_paper_table
from clag.tables.render import compare_frame, render_all
from clag.tables.specs import load_defaults, load_spec

CLAG_DEFAULT = {"routing": "agentic", "evolution_scope": "local", "retrieval": "two_stage", "n_init": 3, "tau": 0.1}


def rows(f1s: list[float], categories: list[int] | None = None) -> list[dict]:
    categories = categories or [4] * len(f1s)
    return [
        {"question_id": f"q{i}", "category": c, "f1": f, "bleu1": f / 2, "prediction": "x", "reference": "y"}
        for i, (f, c) in enumerate(zip(f1s, categories))
    ]


def test_paired_difference_matches_questions_and_counts_wins():
    a = rows([1.0, 0.5, 0.0, 1.0])
    b = rows([0.0, 0.5, 1.0, 0.0])[::-1]  # order does not matter: questions are matched by id
    b.append({"question_id": "extra", "f1": 1.0, "category": 4})  # only in B: left out
    a[3]["f1"] = None  # no value in A (e.g. an unclear judge verdict): left out of the pair
    result = paired_difference(a, b, "f1", samples=500)
    assert result["n"] == 3
    expected = paired_bootstrap([1.0, 0.5, 0.0], [0.0, 0.5, 1.0], samples=500)
    assert result["mean_diff"] == pytest.approx(expected["mean_diff"]) == 0.0
    assert (result["wins_a"], result["wins_b"], result["ties"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    only_cat = paired_difference(rows([1.0, 0.0], [1, 2]), rows([0.0, 0.0], [1, 2]), "f1", categories=(1,))
    assert only_cat["n"] == 1 and only_cat["mean_diff"] == 1.0
    assert paired_difference(rows([1.0]), [], "f1") is None


def test_official_category_5_scoring_replaces_answer_metrics_but_never_j():
    a, b = rows([0.2, 0.3], [4, 5]), rows([0.1, 0.9], [4, 5])
    a[1]["adversarial_official"], b[1]["adversarial_official"] = 1.0, 0.0  # A abstains on the trap, B does not
    f1 = paired_difference(a, b, "f1", samples=200, adversarial="official")
    assert f1["n"] == 2 and f1["mean_diff"] == pytest.approx((0.1 + 1.0) / 2)
    # Unjudged runs have no J on any question, category 5's abstention included: nothing to pair.
    assert paired_difference(a, b, "j_strict_dated", samples=200, adversarial="official") is None
    # Judged runs: J skips category 5 (None there), so it pairs categories 1-4 under either scoring.
    a[0]["j_strict_dated"], b[0]["j_strict_dated"] = 1.0, 0.0
    j = paired_difference(a, b, "j_strict_dated", samples=200, adversarial="official")
    assert j["n"] == 1 and j["mean_diff"] == 1.0


def test_locomo_overall_over_categories_1_4_and_1_5_apart():
    scored = rows([1.0, 0.0, 1.0, 0.0, 1.0], [1, 2, 4, 5, 5])
    metrics = aggregate_rows(scored, MetricSettings(bootstrap_samples=50), dataset="locomo")
    assert metrics["overall_sets"]["1-4"]["f1"]["mean"] == pytest.approx(2 / 3)
    assert metrics["overall_sets"]["1-4"]["f1"]["n"] == 3
    assert metrics["overall_sets"]["1-5"]["f1"]["mean"] == pytest.approx(3 / 5) == metrics["overall"]["f1"]["mean"]
    assert aggregate_rows(scored, MetricSettings(bootstrap_samples=50), dataset="hotpotqa")["overall_sets"] == {}


def test_the_papers_table_1_is_over_categories_1_to_5(data_dir):
    """Each Table 1 LoCoMo value is the question-weighted mean of its five Table 3 categories, not of 1-4."""
    from clag.data import load_episodes

    counts = Counter(q.category for e in load_episodes("locomo", data_dir) for q in e.questions)
    assert [counts[c] for c in range(1, 6)] == [282, 321, 96, 841, 446]
    t1, t3 = load_paper_table(1), load_paper_table(3)
    t1 = t1[(t1["dataset"] == "locomo") & (t1["model"] == "qwen3-0.6b")]
    for (method, metric), value in t1.set_index(["method", "metric"])["value"].items():
        per = t3[(t3["method"] == method) & (t3["metric"] == metric) & (t3["model"] == "qwen3-0.6b")]
        by_category = {int(v.split("=")[1]): x for v, x in zip(per["variant"], per["value"])}
        over = {
            cats: sum(by_category[c] * counts[c] for c in cats) / sum(counts[c] for c in cats)
            for cats in ((1, 2, 3, 4, 5), (1, 2, 3, 4))
        }
        assert abs(over[(1, 2, 3, 4, 5)] - value) <= 0.03, (method, metric)
        if method != "memoryos":  # MemoryOS's category 5 is as low as the rest, so both means agree
            assert abs(over[(1, 2, 3, 4)] - value) > 2.0, (method, metric)


def write_pair(root: Path, clag_f1: list[float], rag_f1: list[float], categories: list[int]) -> Path:
    """A CLAG and a RAG run over the same questions, with per-question F1s (the summaries follow the rows)."""
    for method, f1s, params in (("clag", clag_f1, dict(CLAG_DEFAULT)), ("rag", rag_f1, {})):
        data = [
            {**row, "question": "q?", "answer": "a", "telemetry": {}, "retrieved_ids": [], "evidence_ids": []}
            for row in rows(f1s, categories)
        ]
        folder = write_run(root, method, "locomo", float(np.mean(f1s)), data, params)
        metrics = json.loads((folder / "metrics.json").read_text())
        metrics.update(
            {
                k: v
                for k, v in aggregate_rows(data, MetricSettings(bootstrap_samples=200), "locomo").items()
                if k in ("n", "overall", "by_category", "overall_sets")
            }
        )
        (folder / "metrics.json").write_text(json.dumps(metrics))
    return root


def test_tables_mark_clag_against_each_baseline(tmp_path):
    # 12 single-hop questions CLAG gets right and RAG wrong; 3 multi-hop ones where they tie.
    categories = [4] * 12 + [1] * 3
    write_pair(tmp_path / "runs", [1.0] * 12 + [0.5] * 3, [0.0] * 12 + [0.5] * 3, categories)
    runs, defaults = find_runs(tmp_path / "runs"), load_defaults()
    frame = compare_frame(load_spec(3), runs, defaults).set_index(["method", "variant", "metric"])
    single = frame.loc[("rag", "category=4", "f1")]
    assert single["vs"] == "clag" and single["vs_diff"] == pytest.approx(100.0) and single["vs_n"] == 12
    assert bool(single["significant"]) and single["vs_ci_low"] > 0
    multi = frame.loc[("rag", "category=1", "f1")]
    assert multi["vs_n"] == 3 and not bool(multi["significant"]) and pd.isna(multi["vs_ci_low"])  # n < 10
    assert pd.isna(frame.loc[("clag", "category=4", "f1"), "vs_n"])  # CLAG is not tested against itself
    assert pd.isna(frame.loc[("full_context", "category=4", "f1"), "ours"])  # no run: a dash, never an error
    out = tmp_path / "tables"
    render_all(tmp_path / "runs", out, numbers=[1, 3])
    md = (out / "table03.md").read_text()
    rag = next(line for line in md.splitlines() if line.startswith("| RAG |"))
    assert "0.00 [0.00, 0.00] †" in rag  # single-hop: 12 questions, interval and mark
    assert "50.00 (n=3)" in rag and "(n=3) †" not in rag  # multi-hop: 3 questions, no interval, no mark
    assert "| Full context (not in the paper) |" in md and "| No memory (not in the paper) |" in md
    assert "† = CLAG − this row over the same questions" in md and "not in the paper" in md
    assert r"$\dagger$" in (out / "table03.tex").read_text()
    t1 = (out / "table01.md").read_text()
    assert "LoCoMo cat. 1-4 (not in the paper)" in t1 and "over all five categories" in t1


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory, data_dir) -> tuple[Path, Path]:
    """full_context, and no_memory judged at the end of its run (metrics.judge), on 8 real LoCoMo turns
    (2 questions; the 0.5B model; about a minute on CPU)."""
    from clag.run import run_with_overrides

    root = tmp_path_factory.mktemp("real")
    common = [
        "dataset=locomo",
        "model=qwen2.5-0.5b",
        "limit.episode_ids=[conv-26]",
        "limit.items=8",  # 2 questions with their evidence inside
        "runner.progress=false",
        f"paths.runs_dir={root}",
    ]
    full = run_with_overrides(["method=full_context", f"run_dir={root / 'full_context'}", *common])
    empty = run_with_overrides(
        ["method=no_memory", f"run_dir={root / 'no_memory'}", "metrics.judge.enabled=true", *common]
    )
    return full, empty


@pytest.mark.model
def test_the_judge_runs_at_the_end_of_a_run(real_runs):
    run = load_run(real_runs[1])
    judge = run.metrics["judge"]
    assert judge["model"] == "qwen2.5-0.5b" and judge["small"] and judge["counts"]["lenient"]["judged"] == run.questions
    for prompt in ("lenient", "strict"):
        count = judge["counts"][prompt]
        assert count["correct"] + count["wrong"] + count["unclear"] == run.questions
        clear = count["correct"] + count["wrong"]
        assert run.metrics["overall"].get(f"j_{prompt}", {}).get("n", 0) == clear
        assert run.metrics["overall_sets"]["1-4"].get(f"j_{prompt}", {}).get("n", 0) == clear
    for row in run.predictions:
        # Each prompt's verdict, and the date comparison exactly where the gold names a date.
        gold = str(row.get("answer", row.get("reference")) or "")
        gold_dated = date_match(str(row["prediction"] or ""), gold)[1] != GOLD_NOT_A_DATE
        assert set(row["judge"]) == {"lenient", "strict"} | ({"date"} if gold_dated else set())
        assert all(f"j_{prompt}_dated" in row for prompt in ("lenient", "strict"))


@pytest.mark.model
def test_reference_baselines_run_end_to_end(real_runs):
    full, empty = (load_run(path) for path in real_runs)
    assert full.questions == empty.questions > 0
    full_rows, empty_rows = full.predictions, empty.predictions
    assert all(r["context_chars"] == 0 and r["retrieved_ids"] == [] for r in empty_rows)
    # One context for the whole episode, untruncated on 8 turns, holding every turn in order.
    assert len({r["context_chars"] for r in full_rows}) == 1 and full_rows[0]["context_chars"] > 0
    assert all(r["telemetry"]["truncated"] is False and r["telemetry"]["items_kept"] == 8 for r in full_rows)
    assert full_rows[0]["retrieved_ids"] == [f"D1:{i}" for i in range(1, 9)]
    assert full.metrics["usage"]["llm_calls_per_item"] == 0.0 and "overall_sets" in full.metrics


@pytest.mark.model
def test_compare_cli_on_two_real_runs(real_runs, capsys, tmp_path):
    full, empty = real_runs
    assert main([str(full), str(empty), "--samples", "500", "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"A: {full} (full_context, qwen2.5-0.5b)")
    header = lines.index(next(line for line in lines if line.startswith("metric\tgroup")))
    first = lines[header + 1].split("\t")
    n = load_run(full).questions
    assert first[:3] == ["f1", "overall", str(n)]
    assert first[5].endswith(f"(n={n})") if n < 10 else "[" in first[5]
    assert any(line.startswith("f1\tcategories 1-4\t") for line in lines)
    records = json.loads((tmp_path / "cmp.json").read_text())
    overall = next(r for r in records if r["metric"] == "f1" and r["group"] == "overall")
    assert overall["wins_a"] + overall["wins_b"] + overall["ties"] == pytest.approx(1.0)
    assert overall == next(
        r for r in compare_runs(load_run(full), load_run(empty), ["f1"], samples=500) if r["group"] == "overall"
    )
    assert main([str(full), str(tmp_path / "nothing")]) == 2
    assert "not a finished run folder" in capsys.readouterr().err
