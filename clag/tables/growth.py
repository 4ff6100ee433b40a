"""Memory growth (issue 30): does CLAG's standing change as its memory grows?

The paper's central claim is that clustering pays off as the number of notes
rises; the reference slice stops at 150 turns. ``experiment=reference_growth``
runs RAG, A-mem and CLAG on two whole LoCoMo conversations at ingestion
checkpoints (``limit.items`` = 150, 300, all), each asking every question
whose evidence lies inside the turns ingested so far. This report reads
those runs and gives, per method and checkpoint:

* notes in memory (per conversation, mean), F1 over categories 1-4 and R@10
  with 95% bootstrap intervals, over that checkpoint's questions;
* the same F1 over the *fixed* questions (those the first checkpoint asks),
  so that a change across checkpoints is the memory's, not the question mix's;
* for CLAG, its clusters (mean per conversation) and the notes its pick
  searched (mean over questions);

then CLAG - A-mem and CLAG - RAG per checkpoint (paired over the same
questions), and the finding: the change of each gap from the first to the
last checkpoint over the fixed questions (a paired bootstrap of the
per-question difference of differences). The gap *narrows* (CLAG gains) or
*widens* only where that interval excludes 0; otherwise it *holds* (no
change shown). The figure plots F1 and R@10 against notes in memory, and
CLAG's clusters and search space beside them.

    python -m clag.tables.growth results/reference/runs/reference_growth --out results/reference/growth.md
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from clag.compare import paired_difference
from clag.metrics.aggregate import format_estimate, paired_bootstrap, summarize
from clag.records.runs import RunRecord, find_runs
from clag.tables import plots
from clag.tables.collect import report_main

METHODS = ("rag", "amem", "clag")
BASELINES = ("amem", "rag")
CATEGORIES = (1, 2, 3, 4)


def _rows(run: RunRecord) -> list[dict[str, Any]]:
    return [row for row in run.predictions if int(row.get("category") or 0) in CATEGORIES]


def checkpoints(runs: Sequence[RunRecord]) -> dict[int, dict[str, RunRecord]]:
    """``{turns: {method: run}}`` for the growth runs (the newest run where a cell has several)."""
    out: dict[int, dict[str, RunRecord]] = {}
    for run in sorted(runs, key=lambda r: r.mtime):
        items = (run.config.get("limit") or {}).get("items")
        if run.method in METHODS and items:
            out.setdefault(int(items), {})[run.method] = run
    return dict(sorted(out.items()))


def run_stats(run: RunRecord, fixed: set[str]) -> dict[str, Any]:
    """Notes, F1 (1-4), F1 over the fixed questions, R@10, CLAG's clusters and search space."""
    episodes = run.episode_structures
    notes = [float(s.get("notes", s.get("items", 0))) for s in episodes]
    rows = _rows(run)
    space = [float(t["search_space"]) for t in (row.get("telemetry") or {} for row in rows) if "search_space" in t]
    clusters = [float(s["clusters"]) for s in episodes if "clusters" in s]
    return {
        "notes": float(np.mean(notes)) if notes else None,
        "f1": summarize([float(row["f1"]) for row in rows]),
        "f1_fixed": summarize([float(row["f1"]) for row in rows if row["question_id"] in fixed]),
        "r10": summarize([float(row["r10"]) for row in rows if row.get("r10") is not None]),
        "clusters": float(np.mean(clusters)) if clusters else None,
        "search_space": float(np.mean(space)) if space and run.method == "clag" else None,
    }


def gap_change(first: Mapping[str, RunRecord], last: Mapping[str, RunRecord], baseline: str,
               fixed: set[str]) -> dict[str, Any] | None:  # fmt: skip
    """(CLAG - baseline) at the last checkpoint minus at the first, per fixed question, bootstrapped."""
    def f1(run: RunRecord) -> dict[str, float]:
        return {row["question_id"]: float(row["f1"]) for row in _rows(run) if row["question_id"] in fixed}

    runs = [first.get("clag"), first.get(baseline), last.get("clag"), last.get(baseline)]
    if any(run is None for run in runs):
        return None
    scores = [f1(run) for run in runs if run is not None]
    shared = sorted(set.intersection(*(set(s) for s in scores)))
    if not shared:
        return None
    clag_first, base_first, clag_last, base_last = ([s[q] for q in shared] for s in scores)
    later = [c - b for c, b in zip(clag_last, base_last)]
    earlier = [c - b for c, b in zip(clag_first, base_first)]
    return paired_bootstrap(later, earlier)


def _turns(turns: int) -> str:
    return "all" if turns >= 1000 else str(turns)


def _number(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def trend(change: Mapping[str, Any] | None) -> str:
    if change is None:
        return "not measured"
    if change["ci_low"] > 0:
        return "narrows (CLAG gains on it)"
    if change["ci_high"] < 0:
        return "widens (CLAG loses ground)"
    return "holds (no change shown)"


def plot_growth(stats: Mapping[int, Mapping[str, Mapping[str, Any]]], path: Path | None) -> Path | None:
    """F1 (1-4) and R@10 against notes in memory per method, and CLAG's clusters and search space."""
    if not stats:
        return None
    figure = Figure(figsize=(13, 3.8))
    axes = figure.subplots(1, 3)
    for key, ax, label in (("f1", axes[0], "F1, categories 1-4 (%)"), ("r10", axes[1], "R@10 (%)")):
        for method in METHODS:
            points = [(s[method]["notes"], s[method][key]) for s in stats.values() if method in s]
            points = [(x, v) for x, v in points if x is not None and v["mean"] is not None]
            if not points:
                continue
            x = [p[0] for p in points]
            y = [100 * p[1]["mean"] for p in points]
            err = [[100 * (p[1]["mean"] - p[1]["ci_low"]) for p in points],
                   [100 * (p[1]["ci_high"] - p[1]["mean"]) for p in points]]  # fmt: skip
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=method)
        ax.set_xlabel("notes in memory (per conversation)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    clag = [(s["clag"]["notes"], s["clag"]) for s in stats.values() if "clag" in s and s["clag"]["notes"]]
    ax = axes[2]
    if clag:
        x = [p[0] for p in clag]
        ax.plot(x, x, linestyle=":", color="grey", label="notes in memory")
        ax.plot(x, [p[1]["search_space"] or np.nan for p in clag], marker="o", label="notes the pick searched")
        ax.set_xlabel("notes in memory (per conversation)")
        ax.set_ylabel("notes")
        twin = ax.twinx()
        twin.plot(x, [p[1]["clusters"] or np.nan for p in clag], marker="s", color="tab:red", label="clusters")
        twin.set_ylabel("clusters (per conversation)")
        ax.legend(fontsize=7, loc="upper left")
        twin.legend(fontsize=7, loc="lower right")
    ax.set_title("CLAG's clusters and search space")
    figure.suptitle("Memory growth: LoCoMo conv-26 and conv-30 at ingestion checkpoints")
    return plots._save(figure, path)


def render(runs_dir: Path, out: Path | None = None) -> str:
    """The growth report as Markdown; the figure goes beside ``out`` (``<out stem>.png``)."""
    cells = checkpoints(find_runs(runs_dir))
    if not cells:
        return f"# Memory growth ({runs_dir})\n\n(no runs of experiment=reference_growth yet)\n"
    first_turns, last_turns = min(cells), max(cells)
    first, last = cells[first_turns], cells[last_turns]
    anchor = first.get("clag") or next(iter(first.values()))
    fixed = {row["question_id"] for row in _rows(anchor)}
    stats = {turns: {m: run_stats(run, fixed) for m, run in by.items()} for turns, by in cells.items()}
    table = [
        "| turns ingested | method | notes | questions | F1 (1-4) | F1, fixed questions | R@10 | clusters "
        "| notes the pick searched |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for turns, by in stats.items():
        for method in METHODS:
            if method not in by:
                continue
            s = by[method]
            table.append(
                f"| {_turns(turns)} | {method} | {s['notes']:.0f} | {s['f1']['n']} | {format_estimate(s['f1'])} | "
                f"{format_estimate(s['f1_fixed'])} | {format_estimate(s['r10'])} | {_number(s['clusters'], 1)} | "
                f"{_number(s['search_space'], 0)} |"
            )
    gaps = ["| turns ingested | " + " | ".join(f"CLAG - {b}" for b in BASELINES) + " |", "|---|---|---|"]
    for turns, by in cells.items():
        cells_text = []
        for baseline in BASELINES:
            diff = (
                paired_difference(_rows(by["clag"]), _rows(by[baseline]), "f1", samples=10000)
                if "clag" in by and baseline in by
                else None
            )
            cells_text.append(format_estimate(diff, signed=True))
        gaps.append(f"| {_turns(turns)} | " + " | ".join(cells_text) + " |")
    findings = []
    for baseline in BASELINES:
        change = gap_change(first, last, baseline, fixed)
        findings.append(
            f"- CLAG's gap to {baseline} from {first_turns} turns to "
            f"{_turns(last_turns)}, over the {len(fixed)} fixed questions: "
            f"{format_estimate(change, signed=True)} F1 points: **{trend(change)}**."
        )
    figure = plot_growth(stats, out.with_suffix(".png") if out else None)
    parts = [
        f"# Memory growth ({runs_dir})",
        "RAG, A-mem and CLAG at ingestion checkpoints of the same two LoCoMo conversations (experiment="
        "reference_growth). Each checkpoint asks every question whose evidence lies in the turns ingested; "
        f"the fixed questions are the {len(fixed)} the first checkpoint asks, scored again at every later one. "
        "F1 and R@10 in %, 95% bootstrap intervals; notes and clusters are means per conversation.",
        "\n".join(table),
        "CLAG - baseline, F1 (1-4), paired over each checkpoint's questions (10,000 resamples):",
        "\n".join(gaps),
        "\n".join(findings),
    ]
    if figure is not None:
        parts.append(f"![memory growth]({figure.name})")
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, "python -m clag.tables.growth", __doc__, render)


if __name__ == "__main__":
    sys.exit(main())
