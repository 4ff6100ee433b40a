"""VectorIndex bookkeeping: one row per id, whatever order adds, replaces and removes come in."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clag.embed import VectorIndex


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_adding_a_present_id_replaces_its_vector_in_place(tmp_path: Path) -> None:
    index = VectorIndex(2)
    index.add(["a", "b"], np.stack([unit(1, 0), unit(0, 1)]))
    index.add(["a"], unit(0, 1)[None, :])  # re-embedded note
    assert index.ids == ["a", "b"] and len(index) == 2
    np.testing.assert_allclose(index.vector("a"), unit(0, 1))
    assert {key for key, _ in index.search(unit(0, 1), 5)} == {"a", "b"}  # searched once each
    assert [key for key, _ in index.search(unit(1, 0), 5)] in (["a", "b"], ["b", "a"])
    index.save(tmp_path)
    again = VectorIndex.load(tmp_path, 2)
    assert again.ids == ["a", "b"]
    np.testing.assert_allclose(again.vectors(["a", "b"]), index.vectors(["a", "b"]))


def test_removed_then_added_again_appears_once_at_the_end() -> None:
    index = VectorIndex(2)
    index.add(["a", "b", "c"], np.stack([unit(1, 0), unit(0, 1), unit(1, 1)]))
    index.remove(["a"])
    index.add(["a"], unit(1, 0)[None, :])
    assert index.ids == ["b", "c", "a"] and len(index) == 3
    assert index.search(unit(1, 0), 1)[0][0] == "a"


def test_an_id_twice_in_one_call_keeps_the_last_vector() -> None:
    index = VectorIndex(2)
    index.add(["a", "b", "a"], np.stack([unit(1, 0), unit(0, 1), unit(1, 1)]))
    assert index.ids == ["a", "b"] and len(index) == 2
    np.testing.assert_allclose(index.vector("a"), unit(1, 1), rtol=1e-6)
