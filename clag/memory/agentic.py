"""The agentic-memory core shared by A-mem and CLAG.

A-mem (WujiangXu/A-mem ``memory_layer.py``) and CLAG (dmis-lab/CLAG
``CLAG_memory.py``, a fork of it) share three operations, implemented here
once so that the two methods differ only where their papers differ:

1. **Note construction** (``MemoryNote.analyze_content``): one LLM call turns
   an item into a note with keywords, a one-sentence context and tags.
2. **Evolution** (``AgenticMemorySystem.process_memory``): one LLM call sees
   the new note and its k nearest neighbours and may *strengthen* (link the
   new note to neighbours and replace its tags) and *update_neighbor*
   (replace each neighbour's context and tags, in the order shown). The
   neighbour scope is a parameter: the whole pool (A-mem, CLAG's global
   evolution ablation) or the routed cluster (CLAG).
3. **Retrieval with link expansion** (``find_related_memories_raw``): the
   top-k notes, each followed by the notes it links to.

Faithful details kept from the authors' code:

- Notes are addressed by their position in the pool (the "memory index"
  shown to the evolution prompt); links are stored on the new note only, as
  those positions.
- Neighbours are searched with the new note's *content* embedding; the note
  itself is embedded from content + context + keywords + tags after its own
  evolution (``add_note``), and neighbours' vectors are not refreshed when
  evolution rewrites their metadata, only by a later consolidation.
- The evolution call is made even when the pool is empty (the first note),
  so ingestion costs exactly 2 LLM calls per item (plus schema retries).
- An unusable note answer gives keywords ``[]``, context ``"General"``,
  tags ``[]``; an unusable evolution answer changes nothing.

Robustness choices of ours (small models, see docs/running.md: Models), all counted in
:meth:`AgenticCore.describe`:

- ``strict_links`` (default on) keeps only suggested connections that are
  memory indices of the neighbours shown; the authors accept any in-range
  integer, which turns an SLM's list positions (0, 1, 2) into links to the
  first notes of the conversation.
- Empty or placeholder tags / contexts never overwrite real ones (the
  authors assign whatever comes back, an empty list included).

The authors embed three slightly different concatenations of the same fields
(for the global retriever, the cluster retrievers and routing); we keep one
vector per note, built by :meth:`Note.document`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clag.embed import Embedder, VectorIndex
from clag.llm.client import LLMClient
from clag.llm.json_parse import is_placeholder
from clag.types import Item

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = "General"  # the authors' value when note construction fails

NOTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "keywords": {"type": "array", "items": {"type": "string"}},
        "context": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["keywords", "context", "tags"],
}

# The authors' evolution JSON shape (process_memory's response_format), all keys required.
EVOLVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "should_evolve": {"type": "boolean"},
        "actions": {"type": "array", "items": {"type": "string"}},
        "suggested_connections": {"type": "array", "items": {"type": "integer"}},
        "tags_to_update": {"type": "array", "items": {"type": "string"}},
        "new_context_neighborhood": {"type": "array", "items": {"type": "string"}},
        "new_tags_neighborhood": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
    },
    "required": [
        "should_evolve",
        "actions",
        "suggested_connections",
        "tags_to_update",
        "new_context_neighborhood",
        "new_tags_neighborhood",
    ],
}


@dataclass
class Note:
    """One memory note (the authors' ``MemoryNote``, without unused fields).

    Attributes:
        index: Position in the pool; the "memory index" links refer to.
            ``-1`` until the note is committed.
        source_id: Id of the item the note was built from (evidence metrics).
        content: ``Speaker <name>says : <text>`` as the authors build it.
        timestamp: Session date of the item.
        keywords: Salient terms from note construction.
        context: One-sentence summary; evolution may rewrite it.
        tags: Categories; evolution may rewrite them.
        links: Memory indices this note was linked to by evolution.
    """

    index: int
    source_id: str
    content: str
    timestamp: str
    keywords: list[str] = field(default_factory=list)
    context: str = DEFAULT_CONTEXT
    tags: list[str] = field(default_factory=list)
    links: list[int] = field(default_factory=list)

    def document(self) -> str:
        """The text the note is embedded from (A-mem ``add_note``: content and metadata)."""
        return (
            f"content:{self.content} context:{self.context} keywords: {', '.join(self.keywords)}"
            f" tags: {', '.join(self.tags)}"
        )

    def line(self, with_index: bool = False) -> str:
        """One note as the authors lay it out for prompts and answer contexts.

        ``with_index`` prefixes the memory index, as the evolution prompt
        shows neighbours (``find_related_memories``); answer contexts omit it
        (``find_related_memories_raw``).
        """
        prefix = f"memory index:{self.index}\t" if with_index else ""
        return (
            f"{prefix}talk start time:{self.timestamp}\tmemory content: {self.content}\t"
            f"memory context: {self.context}\tmemory keywords: {self.keywords}\tmemory tags: {self.tags}"
        )


def clean_strings(value: Any) -> list[str]:
    """Non-empty, non-placeholder strings of a list, stripped, first occurrence kept."""
    if not isinstance(value, list):
        return []
    out: list[str] = []
    for entry in value:
        text = str(entry).strip() if isinstance(entry, (str, int, float)) else ""
        if text and not is_placeholder(text) and text not in out:
            out.append(text)
    return out


def note_prompt(content: str) -> str:
    """Note construction (paraphrase of A-mem ``MemoryNote.analyze_content``)."""
    return (
        "Analyse the memory content below and describe it with structured metadata:\n"
        '- "keywords": the most salient specific terms (nouns, verbs, key concepts), most important '
        "first; at least three, without redundancy; leave out speaker names and times.\n"
        '- "context": one sentence giving the main topic, the key points and the purpose of the content.\n'
        '- "tags": at least three broad categories for classifying it (domain, format, type), without '
        "redundancy.\n"
        'Reply with a JSON object with the keys "keywords" (list of strings), "context" (string) and '
        '"tags" (list of strings).\n\n'
        f"Content:\n{content}"
    )


def evolve_prompt(note: Note, neighbours: Sequence[Note]) -> str:
    """Evolution (paraphrase of A-mem ``evolution_system_prompt``): same inputs, actions and JSON keys."""
    shown = "\n".join(n.line(with_index=True) for n in neighbours)
    count = len(neighbours)
    return (
        "You maintain a memory store and decide how it evolves when a new note arrives.\n\n"
        f"New note\ncontext: {note.context}\ncontent: {note.content}\nkeywords: {note.keywords}\n\n"
        f"Its nearest neighbour notes ({count}):\n{shown}\n\n"
        "Decide:\n"
        "1. should_evolve: whether the new note relates to its neighbours so that the store should "
        "change (true or false).\n"
        '2. actions: any of "strengthen" and "update_neighbor".\n'
        "   - strengthen: put in suggested_connections the memory index numbers of the neighbours the "
        "new note should be linked to, and the new note's revised tags in tags_to_update.\n"
        "   - update_neighbor: give each neighbour, in the order listed, its revised context in "
        "new_context_neighborhood and its revised tags in new_tags_neighborhood; repeat the current "
        "context and tags of a neighbour that needs no change.\n"
        "Tags should characterise a note so that it can be found and grouped later. "
        f"new_context_neighborhood and new_tags_neighborhood must each have exactly {count} entries.\n"
        "Reply with a JSON object with the keys should_evolve (boolean), actions (list of strings), "
        "suggested_connections (list of integers), tags_to_update (list of strings), "
        "new_context_neighborhood (list of strings) and new_tags_neighborhood (list of lists of strings)."
    )


class AgenticCore:
    """Notes, links and their vector index, with the three shared operations.

    Methods compose it: A-mem calls :meth:`neighbours` with the whole pool,
    CLAG with the routed cluster's members.

    Args:
        llm: Shared client; stages ``note`` and ``evolve``.
        embedder: Shared sentence embedder (all-MiniLM-L6-v2).
        strict_links: Keep only links to the neighbours shown (see module doc).
    """

    def __init__(self, llm: LLMClient, embedder: Embedder, strict_links: bool = True) -> None:
        self.llm = llm
        self.embedder = embedder
        self.strict_links = strict_links
        self.reset()

    def reset(self) -> None:
        self.notes: list[Note] = []
        self.index = VectorIndex(self.embedder.dim)
        self.stats: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.notes)

    # -- note construction -------------------------------------------------

    def build_notes(self, items: Sequence[Item]) -> list[Note]:
        """One ``note`` call per item, batched: they depend on the item only."""
        parsed = self.llm.generate_json([note_prompt(item.content) for item in items], "note", NOTE_SCHEMA)
        notes = []
        for item, value in zip(items, parsed):
            note = Note(index=-1, source_id=item.id, content=item.content, timestamp=item.timestamp)
            if value is None:
                self.stats["note_fallbacks"] += 1
            else:
                note.keywords = clean_strings(value["keywords"])
                note.tags = clean_strings(value["tags"])
                note.context = value["context"].strip()
            notes.append(note)
        return notes

    # -- search --------------------------------------------------------------

    def embed(self, text: str) -> np.ndarray:
        """One text at a time, so ``add`` and ``add_many`` produce bit-identical vectors."""
        return self.embedder.encode_one(text)

    def search(self, query: np.ndarray, k: int, scope: Collection[int] | None = None) -> list[int]:
        """Top-``k`` note indices by cosine, best first; ``scope`` restricts the pool."""
        subset = None if scope is None else [str(i) for i in scope]
        return [int(key) for key, _ in self.index.search(query, k, subset=subset)]

    def vectors(self, indices: Sequence[int]) -> np.ndarray:
        return self.index.vectors([str(i) for i in indices])

    # -- evolution -----------------------------------------------------------

    def evolve(self, note: Note, neighbours: Sequence[int]) -> bool:
        """One ``evolve`` call over ``neighbours``; applies the authors' rules.

        Returns ``should_evolve`` (what the authors count towards
        consolidation); an unusable answer counts as ``False``.
        """
        shown = [self.notes[i] for i in neighbours]
        value = self.llm.generate_json([evolve_prompt(note, shown)], "evolve", EVOLVE_SCHEMA)[0]
        if value is None:
            self.stats["evolve_failures"] += 1
            return False
        if not value["should_evolve"]:
            return False
        self.stats["evolutions"] += 1
        actions = {str(a).strip().lower() for a in value["actions"]}
        if "strengthen" in actions:
            self._strengthen(note, shown, value)
        if "update_neighbor" in actions:
            self._update_neighbours(shown, value)
        return True

    def _strengthen(self, note: Note, shown: Sequence[Note], value: dict[str, Any]) -> None:
        allowed = {n.index for n in shown} if self.strict_links else set(range(len(self.notes)))
        for raw in value["suggested_connections"]:
            target = _as_int(raw)
            if target is None or target not in allowed:
                self.stats["links_rejected"] += 1
            elif target not in note.links:
                note.links.append(target)
                self.stats["links_added"] += 1
        tags = clean_strings(value["tags_to_update"])
        if tags:
            note.tags = tags

    def _update_neighbours(self, shown: Sequence[Note], value: dict[str, Any]) -> None:
        # As the authors: position i of the answer lists rewrites the i-th neighbour
        # shown, for as many neighbours as there are tag lists.
        contexts = value["new_context_neighborhood"]
        for i, (neighbour, tags) in enumerate(zip(shown, value["new_tags_neighborhood"])):
            tags = clean_strings(tags)
            context = contexts[i] if i < len(contexts) else None
            changed = False
            if tags and tags != neighbour.tags:
                neighbour.tags, changed = tags, True
            if isinstance(context, str) and context.strip() and not is_placeholder(context):
                if context.strip() != neighbour.context:
                    neighbour.context, changed = context.strip(), True
            self.stats["neighbours_updated"] += changed

    # -- pool ----------------------------------------------------------------

    def commit(self, note: Note, vector: np.ndarray) -> int:
        """Append ``note`` to the pool under the next memory index."""
        note.index = len(self.notes)
        self.notes.append(note)
        self.index.add([str(note.index)], vector[None, :])
        return note.index

    def refresh_embeddings(self) -> None:
        """Re-embed every note from its current metadata (A-mem ``consolidate_memories``)."""
        self.index = VectorIndex(self.embedder.dim)
        if self.notes:
            vectors = self.embedder.encode([n.document() for n in self.notes])
            self.index.add([str(n.index) for n in self.notes], vectors)
        self.stats["refreshes"] += 1

    # -- retrieval -----------------------------------------------------------

    def render(self, indices: Sequence[int], link_limit: int) -> tuple[str, list[str], float]:
        """Answer context, source ids and the share of the context's characters that links brought.

        Each note is followed by up to ``link_limit`` notes it links to, as
        in the authors' ``find_related_memories_raw`` (repeats included).
        Source ids are the ranked notes' item ids, then linked notes' ids
        not already listed, so rank-based evidence metrics see the ranking.
        The link share (0 for an empty context) says how much of what the
        answerer reads evolution's links put there, not the search.
        """
        lines: list[str] = []
        ranked = [self.notes[i].source_id for i in indices]
        linked: list[str] = []
        linked_chars = 0
        for i in indices:
            note = self.notes[i]
            lines.append(note.line())
            for target in note.links[:link_limit]:
                lines.append(self.notes[target].line())
                linked.append(self.notes[target].source_id)
                linked_chars += len(lines[-1]) + 1
        seen = set(ranked)
        extra = [s for s in dict.fromkeys(linked) if s not in seen]
        text = "".join(line + "\n" for line in lines)
        return text, ranked + extra, linked_chars / len(text) if text else 0.0

    # -- telemetry and persistence -------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "notes": len(self.notes),
            "links": sum(len(n.links) for n in self.notes),
            **{key: int(self.stats[key]) for key in sorted(self.stats)},
        }

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.index.save(directory, "notes")
        state = {"notes": [asdict(n) for n in self.notes], "stats": dict(self.stats)}
        (directory / "notes.json").write_text(json.dumps(state, ensure_ascii=False))

    def load(self, directory: Path) -> None:
        state = json.loads((directory / "notes.json").read_text())
        self.notes = [Note(**row) for row in state["notes"]]
        self.stats = Counter(state["stats"])
        self.index = VectorIndex.load(directory, self.embedder.dim, "notes")


def _as_int(value: Any) -> int | None:
    """An integer from an int or a digit string (small models quote numbers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None
