"""LLM-judge accuracy: does each prediction answer its question, given the gold answer?

The agent-memory literature (mem0, Zep, MemOS, LightMem, A-mem's later
comparisons) places systems on LoCoMo by an LLM judge's accuracy ("J"),
beside token F1, because F1 punishes a right answer in other words. Two
named prompts, both written here in our own words:

* ``lenient``: in the style of mem0's LoCoMo judge (mem0ai/mem0
  ``evaluation/metrics/llm_judge.py``, ``ACCURACY_PROMPT``, as of commit
  373709ffb before the folder moved to mem0ai/memory-benchmarks): generous,
  an answer on the same topic that carries the gold answer's key fact is
  correct however long or differently worded; a time given in another
  format or as a relative reference to the same period is correct.
* ``strict``: the key fact itself must be stated (the same entity, number,
  date or event); the right topic with a missing, wrong or hedged key fact
  is wrong, as is a list of guesses of which one is right.

Both ask for a one-sentence reason first and then the verdict, as mem0's
does, as JSON. What mem0 does not do: a reply that is no clear verdict
(neither label, or both) is counted as *unclear* and left out of the score,
never scored wrong (mem0 scores any label other than ``CORRECT`` as 0).
LoCoMo's category 5 is skipped (mem0 skips it too: its gold "answer" is the
absence of one), as is any row without a gold answer; both are counted.

The judge is handed its client (:func:`clag.running.build.judge_client`
builds it: by default the run's own model on the same engine, else a
``configs/model`` name), so its calls are cached and counted like every
other (stages ``judge_lenient``, ``judge_strict``). A small judge (under 3B
parameters, the 0.5B offline stand-in above all) is labelled as such in
``metrics.json`` and wherever its numbers are printed: its verdicts are a
rough check, not comparable with the GPT-4o-mini judge behind published J
scores.

Each prompt also has a *date-vetoed* variant (``lenient_dated``,
``strict_dated``): its verdict, overruled to WRONG where the answer names a
date outside every date the gold names (:func:`date_vetoed`, with
:func:`clag.metrics.temporal.date_match`'s parse). The judge calibration found
both prompts' weak spot there: the 1.5B judge accepted the next day or month
of a dated gold (lenient 79%, strict 39%), and "sometime in <year>" for a day
(lenient 32%). The veto only ever takes a CORRECT away, and only where both
answers name dates; the calibration measures each variant like a prompt.

Per question, ``predictions.jsonl`` gains ``j_lenient`` / ``j_strict`` and
``j_lenient_dated`` / ``j_strict_dated`` (1.0, 0.0 or None) and ``judge``
(verdict and reason per prompt, and the date comparison where the gold names a date);
``metrics.json`` gains both in ``overall``, ``by_category`` and
``overall_sets`` with bootstrap intervals, and a ``judge`` section
(:class:`clag.records.schema.JudgeSection`: model,
prompt hashes, counts, unclear verdicts, Cohen's kappa between the prompts).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clag.llm.client import LLMClient
from clag.metrics import cohen_kappa
from clag.metrics.aggregate import format_estimate, refresh_answer_tables
from clag.metrics.scoring import category_label, category_number
from clag.metrics.temporal import GOLD_NOT_A_DATE, OTHER_DATE, date_match
from clag.records.schema import JudgeSection

CORRECT, WRONG, UNCLEAR = "CORRECT", "WRONG", "UNCLEAR"
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "verdict": {"type": "string", "enum": [CORRECT, WRONG]}},
    "required": ["verdict"],
}
SMALL_JUDGE_B = 3.0
"""A judge below this many billion parameters is labelled small wherever its numbers appear."""

_TASK = (
    "You are grading the answer a question-answering assistant gave. You see the question, the gold "
    "(reference) answer, and the assistant's answer."
)
_RULES = {
    "lenient": (
        "Grade generously. The answer is CORRECT when it is about the same topic as the gold answer and "
        "contains its key fact, even if it is much longer, worded differently, or adds other details. For a "
        "question about time, the answer is CORRECT when it names the same date or period as the gold answer, "
        'in any format, or by a relative expression ("the week before", "last May") that points to it. '
        "Otherwise it is WRONG."
    ),
    "strict": (
        "Grade strictly. The answer is CORRECT only when it states the gold answer's key fact itself: the same "
        "person, thing, place, number, date or event. Wording and length may differ, but an answer that is on "
        "the right topic while missing, changing or hedging over the key fact is WRONG, and so is one that "
        "offers several candidates of which only one is right. A date must match at the precision the gold "
        "answer gives (day, month or year)."
    ),
}
_REPLY = (
    'Reply with JSON only, the reason first: {"reason": "<one short sentence>", "verdict": "CORRECT"} '
    'or {"reason": "<one short sentence>", "verdict": "WRONG"}. Never give both labels.'
)
PROMPTS = tuple(_RULES)
DATED = "_dated"
"""Suffix of a prompt's date-vetoed variant (``strict_dated``): see :func:`date_vetoed`."""
_LABEL_WORDS = re.compile(r"\b(correct|incorrect|wrong)\b", re.IGNORECASE)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


def judge_prompt(name: str, question: str, gold: str, prediction: str) -> str:
    """The prompt ``name`` (``lenient`` or ``strict``) for one question."""
    return "\n\n".join(
        [
            _TASK,
            _RULES[name],
            f"Question: {question}\nGold answer: {gold}\nAssistant's answer: {prediction}",
            _REPLY,
        ]
    )


def judged_names(prompts: Sequence[str]) -> list[str]:
    """The verdict names ``prompts`` yield: each prompt, then each one's date-vetoed variant."""
    return [*prompts, *(f"{name}{DATED}" for name in prompts)]


def date_vetoed(verdict: float | None, status: str) -> float | None:
    """A verdict under the date veto: WRONG (0.0) where it was CORRECT but the answer names a date outside the
    gold's (``status`` from :func:`clag.metrics.temporal.date_match` is ``other_date``); else unchanged. An
    answer without a date, or a gold without one, leaves the verdict to the judge."""
    return 0.0 if verdict and status == OTHER_DATE else verdict


def prompt_hash(name: str) -> str:
    """sha256 (12 hex digits) of a prompt's fixed text, recorded with its numbers."""
    return hashlib.sha256(judge_prompt(name, "{question}", "{gold}", "{prediction}").encode()).hexdigest()[:12]


def parse_verdict(value: Mapping[str, Any] | None, text: str) -> str:
    """``CORRECT``, ``WRONG`` or ``UNCLEAR`` from a judge reply.

    The parsed JSON's ``verdict`` decides when it is one of the two labels
    (any case); otherwise the raw text decides when it names exactly one of
    them as a word ("incorrect" counts as WRONG); a reply naming both, or
    neither, is unclear.
    """
    verdict = str((value or {}).get("verdict", "")).strip().upper()
    if verdict in (CORRECT, WRONG):
        return verdict
    found = {CORRECT if word.lower() == "correct" else WRONG for word in _LABEL_WORDS.findall(text or "")}
    return found.pop() if len(found) == 1 else UNCLEAR


def model_label(name: str) -> dict[str, Any]:
    """Size and printed label of a judge model, from its config name (``qwen2.5-0.5b`` -> 0.5B, small)."""
    sizes = [float(number) * (1.0 if unit.lower() == "b" else 1e-3) for number, unit in _SIZE.findall(name)]
    billions = sizes[-1] if sizes else None
    small = billions is not None and billions < SMALL_JUDGE_B
    if billions is None:
        label = f"{name} judge (size unknown)"
    else:
        label = (
            f"{name} judge ({billions:g}B{', small: a rough check, not comparable with published J' if small else ''})"
        )
    return {"model": name, "params_b": billions, "small": small, "label": label}


@dataclass(frozen=True)
class JudgeSettings:
    """The ``metrics.judge`` block of a run config.

    Attributes:
        enabled: Judge at the end of every run (``clag.judge`` judges finished runs either way).
        model: ``configs/model`` name of the judge; None = the run's own model and engine.
        prompts: Which of :data:`PROMPTS` to ask.
        max_new_tokens: Reply budget (a reason sentence and the label).
        skip_categories: Dataset -> categories left unjudged (LoCoMo's adversarial 5, as mem0).
        temperature: 0 = greedy (the judge's verdicts); above 0 with ``seed``, a sampled judge run
            (the calibration's second run, for the judge's agreement with itself).
        seed: Sampling seed of a sampled judge run.
        overrides: Hydra overrides of the judge model's config when it is not the run's own
            (e.g. ``engine=vllm``, ``cache.path=...``: the reference keeps its judge calls in its own cache).
    """

    enabled: bool = False
    model: str | None = None
    prompts: tuple[str, ...] = PROMPTS
    max_new_tokens: int = 96
    skip_categories: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: {"locomo": (5,)})
    temperature: float = 0.0
    seed: int | None = None
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [name for name in self.prompts if name not in _RULES]
        if unknown or not self.prompts:
            raise ValueError(f"judge prompts must be among {list(PROMPTS)}, got {list(self.prompts)}")

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> JudgeSettings:
        """Settings from a (resolved) ``metrics.judge`` mapping; missing keys keep the defaults."""
        node = dict(node or {})
        kwargs: dict[str, Any] = {}
        if "enabled" in node:
            kwargs["enabled"] = bool(node["enabled"])
        if node.get("model"):
            kwargs["model"] = str(node["model"])
        if node.get("prompts"):
            kwargs["prompts"] = tuple(str(p) for p in node["prompts"])
        if node.get("max_new_tokens"):
            kwargs["max_new_tokens"] = int(node["max_new_tokens"])
        if node.get("skip_categories") is not None:
            kwargs["skip_categories"] = {str(k): tuple(int(c) for c in v) for k, v in node["skip_categories"].items()}
        if node.get("overrides"):
            kwargs["overrides"] = tuple(str(o) for o in node["overrides"])
        return cls(**kwargs)

    def sampling(self) -> dict[str, Any]:
        """Generation overrides of a sampled judge run; none for the greedy judge (its cache keys stay)."""
        return {"temperature": self.temperature, "seed": self.seed} if self.temperature > 0 else {}


def _gold(row: Mapping[str, Any]) -> str:
    """The dataset's gold answer (never LoCoMo's category-5 trap, which is the paper's F1 reference)."""
    value = row.get("answer", row.get("reference"))
    return str(value).strip() if value not in (None, "") else ""


def judge_rows(
    rows: Sequence[Mapping[str, Any]], llm: LLMClient, settings: JudgeSettings, dataset: str | None, judge_name: str
) -> tuple[list[dict[str, Any]], JudgeSection]:
    """Judge every eligible row with every prompt; returns new rows and the ``judge`` summary.

    A row keeps all its keys and gains ``j_<prompt>`` (1.0 correct, 0.0
    wrong, None unclear or skipped), ``j_<prompt>_dated`` (the same under the
    date veto) and ``judge`` (``{prompt: {"verdict", "reason"}}``, plus the
    raw reply of an unclear verdict and ``date``, the date comparison, where
    the gold names a date; or ``{"skipped": why}``).
    """
    skip = set(settings.skip_categories.get(dataset or "", ()))
    out = [dict(row) for row in rows]
    eligible = []
    skipped = {"category": 0, "no_gold": 0}
    for index, row in enumerate(out):
        for name in judged_names(settings.prompts):
            row[f"j_{name}"] = None
        if category_number(row.get("category")) in skip:
            skipped["category"] += 1
            row["judge"] = {"skipped": f"category {row.get('category')} is not judged on {dataset}"}
        elif not _gold(row):
            skipped["no_gold"] += 1
            row["judge"] = {"skipped": "no gold answer"}
        else:
            row["judge"] = {}
            eligible.append(index)
    dates = {i: date_match(str(out[i].get("prediction") or ""), _gold(out[i]))[1] for i in eligible}
    for i, status in dates.items():
        if status != GOLD_NOT_A_DATE:
            out[i]["judge"]["date"] = status
    counts = {}
    for name in settings.prompts:
        prompts = [
            judge_prompt(name, str(out[i].get("question", "")), _gold(out[i]), str(out[i].get("prediction") or ""))
            for i in eligible
        ]
        replies = llm.generate_json_with_text(
            prompts,
            f"judge_{name}",
            VERDICT_SCHEMA,
            max_new_tokens=settings.max_new_tokens,
            repetition_penalty=1.0,
            **settings.sampling(),
        )
        tally = {CORRECT: 0, WRONG: 0, UNCLEAR: 0}
        for i, (value, text) in zip(eligible, replies):
            verdict = parse_verdict(value, text)
            tally[verdict] += 1
            record: dict[str, Any] = {"verdict": verdict, "reason": str((value or {}).get("reason", ""))}
            if verdict == UNCLEAR:
                record["raw"] = text[:500]
            out[i]["judge"][name] = record
            out[i][f"j_{name}"] = None if verdict == UNCLEAR else float(verdict == CORRECT)
            out[i][f"j_{name}{DATED}"] = date_vetoed(out[i][f"j_{name}"], dates[i])
        counts[name] = {
            "judged": len(eligible),
            "correct": tally[CORRECT],
            "wrong": tally[WRONG],
            "unclear": tally[UNCLEAR],
            "date_vetoed": sum(out[i][f"j_{name}"] != out[i][f"j_{name}{DATED}"] for i in eligible),
        }
    summary: JudgeSection = {  # type: ignore[typeddict-item]  # model_label's keys are spread in
        **model_label(judge_name),
        "model_identity": llm.identity(),
        "prompts": {name: {"sha256": prompt_hash(name)} for name in settings.prompts},
        "counts": counts,
        "skipped": {**skipped, "categories": sorted(skip)},
        "unclear_policy": "unclear verdicts are counted and left out of j_*, never scored wrong",
    }
    if {"lenient", "strict"} <= set(settings.prompts):
        summary["kappa"] = _kappa(out)
        summary["kappa_by_category"] = {
            label: _kappa([r for r in out if category_label(r.get("category")) == label])
            for label in dict.fromkeys(category_label(r.get("category")) for r in out)
            if label is not None
        }
    return out, summary


def _kappa(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cohen's kappa of the two prompts over the rows where both gave a clear verdict."""
    pairs = [(r["j_lenient"], r["j_strict"]) for r in rows if None not in (r.get("j_lenient"), r.get("j_strict"))]
    return cohen_kappa([a for a, _ in pairs], [b for _, b in pairs])


def apply_judge(
    rows: Sequence[Mapping[str, Any]],
    metrics: dict[str, Any],
    llm: LLMClient,
    settings: JudgeSettings,
    dataset: str | None,
    judge_name: str,
) -> list[dict[str, Any]]:
    """Judge ``rows`` and put the results into ``metrics`` (in place); returns the judged rows.

    The answer tables are recomputed from the judged rows with the run's own
    bootstrap settings, so the ``j_*`` intervals sit beside the other metrics'.
    """
    judged, summary = judge_rows(rows, llm, settings, dataset, judge_name)
    refresh_answer_tables(metrics, judged, dataset)
    metrics["judge"] = summary
    return judged


def format_judge(metrics: Mapping[str, Any]) -> str:
    """Plain-text report: each prompt's accuracy overall, per category set and category; counts and kappa."""
    judge = metrics.get("judge") or {}
    prompts = list(judge.get("prompts") or PROMPTS)
    keys = [f"j_{name}" for name in judged_names(prompts)]
    lines = [f"judge: {judge.get('label', '?')}", "\t".join(["", *keys])]
    groups = [("overall", metrics.get("overall") or {})]
    groups += [(f"categories {name}", table) for name, table in (metrics.get("overall_sets") or {}).items()]
    groups += [(f"category {label}", table) for label, table in (metrics.get("by_category") or {}).items()]
    for title, table in groups:
        if any(key in table for key in keys):
            lines.append("\t".join([title, *(format_estimate(table.get(key)) for key in keys)]))
    for name, count in (judge.get("counts") or {}).items():
        lines.append(
            f"{name}: {count['judged']} judged, {count['correct']} correct, {count['wrong']} wrong, "
            f"{count['unclear']} unclear (left out), {count.get('date_vetoed', 0)} CORRECT overruled by the date veto"
        )
    skipped = judge.get("skipped") or {}
    lines.append(
        f"skipped: {skipped.get('category', 0)} in categories {skipped.get('categories')}, "
        f"{skipped.get('no_gold', 0)} without a gold answer"
    )
    if kappa := judge.get("kappa"):
        value = "undefined" if kappa["kappa"] is None else f"{kappa['kappa']:.3f}"
        agreement = "-" if kappa["agreement"] is None else f"{kappa['agreement']:.3f}"
        lines.append(f"Cohen's kappa lenient vs strict: {value} (raw agreement {agreement}, n={kappa['n']})")
    return "\n".join(lines)
