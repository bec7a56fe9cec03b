"""``index.multiset``: copy numbers of equal rows (dense per image, counted on from a base)."""

from __future__ import annotations

import pyarrow as pa

from replicator.index.multiset import number_copies


def test_number_copies_counts_on_per_image_from_a_base() -> None:
    hi = pa.array([5, 7, 5, 5, 7], pa.uint64()).to_numpy()
    lo = pa.array([1, 1, 1, 1, 1], pa.uint64()).to_numpy()
    assert number_copies(hi, lo).tolist() == [0, 0, 1, 2, 1]
    assert number_copies(hi, lo, {(5, 1): 3}).tolist() == [3, 0, 4, 5, 1]
