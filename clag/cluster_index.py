"""Per-cluster vector matrices: search that touches only the picked clusters.

CLAG's second retrieval stage searches the members of the clusters the SLM
picked. Through :class:`clag.embed.VectorIndex` that is a FAISS
``IDSelectorBatch`` over one flat index: the scan still visits every stored
vector and asks the selector whether it is a member, so its cost grows with
the whole memory, not with the clusters searched (``benchmarks/``
measures it). Here each cluster owns a small contiguous matrix of its
members' unit vectors; a search multiplies the query with the picked
clusters' matrices only, so it costs O(size of the picked clusters).

Clusters stay small by construction (CLAG splits any cluster above
``tau_split`` = 300 members), so appending by copying a cluster's matrix is
cheap, and exact search over a few hundred rows needs no FAISS.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ClusterIndex:
    """Exact cosine search restricted to chosen clusters, one matrix per cluster.

    Vectors are expected L2-normalised (as :class:`clag.embed.Embedder`
    returns them), so the inner product is the cosine, as in ``VectorIndex``.

    Args:
        dim: Vector dimension.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._ids: dict[str, list[str]] = {}
        self._vectors: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._ids.values())

    @property
    def clusters(self) -> list[str]:
        return list(self._ids)

    def members(self, cluster: str) -> list[str]:
        return list(self._ids.get(cluster, []))

    def set_cluster(self, cluster: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Replace a cluster's members (cold start, split, consolidation, refit)."""
        self._ids[cluster] = list(ids)
        self._vectors[cluster] = self._matrix(vectors, len(ids))

    def add(self, cluster: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Append members to a cluster (a routed note joins); creates the cluster if new."""
        matrix = self._matrix(vectors, len(ids))
        if cluster not in self._ids:
            self.set_cluster(cluster, ids, matrix)
            return
        self._ids[cluster].extend(ids)
        self._vectors[cluster] = np.vstack([self._vectors[cluster], matrix])

    def search(self, query: np.ndarray, k: int, clusters: Sequence[str]) -> list[tuple[str, float]]:
        """Top-``k`` ids by cosine over the members of ``clusters``, best first.

        Unknown cluster ids are ignored; equal scores keep the clusters' order,
        then the members' joining order (a stable sort), so results repeat exactly.
        """
        picked = list(dict.fromkeys(c for c in clusters if c in self._ids))
        if k <= 0 or not picked:
            return []
        ids = [key for c in picked for key in self._ids[c]]
        matrix = self._vectors[picked[0]] if len(picked) == 1 else np.vstack([self._vectors[c] for c in picked])
        scores = matrix @ np.asarray(query, dtype=np.float32).reshape(self.dim)
        order = np.argsort(-scores, kind="stable")[:k]  # a few hundred rows: a full sort is microseconds
        return [(ids[i], float(scores[i])) for i in order]

    def _matrix(self, vectors: np.ndarray, rows: int) -> np.ndarray:
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(rows, self.dim)
