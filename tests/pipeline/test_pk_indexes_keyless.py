"""``pipeline.pk_indexes`` for a table without a primary key, over a real SQL catalog without
Spark: the index is a multimap of whole rows (``index.multiset``): every live copy of an old
image is looked up in copy order, a batch's deletes remove the top copies and its new rows
are numbered on, and a commit by another writer makes it rebuild (copies renumbered)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from ops_mapping import OP_COLUMN, MappingPolicy, MultisetMapper, before_key_column
from ops_mapping.contract import TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN
from replicator.iceberg.files import data_file_from_parquet
from replicator.iceberg.row_delta import commit_row_delta
from replicator.iceberg.tables import TableState
from replicator.index.multiset import COPY_COLUMN
from replicator.pipeline.pk_indexes import TableIndexes
from tests.iceberg.tablekit import pos_deletes, sql_catalog, write_parquet

KEYLESS = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
Image = tuple[int | None, str | None]


@pytest.fixture
def state(tmp_path: Path) -> TableState:
    t = sql_catalog(tmp_path).create_table("db.h", KEYLESS, properties={"format-version": "2"})
    return TableState(t, "app.h", (), keyless=True)


def _data(state: TableState, name: str, rows: list[Image]) -> Any:
    path = write_parquet(state.table, name, [{"id": i, "name": n} for i, n in rows], schema_to_pyarrow(KEYLESS))
    return data_file_from_parquet(state.table, path)


def _head(state: TableState) -> int | None:
    snap = state.table.current_snapshot()
    return snap.snapshot_id if snap is not None else None


def _commit(state: TableState, data: list[Any], deletes: list[Any] = ()) -> tuple[int | None, int]:  # type: ignore[assignment]
    parent = _head(state)
    snap = commit_row_delta(state.table, data_files=data, delete_files=list(deletes), snapshot_properties={},
                            expected_parent_snapshot_id=parent)  # fmt: skip
    state.table = state.table.refresh()
    return parent, snap.snapshot_id


def _deletes_of(images: list[Image]) -> pa.Table:
    return pa.table({
        OP_COLUMN: ["d"] * len(images),
        before_key_column("id"): pa.array([i for i, _ in images], pa.int64()),
        before_key_column("name"): pa.array([n for _, n in images], pa.string()),
        "id": pa.nulls(len(images), pa.int64()), "name": pa.nulls(len(images), pa.string()),
    })  # fmt: skip


def _copies(indexes: TableIndexes, state: TableState, images: list[Image]) -> list[tuple[str, int, int]]:
    got = indexes.positions(state, _head(state), [_deletes_of(images)], [], MappingPolicy(), truncate=False)
    return [(r[TABLE_ROW_PATH_COLUMN].rsplit("/", 1)[1], r[TABLE_ROW_POS_COLUMN], r[COPY_COLUMN])
            for r in got.rows.to_pylist()]  # fmt: skip


def test_copies_are_looked_up_in_order_removed_from_the_top_and_numbered_on(state: TableState, tmp_path: Path) -> None:
    a = _data(state, "a", [(1, "x"), (1, "x"), (None, None), (1, "x")])
    _commit(state, [a])
    indexes = TableIndexes(tmp_path / "index")
    # An image deleted k times: its top k copies, in copy order (the last one goes first).
    assert _copies(indexes, state, [(1, "x")]) == [("a.parquet", 3, 2)]
    assert _copies(indexes, state, [(1, "x")] * 5) == [("a.parquet", 0, 0), ("a.parquet", 1, 1), ("a.parquet", 3, 2)]
    assert _copies(indexes, state, [(None, None), (9, None)]) == [("a.parquet", 2, 0)]

    # Our batch deletes (1, x) twice and writes it once more: the mapper removes the top
    # copies the positions list last, the new row is numbered on from what is left.
    seen = indexes.positions(state, _head(state), [_deletes_of([(1, "x"), (1, "x")])], [], MappingPolicy(),
                             truncate=False)  # fmt: skip
    mapper = MultisetMapper(pa.schema([("id", pa.int64()), ("name", pa.string())]), table_rows=seen.rows)
    staged = _deletes_of([(1, "x"), (1, "x")]).add_column(0, "__rep_seq", pa.array([1, 2], pa.int64()))
    mapper.map_chunk(staged.to_batches()[0])
    removed = [(r["file_path"], r["pos"]) for r in mapper.finish().table_position_deletes.to_pylist()]
    assert removed == [(a.file_path, 1), (a.file_path, 3)]
    b = _data(state, "b", [(1, "x"), (2, "y")])
    dels = pos_deletes(state.table, "b-del", removed)
    parent, snap = _commit(state, [b], [dels])
    indexes.committed(state, parent, snap, [b], [dels], seen, truncate=False)
    assert _copies(indexes, state, [(1, "x"), (1, "x"), (2, "y")]) == [
        ("a.parquet", 0, 0), ("b.parquet", 0, 1), ("b.parquet", 1, 0)]  # fmt: skip

    # A new run reads it back; another writer's delete makes it rebuild, copies renumbered.
    assert _copies(TableIndexes(tmp_path / "index"), state, [(1, "x")] * 2) == [
        ("a.parquet", 0, 0), ("b.parquet", 0, 1)]  # fmt: skip
    _commit(state, [], [pos_deletes(state.table, "other", [(a.file_path, 0)])])
    assert _copies(indexes, state, [(1, "x")] * 2) == [("b.parquet", 0, 0)]

