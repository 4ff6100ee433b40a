"""The one protocol every memory system (CLAG and each baseline) implements.

The runner drives all methods through these calls only, so methods differ
solely in how they organise memory:

    reset() -> add(item) for each item, in order -> finish_ingestion()
            -> retrieve(question) for each question -> Context

``save``/``load`` round-trip the complete state (notes, links, clusters,
tiers, indexes), so an ingested memory is reused by retrieval-only variants
and metric reruns without a single new ingestion call.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from clag.types import Context, Item, Question


@runtime_checkable
class MemorySystem(Protocol):
    """A memory organisation strategy under test."""

    def reset(self) -> None:
        """Forget everything (a fresh memory per episode)."""
        ...

    def add(self, item: Item) -> None:
        """Ingest one item; items arrive in stream order."""
        ...

    def add_many(self, items: Sequence[Item]) -> None:
        """Ingest items in order. Equivalent to ``add`` on each; methods
        override it to batch the LLM calls that do not depend on memory state
        (e.g. note construction)."""
        ...

    def finish_ingestion(self) -> None:
        """Called once after the last item (flush pages, consolidate clusters)."""
        ...

    def retrieve(self, question: Question) -> Context:
        """Return the context for one question."""
        ...

    def describe(self) -> dict[str, Any]:
        """Structure telemetry for the results (sizes, clusters, tiers)."""
        ...

    def save(self, directory: Path) -> None:
        """Write the full state under ``directory`` (JSON + numpy, no pickle)."""
        ...

    def load(self, directory: Path) -> None:
        """Restore the state written by :meth:`save`."""
        ...


class MemoryBase:
    """Defaults shared by all methods; subclasses override what differs.

    ``retrieval_params`` names constructor parameters that act only at
    retrieval time; the runner reuses a memory snapshot across runs that
    differ only in these (see :func:`clag.running.snapshots.ingestion_key`).
    """

    retrieval_params: frozenset[str] = frozenset()

    def add(self, item: Item) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def add_many(self, items: Sequence[Item]) -> None:
        for item in items:
            self.add(item)

    def finish_ingestion(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {}
