"""A-mem (Xu et al., 2025) as a MemorySystem: the agentic core over one global pool.

Follows WujiangXu/A-mem ``memory_layer.py`` (``AgenticMemorySystem``) and its
evaluation loop ``test_advanced.py``:

- ingestion: per item one ``note`` call (keywords, context, tags) and one
  ``evolve`` call over the 5 nearest notes of the whole pool, searched with
  the new note's content; exactly **2 LLM calls per item** (plus one sampled
  retry per unusable JSON answer, counted by the client);
- every ``consolidate_every`` = 100 evolving notes (``evo_threshold``) every
  note is re-embedded from its current metadata (``consolidate_memories``);
- per question: the ``keywords`` call, the top ``retrieve_k`` = 10 notes by
  cosine to the keywords, each followed by the notes it links to
  (``find_related_memories_raw``), then the shared answer call: **2 LLM calls
  per question**.

The authors' link expansion stops after k + 1 links per note (the counter is
checked after appending); we stop at k, as CLAG's fork does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clag.answer import timed_keywords
from clag.embed import Embedder
from clag.llm.client import LLMClient
from clag.memory.agentic import AgenticCore
from clag.memory.base import MemoryBase
from clag.types import Context, Item, Question


class AMemMemory(MemoryBase):
    """A-mem: note construction, global evolution, top-k plus links.

    Args:
        llm: Shared client (stages ``note``, ``evolve``, ``keywords``).
        embedder: Shared sentence embedder.
        retrieve_k: Notes per question (``retrieve_k`` = 10 in ``test_advanced.py``).
        k_neighbours: Neighbours shown to the evolution call (``k=5`` in ``process_memory``).
        consolidate_every: Evolving notes between re-embeddings (``evo_threshold`` = 100).
        strict_links: Keep only links to the neighbours shown (see :mod:`clag.memory.agentic`).
    """

    retrieval_params = frozenset({"retrieve_k"})  # shapes retrieval only (clag.running.snapshots.ingestion_key)

    def __init__(
        self,
        llm: LLMClient,
        embedder: Embedder,
        retrieve_k: int = 10,
        k_neighbours: int = 5,
        consolidate_every: int = 100,
        strict_links: bool = True,
    ) -> None:
        self.llm = llm
        self.retrieve_k = retrieve_k
        self.k_neighbours = k_neighbours
        self.consolidate_every = consolidate_every
        self.core = AgenticCore(llm, embedder, strict_links=strict_links)

    def reset(self) -> None:
        self.core.reset()

    def add(self, item: Item) -> None:
        self.add_many([item])

    def add_many(self, items: Sequence[Item]) -> None:
        """Note calls batched; evolution item by item (it reads the pool)."""
        core = self.core
        for note in core.build_notes(items):
            neighbours = core.search(core.embed(note.content), self.k_neighbours)
            evolved = core.evolve(note, neighbours)
            core.commit(note, core.embed(note.document()))
            if evolved and core.stats["evolutions"] % self.consolidate_every == 0:
                core.refresh_embeddings()

    def retrieve(self, question: Question) -> Context:
        keywords, keywords_ms = timed_keywords(self.llm, question.text)
        start = time.perf_counter()
        hits = self.core.search(self.core.embed(keywords), self.retrieve_k)
        search_ms = (time.perf_counter() - start) * 1000
        text, source_ids, link_share = self.core.render(hits, self.retrieve_k)
        return Context(
            text=text,
            source_ids=source_ids,
            timings_ms={"keywords": keywords_ms, "search": search_ms},
            telemetry={
                "query": keywords,
                "mode": "global",
                "search_space": len(self.core),
                "total_notes": len(self.core),
                "link_share": link_share,
            },
        )

    def describe(self) -> dict[str, Any]:
        return {"method": "amem", **self.core.describe()}

    def save(self, directory: Path) -> None:
        self.core.save(directory)

    def load(self, directory: Path) -> None:
        self.core.load(directory)
