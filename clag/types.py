"""The data model every part of the harness speaks.

An :class:`Episode` is one memory stream and the questions asked against it
(a LoCoMo conversation, or one HotpotQA / BioASQ sample of 20 questions).
Memory systems ingest :class:`Item` objects in order and answer
:class:`Question` objects with a :class:`Context`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Item:
    """One unit of memory input: a dialogue turn or a passage sentence.

    Attributes:
        id: Stable id used by evidence metrics (LoCoMo ``dia_id``, HotpotQA ``0:19``).
        text: The raw text of the turn / sentence.
        timestamp: Session date string as the dataset gives it.
        speaker: Speaker name (LoCoMo) or source label (``System`` for documents).
        session: Session key (``session_3``); GAM and MemoryOS page by it.
    """

    id: str
    text: str
    timestamp: str
    speaker: str = ""
    session: str = ""

    @property
    def content(self) -> str:
        """The note content the authors build from a turn (``test_CLAG.py``).

        Their string omits the space before ``says``; we keep it verbatim so
        that prompts (and hence cached calls) match the reference runs.
        """
        return f"Speaker {self.speaker}says : {self.text}"


@dataclass(frozen=True)
class Question:
    """A question with its gold answer(s) and evidence.

    Attributes:
        id: Stable id, unique within the dataset (``conv-26:q17``).
        text: The question.
        answer: Gold answer as a string ("" when the dataset has none).
        category: LoCoMo 1-5 (1 multi-hop, 2 temporal, 3 open-domain,
            4 single-hop, 5 adversarial); HotpotQA 4; BioASQ 4 factoid, 6 list.
        evidence_ids: Item ids that support the answer (may be empty).
        adversarial_answer: LoCoMo category-5 trap answer (the authors' reference).
    """

    id: str
    text: str
    answer: str
    category: int
    evidence_ids: tuple[str, ...] = ()
    adversarial_answer: str | None = None

    @property
    def reference(self) -> str:
        """The reference the paper scores against (category 5: the trap answer)."""
        if self.category == 5 and self.adversarial_answer is not None:
            return self.adversarial_answer
        return self.answer


@dataclass
class Episode:
    """One memory stream and its questions."""

    id: str
    dataset: str
    items: list[Item]
    questions: list[Question]


@dataclass
class Context:
    """What a memory system returns for one question.

    Attributes:
        text: The context handed to the answerer.
        source_ids: Item ids the context came from, in rank order (evidence metrics).
        timings_ms: Wall time per retrieval stage, e.g. ``{"keywords": .., "search": ..}``.
        telemetry: Method-specific details worth keeping per question
            (CLAG's selected / pruned clusters, GAM's iterations, ...).
        answer_prompt: The whole answer prompt, for a method whose published
            protocol answers with its own (MemoryOS's ``answer_step: memoryos``);
            ``None`` = the shared answerer's prompt around :attr:`text`.
    """

    text: str
    source_ids: list[str]
    timings_ms: dict[str, float] = field(default_factory=dict)
    telemetry: dict[str, Any] = field(default_factory=dict)
    answer_prompt: str | None = None
