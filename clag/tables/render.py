"""Every paper table from finished runs, our value beside the paper's, as Markdown, LaTeX and CSV.

Each cell shows the paper's number, ours with its bootstrap 95% interval
over questions (``n=K`` instead under 10 questions, where an interval says
nothing), and the difference ours - paper; a cell without a finished run
shows "—" and never fails the rendering. A spec with ``significance: clag``
also tests CLAG against every other row on the same questions (paired
bootstrap, :func:`clag.compare.paired_difference`) and marks a row with †
where the 95% interval of the difference excludes 0. The caption names the model
that produced our numbers (a stand-in when it is not the paper's backbone)
and the data slice of every run used, and says plainly when the runs are a
slice: a demo-scale number is never passed off as the paper's setting.

The CSV is the long, machine-readable form (one row per cell, every number
in its own column); Markdown and LaTeX are the wide form a reader compares.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from clag.compare import paired_difference
from clag.metrics.aggregate import CATEGORY_SETS, JUDGE_KEYS, MIN_INTERVAL_N
from clag.metrics.judge_calibration import allowed_metrics, find_report
from clag.records.runs import RunRecord, find_runs
from clag.tables import cases, plots
from clag.tables.collect import METRICS, category_set, metric_value, provenance_notes, select_run
from clag.tables.paper import paper_value
from clag.tables.specs import SPEC_DIR, Cell, Defaults, TableSpec, compare_numbers, load_defaults, load_spec

log = logging.getLogger(__name__)

MISSING = "—"
PAPER_MODELS = {"qwen3-0.6b": "Qwen3-0.6B", "qwen3-1.7b": "Qwen3-1.7B", "qwen3-8b": "Qwen3-8B"}
LONG_COLUMNS = (
    "table row group metric method dataset variant paper ours diff ci_low ci_high n "
    "vs vs_diff vs_ci_low vs_ci_high vs_p vs_n significant "
    "our_model exp seed sliced scale run_dir slice"
).split()
DAGGER = "†"
PAIRED_SAMPLES = 10000


def _categories(cell: Cell, dataset: str) -> tuple[int, ...] | None:
    """The categories a cell's value is over: ``category=N``, a ``categories=`` set, or all (None)."""
    if cell.variant.startswith("category="):
        return (int(cell.variant.split("=", 1)[1]),)
    subset = category_set(cell.variant)
    return CATEGORY_SETS.get(dataset, {}).get(subset) if subset else None


def _paired(cell: Cell, run: RunRecord | None, anchor: RunRecord | None) -> dict[str, Any]:
    """The anchor's (CLAG's) paired difference from ``run`` on ``cell``'s metric, in table units; {} if untestable.

    Testable: both runs exist, differ, share the model and dataset, and the
    metric is a per-question answer metric.
    """
    if run is None or anchor is None or run.path == anchor.path or METRICS[cell.metric].source != "answer":
        return {}
    if (run.model, run.dataset) != (anchor.model, anchor.dataset):
        return {}
    result = paired_difference(
        anchor.predictions, run.predictions, cell.metric, _categories(cell, run.dataset), PAIRED_SAMPLES
    )
    if result is None:
        return {}
    scale = METRICS[cell.metric].scale
    shown = result["n"] >= MIN_INTERVAL_N
    return {
        "vs": anchor.method,
        "vs_diff": scale * result["mean_diff"],
        "vs_ci_low": scale * result["ci_low"] if shown else None,
        "vs_ci_high": scale * result["ci_high"] if shown else None,
        "vs_p": result["p_value"],
        "vs_n": result["n"],
        "significant": shown and (result["ci_low"] > 0 or result["ci_high"] < 0),
    }


def compare_frame(spec: TableSpec, runs: list[RunRecord], defaults: Defaults) -> pd.DataFrame:
    """One row per cell of ``spec``: the paper's value, ours, the difference and our interval,
    and (``spec.significance``) the anchor method's paired difference from this row."""
    models = defaults.models_for(spec.model)
    cells = spec.cells(defaults.clag_default)
    chosen = [select_run(runs, cell.method, cell.run_dataset, models, cell.where, spec.exps) for cell in cells]
    anchors = {
        (cell.group, cell.metric): run
        for cell, run in zip(cells, chosen)
        if spec.significance and cell.method == spec.significance
    }
    records = []
    for cell, run in zip(cells, chosen):
        paper = paper_value(spec.number, cell.method, cell.dataset, spec.model, cell.metric, cell.paper_variant)
        ours = metric_value(run, cell.metric, cell.variant, cell.config_key) if run else None
        records.append(
            {
                "table": spec.number,
                "row": cell.row,
                "group": cell.group,
                "metric": cell.metric,
                "method": cell.method,
                "dataset": cell.dataset or cell.run_dataset,
                "variant": cell.variant,
                "paper": paper,
                "ours": ours.mean if ours else None,
                "diff": ours.mean - paper if ours and paper is not None else None,
                "ci_low": ours.ci_low if ours else None,
                "ci_high": ours.ci_high if ours else None,
                "n": ours.n if ours else None,
                **_paired(cell, run, anchors.get((cell.group, cell.metric))),
                "our_model": run.model if run else "",
                "exp": run.exp if run else "",
                "seed": run.seed if run else None,
                "sliced": run.is_sliced if run else None,
                "scale": run.scale if run else "",
                "run_dir": str(run.path) if run else "",
                "slice": run.slice_text() if run else "",
            }
        )
    return pd.DataFrame.from_records(records, columns=LONG_COLUMNS)


def _number(value: Any, metric: str, signed: bool = False) -> str:
    if value is None or pd.isna(value):
        return MISSING
    if METRICS[metric].source == "config":
        return f"{value:+g}" if signed else f"{value:g}"
    return f"{value:+,.2f}" if signed else f"{value:,.2f}"


def _ours(row: pd.Series) -> str:
    """Ours with its interval, or ``(n=K)`` under :data:`MIN_INTERVAL_N` questions; † where the paired test says so."""
    text = _number(row["ours"], row["metric"])
    if text == MISSING:
        return text
    if not pd.isna(row["n"]) and int(row["n"]) < MIN_INTERVAL_N:
        text += f" (n={int(row['n'])})"
    elif not pd.isna(row["ci_low"]) and not pd.isna(row["ci_high"]):
        text += f" [{_number(row['ci_low'], row['metric'])}, {_number(row['ci_high'], row['metric'])}]"
    if not pd.isna(flag := row.get("significant")) and bool(flag):
        text += f" {DAGGER}"
    return text


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    MISSING: "--",
    "Δ": r"$\Delta$",
    "−": "-",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "→": r"$\rightarrow$",
    "✓": r"$\checkmark$",
    "✗": r"$\times$",
    DAGGER: r"$\dagger$",
}
_LATEX_PATTERN = re.compile("|".join(re.escape(key) for key in _LATEX))


def escape_latex(text: str) -> str:
    """Free text (labels, predictions, captions) as LaTeX: specials escaped, a few symbols as math (one pass)."""
    return _LATEX_PATTERN.sub(lambda match: _LATEX[match.group(0)], text)


def wide_frame(long: pd.DataFrame, latex: bool = False) -> pd.DataFrame:
    """Rows x (group, metric, paper / ours [95% CI] / Δ) strings, in the spec's order."""
    text = (lambda s: escape_latex(str(s))) if latex else str
    fields = tuple(map(text, ("paper", "ours [95% CI]", "Δ")))
    rows = list(dict.fromkeys(long["row"]))
    columns: dict[tuple[str, str, str], list[str]] = {}
    for _, cell in long.iterrows():
        key = (text(cell["group"]), text(METRICS[cell["metric"]].label))
        values = (_number(cell["paper"], cell["metric"]), _ours(cell), _number(cell["diff"], cell["metric"], True))
        for name, value in zip(fields, values):
            columns.setdefault((*key, name), [MISSING] * len(rows))[rows.index(cell["row"])] = text(value)
    frame = pd.DataFrame(columns, index=[text(r) for r in rows])
    frame.columns = pd.MultiIndex.from_tuples(list(columns))
    if not any(group for group, _, _ in columns):
        frame.columns = frame.columns.droplevel(0)
    return frame


def caption(spec: TableSpec, long: pd.DataFrame, runs: list[RunRecord]) -> str:
    """Names the paper's setting, our model(s) and data slice(s), and what the numbers can be compared with."""
    used = {run.path: run for run in runs if str(run.path) in set(long["run_dir"])}
    paper_model = PAPER_MODELS.get(spec.model, spec.model)
    parts = [f"Table {spec.number}: {spec.title}."]
    parts.append(f"Paper: {paper_model}, the paper's full protocol, numbers as printed." if paper_model else "")
    filled = int(long["ours"].notna().sum())
    if used:
        names = sorted({run.model for run in used.values()})
        described = [
            f"{name} (offline stand-in for the paper's {paper_model})" if paper_model and name != spec.model else name
            for name in names
        ]
        parts.append("Ours: " + ", ".join(described) + ".")
        parts.append("Data: " + "; ".join(sorted({run.slice_text() for run in used.values()})) + ".")
        parts.extend(provenance_notes(used.values()))
        parts.extend(_run_notes(long, list(used.values())))
    else:
        parts.append("Ours: no finished run matches this table yet.")
    units: dict[str, list[str]] = {}
    for metric in dict.fromkeys(long["metric"]):
        units.setdefault(METRICS[metric].unit, []).append(METRICS[metric].label)
    parts.append("Units: " + "; ".join(f"{', '.join(labels)} in {unit}" for unit, labels in units.items()) + ".")
    parts.append(
        f"Ours with its bootstrap 95% interval over questions (n=K instead under {MIN_INTERVAL_N} questions); "
        f"Δ = ours − paper; {MISSING} = no finished run. Cells filled: {filled}/{len(long)}."
    )
    if spec.significance:
        tested = int(long["vs_n"].notna().sum())
        marked = int(long["significant"].fillna(False).astype(bool).sum())
        parts.append(
            f"{DAGGER} = {spec.significance.upper()} − this row over the same questions (paired bootstrap, "
            f"{PAIRED_SAMPLES:,} resamples; same model and data) has a 95% interval excluding 0: {marked} of "
            f"{tested} tested cells; no mark under {MIN_INTERVAL_N} paired questions. The CSV holds each "
            "difference (vs_diff), its interval, p and n."
        )
    if any(row.get("label", "").endswith("(not in the paper)") for row in spec.rows):
        parts.append(
            "Rows marked “not in the paper” are the agent-memory literature's reference baselines: the whole "
            "episode as context (cut from the oldest end at a token budget) and an empty context; the paper "
            "has no numbers for them."
        )
    parts.extend(spec.notes)
    return " ".join(part for part in parts if part)


def _run_notes(long: pd.DataFrame, used: list[RunRecord]) -> list[str]:
    """Protocol differences visible in the runs' own records."""
    notes = []
    keys = set(long["metric"])
    for run in used:
        if run.method == "full_context":
            cut = sum(bool((row.get("telemetry") or {}).get("truncated")) for row in run.predictions)
            notes.append(
                f"Full context ({run.dataset}): truncated at the budget for {cut} of {run.questions} questions."
            )
    judges = sorted({str((run.metrics.get("judge") or {}).get("label")) for run in used if run.metrics.get("judge")})
    if judges and keys & set(JUDGE_KEYS):
        notes.append(f"J = LLM-judge accuracy by {', '.join(judges)}.")
    if "bert_f1" in keys:
        settings = [run.metrics.get("settings") or {} for run in used]
        proxies = sorted({s.get("bert_model", "?") for s in settings if not s.get("bert_is_paper_model")})
        if proxies:
            notes.append(
                f"BERT-F1 computed with {', '.join(proxies)} (a proxy; the paper's is roberta-large): "
                "not comparable with the paper's BERT-F1."
            )
    if any(METRICS[key].source == "latency" for key in keys):
        notes.append("Our retrieval time excludes the question-keyword call, as the authors time it.")
        runners = [run.config.get("runner") or {} for run in used]
        batches = sorted({int(r.get("answer_batch_size", 1)) for r in runners})
        if any(size > 1 for size in batches):
            notes.append(
                f"Our end-to-end time spreads one batched answer call over its batch (answer_batch_size={batches}), "
                "so it is not one question's latency: run experiment=table2 for that."
            )
        if not all(r.get("warmup") for r in runners):
            notes.append("Some runs had no untimed warm-up call (runner.warmup=false); the paper excludes warm-up.")
    return notes


def to_markdown(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub pipe table (column levels joined by a space), without needing ``tabulate``."""

    def cell(value: Any) -> str:
        return str(value).replace("|", r"\|").replace("\n", " ")

    headers = [" ".join(p for p in c if p) if isinstance(c, tuple) else str(c) for c in frame.columns]
    lead = [frame.index.name or ""] if index else []
    lines = ["| " + " | ".join(cell(h) for h in [*lead, *headers]) + " |"]
    lines.append("|" + "---|" * (len(headers) + len(lead)))
    for label, row in frame.iterrows():
        lines.append("| " + " | ".join(cell(v) for v in [*([label] if index else []), *row.tolist()]) + " |")
    return "\n".join(lines)


def to_latex(frame: pd.DataFrame, caption_text: str, label: str, index: bool = True) -> str:
    """LaTeX via pandas' Styler (booktabs rules, centred multi-column headers); cells are pre-escaped."""
    styler = frame.style if index else frame.style.hide(axis="index")
    return styler.to_latex(
        caption=escape_latex(caption_text), label=label, hrules=True, multicol_align="c", position="htbp"
    )


def write_table(
    out_dir: Path,
    number: int,
    title: str,
    sections: Sequence[tuple[str, pd.DataFrame]],
    latex_frame: pd.DataFrame,
    data: pd.DataFrame,
    caption_text: str,
    index: bool = True,
) -> list[Path]:
    """Write ``tableNN.md`` (every section), ``tableNN.tex`` and ``tableNN.csv`` (``data``, rounded)."""
    stem = out_dir / f"table{number:02d}"
    body = [f"# Table {number}: {title}", "", caption_text, ""]
    for heading, frame in sections:
        body += ([f"## {heading}", ""] if heading else []) + [to_markdown(frame, index), ""]
    paths = [stem.with_suffix(".md"), stem.with_suffix(".tex"), stem.with_suffix(".csv")]
    paths[0].write_text("\n".join(body), encoding="utf-8")
    paths[1].write_text(to_latex(latex_frame, caption_text, f"tab:ours-{number:02d}", index), encoding="utf-8")
    data.round(4).to_csv(paths[2], index=False)
    return paths


@dataclass
class Rendered:
    """What one table rendering produced, for the index.

    Attributes:
        summary: How much of the table our runs filled (``10/30 cells``, ``5 methods``).
        scale: The scale of the runs behind it (``reference``, ``demo``, ``full``; "" without runs).
    """

    number: int
    title: str
    files: list[Path]
    summary: str
    scale: str
    filled: bool


def render_compare(
    spec: TableSpec, runs: list[RunRecord], defaults: Defaults, out_dir: Path
) -> tuple[Rendered, pd.DataFrame]:
    """Render one side-by-side table; returns what was written and the long frame (for plots)."""
    long = compare_frame(spec, runs, defaults)
    long[["n", "seed", "vs_n"]] = long[["n", "seed", "vs_n"]].astype("Int64")
    text = caption(spec, long, runs)
    files = write_table(out_dir, spec.number, spec.title, [("", wide_frame(long))], wide_frame(long, True), long, text)
    filled = int(long["ours"].notna().sum())
    scale = " / ".join(sorted(set(long["scale"]) - {""}))
    return Rendered(spec.number, spec.title, files, f"{filled}/{len(long)} cells", scale, filled > 0), long


def render_cases(table: cases.CaseTable, out_dir: Path) -> Rendered:
    """Render one of Tables 11-14: ours, then the paper's for reference."""
    latex = table.ours.map(lambda v: escape_latex(str(v)))
    latex.columns = [escape_latex(str(c)) for c in latex.columns]
    sections = [("Ours", table.ours), ("Paper", table.paper)]
    files = write_table(out_dir, table.number, table.title, sections, latex, table.ours, table.caption, index=False)
    return Rendered(table.number, table.title, files, table.summary, table.scale, bool(table.summary))


def write_index(out_dir: Path, rendered: list[Rendered], figures: list[Path], runs_dir: Path, n_runs: int) -> Path:
    """``README.md`` listing every table and plot, with how many cells our runs filled."""
    lines = [
        "# Rendered tables: the paper's numbers beside ours",
        "",
        f"Generated by `python -m clag.tables --runs {runs_dir}` from {n_runs} finished run(s) "
        "(no timestamp: the same runs render the same files). Each table's caption names the model, data slice "
        "and machine behind our numbers; "
        "a scale other than *full* means sliced runs, whose numbers are not comparable with the paper's.",
        "",
        "| table | title | ours | scale | files |",
        "|---|---|---|---|---|",
    ]
    for item in sorted(rendered, key=lambda r: r.number):
        files = " ".join(f"[{p.suffix[1:]}]({p.name})" for p in item.files)
        summary, scale = item.summary or MISSING, item.scale or MISSING
        lines.append(f"| {item.number} | {item.title} | {summary} | {scale} | {files} |")
    if figures:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in figures]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def render_all(
    runs_dir: Path,
    out_dir: Path,
    judge: cases.Judge | None = None,
    numbers: Sequence[int] | None = None,
    spec_dir: Path = SPEC_DIR,
    defaults: Defaults | None = None,
    run_datasets: Mapping[int, str] | None = None,
) -> list[Path]:
    """Render every table (or ``numbers``), the plots and the index; returns the files written.

    Args:
        runs_dir: Root of the run folders.
        out_dir: Where tables and plots go (``results/tables``).
        judge: Classifies CLAG's failures for Tables 13-14; None leaves them
            unclassified (see :class:`clag.tables.cases.Judge`).
        numbers: Only these tables (default: all 16).
        spec_dir: Folder of the table specs.
        defaults: Shared table settings (default: ``spec_dir/defaults.yaml``).
        run_datasets: Table number -> the dataset whose runs fill its cells, where it is not the
            paper's (the reference runs Tables 9 and 10 on BioASQ; the caption says so).

    A table's J columns (``j_lenient``, ``j_strict`` and their ``_dated`` variants) are shown only for the
    judge prompts that the judge calibration governing ``runs_dir`` lets through
    (:mod:`clag.metrics.judge_calibration`), and only once some run carries them (``python -m clag.judge``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = find_runs(runs_dir)
    defaults = defaults or load_defaults(spec_dir)
    calibration = find_report(runs_dir)
    judged = {key for run in runs for key in JUDGE_KEYS if key in (run.metrics.get("overall") or {})}
    log.info("%d finished runs under %s", len(runs), runs_dir)
    wanted = set(numbers or range(1, 17))
    rendered, frames = [], {}
    for number in compare_numbers(spec_dir):
        if number in wanted:
            spec = load_spec(number, spec_dir)
            named = [m for m in spec.metrics if m]
            allowed = allowed_metrics(named, calibration and calibration[1])
            metrics = [m for m in allowed if m not in JUDGE_KEYS or m in judged]
            if metrics != named:  # J left out: no calibration lets it through, or no run is judged
                spec = replace(spec, metrics=metrics or [None])
            if dataset := (run_datasets or {}).get(number):
                spec = replace(
                    spec,
                    defaults={**spec.defaults, "run_dataset": dataset},
                    notes=[*spec.notes, f"Our cells come from {dataset} runs; the paper's from its own dataset."],
                )
            done, frames[spec.plot or number] = render_compare(spec, runs, defaults, out_dir)
            rendered.append(done)
    for table in cases.build_cases(runs, defaults, judge, wanted):
        rendered.append(render_cases(table, out_dir))
    figures = []
    for name, frame in frames.items():
        if name in plots.PLOTS:
            path = plots.PLOTS[name](frame, out_dir / f"fig_{name}.png")
            if path is not None:
                figures.append(path)
    index = write_index(out_dir, rendered, figures, runs_dir, len(runs))
    return [path for item in rendered for path in item.files] + figures + [index]
