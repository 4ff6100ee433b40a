"""RAG: every item embedded as is, top-k by cosine, no LLM call at ingestion.

The paper's plain retrieval baseline. The query is the question's keywords
from the shared keyword step, exactly as the memory methods query, so that
RAG differs from them only in how memory is organised.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from clag.answer import timed_keywords
from clag.embed import Embedder, VectorIndex
from clag.llm.client import LLMClient
from clag.memory.base import MemoryBase
from clag.types import Context, Item, Question


class RagMemory(MemoryBase):
    """Flat vector memory over raw items.

    Args:
        llm: Used only for the question-keywords step.
        embedder: The shared sentence embedder.
        retrieve_k: Items returned per question (the authors' ``retrieve_k`` = 10).
        use_keywords: Query with the SLM's keywords (as every method in the
            authors' loop does) instead of the raw question.
    """

    retrieval_params = frozenset({"retrieve_k", "use_keywords"})

    def __init__(self, llm: LLMClient, embedder: Embedder, retrieve_k: int = 10, use_keywords: bool = True) -> None:
        self.llm = llm
        self.embedder = embedder
        self.retrieve_k = retrieve_k
        self.use_keywords = use_keywords
        self.reset()

    def reset(self) -> None:
        self.items: dict[str, Item] = {}
        self.index = VectorIndex(self.embedder.dim)

    def add(self, item: Item) -> None:
        self.add_many([item])

    def add_many(self, items: list[Item]) -> None:
        # Embedding is the only work here, so a batch is strictly cheaper.
        self.index.add([item.id for item in items], self.embedder.encode([item.content for item in items]))
        self.items.update((item.id, item) for item in items)

    def retrieve(self, question: Question) -> Context:
        query, keywords_ms = timed_keywords(self.llm, question.text) if self.use_keywords else (question.text, 0.0)
        timings = {"keywords": keywords_ms}
        start = time.perf_counter()
        hits = self.index.search(self.embedder.encode_one(query), self.retrieve_k)
        timings["search"] = (time.perf_counter() - start) * 1000
        ids = [item_id for item_id, _ in hits]
        text = "\n".join(
            f"talk start time:{self.items[i].timestamp}\nmemory content: {self.items[i].content}" for i in ids
        )
        return Context(text=text, source_ids=ids, timings_ms=timings, telemetry={"query": query})

    def describe(self) -> dict[str, Any]:
        return {"items": len(self.items)}

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.index.save(directory)
        rows = [item.__dict__ for item in self.items.values()]
        (directory / "items.json").write_text(json.dumps(rows, ensure_ascii=False))

    def load(self, directory: Path) -> None:
        self.items = {row["id"]: Item(**row) for row in json.loads((directory / "items.json").read_text())}
        self.index = VectorIndex.load(directory, self.embedder.dim)
