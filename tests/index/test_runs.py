"""Sorted runs: probes find every entry (also when 64-bit hashes collide), merges keep the
newest entry per key and drop tombstones and dead files only when nothing older remains."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np

from replicator.index import runs
from replicator.index.runs import TOMBSTONE, Entries, merge_runs, sort_unique, write_run


def entries(hi: list[int], lo: list[int], file: list[int], pos: list[int]) -> Entries:
    return Entries(np.array(hi, np.uint64), np.array(lo, np.uint64), np.array(file, np.int32), np.array(pos, np.int64))


def test_probe_finds_all_and_only_present_keys_with_colliding_hi(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 5000
    # many equal hi (lo must decide), spread over the whole range (bloom segments)
    hi = rng.integers(0, 300, n, dtype=np.uint64) * np.uint64(2**55)
    lo = rng.integers(0, 2**63, n, dtype=np.uint64)
    ents = sort_unique(Entries(hi, lo, np.zeros(n, np.int32), np.arange(n, dtype=np.int64)), "last")
    with mock.patch.object(runs, "STRIDE", 16), mock.patch.object(runs, "BLOOM_SEGMENT_ENTRIES", 100):
        run = write_run(tmp_path / "r", [ents])
        assert run is not None
        reopened = runs.Run.open(tmp_path / "r", run.count)
    q_hi = np.concatenate([ents.hi, ents.hi[:100]])
    q_lo = np.concatenate([ents.lo, ents.lo[:100] + np.uint64(1)])  # same hi, other lo: absent
    with reopened.entries() as e:
        idx = reopened.probe(q_hi, q_lo, e)
    assert (idx[: len(ents)] == np.arange(len(ents))).all()
    assert (idx[len(ents) :] == -1).all()


def test_partial_merge_keeps_tombstones_complete_merge_drops_them(tmp_path: Path) -> None:
    old = write_run(tmp_path / "a", [entries([1, 2, 3], [0, 0, 0], [0, 0, 0], [0, 1, 2])])
    mid = write_run(tmp_path / "b", [entries([2, 3], [0, 0], [TOMBSTONE, 1], [-1, 0])])
    new = write_run(tmp_path / "c", [entries([3, 4], [0, 0], [2, 2], [5, 6])])
    assert old and mid and new
    dead = np.array([2], np.int32)
    with mock.patch.object(runs, "MERGE_PART_ENTRIES", 1):  # several parts
        partial = merge_runs([mid, new], tmp_path / "d", dead, complete=False)
        full = merge_runs([old, mid, new], tmp_path / "e", dead, complete=True)
    assert partial and full
    with partial.entries() as p:
        assert p.hi.tolist() == [2, 3, 4] and p.file.tolist() == [TOMBSTONE] * 3
    with full.entries() as f:
        assert f.hi.tolist() == [1] and f.file.tolist() == [0]


def test_sort_unique_keeps_the_last_given_of_each_key_among_colliding_hi() -> None:
    rng = np.random.default_rng(3)
    n = 3000
    hi = rng.integers(0, 20, n, dtype=np.uint64)
    lo = rng.integers(0, 40, n, dtype=np.uint64)
    ents = Entries(hi, lo, np.zeros(n, np.int32), np.arange(n, dtype=np.int64))
    s = sort_unique(ents, "last")
    model: dict[tuple[int, int], int] = {}
    for i, (h, lw) in enumerate(zip(hi.tolist(), lo.tolist(), strict=True)):
        model[(h, lw)] = i
    assert list(zip(s.hi.tolist(), s.lo.tolist(), strict=True)) == sorted(model)
    assert s.pos.tolist() == [model[k] for k in sorted(model)]
