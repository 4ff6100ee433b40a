"""The two reference baselines the agent-memory literature reports first: full context and no memory.

Neither is in the CLAG paper. They bracket every memory system under the
same answerer: **no memory** answers from an empty context (what the model
knows, or guesses, without the conversation), and **full context** hands
the answerer the whole episode, in stream order with its dates. On LoCoMo
the full-context baseline matches or beats most memory systems under the
same answering model (mem0's and Zep's LoCoMo evaluations report it first),
so a memory system is worth its LLM calls only where it beats this row.

Full context follows LoCoMo's own full-context baseline
(snap-research/locomo ``task_eval/gpt_utils.py``, ``get_input_context``):
each session under a ``DATE:`` line, oldest first, and when the
conversation exceeds the budget the *oldest* items are dropped, so the most
recent turns always fit. The text is the same for every question of an
episode and the answerer puts it before the question, so a serving engine's
prefix cache (vLLM, SGLang) reuses the conversation across the episode's
questions. Tokens are estimated as characters / ``chars_per_token`` (the
estimate GAM's pages use, ``baselines/gam/memory.py``): cheap, independent
of the backend, and the budget leaves room for the estimate's error.

Both keep the episode's items (so the runner's snapshots, resumes and
``describe()`` work as for every method) and make no LLM call at all; the
answer call is the shared one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clag.memory.base import MemoryBase
from clag.types import Context, Item, Question


class ItemLog(MemoryBase):
    """The episode's items in stream order, saved and loaded as JSON; retrieval is the subclass's.

    Args:
        llm: Accepted for the runner's uniform construction; unused (no LLM call).
        embedder: Likewise unused.
    """

    def __init__(self, llm: Any = None, embedder: Any = None) -> None:
        self.reset()

    def reset(self) -> None:
        self.items: list[Item] = []

    def add(self, item: Item) -> None:
        self.items.append(item)

    def add_many(self, items: Sequence[Item]) -> None:
        self.items.extend(items)

    def describe(self) -> dict[str, Any]:
        return {"items": len(self.items)}

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        rows = [item.__dict__ for item in self.items]
        (directory / "items.json").write_text(json.dumps(rows, ensure_ascii=False))

    def load(self, directory: Path) -> None:
        self.items = [Item(**row) for row in json.loads((directory / "items.json").read_text())]


class NoMemory(ItemLog):
    """The answerer with an empty context: the floor every memory system must clear."""

    def retrieve(self, question: Question) -> Context:
        return Context(text="", source_ids=[], telemetry={"items_total": len(self.items), "items_kept": 0})


def render_items(items: Sequence[Item]) -> str:
    """Items in order, one per line, with a ``DATE:`` line wherever the timestamp changes (LoCoMo's layout)."""
    lines: list[str] = []
    last: str | None = None
    for item in items:
        if item.timestamp and item.timestamp != last:
            lines.append(f"DATE: {item.timestamp}")
        last = item.timestamp
        lines.append(item.content)
    return "\n".join(lines)


class FullContextMemory(ItemLog):
    """The whole episode as the context, cut from the oldest end at a token budget.

    Args:
        llm: Unused (see :class:`ItemLog`).
        embedder: Unused.
        budget_tokens: Most (estimated) tokens of context; the model's window
            must also hold the answer prompt (~100 tokens) and the answer.
        chars_per_token: Characters per token of the estimate.
    """

    retrieval_params = frozenset({"budget_tokens", "chars_per_token"})

    def __init__(
        self, llm: Any = None, embedder: Any = None, budget_tokens: int = 24000, chars_per_token: float = 4.0
    ) -> None:
        if budget_tokens < 1 or chars_per_token <= 0:
            raise ValueError(f"need budget_tokens >= 1 and chars_per_token > 0, got {budget_tokens}, {chars_per_token}")
        self.budget_tokens = int(budget_tokens)
        self.chars_per_token = float(chars_per_token)
        super().__init__(llm, embedder)

    def reset(self) -> None:
        super().reset()
        self._fitted: tuple[int, str] | None = None

    def add(self, item: Item) -> None:
        super().add(item)
        self._fitted = None

    def add_many(self, items: Sequence[Item]) -> None:
        super().add_many(items)
        self._fitted = None

    def load(self, directory: Path) -> None:
        super().load(directory)
        self._fitted = None

    def tokens(self, text: str) -> int:
        """Estimated tokens of ``text``."""
        return int(-(-len(text) // self.chars_per_token))

    def fit(self) -> tuple[int, str]:
        """``(first kept item, context text)``: the longest suffix of the items within the budget.

        The rendered length grows as the suffix grows, so a binary search over
        the first kept index finds it; computed once per episode.
        """
        if self._fitted is None:
            low, high = 0, len(self.items)  # invariant: items[high:] fits (the empty suffix always does)
            while low < high:
                middle = (low + high) // 2
                if self.tokens(render_items(self.items[middle:])) <= self.budget_tokens:
                    high = middle
                else:
                    low = middle + 1
            self._fitted = (high, render_items(self.items[high:]))
        return self._fitted

    def retrieve(self, question: Question) -> Context:
        start = time.perf_counter()
        first, text = self.fit()
        kept = self.items[first:]
        telemetry = {
            "items_total": len(self.items),
            "items_kept": len(kept),
            "items_dropped": first,
            "truncated": first > 0,
            "context_tokens_est": self.tokens(text),
            "budget_tokens": self.budget_tokens,
        }
        timings = {"assemble": (time.perf_counter() - start) * 1000}
        return Context(text=text, source_ids=[item.id for item in kept], timings_ms=timings, telemetry=telemetry)

    def describe(self) -> dict[str, Any]:
        first, text = self.fit()
        return {
            "items": len(self.items),
            "items_kept": len(self.items) - first,
            "truncated": first > 0,
            "context_tokens_est": self.tokens(text),
            "budget_tokens": self.budget_tokens,
        }
