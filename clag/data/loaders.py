"""Load LoCoMo, HotpotQA and BioASQ into :class:`~clag.types.Episode` objects.

All three files share LoCoMo's layout (a JSON list of samples, each with a
``conversation`` of ``session_<n>`` turn lists plus ``session_<n>_date_time``
and a ``qa`` list), because the CLAG authors converted HotpotQA and BioASQ into
it to run one evaluation loop (dmis-lab/CLAG ``load_dataset.py``,
``test_CLAG.py``). So there is one parser; a :class:`DatasetSpec` only says
which file to read and which QA field holds the evidence ids.

Choices that follow the authors' loader (``load_dataset.parse_session``):

* A LoCoMo turn that has both ``img_url`` and ``blip_caption`` gets the text
  ``"[Image: <caption>] <text>"``; the 316 turns with a caption but no
  ``img_url`` keep their bare text, as in theirs.
* Sessions are taken from the ``session_<n>`` lists (not from the
  ``_date_time`` keys, some of which have no turns) in numeric order.

Evidence ids are checked against the episode's item ids. A few LoCoMo ids are
malformed; the clearly recoverable ones are repaired (``"D8:6; D9:17"`` is
two ids, ``"D:11:26"`` is ``D11:26``, ``"D30:05"`` is ``D30:5``) and ids that
name no turn (``"D"``, or a turn number past the session's end) are dropped;
both are counted and logged on every load.

Errors in a data file raise :class:`DatasetError` with one line naming the
file, the record and the field, so the runner can print it as is.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clag.types import Episode, Item, Question

logger = logging.getLogger(__name__)

#: Environment variable that names the data root (holding ``locomo/``, ``hotpotqa/``, ``bioasq/``).
DATA_DIR_ENV = "CLAG_DATA_DIR"

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
_LOCOMO_ID = re.compile(r"^D:?(\d+):(\d+)$")


class DatasetError(ValueError):
    """A dataset cannot be loaded; the message is one line naming file, record and field."""


@dataclass(frozen=True)
class Source:
    """One data file of a dataset.

    Attributes:
        path: Path relative to the data root.
        evidence_field: QA field holding the supporting item ids, or ``None``
            when the file has none (then every question has empty evidence).
    """

    path: str
    evidence_field: str | None


@dataclass(frozen=True)
class DatasetSpec:
    """Where a dataset lives and how its QA names its evidence.

    Attributes:
        name: Dataset name used in configs (``dataset=locomo``).
        variants: Variant name -> source file.
        default_variant: Variant used when none is asked for.
    """

    name: str
    variants: Mapping[str, Source]
    default_variant: str = "default"

    def source(self, variant: str | None) -> Source:
        """The source of ``variant`` (the default when ``None``)."""
        chosen = self.default_variant if variant is None else variant
        if chosen not in self.variants:
            raise DatasetError(f"unknown variant {chosen!r} of dataset {self.name!r}"
                               f"{_suggestion(chosen, self.variants)}; choose one of {sorted(self.variants)}")
        return self.variants[chosen]


#: The registry of datasets (name -> spec); the file layout is the one of ``data/README.md``.
DATASETS: dict[str, DatasetSpec] = {
    "locomo": DatasetSpec("locomo", {"default": Source("locomo/locomo10.json", "evidence")}),
    "hotpotqa": DatasetSpec("hotpotqa", {"default": Source("hotpotqa/hotpot_200.json", "gold_turn_ids")}),
    "bioasq": DatasetSpec(
        "bioasq",
        {
            "gold_context": Source("bioasq/bioasq_chunked_gold_context.json", "gold_turn_ids"),
            "all_snippets": Source("bioasq/bioasq_chunked.json", None),
        },
        default_variant="gold_context",
    ),
}


def _suggestion(name: str, choices: Sequence[str] | Mapping[str, Any]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix for a mistyped name, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def resolve_data_dir(data_dir: str | Path | None) -> Path:
    """The data root: the argument, else ``$CLAG_DATA_DIR``."""
    if data_dir is None or str(data_dir) == "":
        data_dir = os.environ.get(DATA_DIR_ENV)
    if not data_dir:
        raise DatasetError(f"no data directory: set {DATA_DIR_ENV} to the data root "
                           "or run `make data` (scripts/fetch_data.py) to download the files into data/")
    return Path(data_dir).expanduser()


def dataset_path(name: str, data_dir: str | Path | None = None, variant: str | None = None) -> Path:
    """The file :func:`load_episodes` reads for ``name``/``variant``."""
    return resolve_data_dir(data_dir) / _spec(name).source(variant).path


def _spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}{_suggestion(name, DATASETS)}; "
                           f"choose one of {sorted(DATASETS)}")
    return DATASETS[name]


def load_slice(cfg: Any) -> list[Episode]:
    """The episodes a composed run config names (``dataset``, ``paths.data_dir``, ``limit``), as the run loads them."""
    limit = cfg.limit
    return load_episodes(
        cfg.dataset.name,
        cfg.paths.data_dir,
        variant=cfg.dataset.get("variant"),
        episodes=limit.episodes,
        items=limit["items"],
        questions=limit.questions,
        categories=limit.categories,
        episode_ids=limit.episode_ids,
    )


def load_episodes(
    name: str,
    data_dir: str | Path | None = None,
    *,
    variant: str | None = None,
    episodes: int | None = None,
    items: int | None = None,
    questions: int | None = None,
    categories: Sequence[int] | None = None,
    episode_ids: Sequence[str] | None = None,
) -> list[Episode]:
    """Load a dataset as episodes, optionally sliced.

    Slicing keeps a slice self-consistent: ``episodes`` keeps the first N
    episodes; ``items`` the first N items of each; then ``categories`` filters
    the questions; when ``items`` is set, only questions whose evidence lies
    entirely in the kept items survive (a question without evidence cannot be
    checked against a cut memory, so it is kept only when ``items`` is None);
    last, ``questions`` keeps the first N remaining questions of each episode.
    Episodes left without questions are kept (they still show ingestion).

    Args:
        name: One of :data:`DATASETS`.
        data_dir: Data root; ``None`` means ``$CLAG_DATA_DIR``.
        variant: Dataset variant (BioASQ: ``gold_context`` or ``all_snippets``); ``None`` = default.
        episodes: Keep the first N episodes.
        items: Keep the first N items of each episode.
        questions: Keep the first N questions of each episode (after the filters above).
        categories: Keep only questions of these categories.
        episode_ids: Keep only these episodes (by id, in file order), before ``episodes`` applies.

    Returns:
        The episodes in file order.

    Raises:
        DatasetError: Unknown name or variant, no data directory, a missing or
            malformed file or field, a bad limit, or a slice without any question.
    """
    spec = _spec(name)
    source = spec.source(variant)
    for label, value, least in (("episodes", episodes, 1), ("items", items, 1), ("questions", questions, 0)):
        if value is not None and value < least:
            raise DatasetError(f"limit.{label} must be at least {least}, got {value}")
    loaded = parse_file(resolve_data_dir(data_dir) / source.path, spec.name, source.evidence_field)
    wanted = None if categories is None else frozenset(int(c) for c in categories)
    if wanted is not None and not any(q.category in wanted for ep in loaded for q in ep.questions):
        present = sorted({q.category for ep in loaded for q in ep.questions})
        raise DatasetError(f"{name} has no question of categories {sorted(wanted)}; its categories are {present}")
    if episode_ids is not None:
        chosen = {str(e) for e in episode_ids}
        if unknown := chosen - {ep.id for ep in loaded}:
            raise DatasetError(f"{name} has no episode {sorted(unknown)}; its ids are {[ep.id for ep in loaded]}")
        loaded = [ep for ep in loaded if ep.id in chosen]
    sliced = [_slice(ep, items, questions, wanted) for ep in loaded[:episodes]]
    if questions != 0 and not any(ep.questions for ep in sliced):
        why = " (none without evidence is kept when items is limited)" if source.evidence_field is None else ""
        raise DatasetError(f"the slice of {name} (episodes={episodes}, items={items}, categories={categories}) "
                           f"keeps no question whose evidence lies in the kept items{why}")
    return sliced


def _slice(episode: Episode, items: int | None, questions: int | None, categories: frozenset[int] | None) -> Episode:
    kept_items = episode.items[:items]
    kept_ids = {item.id for item in kept_items}
    kept = [q for q in episode.questions if categories is None or q.category in categories]
    if items is not None:
        kept = [q for q in kept if q.evidence_ids and kept_ids.issuperset(q.evidence_ids)]
    return Episode(id=episode.id, dataset=episode.dataset, items=kept_items, questions=kept[:questions])


def episode_fingerprint(episode: Episode) -> str:
    """sha256 of an episode's items and questions, for the run's input hash.

    Computed on the parsed content (not file bytes), so it also identifies a slice.
    """
    payload = {"items": [dataclasses.asdict(i) for i in episode.items],
               "questions": [dataclasses.asdict(q) for q in episode.questions]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


# --- parsing -----------------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found; set {DATA_DIR_ENV} to the data root "
                           "or run `make data` (scripts/fetch_data.py)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read file: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: malformed JSON ({exc.msg}; line {exc.lineno}, column {exc.colno}); "
                           "the file may be truncated: fetch it again with scripts/fetch_data.py") from None


class _Record:
    """Typed field access that names the file and the record in every error."""

    def __init__(self, path: Path, where: str, obj: Any):
        if not isinstance(obj, dict):
            raise DatasetError(f"{path}: {where}: expected a JSON object, got {type(obj).__name__}")
        self.path, self.where, self.obj = path, where, obj

    def has(self, key: str) -> bool:
        return key in self.obj

    def get(self, key: str, kind: type | tuple[type, ...]) -> Any:
        if key not in self.obj:
            raise DatasetError(f"{self.path}: {self.where}: missing field '{key}'")
        value = self.obj[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise DatasetError(f"{self.path}: {self.where}: field '{key}' should be {names}, "
                               f"got {type(value).__name__}")
        return value


def parse_file(path: Path, dataset: str, evidence_field: str | None) -> list[Episode]:
    """Parse one LoCoMo-layout file into episodes (no slicing)."""
    data = _read_json(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of samples, got {type(data).__name__}")
    stats: dict[str, list[str]] = {"repaired": [], "dropped": []}
    episodes = [_parse_sample(path, index, raw, dataset, evidence_field, stats) for index, raw in enumerate(data)]
    if stats["repaired"]:
        logger.info("%s: repaired %d malformed evidence entries: %s", path.name, len(stats["repaired"]),
                    ", ".join(stats["repaired"]))
    if stats["dropped"]:
        # Expected on every load of locomo10.json (3 ids), hence INFO: a warning that always fires gets ignored.
        logger.info("%s: dropped %d evidence ids that name no item: %s", path.name, len(stats["dropped"]),
                    ", ".join(stats["dropped"]))
    return episodes


def _parse_sample(path: Path, index: int, raw: Any, dataset: str, evidence_field: str | None,
                  stats: dict[str, list[str]]) -> Episode:
    record = _Record(path, f"sample #{index}", raw)
    sample_id = str(record.get("sample_id", (str, int)))
    record.where = f"sample {sample_id}"
    conversation = _Record(path, f"sample {sample_id}, conversation", record.get("conversation", dict))
    items = _parse_items(conversation)
    item_ids = {item.id for item in items}
    questions = []
    for q_index, raw_qa in enumerate(record.get("qa", list)):
        qa = _Record(path, f"sample {sample_id}, qa[{q_index}]", raw_qa)
        question_id = f"{sample_id}:q{q_index}"
        evidence = () if evidence_field is None else _evidence(
            qa.get(evidence_field, list), item_ids, question_id, qa, evidence_field, stats)
        questions.append(_parse_question(qa, question_id, evidence))
    return Episode(id=sample_id, dataset=dataset, items=items, questions=questions)


def _parse_items(conversation: _Record) -> list[Item]:
    sessions = sorted((int(m.group(1)), key) for key in conversation.obj
                      if (m := _SESSION_KEY.match(key)) and isinstance(conversation.obj[key], list))
    items = []
    for _, key in sessions:
        date = conversation.get(f"{key}_date_time", str)
        for t_index, raw_turn in enumerate(conversation.obj[key]):
            turn = _Record(conversation.path, f"{conversation.where}.{key}[{t_index}]", raw_turn)
            text = turn.get("text", str)
            if turn.has("img_url") and turn.has("blip_caption"):
                caption = f"[Image: {turn.get('blip_caption', str)}]"
                text = f"{caption} {text}" if text else caption
            items.append(Item(id=turn.get("dia_id", str), text=text, timestamp=date,
                              speaker=turn.get("speaker", str), session=key))
    return items


def _parse_question(qa: _Record, question_id: str, evidence: tuple[str, ...]) -> Question:
    category = qa.get("category", int)
    adversarial = qa.get("adversarial_answer", (str, int, float)) if category == 5 else None
    # LoCoMo's category-5 questions may have no answer; every other question must have one.
    answer = qa.get("answer", (str, int, float)) if category != 5 or qa.has("answer") else ""
    return Question(id=question_id, text=qa.get("question", str), answer=str(answer), category=category,
                    evidence_ids=evidence, adversarial_answer=None if adversarial is None else str(adversarial))


def _evidence(raw: list[Any], item_ids: set[str], question_id: str, qa: _Record, field: str,
              stats: dict[str, list[str]]) -> tuple[str, ...]:
    """Evidence ids that name items of the episode, in order, without repeats."""
    kept: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            raise DatasetError(f"{qa.path}: {qa.where}: field '{field}' should hold strings, "
                               f"got {type(entry).__name__}")
        resolved = []
        for token in _EVIDENCE_SEPARATORS.split(entry.strip()):
            item_id = _resolve_id(token, item_ids)
            if item_id is None:
                stats["dropped"].append(f"{question_id} {token!r}")
            else:
                resolved.append(item_id)
        if resolved and resolved != [entry]:
            stats["repaired"].append(f"{question_id} {entry!r} -> {' '.join(resolved)}")
        kept.extend(item_id for item_id in resolved if item_id not in kept)
    return tuple(kept)


def _resolve_id(token: str, item_ids: set[str]) -> str | None:
    """The item id ``token`` names, repairing LoCoMo's ``D:11:26`` / ``D30:05`` forms; ``None`` if none."""
    if token in item_ids:
        return token
    match = _LOCOMO_ID.match(token)
    if match:
        repaired = f"D{int(match.group(1))}:{int(match.group(2))}"
        if repaired in item_ids:
            return repaired
    return None
