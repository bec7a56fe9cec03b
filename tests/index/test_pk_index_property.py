"""Property: random sequences of batches (inserts, updates, deletes, key changes, rows deleted
inside their own batch), compactions (ours, with a position map, and another writer's),
files removed by another writer, no-op commits and crashes (reopen from disk; a crash
before the manifest is replaced) -> the index answers exactly like a dict model, its live
files are the model's, and a rebuild from the model's live rows answers the same."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.index import FileMove, FileRows, PrimaryKeyIndex, StaleIndexError, pk_index, runs

KEYS = 12

op = st.tuples(st.sampled_from(["insert", "update", "delete", "rekey"]), st.integers(0, KEYS - 1),
               st.integers(0, KEYS - 1))  # fmt: skip
step = st.one_of(
    st.tuples(st.just("batch"), st.lists(op, min_size=1, max_size=8), st.booleans()),
    st.tuples(st.just("compact"), st.integers(0, 2**16), st.booleans()),
    st.tuples(st.just("other_compact"), st.integers(0, 2**16), st.booleans()),
    st.tuples(st.just("other_drop"), st.integers(0, 2**16), st.booleans()),
    st.tuples(st.just("noop"), st.integers(0, 0), st.booleans()),
    st.tuples(st.just("reopen"), st.integers(0, 0), st.booleans()),
)


class Model:
    """The table: data files as lists of row keys, and key -> (file, pos) of live rows."""

    def __init__(self, composite: bool) -> None:
        self.composite = composite
        self.files: dict[str, list[int]] = {}
        self.live: dict[int, tuple[str, int]] = {}
        self.snapshot: int | None = None
        self.n = 0

    def columns(self, keys: list[int]) -> list[pa.Array]:
        if self.composite:
            return [pa.array([k % 3 for k in keys], pa.int32()), pa.array([f"k{k}" for k in keys], pa.string())]
        return [pa.array(keys, pa.int64())]

    def new_path(self) -> str:
        self.n += 1
        return f"f{self.n}"

    def next_snapshot(self) -> tuple[int | None, int]:
        parent = self.snapshot
        self.snapshot = (parent or 0) + 1
        return parent, self.snapshot

    def live_rows(self, path: str) -> tuple[list[int], list[int]]:
        keys, pos = [], []
        for p, k in enumerate(self.files[path]):
            if self.live.get(k) == (path, p):
                keys.append(k)
                pos.append(p)
        return keys, pos

    def pick(self, seed: int) -> list[str]:
        names = sorted(self.files)
        if not names:
            return []
        rng = np.random.default_rng(seed)
        return sorted(rng.choice(names, size=int(rng.integers(1, len(names) + 1)), replace=False).tolist())


def batch(model: Model, ops: list[tuple[str, int, int]]) -> tuple[FileRows | None, list[int]]:
    path = model.new_path()
    rows: list[int] = []
    removed: list[int] = []
    for kind, k, k2 in ops:
        if kind == "insert" and k in model.live:
            kind = "update"
        if kind in ("update", "delete", "rekey") and k not in model.live:
            continue
        if kind == "rekey" and (k2 in model.live or k2 == k):
            continue
        if kind != "insert":  # the row of k goes
            file, _pos = model.live.pop(k)
            if file != path:
                removed.append(k)
        if kind in ("insert", "update", "rekey"):
            new = k2 if kind == "rekey" else k
            model.live[new] = (path, len(rows))
            rows.append(new)
    if not rows:
        return None, removed
    model.files[path] = rows
    keys, pos = model.live_rows(path)
    return FileRows(path, model.columns(keys), np.array(pos, np.int64)), removed


def compaction(model: Model, olds: list[str]) -> tuple[str, list[FileMove], FileRows]:
    new = model.new_path()
    rows: list[int] = []
    moves = []
    for old in olds:
        mapping = np.full(len(model.files[old]), -1, np.int64)
        for k, p in zip(*model.live_rows(old), strict=True):
            mapping[p] = len(rows)
            model.live[k] = (new, len(rows))
            rows.append(k)
        moves.append(FileMove(old, new, mapping))
        del model.files[old]
    model.files[new] = rows
    return new, moves, FileRows(new, model.columns(rows))


@contextmanager
def crash_before_manifest() -> Iterator[None]:
    def boom(*_a: Any, **_k: Any) -> None:
        raise OSError("crash before the manifest is replaced")

    with mock.patch.object(pk_index, "write_manifest", boom):
        yield


def check(index: PrimaryKeyIndex, model: Model) -> None:
    probe = list(range(KEYS + 3))
    found = index.lookup(model.columns(probe), model.snapshot)
    got = {k: (p, int(pos)) for k, p, pos in zip(probe, found.file_paths(), found.positions, strict=True) if p}
    assert got == model.live
    index.check_live(model.snapshot, model.files)


def run_steps(directory: Path, steps: list[tuple[str, Any, bool]], composite: bool) -> None:
    model = Model(composite)
    index = PrimaryKeyIndex.create(directory / "idx")
    for kind, arg, crash in steps:
        if kind == "batch":
            rows, removed = batch(model, arg)
            parent, snap = model.next_snapshot()

            def apply(ix: PrimaryKeyIndex, rows: FileRows | None = rows, removed: list[int] = removed,
                      parent: int | None = parent, snap: int = snap) -> None:  # fmt: skip
                ix.apply_batch(parent, snap, [rows] if rows else [], removed=model.columns(removed))

            if crash:  # the table committed; the index did not: reopen, then catch up
                with crash_before_manifest(), pytest.raises(OSError, match="crash"):
                    apply(index)
                index = PrimaryKeyIndex.open(directory / "idx")
                assert index.snapshot_id == parent
            apply(index)
        elif kind in ("compact", "other_compact"):
            olds = model.pick(arg)
            if not olds:
                continue
            _new, moves, rows = compaction(model, olds)
            parent, snap = model.next_snapshot()
            if kind == "compact":
                index.rewrite(parent, snap, moves)
            else:
                index.catch_up(parent, snap, removed_files=olds, added=[rows])
        elif kind == "other_drop":
            olds = model.pick(arg)[:1]
            if not olds:
                continue
            for k in model.live_rows(olds[0])[0]:
                del model.live[k]
            del model.files[olds[0]]
            parent, snap = model.next_snapshot()
            index.catch_up(parent, snap, removed_files=olds)
        elif kind == "noop":
            parent, snap = model.next_snapshot()
            index.note_snapshot(parent, snap)
        else:
            index = PrimaryKeyIndex.open(directory / "idx")
        check(index, model)
    if model.snapshot is not None:
        try:
            index.lookup(model.columns([0]), model.snapshot + 1)
            raise AssertionError("answered for a snapshot it is not at")
        except StaleIndexError:
            pass
    live = [FileRows(p, model.columns(ks), np.array(ps, np.int64)) for p in sorted(model.files)
            for ks, ps in [model.live_rows(p)]]  # fmt: skip
    check(PrimaryKeyIndex.rebuild(directory / "rebuilt", model.snapshot, live), model)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, min_size=1, max_size=25), st.booleans())
def test_index_answers_like_the_model(steps: list[tuple[str, Any, bool]], composite: bool) -> None:
    # tiny strides, merge parts and bloom segments: multi-part merges and sparse searches happen on small data
    with mock.patch.object(runs, "STRIDE", 2), mock.patch.object(runs, "MERGE_PART_ENTRIES", 3), \
            mock.patch.object(runs, "BLOOM_SEGMENT_ENTRIES", 2), \
            mock.patch.object(pk_index, "MERGE_PART_ENTRIES", 3), tempfile.TemporaryDirectory() as tmp:  # fmt: skip
        run_steps(Path(tmp), steps, composite)
