"""Build the LoCoMo-layout BioASQ files from the BioASQ Task 10b golden batches.

The CLAG authors turn BioASQ into "conversations" so that it runs through the
same loop as LoCoMo (dmis-lab/CLAG ``prepare_bioasq.py`` and
``prepare_bioasq_gold_context.py``, run with the defaults of
``run_prepare_bioasq_all.sh``: 20 questions per chunk, 10 chunks, seed 42).
This module re-implements that procedure as pure functions, so that
``scripts/fetch_data.py`` can rebuild ``bioasq_chunked.json`` and
``bioasq_chunked_gold_context.json`` from the six public golden files and the
tests can check the result against the shared copies byte for byte.

The two outputs differ in one parameter (``gold_context``): the gold-context
file drops repeated snippets within a question and records, per question, the
turn ids built from its snippets (``gold_turn_ids``), which evidence metrics use.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: BioASQ question type -> the category number the authors' prompts use.
CATEGORY_OF_TYPE = {"factoid": 4, "list": 6}
#: Constant session timestamp the authors give every passage-style dataset.
PLACEHOLDER_DATE = "2020-01-01 00:00:00"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WHITESPACE = re.compile(r"\s+")


def split_sentences(text: str) -> list[str]:
    """Split a snippet into sentences after whitespace normalisation.

    A plain regex split at ``.``/``!``/``?`` followed by whitespace, as the
    authors do; abbreviations such as "e.g. " split too, and that is kept so
    that the turns match theirs.
    """
    normalised = _WHITESPACE.sub(" ", text).strip()
    return [part.strip() for part in _SENTENCE_END.split(normalised) if part.strip()] if normalised else []


def answer_string(exact_answer: Any) -> str:
    """Flatten a BioASQ ``exact_answer`` to one reference string.

    Factoid answers are ``[[syn1, syn2, ...]]`` and list answers
    ``[[item1 synonyms], [item2 synonyms], ...]``; the first synonym of every
    answer item is kept and the items are joined by ``" ; "`` (which is the
    separator the category-6 answer prompt asks the model for).
    """
    if not isinstance(exact_answer, list):
        return ""
    firsts = [
        synonyms[0].strip()
        for synonyms in exact_answer
        if isinstance(synonyms, list) and synonyms and isinstance(synonyms[0], str) and synonyms[0].strip()
    ]
    return " ; ".join(firsts)


def _snippet_texts(snippets: Any, *, dedup: bool) -> list[str]:
    """Stripped, non-empty snippet texts; with ``dedup``, case/space-insensitive repeats dropped."""
    texts: list[str] = []
    seen: set[str] = set()
    for snippet in snippets if isinstance(snippets, list) else []:
        text = snippet.get("text") if isinstance(snippet, dict) else None
        if not isinstance(text, str) or not text.strip():
            continue
        if dedup:
            key = _WHITESPACE.sub(" ", text).strip().lower()
            if key in seen:
                continue
            seen.add(key)
        texts.append(text.strip())
    return texts


def select_records(questions: Iterable[dict[str, Any]], *, dedup: bool) -> list[dict[str, Any]]:
    """Keep factoid and list questions that have an id, a body, snippet text and an exact answer.

    Returns records ``{question_id, question, answer, category, snippets}`` in
    input order; their positions are what the seeded shuffle permutes, so the
    filter must stay exactly the authors' (dedup never empties a list, so both
    variants select the same 251 records from the Task 10b batches).
    """
    records = []
    for question in questions:
        category = CATEGORY_OF_TYPE.get(question.get("type"))
        qid, body = question.get("id"), question.get("body")
        if category is None or not qid or not body:
            continue
        snippets = _snippet_texts(question.get("snippets", []), dedup=dedup)
        answer = answer_string(question.get("exact_answer"))
        if not snippets or not answer:
            continue
        records.append(
            {"question_id": str(qid), "question": body.strip(), "answer": answer, "category": category,
             "snippets": snippets}
        )
    return records


def build_chunked(
    questions: Sequence[dict[str, Any]],
    *,
    gold_context: bool,
    chunk_size: int = 20,
    num_chunks: int = 10,
    seed: int = 42,
) -> list[dict[str, Any]]:
    """Group the selected questions into LoCoMo-layout samples.

    Args:
        questions: The concatenated ``questions`` of the golden files, in sorted file order.
        gold_context: Build ``bioasq_chunked_gold_context.json`` (dedup snippets,
            add ``question_id`` and ``gold_turn_ids``) instead of ``bioasq_chunked.json``.
        chunk_size: Questions per sample.
        num_chunks: Samples wanted; fewer if the data do not fill them (as the authors do).
        seed: Seed of the shuffle of record positions (``random.seed(seed); random.shuffle``).

    Returns:
        The samples, ready for :func:`dump_samples`.
    """
    records = select_records(questions, dedup=gold_context)
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)  # same permutation as the authors' global random.seed + shuffle
    available = len(records) // chunk_size
    if num_chunks > available:
        logger.warning("only %d records: building %d chunks of %d instead of %d", len(records), available,
                       chunk_size, num_chunks)
        num_chunks = available
    return [_chunk(index, [records[i] for i in order[index * chunk_size:(index + 1) * chunk_size]], gold_context)
            for index in range(num_chunks)]


def _chunk(index: int, records: list[dict[str, Any]], gold_context: bool) -> dict[str, Any]:
    """One sample: every snippet sentence of its questions is a ``System`` turn of ``session_0``."""
    turns: list[dict[str, str]] = []
    qa: list[dict[str, Any]] = []
    for record in records:
        gold_ids = []
        for snippet in record["snippets"]:
            for sentence in split_sentences(snippet):
                dia_id = f"{index}:{len(turns)}"
                turns.append({"speaker": "System", "dia_id": dia_id, "text": sentence})
                gold_ids.append(dia_id)
        entry = {"question": record["question"], "answer": record["answer"], "category": record["category"]}
        if gold_context:
            entry = {"question_id": record["question_id"], **entry, "gold_turn_ids": gold_ids}
        qa.append(entry)
    return {
        "sample_id": index,
        "conversation": {"speaker_a": "System", "speaker_b": "User", "session_0": turns,
                         "session_0_date_time": PLACEHOLDER_DATE},
        "qa": qa,
        "event_summary": {},
        "observation": {},
        "session_summary": {},
    }


def read_golden(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Concatenate the ``questions`` of the golden files, in sorted path order.

    Raises:
        ValueError: A file is not JSON or has no ``questions`` list (the
            authors skip such files; we stop, because the selection would change).
    """
    questions: list[dict[str, Any]] = []
    for path in sorted(paths):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read golden file: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
            raise ValueError(f"{path}: missing field 'questions' (a list)")
        questions.extend(data["questions"])
    return questions


def dump_samples(samples: list[dict[str, Any]]) -> bytes:
    """Serialise as the authors do (``json.dump(indent=2, ensure_ascii=False)``, no final newline)."""
    return json.dumps(samples, indent=2, ensure_ascii=False).encode("utf-8")
