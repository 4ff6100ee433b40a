"""Every number in results/paper/*.csv is checked against the paper's own text.

The paper text is parsed here on its own (tab-separated lines, the caption
that follows each block), so a typo, a swapped column or a missing cell in a
CSV fails. Labels are mapped to the harness's keys by the small tables below,
written from the paper's headers, not from the CSVs.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest

from clag.tables.paper import PAPER_DIR, load_paper_table, paper_value

# The paper's text (extracted from its PDF) is not in the repository; CLAG_PAPER_TEXT names it (.ci/run does).
PAPER_TEXT = Path(os.environ.get("CLAG_PAPER_TEXT", "clag-paper.txt"))
if not PAPER_TEXT.is_file():
    pytest.skip(f"paper text not found at {PAPER_TEXT} (set CLAG_PAPER_TEXT)", allow_module_level=True)

METHOD = {"rag": "RAG", "amem": "A-mem", "gam": "GAM", "memoryos": "MemoryOS", "clag": "CLAG"}
DATASET = {"locomo": "LoCoMo", "hotpotqa": "HotpotQA", "bioasq": "BioASQ"}
MODEL = {"qwen3-0.6b": "Qwen3-0.6B", "qwen3-8b": "Qwen3-8B"}
METRIC = {
    "f1": "F1",
    "bleu1": "BLEU-1",
    "bert_f1": "BERT-F1",
    "meteor": "METEOR",
    "e_prec": "E-Prec",
    "e_recall": "E-Recall",
    "e_f1": "E-F1",
    "r5": "R@5",
    "r10": "R@10",
    "ndcg10": "nDCG@10",
    "context_chars": "Chars",
    "retrieval_ms": "Retrieval (ms)",
    "e2e_ms": "End-to-End (ms)",
    "avg_clusters": "Avg. # Clusters",
    # Table 8's hyperparameters, named by the paper's symbols.
    "n": "$n$",
    "n_init": "$n_{\\text{init}}$",
    "tau_split": "$\\tau_{\\text{split}}$",
    "k_route": "$k_{\\text{route}}$",
    "tau": "$\\tau$",
    "k_local": "$k_{\\text{local}}$",
}
VARIANT = {
    **{
        f"category={i}": name
        for i, name in enumerate(["Multi Hop", "Temporal", "Open Domain", "Single-Hop", "Adversarial"], start=1)
    },
    "routing=cosine": "Cosine-based Clustering",
    "routing=kmeans": "K-Means Clustering",
    "routing=agentic": "CLAG",
    "full": "CLAG (full)",
    "global_evolution": "w/ Global Evolution",
    "global_retrieval": "w/ Global Retrieval",
    **{f"n_init={n}": n for n in ("3", "5", "10")},
    **{f"tau={t}": t for t in ("0.10", "0.15", "0.20", "0.25", "0.30")},
}
LABELS = {"method": METHOD, "dataset": DATASET, "model": MODEL, "metric": METRIC, "variant": VARIANT}

# Per numeric table: the CSV columns naming the paper's row (label columns, left to right)
# and column (the last header rows, top to bottom; a top row that only groups columns, like
# Table 16's "Evidence Quality", is left out), the number of header rows, and the row count.
NUMERIC = {
    1: (["model", "method"], ["dataset", "metric"], 2, 30),
    2: (["method"], ["metric"], 1, 10),
    3: (["model", "method"], ["variant", "metric"], 2, 50),
    4: (["dataset", "method"], ["metric"], 1, 36),
    5: (["variant"], ["metric"], 1, 6),
    6: (["method"], ["dataset", "metric"], 2, 30),
    7: (["variant"], ["metric"], 1, 6),
    8: (["metric"], [], 1, 6),  # one number per hyperparameter row (Value); Meaning is prose
    9: (["variant"], ["metric"], 1, 6),
    10: (["variant"], ["metric"], 1, 15),
    15: (["model", "method"], ["dataset", "metric"], 2, 30),
    16: (["dataset", "method"], ["metric"], 2, 25),
}
# Keys a table fixes for all its rows: the paper states them in the caption.
CAPTION_KEYS = {
    2: {"model": "qwen3-0.6b", "dataset": ""},  # the paper does not say which dataset was timed
    3: {"dataset": "locomo"},
    4: {"model": "qwen3-0.6b"},
    5: {"model": "qwen3-0.6b", "dataset": "bioasq", "method": "clag"},
    6: {"model": "qwen3-8b"},
    7: {"model": "qwen3-0.6b", "dataset": "bioasq", "method": "clag"},
    8: {"model": "", "dataset": "", "method": "clag"},
    9: {"model": "qwen3-0.6b", "dataset": "locomo", "method": "clag"},
    10: {"model": "qwen3-0.6b", "dataset": "locomo", "method": "clag"},
    16: {"model": "qwen3-0.6b"},  # not in the caption: inferred, see test_table16_model_is_inferred_from_table4
}
NUMBER = re.compile(r"\d[\d,]*(\.\d+)?")
TEXT_COLUMNS = {
    11: ["method", "prediction", "result"],
    12: ["cluster_id", "profile", "count", "status"],
    13: ["category", "description"],
    14: ["pattern", "count", "percent"],
}


def _paper() -> tuple[dict[int, list[list[str]]], dict[int, str]]:
    """Split the text into tab-separated blocks, each owned by the next 'Table N:' caption."""
    blocks: dict[int, list[list[str]]] = {}
    captions: dict[int, str] = {}
    current: list[list[str]] = []
    last: list[list[str]] = []
    caption_of: int | None = None
    for line in PAPER_TEXT.read_text(encoding="utf-8").splitlines():
        if "\t" in line:
            current.append(line.split("\t"))
            caption_of = None
            continue
        if current:
            last, current = current, []
        match = re.match(r"Table (\d+):", line)
        if match:
            caption_of = int(match.group(1))
            blocks[caption_of], captions[caption_of] = last, ""
        if caption_of is not None:
            captions[caption_of] += line + " "
            if line.rstrip().endswith("."):
                caption_of = None
    return blocks, captions


BLOCKS, CAPTIONS = _paper()


def _clean(cell: str) -> str:
    """Drop what is typography, not content: "(Ours)", "(Default)", quotes and check marks."""
    cell = re.sub(r"\s*\((Ours|Default)\)$", "", cell.strip())
    return re.sub("[\u201c\u201d\u2713\u2717]", "", cell).strip()


def _cells(number: int, n_labels: int, n_headers: int, n_keys: int) -> dict[tuple[tuple[str, ...], ...], str]:
    """(row labels, last n_keys column headers) -> printed number, spanning labels carried right / down."""
    rows = BLOCKS[number]
    width = len(rows[n_headers])
    headers = []
    for header in rows[:n_headers]:
        filled: list[str] = []
        for j in range(width):
            cell = header[j] if j < len(header) else ""
            filled.append(cell or filled[-1])
        headers.append(filled)
    cells, labels = {}, [""] * n_labels
    for row in rows[n_headers:]:
        labels = [_clean(row[i]) or labels[i] for i in range(n_labels)]
        for j in range(n_labels, width):
            if NUMBER.fullmatch(row[j]):
                column = tuple(h[j] for h in headers)[n_headers - n_keys :]
                cells[(tuple(labels), column)] = row[j]
    return cells


def _raw_csv(number: int) -> list[dict[str, str]]:
    with (PAPER_DIR / f"table{number:02d}.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_table_has_a_block_and_a_csv() -> None:
    assert sorted(BLOCKS) == list(range(1, 17))
    assert sorted(p.name for p in PAPER_DIR.glob("table*.csv")) == [f"table{n:02d}.csv" for n in range(1, 17)]


@pytest.mark.parametrize("number", sorted(NUMERIC))
def test_numeric_table_matches_paper(number: int) -> None:
    row_keys, col_keys, n_headers, n_rows = NUMERIC[number]
    cells = _cells(number, len(row_keys), n_headers, len(col_keys))

    rows = _raw_csv(number)
    assert list(rows[0]) == ["table", "method", "dataset", "model", "variant", "metric", "value"]
    assert len(rows) == n_rows == len(cells)
    seen = set()
    for row in rows:
        assert row["table"] == str(number)
        row_label = tuple(LABELS[k][row[k]] for k in row_keys)
        col_label = tuple(LABELS[k][row[k]] for k in col_keys)
        printed = cells[(row_label, col_label)]
        assert row["value"] == printed.replace(",", ""), (row, printed)
        seen.add((row_label, col_label))
        for key in ("method", "dataset", "model", "variant"):
            if key not in row_keys + col_keys:
                assert row[key] == CAPTION_KEYS.get(number, {}).get(key, ""), (key, row)
    assert len(seen) == len(cells)


@pytest.mark.parametrize("number", sorted(CAPTION_KEYS))
def test_fixed_keys_are_named_in_the_caption(number: int) -> None:
    caption = CAPTIONS[number]
    for key, value in CAPTION_KEYS[number].items():
        if value and key != "method" and number != 16:
            assert LABELS[key][value] in caption, (number, key, caption)


def test_table16_model_is_inferred_from_table4() -> None:
    """Table 16's caption names no backbone; its RAG / A-mem rows equal Table 4's Qwen3-0.6B ones."""
    for method in ("rag", "amem"):
        for metric in ("e_prec", "e_f1", "r5", "ndcg10"):
            assert paper_value(16, method, "locomo", "qwen3-0.6b", metric) == paper_value(
                4, method, "locomo", "qwen3-0.6b", metric
            )


@pytest.mark.parametrize("number", sorted(TEXT_COLUMNS))
def test_text_table_matches_paper(number: int) -> None:
    rows = _raw_csv(number)
    assert list(rows[0]) == ["table", *TEXT_COLUMNS[number]]
    printed = [[_clean(cell) for cell in line] for line in BLOCKS[number][1:]]
    if number == 11:
        printed = [[{v: k for k, v in METHOD.items()}[line[0]], *line[1:]] for line in printed]
    assert [[row[c] for c in TEXT_COLUMNS[number]] for row in rows] == printed
    assert all(row["table"] == str(number) for row in rows)


def test_loader_types_and_lookup() -> None:
    table1 = load_paper_table(1)
    assert table1["value"].dtype == float
    assert (table1["variant"] == "").all()
    assert paper_value(1, "clag", "bioasq", "qwen3-0.6b", "f1") == 22.01
    assert paper_value(2, "gam", "", "qwen3-0.6b", "e2e_ms") == 17934.32
    assert paper_value(3, "rag", "locomo", "qwen3-0.6b", "bleu1", variant="category=5") == 24.90
    assert paper_value(10, "clag", "locomo", "qwen3-0.6b", "avg_clusters", variant="tau=0.30") == 47.5
    assert paper_value(16, "gam", "locomo", "qwen3-0.6b", "context_chars") == 17198.04
    assert paper_value(1, "clag", "bioasq", "qwen3-8b", "f1") is None  # only in Table 6
    assert paper_value(6, "clag", "bioasq", "qwen3-8b", "f1") == 25.40
    assert load_paper_table(12)["count"].sum() == 680  # the caption's 680 notes
    with pytest.raises(ValueError):
        paper_value(11, "clag", "", "", "f1")
    with pytest.raises(ValueError):
        load_paper_table(17)


def test_loader_returns_copies() -> None:
    frame = load_paper_table(5)
    frame.loc[:, "value"] = 0.0
    assert paper_value(5, "clag", "bioasq", "qwen3-0.6b", "f1", variant="routing=agentic") == 22.01
