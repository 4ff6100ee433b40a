"""What a set of runs says about the paper's claims, and why: paired tests and CLAG's telemetry.

The reference run (``make reference``) is the first one large enough for its
numbers to mean something, so its outcome is written as findings rather than
only as tables beside the paper's:

* **claims**: for each claim the slice can test (CLAG ahead of each baseline
  on each dataset, on LoCoMo also without its adversarial category 5, whose
  "not mentioned" answers can carry an overall lead alone; agentic routing
  ahead of cosine / K-Means routing, Table 5; localized evolution and
  two-stage retrieval ahead of their global versions, Table 7), the paired
  difference over the same questions
  (:func:`clag.compare.paired_difference`) with its 95% interval, and a
  verdict that only says "ahead" or "behind" when the interval excludes 0;
* **telemetry**: per CLAG run, how its clusters formed (count and sizes per
  episode), how notes were routed (agentic picks vs fallbacks vs new
  clusters), how often the question-time picker chose clusters vs left the
  search global, whether the picked clusters held the question's evidence,
  and how often the small model's JSON failed per stage (an echoed
  placeholder counts as a failure: :mod:`clag.llm.json_parse`);
* **evidence reach**: the R@10 of CLAG and of each retrieving baseline over
  the same questions, grouped by whether CLAG's picked clusters held all, part
  or none of their evidence, which tells pruning from ranking;
* **failure attribution**: every wrong answer of every method's run sorted by
  where its evidence was lost (never stored, pruned by CLAG's pick, ranked
  out, or in the context and answered wrong), from ids alone
  (:mod:`clag.metrics.attribution`), as a table and a stacked-bar plot;
* **history** (with ``--previous RUNS``): each run against the earlier run of
  the same method, dataset and switches under ``RUNS``, paired over the same
  questions, so that a re-run's findings keep the numbers they replace
  (the corrected reference against the first one, issue 29).

    python -m clag.tables.findings results/reference/runs --out results/reference/findings.md
    python -m clag.tables.findings results/reference/runs/reference_corrected \
        --previous results/reference/runs/reference --out results/reference/findings.md

With ``--out``, the attribution plot is written beside it (``<out>-attribution.png``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from clag.compare import paired_difference
from clag.metrics.aggregate import JUDGE_KEYS, format_estimate
from clag.metrics.attribution import CLASSES, attribution
from clag.metrics.judge_calibration import allowed_metrics, find_report, judge_note
from clag.metrics.scoring import category_number
from clag.records.runs import RunRecord, find_runs
from clag.tables import plots
from clag.tables.collect import departures, machines, matches, report_main, select_run
from clag.tables.conventions import date_forms
from clag.tables.specs import load_defaults, load_spec

BASELINES = ("rag", "amem", "gam", "memoryos", "full_context", "no_memory")
RETRIEVERS = ("rag", "amem", "gam", "memoryos")  # the baselines that rank evidence
METRICS = ("f1", "bleu1", *JUDGE_KEYS)  # J only where the judge calibration lets it through


@dataclass(frozen=True)
class Claim:
    """One comparison the paper makes: run A (``method`` + ``where``) ahead of run B on ``dataset``
    (over the questions of ``categories`` only, where given)."""

    label: str
    dataset: str
    a: tuple[str, dict[str, Any]]
    b: tuple[str, dict[str, Any]]
    source: str = ""
    metrics: tuple[str, ...] = METRICS
    categories: tuple[int, ...] | None = None
    adversarial: str = "paper"  # how LoCoMo's category 5 is scored (clag.compare.paired_difference)


@dataclass
class Finding:
    claim: Claim
    per_metric: dict[str, dict[str, Any] | None] = field(default_factory=dict)


def default_claims(clag_default: dict[str, Any]) -> list[Claim]:
    """The paper's comparisons a LoCoMo + BioASQ + HotpotQA slice can test (a claim without its runs is skipped)."""
    clag = ("clag", dict(clag_default))
    claims = []
    for baseline in BASELINES:  # LoCoMo: categories 1-4 lead; 1-5 under both scorings of category 5 follow
        pair = (clag, (baseline, {}))
        claims += [
            Claim(f"CLAG vs {baseline} on locomo, categories 1-4", "locomo", *pair, "Table 3", categories=(1, 2, 3, 4)),
            Claim(f"CLAG vs {baseline} on locomo, 1-5, category 5 as the paper scores it", "locomo", *pair,
                  "Tables 1, 3, 15"),
            Claim(f"CLAG vs {baseline} on locomo, 1-5, category 5 as LoCoMo scores it", "locomo", *pair,
                  "LoCoMo's official", adversarial="official"),
        ]  # fmt: skip
    for dataset in ("bioasq", "hotpotqa"):
        for baseline in BASELINES:
            claims.append(Claim(f"CLAG vs {baseline} on {dataset}", dataset, clag, (baseline, {}), "Tables 1, 15"))
    for label, where in (
        ("agentic vs cosine routing", {"routing": "cosine"}),
        ("agentic vs K-Means routing", {"routing": "kmeans"}),
    ):
        claims.append(Claim(label, "bioasq", clag, ("clag", {**clag_default, **where}), "Table 5"))
    for label, where in (
        ("localized vs global evolution", {"evolution_scope": "global"}),
        ("two-stage vs global retrieval", {"retrieval": "global"}),
    ):
        claims.append(Claim(label, "bioasq", clag, ("clag", {**clag_default, **where}), "Table 7"))
    return claims


def _run(runs: list[RunRecord], method: str, dataset: str, where: dict[str, Any]) -> RunRecord | None:
    """The run of ``method`` whose explicit switches equal ``where`` (a variant never stands in for another)."""
    exact = [r for r in runs if matches(r, method, dataset, [], where) and all(k in r.params for k in where)]
    return select_run(exact, method, dataset, [], where, [])


def evaluate(runs: list[RunRecord], claims: Sequence[Claim], samples: int = 10000) -> list[Finding]:
    """Paired differences A - B for every claim whose two runs exist."""
    findings = []
    for claim in claims:
        run_a = _run(runs, claim.a[0], claim.dataset, claim.a[1])
        run_b = _run(runs, claim.b[0], claim.dataset, claim.b[1])
        if run_a is None or run_b is None or run_a.path == run_b.path:
            continue
        finding = Finding(claim)
        for metric in claim.metrics:
            finding.per_metric[metric] = paired_difference(
                run_a.predictions, run_b.predictions, metric, claim.categories, samples, adversarial=claim.adversarial
            )
        findings.append(finding)
    return findings


def verdict(result: dict[str, Any] | None) -> str:
    """``ahead`` / ``behind`` only when the 95% interval of A - B excludes 0."""
    if result is None:
        return "—"
    if result["ci_low"] > 0:
        return "ahead"
    if result["ci_high"] < 0:
        return "behind"
    return "no difference shown"


def claims_table(findings: Sequence[Finding]) -> str:
    metrics = sorted({m for f in findings for m, result in f.per_metric.items() if result}, key=METRICS.index)
    header = "| claim (A vs B) | dataset | paper | n | " + " | ".join(f"{m}: A - B [95% CI], verdict" for m in metrics)
    lines = [header + " |", "|" + "---|" * (4 + len(metrics))]
    for finding in findings:
        cells, counts = [], {}
        for metric in metrics:
            result = finding.per_metric.get(metric)
            if result is None:
                cells.append("—")
                continue
            counts[metric] = result["n"]
            cells.append(f"{format_estimate(result, signed=True)}, {verdict(result)}")
        claim = finding.claim
        n = question_counts(counts)
        lines.append(f"| {claim.label} | {claim.dataset} | {claim.source} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def question_counts(counts: dict[str, int]) -> str:
    """The n column: the first metric's question count, and the metrics paired over another count named
    beside it (the judge leaves out a question it could not score: F1 60, J 59)."""
    if not counts:
        return "—"
    first = next(iter(counts.values()))
    others: dict[int, list[str]] = {}
    for metric, n in counts.items():
        if n != first:
            others.setdefault(n, []).append(metric)
    beside = "; ".join(f"{n} for {', '.join(names)}" for n, names in others.items())
    return f"{first} ({beside})" if beside else str(first)


def clag_telemetry(run: RunRecord) -> dict[str, Any]:
    """Clusters, routing, picking and JSON failures of one CLAG run, from its metrics and predictions."""
    structure = run.metrics.get("structure") or {}
    counts = [int(s.get("clusters") or 0) for s in structure.values()]
    sizes = [int(v) for s in structure.values() for v in (s.get("cluster_sizes") or {}).values()]
    routes: Counter[str] = Counter()
    route_fallbacks = 0
    for s in structure.values():
        routes.update(s.get("routing") or {})
        route_fallbacks += int(s.get("route_fallbacks_total") or 0)
    rows = run.predictions
    telemetry = [row.get("telemetry") or {} for row in rows]
    picked = [t for t in telemetry if "selected" in t]
    usage = run.metrics.get("usage") or {}
    failures: dict[str, str] = {}
    for phase in ("ingestion", "questions"):
        for stage, c in (usage.get(phase) or {}).items():
            if c.get("json_calls"):
                failures[stage] = f"{int(c.get('parse_failures', 0))}/{int(c['json_calls'])}"
    total_routes = sum(routes.values())
    return {
        "episodes": len(structure),
        "clusters per episode": f"{np.mean(counts):.1f} ({min(counts)}-{max(counts)})" if counts else "—",
        "cluster size": f"{np.mean(sizes):.1f} (max {max(sizes)})" if sizes else "—",
        "routes": ", ".join(f"{k} {v}" for k, v in routes.most_common()) or "—",
        "route fallbacks": f"{route_fallbacks}/{total_routes}" if total_routes else "—",
        "questions picking clusters": f"{sum(bool(t.get('selected')) for t in picked)}/{len(picked)}",
        "questions searched in clusters": f"{sum(t.get('mode') == 'cluster' for t in telemetry)}/{len(telemetry)}",
        "pick fallbacks": f"{sum(bool(t.get('pick_fallback')) for t in picked)}/{len(picked)}",
        "mean search space / notes": _ratio(telemetry),
        **_evidence_reach(run),
        "JSON failures (failed/JSON calls)": ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "—",
    }


Key = tuple[str, str]
REACH = ("all", "part", "none")  # how much of a question's evidence the picked clusters held


def _key(row: dict[str, Any]) -> Key:
    return str(row.get("episode_id")), str(row.get("question_id"))


Members = dict[str, dict[str, list[str]]]  # per episode: cluster id -> the source ids it holds


def cluster_members(run: RunRecord) -> Members:
    """Per episode, CLAG's cluster members as its structure records them (empty for runs before it did)."""
    structure = run.metrics.get("structure") or {}
    return {str(e): members for e, s in structure.items() if (members := (s or {}).get("cluster_members"))}


def reach_groups(rows: list[dict[str, Any]], members_by_episode: Members) -> dict[str, list[Key]]:
    """The questions whose picked clusters held all, part or none of their evidence. Over questions
    with evidence whose search was narrowed to clusters, in episodes whose structure lists the
    members (runs before it did have no groups)."""
    groups: dict[str, list[Key]] = {reach: [] for reach in REACH}
    for row in rows:
        members = members_by_episode.get(str(row.get("episode_id")))
        telemetry = row.get("telemetry") or {}
        evidence = set(row.get("evidence_ids") or [])
        if not members or not evidence or telemetry.get("mode") != "cluster":
            continue
        searched = {source for cid in telemetry.get("selected") or [] for source in members.get(cid, [])}
        inside = len(evidence & searched)
        groups["all" if inside == len(evidence) else "part" if inside else "none"].append(_key(row))
    return groups


def _by_question(rows: list[dict[str, Any]], metric: str) -> dict[Key, float]:
    """Each question's score; a question without one (unjudged, unscored) is left out, not counted 0."""
    return {_key(row): float(row[metric]) for row in rows if row.get(metric) is not None}


def _mean_over(scores: dict[Key, float], keys: list[Key]) -> str:
    """Mean score (%) over the questions ``keys``; a run missing some says over how many."""
    values = [scores[k] for k in keys if k in scores]
    if not values:
        return "—"
    return f"{100 * np.mean(values):.1f}" + (f" ({len(values)}/{len(keys)})" if len(values) < len(keys) else "")


def _evidence_reach(run: RunRecord) -> dict[str, str]:
    """Whether the picked clusters held each question's evidence, and the evidence recall (R@10) in
    each case: where the picker prunes the evidence away, no ranking can find it."""
    groups = reach_groups(run.predictions, cluster_members(run))
    r10 = _by_question(run.predictions, "r10")
    counted = sum(len(v) for v in groups.values())
    if not counted:
        return {"evidence in the picked clusters (all/part/none)": "—", "R@10 (all/part/none)": "—"}
    return {
        "evidence in the picked clusters (all/part/none)": "/".join(str(len(v)) for v in groups.values())
        + f" of {counted}",
        "R@10 (all/part/none)": "/".join(_mean_over(r10, v) for v in groups.values()),
    }


def reach_table(runs: list[RunRecord], clag_default: dict[str, Any], judge_metrics: Sequence[str] = ()) -> str:
    """R@10 and F1 of the default CLAG run and of each retrieving baseline over the same questions,
    grouped by where CLAG's picker left the evidence: a gap in the "none" group is pruning, a gap in
    the "all" group is ranking (or answering) inside the clusters. F1 leaves LoCoMo's category 5 out,
    as the headlines do, and so do the J of ``judge_metrics`` (the calibrated ones: each over the
    questions its judge scored, a row only where a run was judged). Full context and no memory rank
    nothing and are left out."""
    body = []
    for dataset in sorted({r.dataset for r in runs}):
        clag = _run(runs, "clag", dataset, clag_default)
        if clag is None:
            continue
        groups = reach_groups(clag.predictions, cluster_members(clag))
        if not any(groups.values()):
            continue
        adversarial = {_key(row) for row in clag.predictions if category_number(row.get("category")) == 5}
        answerable = {reach: [k for k in keys if k not in adversarial] for reach, keys in groups.items()}
        body.append(f"| {dataset} | questions | " + " | ".join(str(len(v)) for v in groups.values()) + " |")
        if adversarial:
            cells = " | ".join(str(len(v)) for v in answerable.values())
            body.append(f"| {dataset} | of them outside category 5 | {cells} |")
        judged = [(m, m, answerable) for m in judge_metrics]
        for metric, label, over in (("r10", "R@10", groups), ("f1", "F1", answerable), *judged):
            for method in ("clag", *RETRIEVERS):
                run = clag if method == "clag" else _run(runs, method, dataset, {})
                scores = _by_question(run.predictions, metric) if run is not None else {}
                if scores:
                    cells = " | ".join(_mean_over(scores, v) for v in over.values())
                    body.append(f"| {dataset} | {method} {label} | {cells} |")
    if not body:
        return "(no CLAG run with cluster members)"
    header = "| dataset | | " + " | ".join(f"{reach} of it" for reach in REACH) + " |"
    return "\n".join([header, "|---|---|" + "---|" * len(REACH), *body])


def category5_table(runs: list[RunRecord], clag_default: dict[str, Any]) -> str:
    """LoCoMo's category 5 apart, scored both ways per method, the no-memory floor among them: F1 against
    the adversarial answer (the paper's scoring: it rewards naming the trap) and LoCoMo's official score
    (the share of abstentions)."""
    body = []
    for method in ("clag", *BASELINES):
        run = _run(runs, method, "locomo", clag_default if method == "clag" else {})
        if run is None:
            continue
        five = (run.metrics.get("by_category") or {}).get("5") or {}
        paper, official = five.get("f1"), five.get("adversarial_official")
        n = (paper or {}).get("n", "—")
        body.append(f"| {method} | {n} | {format_estimate(paper)} | {format_estimate(official)} |")
    if not body:
        return "(no LoCoMo runs)"
    header = "| method | n | F1 vs the adversarial answer (paper) | abstentions (LoCoMo's official) |"
    return "\n".join([header, "|---|---|---|---|", *body])


def run_attribution(run: RunRecord) -> Counter[str]:
    """:func:`clag.metrics.attribution.attribution` of one run, with what its structure says its memory
    held: nothing for no memory, CLAG's cluster members where recorded, every item otherwise."""
    members = cluster_members(run)
    memory: dict[str, set[str] | None] = {}
    for episode in {str(row.get("episode_id")) for row in run.predictions}:
        if run.method == "no_memory":
            memory[episode] = set()
        elif members.get(episode):
            memory[episode] = {str(i) for ids in members[episode].values() for i in ids}
    return attribution(run.predictions, run.dataset, memory, members)


def attribution_rows(runs: list[RunRecord], clag_default: dict[str, Any]) -> list[tuple[str, str, Counter[str]]]:
    """``(dataset, method, counts)`` for each dataset's default run of every method, CLAG first."""
    out = []
    for dataset in sorted({r.dataset for r in runs}):
        for method in ("clag", *BASELINES):
            run = _run(runs, method, dataset, clag_default if method == "clag" else {})
            if run is None:
                continue
            unrecorded = method == "clag" and not cluster_members(run)
            label = f"{method} (members not recorded: pruned counted as not retrieved)" if unrecorded else method
            out.append((dataset, label, run_attribution(run)))
    return out


def attribution_table(rows: list[tuple[str, str, Counter[str]]]) -> str:
    """Wrong answers per class, as counts with their share of the run's wrong answers."""
    if not rows:
        return "(no runs)"
    header = "| dataset | method | wrong / answered | " + " | ".join(CLASSES) + " |"
    body = [header, "|---|---|---|" + "---|" * len(CLASSES)]
    for dataset, method, counts in rows:
        wrong = counts["wrong"]
        cells = [f"{counts[c]} ({100 * counts[c] / wrong:.0f}%)" if wrong else "0" for c in CLASSES]
        body.append(f"| {dataset} | {method} | {wrong} / {counts['answered']} | " + " | ".join(cells) + " |")
    return "\n".join(body)


def _ratio(telemetry: list[dict[str, Any]]) -> str:
    spaces = [(t["search_space"], t["total_notes"]) for t in telemetry if t.get("total_notes")]
    if not spaces:
        return "—"
    return f"{np.mean([s for s, _ in spaces]):.0f} / {np.mean([n for _, n in spaces]):.0f}"


def telemetry_table(runs: list[RunRecord], clag_default: dict[str, Any]) -> str:
    clag_runs = sorted((r for r in runs if r.method == "clag"), key=lambda r: (r.dataset, _variant(r, clag_default)))
    if not clag_runs:
        return "(no CLAG run)"
    columns = [(f"{r.dataset} / {_variant(r, clag_default)}", clag_telemetry(r)) for r in clag_runs]
    keys = list(columns[0][1])
    lines = ["| | " + " | ".join(label for label, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {key} | " + " | ".join(str(values[key]) for _, values in columns) + " |" for key in keys]
    return "\n".join(lines)


SWITCHES = ("routing", "evolution_scope", "retrieval")  # the ablations' switches, named in every CLAG label


def _variant(run: RunRecord, clag_default: dict[str, Any]) -> str:
    """The run's switches, then any other setting it departs from plain CLAG in (a sensitivity run's tau)."""
    p = run.params
    label = f"{p.get('routing')}, {p.get('evolution_scope')} evolution, {p.get('retrieval')} retrieval"
    settings = departures(run, {k: v for k, v in clag_default.items() if k not in SWITCHES})
    return f"{label}, {settings}" if settings else label


def _history_row(now: RunRecord, then: RunRecord, clag_default: dict[str, Any]) -> str:
    """One history row: LoCoMo's categories 1-4 (else every question), its temporal questions, R@10."""
    locomo = now.dataset == "locomo"
    categories = (1, 2, 3, 4) if locomo else None

    def change(metric: str, only: tuple[int, ...] | None) -> str:
        return format_estimate(paired_difference(now.predictions, then.predictions, metric, only), signed=True)

    def rows(run: RunRecord, only: tuple[int, ...] | None) -> list[dict[str, Any]]:
        return [dict(r) for r in run.predictions if only is None or category_number(r.get("category")) in only]

    def mean(run: RunRecord, metric: str, only: tuple[int, ...] | None) -> str:
        values = [r[metric] for r in rows(run, only) if r.get(metric) is not None]
        return f"{100 * float(np.mean(values)):.2f}" if values else "—"

    def iso(run: RunRecord) -> str:
        temporal = [str(r.get("prediction") or "") for r in rows(run, (2,))]
        return f"{date_forms(temporal)[0]}/{len(temporal)}"

    cells = [f"{mean(then, 'f1', categories)} → {mean(now, 'f1', categories)}", change("f1", categories)]
    if locomo:
        cells += [change("f1", (2,)), f"{mean(then, 'date_match', (2,))} → {mean(now, 'date_match', (2,))}",
                  f"{iso(then)} → {iso(now)}"]  # fmt: skip
    else:
        cells += ["—", "—", "—"]
    cells.append(change("r10", None))
    variant = f" ({_variant(now, clag_default)})" if now.method == "clag" else ""
    return f"| {now.dataset} | {now.method}{variant} | " + " | ".join(cells) + " |"


def history_table(runs: list[RunRecord], previous: list[RunRecord], clag_default: dict[str, Any]) -> str:
    """Each run against the previous run of the same method, dataset and switches (see the module docstring)."""
    rows = []
    for now in sorted(runs, key=lambda r: (r.dataset, r.method, _variant(r, clag_default))):
        then = _run(previous, now.method, now.dataset, now.params)
        if then is not None:
            rows.append(_history_row(now, then, clag_default))
    if not rows:
        return "(no run has an earlier counterpart)"
    header = (
        "| dataset | method | F1 then → now | F1 now − then | temporal F1 now − then | date match then → now "
        "| ISO temporal answers then → now | R@10 now − then |"
    )
    return "\n".join([header, "|---|---|---|---|---|---|---|---|", *rows])


def render(runs_dir: Path, plot: Path | None = None, previous: Path | None = None) -> str:
    """The findings of the runs under ``runs_dir`` as Markdown; the attribution plot goes to ``plot``; with
    ``previous``, a history section compares each run with its earlier counterpart there."""
    defaults = load_defaults()
    # the claims' backbone is Table 1's (or its stand-ins); a larger model's runs are Table 6's, never a claim's
    backbone = defaults.models_for(load_spec(1).model)

    def find(folder: Path) -> list[RunRecord]:
        return [run for run in find_runs(folder) if run.model in backbone]

    runs, clag_default = find(runs_dir), defaults.clag_default
    calibration = find_report(runs_dir)
    claims = [
        replace(claim, metrics=tuple(allowed_metrics(claim.metrics, calibration and calibration[1])))
        for claim in default_claims(clag_default)
    ]
    findings = evaluate(runs, claims)
    attributed = attribution_rows(runs, clag_default)
    figure = plots.plot_attribution(attributed, CLASSES, plot) if plot and attributed else None
    models = sorted({r.model for r in runs})
    return "\n\n".join(
        [
            "# Findings of the runs under " + str(runs_dir),
            f"{len(runs)} finished runs; models: {', '.join(models) or '—'}; computed with {machines(runs) or '—'}.",
            "## Claims: A - B over the same questions (percentage points; paired bootstrap, 10,000 resamples)",
            "A verdict says *ahead* or *behind* only where the 95% interval of the difference excludes 0. "
            + judge_note(calibration, judged=any(f.per_metric.get(m) for f in findings for m in JUDGE_KEYS))
            + " J is the judge's share of right answers over the questions it scored (LoCoMo: categories 1-4),"
            " so a claim over more questions leaves it out (—).",
            claims_table(findings) if findings else "(no pair of runs to compare yet)",
            "## LoCoMo's category 5 apart, scored both ways",
            "The paper scores category 5 with F1 against the adversarial answer, which rewards repeating the trap;"
            " LoCoMo's own code counts an abstention as right. No memory shows what either rewards without any"
            " memory at all. The claims above lead with categories 1-4 and give 1-5 under both scorings.",
            category5_table(runs, clag_default),
            "## CLAG telemetry",
            telemetry_table(runs, clag_default),
            "## R@10, F1 and J (%) over the same questions, by how much of their evidence CLAG's picked clusters held",
            reach_table(runs, clag_default, allowed_metrics(JUDGE_KEYS, calibration and calibration[1])),
            "## Where each wrong answer lost its evidence (no LLM: ids only)",
            "Wrong: token F1 below 0.5; LoCoMo's category 5 left out. First match wins, in the column order: the"
            " date-aware score matches; no gold evidence; evidence never stored; CLAG's pick pruned it; in memory but"
            " none / part of it in the context; all of it in the context (clag/metrics/attribution.py; the idea is"
            " MemBase's error attribution, which asks an LLM instead).",
            attribution_table(attributed) + (f"\n\n![attribution]({figure.name})" if figure else ""),
            *(
                [
                    f"## History: against the earlier runs under {previous}",
                    "Each run against the earlier run of the same method, dataset and switches, paired over the same"
                    " questions (percentage points, 95% intervals; LoCoMo's F1 over categories 1-4, temporal ="
                    " category 2; ISO = answers holding `YYYY-MM-DD`). The tables above are this run's alone.",
                    history_table(runs, find(previous), clag_default),
                ]
                if previous
                else []
            ),
        ]
    ) + "\n"


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--previous", type=Path, help="earlier runs to compare each run with (a history section)")
    previous = options.parse_known_args(argv)[0].previous

    def with_plot(runs: Path, out: Path | None) -> str:
        return render(runs, out.with_name(f"{out.stem}-attribution.png") if out else None, previous)

    return report_main(argv, "python -m clag.tables.findings", __doc__, with_plot, parents=[options])


if __name__ == "__main__":
    sys.exit(main())
