"""``index.multiset``: copy numbers of equal rows (dense per image, counted on from a base)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from replicator.index import FileRows, PrimaryKeyIndex
from replicator.index.multiset import copy_counts, copy_keys, live_copies, number_copies


def test_number_copies_counts_on_per_image_from_a_base() -> None:
    hi = pa.array([5, 7, 5, 5, 7], pa.uint64()).to_numpy()
    lo = pa.array([1, 1, 1, 1, 1], pa.uint64()).to_numpy()
    assert number_copies(hi, lo).tolist() == [0, 0, 1, 2, 1]
    assert number_copies(hi, lo, {(5, 1): 3}).tolist() == [3, 0, 4, 5, 1]


def test_copy_counts_search_dense_copies(tmp_path: Path) -> None:
    """Images with 0, 1, 2, 5 and 37 copies: counted by an exponential then binary search."""
    sizes = {11: 1, 12: 2, 13: 5, 14: 37}
    hi = np.array([h for h, n in sizes.items() for _ in range(n)], np.uint64)
    lo = np.full(len(hi), 7, np.uint64)
    keys = copy_keys(hi, lo, number_copies(hi, lo))
    index = PrimaryKeyIndex.create(tmp_path / "ix")
    index.apply_batch(None, 1, [FileRows("f", keys)])
    asked = np.array([10, 11, 12, 13, 14], np.uint64)
    assert copy_counts(index, 1, asked, np.full(5, 7, np.uint64)).tolist() == [0, 1, 2, 5, 37]
    top = live_copies(index, 1, np.array([14, 14, 13], np.uint64), np.full(3, 7, np.uint64))
    assert top.column("__rep_copy").to_pylist() == [4, 35, 36]  # image 13's top one, 14's top two

