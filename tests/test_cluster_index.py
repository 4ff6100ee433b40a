"""ClusterIndex: the per-cluster stage-2 search gives VectorIndex's subset-search answers."""

from __future__ import annotations

import numpy as np
import pytest

from clag.cluster_index import ClusterIndex
from clag.embed import VectorIndex

DIM = 16


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.fixture
def memory() -> tuple[ClusterIndex, VectorIndex, dict[str, list[str]], np.ndarray]:
    rng = np.random.default_rng(0)
    vectors = unit(rng, 60)
    ids = [f"n{i}" for i in range(60)]
    flat = VectorIndex(DIM)
    flat.add(ids, vectors)
    members = {"a": ids[:25], "b": ids[25:45], "c": ids[45:]}
    index = ClusterIndex(DIM)
    for cluster, keys in members.items():
        index.set_cluster(cluster, keys, flat.vectors(keys))
    return index, flat, members, unit(rng, 5)


def test_search_matches_vector_index_subset_search(memory) -> None:
    index, flat, members, queries = memory
    for query in queries:
        for picked in (["a"], ["b", "c"], ["c", "a", "b"]):
            subset = [key for c in picked for key in members[c]]
            expected = flat.search(query, 7, subset=subset)
            got = index.search(query, 7, picked)
            assert [key for key, _ in got] == [key for key, _ in expected]
            assert np.allclose([s for _, s in got], [s for _, s in expected], atol=1e-5)


def test_k_unknown_and_repeated_clusters(memory) -> None:
    index, _, members, queries = memory
    assert len(index.search(queries[0], 100, ["b"])) == len(members["b"])
    assert index.search(queries[0], 0, ["a"]) == []
    assert index.search(queries[0], 5, ["nope"]) == []
    assert index.search(queries[0], 5, ["a", "nope", "a"]) == index.search(queries[0], 5, ["a"])
    assert len(index) == 60 and index.clusters == ["a", "b", "c"]


def test_add_and_set_keep_members_and_vectors_together() -> None:
    index = ClusterIndex(2)
    index.add("x", ["p"], np.array([[1.0, 0.0]]))  # creates the cluster
    index.add("x", ["q"], np.array([[0.0, 1.0]]))  # appends
    assert index.members("x") == ["p", "q"]
    assert [key for key, _ in index.search(np.array([0.0, 1.0]), 1, ["x"])] == ["q"]
    index.set_cluster("x", ["r"], np.array([[0.6, 0.8]]))  # a split or consolidation replaces members
    assert index.members("x") == ["r"] and len(index) == 1


def test_equal_scores_keep_cluster_then_joining_order() -> None:
    index = ClusterIndex(2)
    same = np.array([[1.0, 0.0], [1.0, 0.0]])
    index.set_cluster("late", ["l1", "l2"], same)
    index.set_cluster("early", ["e1", "e2"], same)
    hits = index.search(np.array([1.0, 0.0]), 3, ["early", "late"])
    assert [key for key, _ in hits] == ["e1", "e2", "l1"]


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError):
        ClusterIndex(3).set_cluster("x", ["a", "b"], np.zeros((3, 3)))
