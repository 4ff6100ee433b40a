"""Tables 11-14 from real runs: a case study, its clusters, and CLAG's failures by cause.

* Table 11: a question CLAG answers correctly and the baselines miss, with
  every method's prediction.
* Table 12: that question's clusters (profile, size) as CLAG's two-stage
  retrieval saw them, selected or pruned.
* Tables 13-14: CLAG's wrong answers, each with the clusters the question was
  routed to and picked, classified by an LLM judge into the paper's failure
  taxonomy (Table 13's categories plus Table 14's "Residual ambiguity").
  The judge is a model config name (``configs/tables/defaults.yaml``,
  ``cases.judge_model``) called through :class:`clag.llm.client.LLMClient`,
  so its calls are cached and counted like every other call. The paper does
  not say how its 238 failures were classified; it may have been by hand.

"Correct" is the paper-variant token F1 at or above ``cases.correct_f1``
(the paper states no criterion for its ✓ / ✗).

CLAG's records read here (``clag.memory.clag_method.ClagMemory``): per
question, ``telemetry.candidates`` (the clusters shown to the picker, each
``{"id", "summary", "size", "status": "selected" | "pruned"}``),
``telemetry.search_space`` and ``telemetry.total_notes``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from clag.llm.client import LLMClient
from clag.metrics.judge import model_label
from clag.records.runs import RunRecord
from clag.tables.collect import provenance_notes, select_run
from clag.tables.paper import load_paper_table
from clag.tables.specs import METHOD_ROWS, Defaults

log = logging.getLogger(__name__)

METHOD_LABELS = {row["method"]: row["label"] for row in METHOD_ROWS}
RESIDUAL = "Residual ambiguity"
UNCLASSIFIED = "Unclassified"
CASE_EXPS = ["table1", "demo"]
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"category": {"type": "string"}, "reason": {"type": "string"}},
    "required": ["category", "reason"],
}


@dataclass
class CaseTable:
    """One rendered case table: ours, the paper's, the caption.

    Attributes:
        summary: What our runs supplied, for the index (``5 methods``); "" when nothing.
        scale: The scale of the runs behind it (``reference``, ``demo``, ``full``; "" without runs).
    """

    number: int
    title: str
    ours: pd.DataFrame
    paper: pd.DataFrame
    caption: str
    scale: str
    summary: str = ""


@dataclass
class Judge:
    """The failure classifier: a model config name and its LLM client.

    The client is built on first use (loading a model takes a while), so a
    rendering without CLAG failures never loads it; tests pass a client.
    """

    name: str
    llm: LLMClient | None = None
    max_new_tokens: int = 96
    unavailable: bool = False
    overrides: tuple[str, ...] = ()  # Hydra overrides of the judge model's config (e.g. engine=vllm)

    def client(self) -> LLMClient | None:
        """The client, built from ``configs/model/<name>.yaml`` exactly as a run builds it; None if it cannot be."""
        if self.llm is None and not self.unavailable:
            try:
                from clag.running.build import client_for_model

                self.llm = client_for_model(self.name, self.overrides)
            except Exception as err:  # a missing model must not stop the other tables
                log.warning("failure judge %r unavailable (%s); Tables 13-14 stay unclassified", self.name, err)
                self.unavailable = True
        return self.llm


@dataclass
class Failure:
    """One wrong CLAG answer with what the judge needs to see.

    Attributes:
        row: CLAG's predictions row.
        clusters: The clusters its picker was shown (see :func:`question_clusters`).
        baseline: The best baseline's (method label, prediction, correct?) on
            the same question, or None when no baseline answered it.
    """

    row: dict[str, Any]
    clusters: list[dict[str, Any]]
    baseline: tuple[str, str, bool] | None


def taxonomy() -> dict[str, str]:
    """Failure category -> description: the paper's Table 13, plus Table 14's residual class."""
    frame = load_paper_table(13)
    out = {str(c): _plain(str(d)) for c, d in zip(frame["category"], frame["description"])}
    out[RESIDUAL] = "None of the other causes fits; the question or the memory itself is ambiguous."
    return out


def _plain(text: str) -> str:
    """The paper's inline math as plain text (``( $n\\leq 1$ )`` -> ``(n ≤ 1)``), for prompts and every format."""
    text = text.replace("\\leq", " ≤ ").replace("\\geq", " ≥ ").replace("$", "")
    return re.sub(r"\(\s*(.*?)\s*\)", lambda m: "(" + re.sub(r"\s+", " ", m.group(1)) + ")", text)


def _key(name: str) -> str:
    """Category names compared without case, spaces or punctuation (Table 14 writes "Stale / drift")."""
    return re.sub(r"[^a-z]", "", name.lower())


def _by_id(run: RunRecord | None) -> dict[str, dict[str, Any]]:
    return {str(row["question_id"]): row for row in run.predictions} if run else {}


def _f1(row: dict[str, Any] | None) -> float:
    return float(row.get("f1") or 0.0) if row else 0.0


def question_clusters(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The clusters CLAG's picker was shown for one question: id, profile, size, selected.

    Empty when the question recorded no candidates (global retrieval, or a
    method without clusters).
    """
    candidates = (row.get("telemetry") or {}).get("candidates")
    if not isinstance(candidates, list):
        return []
    return [
        {
            "id": str(c.get("id")),
            "profile": str(c.get("summary") or ""),
            "size": c.get("size"),
            "selected": c.get("status") == "selected",
        }
        for c in candidates
        if isinstance(c, dict)
    ]


def _case_runs(runs: list[RunRecord], defaults: Defaults) -> tuple[str, dict[str, RunRecord]]:
    """The first configured dataset with a plain CLAG run, and each method's run on it."""
    settings = defaults.cases
    models = defaults.models_for(str(settings.get("model", "qwen3-0.6b")))
    for dataset in settings.get("datasets", ["locomo"]):
        chosen = {}
        for method in METHOD_LABELS:
            where = defaults.clag_default if method == "clag" else {}
            run = select_run(runs, method, dataset, models, where, CASE_EXPS)
            if run is not None:
                chosen[method] = run
        if "clag" in chosen:
            return dataset, chosen
    return "", {}


def _setting(runs: dict[str, RunRecord]) -> str:
    models = sorted({run.model for run in runs.values()})
    slices = sorted({run.slice_text() for run in runs.values()})
    return " ".join([f"Ours: {', '.join(models)}; data: {'; '.join(slices)}.", *provenance_notes(runs.values())])


def _pick_case(runs: dict[str, RunRecord], threshold: float) -> tuple[str | None, bool]:
    """The question where CLAG is right and the baselines are wrong by the widest F1 margin.

    Returns the question id and whether it meets the criterion in full (else
    it is only the widest margin). Questions with cluster telemetry win ties,
    so Table 12 can show the same question.
    """
    clag = runs["clag"]
    others = {method: _by_id(run) for method, run in runs.items() if method != "clag"}
    best, best_rank = None, None
    for row in clag.predictions:
        qid = str(row["question_id"])
        rivals = [_f1(rows.get(qid)) for rows in others.values() if qid in rows]
        if others and not rivals:
            continue
        strongest = max(rivals, default=0.0)
        full = _f1(row) >= threshold and strongest < threshold
        rank = (full, bool(question_clusters(row)), _f1(row) - strongest)
        if best_rank is None or rank > best_rank:
            best, best_rank = qid, rank
    return best, bool(best_rank and best_rank[0])


def table11(runs: dict[str, RunRecord], qid: str | None, full: bool, threshold: float) -> CaseTable:
    paper = load_paper_table(11).drop(columns="table")
    paper["method"] = paper["method"].map(METHOD_LABELS)
    columns = ["Method", "Prediction", "F1 (%)", "Result"]
    if qid is None:
        ours = pd.DataFrame([["—"] * 4], columns=columns)
        text = "Table 11 (ours): no finished plain-CLAG run yet, so no case question."
        return CaseTable(11, "Case study: predictions of every method", ours, paper, text, scale="")
    records = []
    for method, run in runs.items():
        row = _by_id(run).get(qid)
        if row is not None:
            result = "Correct ✓" if _f1(row) >= threshold else "Wrong ✗"
            records.append([METHOD_LABELS[method], row.get("prediction", ""), f"{100 * _f1(row):.1f}", result])
    row = _by_id(runs["clag"])[qid]
    records.sort(key=lambda r: r[0] != "CLAG")
    how = (
        "CLAG is correct and every baseline wrong"
        if full
        else "no question had CLAG correct and every baseline wrong; shown: the widest F1 margin for CLAG"
    )
    text = (
        f"Table 11 (ours): predictions for “{row.get('question')}” "
        f"(gold: “{row.get('answer') or row.get('reference')}”, "
        f"category {row.get('category')}, question {qid}). Selection: {how}. Correct = token F1 ≥ {threshold:g} "
        f"(the paper states no criterion). {_setting(runs)}"
    )
    return CaseTable(
        11,
        "Case study: predictions of every method",
        pd.DataFrame(records, columns=columns),
        paper,
        text,
        runs["clag"].scale,
        f"{len(records)} methods",
    )


def table12(clag: RunRecord, qid: str | None) -> CaseTable:
    """The clusters of the Table 11 question, or else of the CLAG question with the most clusters."""
    paper = load_paper_table(12).drop(columns="table")
    rows = _by_id(clag) if clag else {}
    if qid is None or not question_clusters(rows.get(qid, {})):
        with_clusters = [r for r in rows.values() if question_clusters(r)]
        qid = str(max(with_clusters, key=lambda r: len(question_clusters(r)))["question_id"]) if with_clusters else None
    columns = ["Cluster ID", "Profile", "Count", "Status"]
    title = "Clusters of the case question: selected or pruned"
    if qid is None:
        ours = pd.DataFrame([["—"] * 4], columns=columns)
        text = "Table 12 (ours): no CLAG run with per-question cluster telemetry yet."
        return CaseTable(12, title, ours, paper, text, False)
    row = rows[qid]
    clusters = question_clusters(row)
    ours = pd.DataFrame(
        [
            [
                c["id"],
                c["profile"] or "—",
                "—" if c["size"] is None else c["size"],
                "Selected ✓" if c["selected"] else "Pruned ✗",
            ]
            for c in clusters
        ],
        columns=columns,
    )
    telemetry = row.get("telemetry") or {}
    space, total = telemetry.get("search_space"), telemetry.get("total_notes")
    pruning = f" The search space went from {total} to {space} notes." if None not in (space, total) else ""
    text = (
        f"Table 12 (ours): CLAG's clusters for “{row.get('question')}” (question {qid}): the profiles the picker "
        f"saw, their sizes, and whether two-stage retrieval selected or pruned them.{pruning} "
        f"{_setting({'clag': clag})}"
    )
    return CaseTable(12, title, ours, paper, text, clag.scale, f"{len(clusters)} clusters")


def _failures(runs: dict[str, RunRecord], threshold: float) -> list[Failure]:
    clag = runs["clag"]
    baselines = {method: _by_id(run) for method, run in runs.items() if method != "clag"}
    out = []
    for row in clag.predictions:
        if _f1(row) >= threshold:
            continue
        qid = str(row["question_id"])
        answered = [(m, rows[qid]) for m, rows in baselines.items() if qid in rows]
        best = max(answered, key=lambda pair: _f1(pair[1]), default=None)
        baseline = (METHOD_LABELS[best[0]], str(best[1].get("prediction")), _f1(best[1]) >= threshold) if best else None
        out.append(Failure(row, question_clusters(row), baseline))
    return out


def judge_prompt(failure: Failure, categories: dict[str, str]) -> str:
    """The classification prompt: the failed question, what CLAG routed to and picked, a baseline's answer."""
    row = failure.row
    lines = [
        "A memory system for a small language model answered a question wrongly. The system groups memories into",
        "clusters with short profiles; for each question it first picks clusters by their profiles, then searches",
        "only inside the picked clusters. Decide the main cause of this failure.",
        "",
        f"Question: {row.get('question')}",
        f"Correct answer: {row.get('answer') or row.get('reference')}",
        f"System's answer: {row.get('prediction')}",
    ]
    if failure.clusters:
        picked = sum(c["selected"] for c in failure.clusters)
        lines.append(f"Clusters considered ({picked} picked):")
        lines += [
            f"- {'PICKED' if c['selected'] else 'skipped'}: {c['profile'] or '(no profile)'}" for c in failure.clusters
        ]
    else:
        lines.append("Clusters considered: none recorded.")
    telemetry = row.get("telemetry") or {}
    if telemetry.get("search_space") is not None and telemetry.get("total_notes") is not None:
        lines.append(f"Memories searched: {telemetry['search_space']} of {telemetry['total_notes']}.")
    if failure.baseline:
        label, prediction, correct = failure.baseline
        lines.append(f"A simpler system ({label}) answered: {prediction} ({'correct' if correct else 'also wrong'})")
    lines += ["", "Categories:"]
    lines += [f"{i}. {name}: {text}" for i, (name, text) in enumerate(categories.items(), start=1)]
    lines += [
        "",
        'Reply with JSON only: {"category": "<the category name>", "reason": "<one short sentence>"}',
    ]
    return "\n".join(lines)


def parse_category(value: Any, categories: dict[str, str]) -> str:
    """The judge's category as a taxonomy name: by name, by list number, or else unclassified."""
    names = list(categories)
    text = str(value or "").strip()
    number = re.match(r"^(\d+)\b", text)
    if number and 1 <= int(number.group(1)) <= len(names):
        return names[int(number.group(1)) - 1]
    key = _key(text)
    for name in names:
        if key and (_key(name) in key or key in _key(name)):
            return name
    return UNCLASSIFIED


def classify(failures: list[Failure], judge: Judge | None) -> list[tuple[str, str]]:
    """(category, reason) per failure; without a judge, every failure is unclassified."""
    llm = judge.client() if judge and failures else None
    if llm is None:
        return [(UNCLASSIFIED, "no judge configured" if judge is None else "judge unavailable")] * len(failures)
    categories = taxonomy()
    prompts = [judge_prompt(f, categories) for f in failures]
    replies = llm.generate_json(prompts, "judge", JUDGE_SCHEMA, max_new_tokens=judge.max_new_tokens)
    out = []
    for reply in replies:
        if reply is None:
            out.append((UNCLASSIFIED, "judge reply unusable"))
        else:
            out.append((parse_category(reply.get("category"), categories), str(reply.get("reason", ""))))
    return out


def _at_most_one_picked(failure: Failure) -> bool | None:
    """Whether the picker chose at most one cluster (None where no candidates were recorded)."""
    return sum(c["selected"] for c in failure.clusters) <= 1 if failure.clusters else None


# The categories whose definition the run's own telemetry can test, with what is tested: a judge that names
# them where the test fails has not read its case (the paper defines the multi-hop miss as n <= 1 picked)
DEFINITION_CHECKS = {"Compositional/Multi-hop miss": (_at_most_one_picked, "≤ 1 cluster picked")}


def definition_check(name: str, failures: list[Failure]) -> str:
    """How many of the failures judged ``name`` fit the part of its definition the telemetry can test."""
    if name not in DEFINITION_CHECKS or not failures:
        return "—"
    test, what = DEFINITION_CHECKS[name]
    results = [test(f) for f in failures]
    unrecorded = sum(r is None for r in results)
    return f"{sum(r is True for r in results)} of {len(failures)} ({what})" + (
        f", {unrecorded} unrecorded" if unrecorded else ""
    )


def _spread(items: list[Failure], limit: int) -> list[Failure]:
    """At most ``limit`` failures spread evenly over the run (so all categories of questions appear); 0 = all."""
    if limit <= 0 or len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def tables13_14(runs: dict[str, RunRecord], judge: Judge | None, threshold: float, limit: int) -> list[CaseTable]:
    categories = taxonomy()
    paper13 = load_paper_table(13).drop(columns="table")
    paper14 = load_paper_table(14).drop(columns="table")
    clag = runs.get("clag")
    every = _failures(runs, threshold) if clag else []
    judged = _spread(every, limit)
    verdicts = classify(judged, judge)
    names = [*categories, UNCLASSIFIED]
    counts = {name: sum(v == name for v, _ in verdicts) for name in names}
    examples = {}
    for failure, (verdict, reason) in zip(judged, verdicts):
        examples.setdefault(verdict, f"“{failure.row.get('question')}” → “{failure.row.get('prediction')}” ({reason})")
    ours13 = pd.DataFrame(
        [
            [
                name,
                categories.get(name, "no judge, or no usable category in its reply"),
                counts[name],
                definition_check(name, [f for f, (v, _) in zip(judged, verdicts) if v == name]),
                examples.get(name, "—"),
            ]
            for name in names
        ],
        columns=[
            "Category",
            "Description",
            "Count",
            "Fits its definition (telemetry)",
            "Example (question → CLAG's answer, judge's reason)",
        ],
    )
    paper_counts = {_key(p): (c, pc) for p, c, pc in zip(paper14["pattern"], paper14["count"], paper14["percent"])}
    total = len(judged)
    ours14 = pd.DataFrame(
        [
            [
                name,
                counts[name],
                f"{100 * counts[name] / total:.1f}" if total else "—",
                *paper_counts.get(_key(name), ("—", "—")),
            ]
            for name in names
        ],
        columns=["Pattern", "Count", "%", "Paper count", "Paper %"],
    )
    who = "no judge (all unclassified)"
    if judge and judge.llm:
        who = f"an LLM judge, the {model_label(judge.name)['label']}"
    scope = (
        f"{len(every)} CLAG answers with token F1 < {threshold:g}; "
        f"{'every one' if total == len(every) else f'{total} of them (spread evenly)'} classified by {who}, "
        "prompted with the question, the gold answer, CLAG's answer, the profiles of the clusters it was routed to "
        "and picked, and the best baseline's answer. The paper does not describe how its N=238 failures were "
        "classified; its classification may have been manual, so the shares are not directly comparable."
    )
    setting = _setting(runs) if clag else "Ours: no finished plain-CLAG run yet."
    scale = clag.scale if clag else ""
    summary = f"{total} failures, {total - counts[UNCLASSIFIED]} classified" if clag else ""
    return [
        CaseTable(
            13, "Failure taxonomy of CLAG", ours13, paper13, f"Table 13 (ours): {scope} {setting}", scale, summary
        ),
        CaseTable(
            14, "Failure distribution of CLAG", ours14, paper14, f"Table 14 (ours): {scope} {setting}", scale, summary
        ),
    ]


def build_cases(
    runs: list[RunRecord], defaults: Defaults, judge: Judge | None, numbers: set[int] | None = None
) -> list[CaseTable]:
    """Tables 11-14 (those in ``numbers``) from the runs; the judge is called only if 13 or 14 is wanted."""
    wanted = numbers or {11, 12, 13, 14}
    settings = defaults.cases
    threshold = float(settings.get("correct_f1", 0.5))
    dataset, chosen = _case_runs(runs, defaults)
    log.info("case tables from dataset %r (%s)", dataset, ", ".join(chosen) or "no runs")
    qid, full = _pick_case(chosen, threshold) if chosen else (None, False)
    out = []
    if 11 in wanted:
        out.append(table11(chosen, qid, full, threshold))
    if 12 in wanted:
        out.append(table12(chosen.get("clag"), qid))
    if wanted & {13, 14}:
        pair = tables13_14(chosen, judge, threshold, int(settings.get("max_failures", 24)))
        out += [table for table in pair if table.number in wanted]
    return out


def judge_from_settings(
    defaults: Defaults, override: str | None = None, model_overrides: Sequence[str] = ()
) -> Judge | None:
    """The judge named by ``--judge`` or else by ``cases.judge_model``; ``none`` disables it.
    ``model_overrides`` are Hydra overrides of its model config (``--judge-override``)."""
    name = override if override is not None else defaults.cases.get("judge_model")
    if not name or str(name).lower() == "none":
        return None
    return Judge(
        str(name), max_new_tokens=int(defaults.cases.get("judge_max_new_tokens", 96)), overrides=tuple(model_overrides)
    )
