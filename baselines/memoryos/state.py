"""MemoryOS's units of storage: pages, segments, heat, capped fact lists, the item clock.

Follows the data model of the authors' code (github.com/BAI-LAB/MemoryOS,
``memoryos-pypi/mid_term.py`` session objects, ``long_term.py`` knowledge
deques) and the paper's Eq. 4 for heat. Everything here is plain data that
round-trips through JSON; vectors live in :class:`~clag.embed.VectorIndex`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from clag.embed import VectorIndex

#: Timestamp layouts of the datasets: LoCoMo ("1:56 pm on 8 May, 2023"),
#: HotpotQA / BioASQ ("2020-01-01 00:00:00") and a few plain dates.
TIME_FORMATS = (
    "%I:%M %p on %d %B, %Y",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%d %B, %Y",
    "%d %B %Y",
    "%B %d, %Y",
)


def parse_timestamp(text: str) -> float | None:
    """Seconds since the epoch for a dataset timestamp, or ``None`` if unreadable.

    Naive times are read as UTC: only differences between timestamps matter
    (recency in Eq. 4), never the zone. ISO-8601 strings are accepted too.
    """
    cleaned = " ".join((text or "").split())
    for layout in TIME_FORMATS:
        try:
            moment = datetime.strptime(cleaned, layout)
        except ValueError:
            continue
        return moment.replace(tzinfo=UTC).timestamp()
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@dataclass
class Page:
    """One dialogue page: a turn pair (or a single turn) with its chain.

    Attributes:
        id: ``p<n>`` in creation order.
        item_ids / speakers / texts: The items of the page, in stream order.
        session: Session of the items (a pair never spans two sessions).
        timestamp: The first item's raw timestamp, shown to the answerer.
        time: That timestamp on the item clock (seconds).
        chain: Dialogue chain id, set when the page leaves short-term memory.
    """

    id: str
    item_ids: list[str]
    speakers: list[str]
    texts: list[str]
    session: str
    timestamp: str
    time: float
    chain: str = ""

    def text(self) -> str:
        """The page as "speaker: text" lines (the authors' "User: .. Assistant: .." with real names)."""
        return "\n".join(f"{speaker}: {text}" if speaker else text for speaker, text in zip(self.speakers, self.texts))


@dataclass
class Segment:
    """A mid-term topic segment (the authors' "session" object).

    Attributes:
        summary / keywords: Written by the topic-summary step when the segment opened.
        page_ids: Member pages in arrival order.
        analyzed: Pages already promoted to long-term memory.
        visits: N_visit of Eq. 4 (retrievals that matched pages; reset on promotion).
        length: L_interaction of Eq. 4 (pages added since the last promotion).
        last_visit: Item-clock time of the last creation, merge, retrieval or promotion.
        retrievals: Lifetime retrieval count, the authors' LFU eviction key.
    """

    id: str
    summary: str
    keywords: list[str]
    page_ids: list[str]
    analyzed: list[str] = field(default_factory=list)
    visits: int = 0
    length: int = 0
    last_visit: float = 0.0
    retrievals: int = 0


@dataclass(frozen=True)
class Heat:
    """Eq. 4 of the paper: ``alpha * N_visit + beta * L_interaction + gamma * exp(-dt / tau)``.

    ``dt`` is measured on the item clock (dataset timestamps), so heat is the
    same on every rerun; the authors' code uses the wall clock.
    """

    alpha: float = 1.0
    beta: float = 1.0
    gamma: float = 1.0
    tau_s: float = 1.0e7

    def __call__(self, segment: Segment, now: float) -> float:
        recency = math.exp(-max(0.0, now - segment.last_visit) / self.tau_s)
        return self.alpha * segment.visits + self.beta * segment.length + self.gamma * recency


class FactStore:
    """A first-in-first-out list of fact sentences with their vectors (User KB / Assistant Traits).

    Args:
        dim: Embedding dimension.
        capacity: Oldest facts leave beyond this many (paper: 100).
        prefix: Id prefix, so the two stores never share ids.
    """

    def __init__(self, dim: int, capacity: int, prefix: str) -> None:
        self.dim = dim
        self.capacity = capacity
        self.prefix = prefix
        self.facts: dict[str, str] = {}
        self.index = VectorIndex(dim)
        self.added = 0

    def __len__(self) -> int:
        return len(self.facts)

    def add(self, texts: list[str], vectors: np.ndarray) -> None:
        """Append facts, skipping exact repeats of stored ones, then trim to capacity."""
        known = {text.lower() for text in self.facts.values()}
        for text, vector in zip(texts, vectors):
            if text.lower() in known:
                continue
            key = f"{self.prefix}{self.added}"
            self.added += 1
            self.facts[key] = text
            self.index.add([key], vector[None, :])
            known.add(text.lower())
        while len(self.facts) > self.capacity:
            oldest = next(iter(self.facts))
            del self.facts[oldest]
            self.index.remove([oldest])

    def search(self, query: np.ndarray, k: int, threshold: float) -> list[str]:
        """Up to ``k`` facts with cosine >= ``threshold``, best first."""
        return [self.facts[key] for key, score in self.index.search(query, k) if score >= threshold]

    def save(self, directory: Path) -> None:
        self.index.save(directory, self.prefix + "facts")
        state = {"facts": self.facts, "added": self.added}
        (directory / f"{self.prefix}facts.json").write_text(json.dumps(state, ensure_ascii=False))

    def load(self, directory: Path) -> None:
        state = json.loads((directory / f"{self.prefix}facts.json").read_text())
        self.facts, self.added = dict(state["facts"]), state["added"]
        self.index = VectorIndex.load(directory, self.dim, self.prefix + "facts")


def to_json(objects: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Dataclass values by id, as JSON-ready dicts."""
    return {key: asdict(value) for key, value in objects.items()}
