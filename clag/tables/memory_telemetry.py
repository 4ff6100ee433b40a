"""How the agentic memories behaved, run by run: what the model's memory calls did, beside the scores.

Issue 29 asks what the authors' code does with a small model and which of
our departures from it matter. F1 alone cannot say; this report puts, for
every A-mem- and CLAG-family run under a runs folder (our settings, the
corrected conventions, the authors' code settings):

* F1 over LoCoMo's categories 1-4 (BioASQ: all) and R@10, with intervals;
* the memory: notes, the share whose evolution call said to evolve, links
  per note, and the mean share of an answer context that links brought
  (telemetry ``link_share``: a context made mostly of linked notes is one
  the search did not choose);
* CLAG's question-time pick: the share of questions answered from picked
  clusters (the rest searched globally) and the mean search space;
* per memory stage, the replies cut off at their budget (``truncated``), the
  replies echoing the prompt's placeholders (``placeholder_echoes``), the
  failed parses and the fallbacks taken. Runs older than a counter show
  ``—`` for it;
* each ``*_authors_code`` run against every run of its base method (our
  settings) on the same dataset and model that answered all its questions, paired over
  them (:func:`clag.compare.paired_difference`): F1 over categories 1-4, the
  temporal category's F1 and date match, R@10.

    python -m clag.tables.memory_telemetry results/reference/runs --out results/reference/memory_telemetry.md
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from clag.compare import paired_difference
from clag.metrics.aggregate import format_estimate
from clag.records.runs import RunRecord, find_runs
from clag.tables.collect import departures, report_main
from clag.tables.specs import load_defaults

FAMILY = ("amem", "amem_authors_code", "clag", "clag_authors_code")
MEMORY_STAGES = ("note", "evolve", "route", "profile", "pick")
COUNTERS = ("truncated", "placeholder_echoes", "parse_failures", "fallbacks")
AUTHORS_CODE = "_authors_code"
PAIRED = (  # (column, metric, LoCoMo categories)
    ("F1 (1-4)", "f1", (1, 2, 3, 4)),
    ("temporal F1", "f1", (2,)),
    ("temporal date match", "date_match", (2,)),
    ("R@10", "r10", None),
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _shown(value: float | None, form: str = "{:.2f}") -> str:
    return "—" if value is None else form.format(value)


def memory_stats(run: RunRecord) -> dict[str, float | None]:
    """Notes, evolution rate, links per note, link share, pick rate and mean search space of one run."""
    episodes = run.episode_structures
    notes = sum(int(s.get("notes", 0)) for s in episodes)
    telemetry = [row.get("telemetry") or {} for row in run.predictions]
    picked = [t["mode"] == "cluster" for t in telemetry if "clusters" in t and "mode" in t]
    return {
        "notes": float(notes),
        "evolution_rate": sum(int(s.get("evolutions", 0)) for s in episodes) / notes if notes else None,
        "links_per_note": sum(int(s.get("links", 0)) for s in episodes) / notes if notes else None,
        "link_share": _mean([float(t["link_share"]) for t in telemetry if "link_share" in t]),
        "pick_rate": _mean([float(p) for p in picked]),
        "search_space": _mean([float(t["search_space"]) for t in telemetry if "search_space" in t]),
    }


def stage_counters(run: RunRecord, stage: str) -> str:
    """``truncated / echoes / parse failures / fallbacks`` of one stage over the run's calls (``—`` where
    the run predates a counter; empty where the stage never ran)."""
    usage = run.metrics.get("usage") or {}
    row: dict[str, Any] = {**(usage.get("questions") or {}), **(usage.get("ingestion") or {})}.get(stage) or {}
    if not row.get("calls"):
        return ""
    return f"{row['calls']}: " + " / ".join(str(row[name]) if name in row else "—" for name in COUNTERS)


def _name(run: RunRecord, clag_default: dict[str, Any]) -> str:
    """``method``, ``method (variant)`` for CLAG's ablations, ``method (tau=0.15)`` for its sensitivity runs."""
    variant = run.config.get("variant_name")
    if variant and variant != "full":
        return f"{run.method} ({variant})"
    settings = departures(run, clag_default)
    return f"{run.method} ({settings})" if settings else run.method


def _score(run: RunRecord) -> str:
    table = (run.metrics.get("overall_sets") or {}).get("1-4") or run.metrics.get("overall") or {}
    return format_estimate(table.get("f1"))


def _r10(run: RunRecord) -> str:
    return format_estimate(((run.metrics.get("evidence") or {}).get("overall") or {}).get("r10"))


def telemetry_tables(runs: list[RunRecord], clag_default: dict[str, Any]) -> tuple[str, str]:
    """The behaviour table and the per-stage counter table (see the module docstring)."""
    chosen = sorted((r for r in runs if r.method in FAMILY),
                    key=lambda r: (r.dataset, _name(r, clag_default), r.model, r.exp))  # fmt: skip
    if not chosen:
        return "(no A-mem or CLAG runs)", ""
    behaviour = [
        "| dataset | method | model | experiment | F1 (1-4) | R@10 | notes | evolved | links / note "
        "| link share of context | picked | search space |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    counters = [
        f"| dataset | method | model | experiment | {' | '.join(MEMORY_STAGES)} |",
        "|---|---|---|---|" + "---|" * len(MEMORY_STAGES),
    ]
    for run in chosen:
        stats, name = memory_stats(run), _name(run, clag_default)
        behaviour.append(
            f"| {run.dataset} | {name} | {run.model} | {run.exp} | {_score(run)} | {_r10(run)} | "
            f"{_shown(stats['notes'], '{:.0f}')} | {_shown(stats['evolution_rate'], '{:.0%}')} | "
            f"{_shown(stats['links_per_note'])} | {_shown(stats['link_share'], '{:.0%}')} | "
            f"{_shown(stats['pick_rate'], '{:.0%}')} | {_shown(stats['search_space'], '{:.0f}')} |"
        )
        counters.append(
            f"| {run.dataset} | {name} | {run.model} | {run.exp} | "
            + " | ".join(stage_counters(run, stage) for stage in MEMORY_STAGES)
            + " |"
        )
    return "\n".join(behaviour), "\n".join(counters)


def _answered(run: RunRecord) -> set[str]:
    return {str(row.get("question_id")) for row in run.predictions}


def authors_code_table(runs: list[RunRecord], clag_default: dict[str, Any]) -> str:
    """Each authors'-code run minus each run of its base method (default variant and settings, same dataset and
    model) that answered every question it did, paired over those questions (see the module docstring)."""
    rows = []
    for theirs in sorted((r for r in runs if r.method.endswith(AUTHORS_CODE)), key=lambda r: (r.dataset, r.method)):
        base = theirs.method.removesuffix(AUTHORS_CODE)
        asked = _answered(theirs)
        locomo = theirs.dataset == "locomo"
        for ours in sorted(runs, key=lambda r: r.exp):
            # _name is the bare method only for plain settings: an ablation or a sensitivity run is never the base
            same = (ours.dataset, ours.model) == (theirs.dataset, theirs.model)
            if _name(ours, clag_default) != base or not same or not asked <= _answered(ours):
                continue
            cells = [
                "—" if not locomo and only == (2,)  # BioASQ has no temporal category: F1 and R@10 over all
                else format_estimate(
                    paired_difference(theirs.predictions, ours.predictions, metric, only if locomo else None),
                    signed=True,
                )
                for _, metric, only in PAIRED
            ]  # fmt: skip
            rows.append(f"| {theirs.dataset} | {theirs.method} − {base} | {ours.exp} | {len(asked)} | "
                        + " | ".join(cells) + " |")  # fmt: skip
    if not rows:
        return "(no authors'-code run with a base run over the same questions)"
    header = "| dataset | runs | ours from | questions | " + " | ".join(column for column, _, _ in PAIRED) + " |"
    return "\n".join([header, "|---|---|---|---|" + "---|" * len(PAIRED), *rows])


def render(runs_dir: Path) -> str:
    runs, clag_default = find_runs(runs_dir), load_defaults().clag_default
    behaviour, counters = telemetry_tables(runs, clag_default)
    return "\n\n".join(
        [
            f"# How the agentic memories behaved ({runs_dir})",
            "F1 over LoCoMo's categories 1-4 (BioASQ: all questions) and R@10 in %, with 95% bootstrap intervals. "
            "Evolved: the share of notes whose evolution call said to evolve. Link share: the mean share of an "
            "answer context's characters that links brought. Picked: the share of questions CLAG answered from "
            "the clusters it picked (the rest searched every note); search space: the notes searched, mean over "
            "questions. `—`: the run predates the counter.",
            behaviour,
            "Per memory stage: `calls: truncated / placeholder echoes / parse failures / fallbacks` (retries "
            "included in the calls; truncated = stopped at the token budget).",
            counters,
            "## The authors' code against ours",
            "Each authors'-code run (their sampling, budgets, cluster merge and acceptance of what the model "
            "returns) minus our run of the same method, paired over the questions both answered (percentage "
            "points, 95% bootstrap intervals; temporal = LoCoMo's category 2).",
            authors_code_table(runs, clag_default),
        ]
    ) + "\n"


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, "python -m clag.tables.memory_telemetry", __doc__, lambda runs, _out: render(runs))


if __name__ == "__main__":
    sys.exit(main())
