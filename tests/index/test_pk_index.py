"""The primary-key index against a model table: every answer equals the model's, across
batches, compactions, other writers' commits and crashes; never an entry of a file that is
no longer live; never an answer for another snapshot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from replicator.index import (
    DuplicateKeyError,
    FileMove,
    FileRows,
    IndexCorruptError,
    PrimaryKeyIndex,
    StaleIndexError,
)
from replicator.index.manifest import MANIFEST


def ints(*values: int) -> list[pa.Array]:
    return [pa.array(values, pa.int64())]


def where(index: PrimaryKeyIndex, snapshot: int | None, *keys: int) -> list[tuple[str, int] | None]:
    found = index.lookup(ints(*keys), snapshot)
    paths = found.file_paths()
    return [(p, int(pos)) if p is not None else None for p, pos in zip(paths, found.positions, strict=True)]


def test_batches_update_delete_and_rekey(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1, 2, 3))])
    # update 2, delete 3, rekey 1 -> 10; the batch's file has a row deleted inside the batch (pos 0)
    index.apply_batch(1, 2, [FileRows("d2", ints(2, 10), np.array([1, 2]))], removed=ints(2, 3, 1))
    assert where(index, 2, 1, 2, 3, 10, 99) == [None, ("d2", 1), None, ("d2", 2), None]
    assert index.lookup(ints(2, 10), 2).position_deletes().to_pylist() == [
        {"file_path": "d2", "pos": 1},
        {"file_path": "d2", "pos": 2},
    ]


def test_refuses_other_snapshots_and_changes_on_another_parent(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 5, [FileRows("d1", ints(1))])
    with pytest.raises(StaleIndexError, match="at snapshot 5"):
        index.lookup(ints(1), 6)
    with pytest.raises(StaleIndexError):
        index.apply_batch(4, 7, [FileRows("d2", ints(2))])
    assert where(index, 5, 1) == [("d1", 0)]


def test_a_key_added_while_still_live_is_refused(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1, 2))])
    with pytest.raises(DuplicateKeyError, match="d1#0"):
        index.apply_batch(1, 2, [FileRows("d2", ints(1))])
    with pytest.raises(DuplicateKeyError):
        index.apply_batch(1, 2, [FileRows("d2", ints(7, 7))])
    with pytest.raises(DuplicateKeyError, match="two live rows"):
        PrimaryKeyIndex.rebuild(tmp_path / "r", 1, [FileRows("a", ints(1, 2)), FileRows("b", ints(2))])


def test_entries_of_files_another_writer_removed_are_never_returned(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1, 2)), FileRows("d2", ints(3))])
    # another writer rewrote d1 into x (we saw the commit, not the mapping): forget d1
    index.catch_up(1, 2, removed_files=["d1"], added=[FileRows("x", ints(2))])
    assert where(index, 2, 1, 2, 3) == [None, ("x", 0), ("d2", 0)]
    index.check_live(2, ["x", "d2"])
    with pytest.raises(StaleIndexError, match="no longer live"):
        index.check_live(2, ["x"])  # d2 removed behind the index's back
    with pytest.raises(StaleIndexError, match="not indexed"):
        index.check_live(2, ["x", "d2", "y"])
    reopened = PrimaryKeyIndex.open(tmp_path / "i")
    assert where(reopened, 2, 1, 2, 3) == [None, ("x", 0), ("d2", 0)]


def test_compaction_moves_current_rows_only(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1, 2, 3))])
    index.apply_batch(1, 2, [FileRows("d2", ints(2))], removed=ints(2))  # d1#1 deleted
    # compaction of d1 (rows 0 and 2 carried) and d2 into c
    index.rewrite(2, 3, [FileMove("d1", "c", np.array([0, -1, 1])), FileMove("d2", "c", np.array([2]))])
    assert where(index, 3, 1, 2, 3) == [("c", 0), ("c", 2), ("c", 1)]
    assert index.live_files == {"c"}


def test_torn_manifest_is_detected(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1))])
    path = tmp_path / "i" / MANIFEST
    path.write_text(path.read_text()[:-5])
    with pytest.raises(IndexCorruptError):
        PrimaryKeyIndex.open(tmp_path / "i")
    (tmp_path / "i" / MANIFEST).unlink()
    with pytest.raises(IndexCorruptError, match="no index manifest"):
        PrimaryKeyIndex.open(tmp_path / "i")


def test_missing_run_is_detected(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1, 2))])
    run = next(p for p in (tmp_path / "i").iterdir() if p.is_dir())
    (run / "lo.bin").write_bytes(b"")
    with pytest.raises(IndexCorruptError, match="torn"):
        PrimaryKeyIndex.open(tmp_path / "i")


def test_rebuild_equals_incremental(tmp_path: Path) -> None:
    keys = pa.array([f"k{i}" for i in range(50)])
    sub = pa.array(np.arange(50) % 3, pa.int32())
    rebuilt = PrimaryKeyIndex.rebuild(
        tmp_path / "r", 9, [FileRows("a", [keys.slice(0, 20), sub.slice(0, 20)]),
                            FileRows("b", [keys.slice(20), sub.slice(20)], np.arange(30) * 2)]  # fmt: skip
    )
    found = rebuilt.lookup([keys, sub], 9)
    assert found.found.all()
    assert found.file_paths() == ["a"] * 20 + ["b"] * 30
    assert found.positions.tolist() == list(range(20)) + [2 * i for i in range(30)]
    with pytest.raises(ValueError, match="keys of types"):
        rebuilt.lookup([keys], 9)


def test_compacting_a_file_does_not_touch_keys_that_moved_out_of_it(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("a", ints(1, 2, 3))])
    index.apply_batch(1, 2, [FileRows("b", ints(1))], removed=ints(1))  # a#0 deleted, 1 now in b
    assert index.run_counts == (3, 1)  # a's stale entry for 1 is still on disk
    index.rewrite(2, 3, [FileMove("a", "c", np.array([-1, 0, 1]))])
    assert where(index, 3, 1, 2, 3) == [("b", 0), ("c", 0), ("c", 1)]


def test_a_directory_holding_other_files_is_never_wiped(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "dead_letters.jsonl").write_text("x")
    with pytest.raises(ValueError, match="not an index directory"):
        PrimaryKeyIndex.create(tmp_path / "s")
    assert (tmp_path / "s" / "dead_letters.jsonl").exists()


def test_runs_left_by_a_crash_are_removed_on_open(tmp_path: Path) -> None:
    index = PrimaryKeyIndex.create(tmp_path / "i")
    index.apply_batch(None, 1, [FileRows("d1", ints(1, 2))])
    (tmp_path / "i" / "run-00000099.tmp").mkdir()  # a run being written
    (tmp_path / "i" / "run-00000098").mkdir()  # a run written, its manifest never replaced
    reopened = PrimaryKeyIndex.open(tmp_path / "i")
    assert sorted(p.name for p in (tmp_path / "i").iterdir() if p.is_dir()) == ["run-00000000"]
    assert where(reopened, 1, 1, 2) == [("d1", 0), ("d1", 1)]


def test_a_change_syncs_every_run_its_manifest_names_before_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One durability point per change: the runs a change writes and merges away are never
    fsynced, but every file of every run the new manifest names is, before the manifest."""
    import os

    synced: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    index = PrimaryKeyIndex.create(tmp_path / "i")
    snap: int | None = None
    earlier: set[str] = set()  # synced by earlier changes
    for b in range(1, 9):  # 8 equal batches: the binary counter merges at every other one
        synced.clear()
        index.apply_batch(snap, b, [FileRows(f"d{b}", ints(*range(b * 10, b * 10 + 10)))])
        snap = b
        manifest_at = next(i for i, p in enumerate(synced) if p.endswith(MANIFEST + ".tmp"))
        before = earlier | set(synced[:manifest_at])
        earlier |= set(synced)
        for name, _count in index._m.runs:
            run_dir = tmp_path / "i" / name
            assert {str(f) for f in run_dir.iterdir()} <= before, (b, name)
        synced_runs = {Path(p).parent.name for p in synced if "/run-" in p}
        assert synced_runs <= {name for name, _c in index._m.runs}, (b, synced_runs)
    assert where(PrimaryKeyIndex.open(tmp_path / "i"), 8, 10, 45, 89) == [("d1", 0), ("d4", 5), ("d8", 9)]
