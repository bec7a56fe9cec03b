"""Rebuilding the index from a real Iceberg table (SQL catalog, Parquet data and position
deletes): rows deleted by position are not indexed, live files are the table's, and a table
with equality deletes is refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from replicator.iceberg.rewrite import commit_rewrite
from replicator.iceberg.row_delta import commit_row_delta
from replicator.index import StaleIndexError
from replicator.index.from_table import catch_up_from_table, live_data_files, rebuild_from_table
from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, pos_deletes, sql_catalog


def test_rebuild_skips_rows_deleted_by_position(tmp_path: Path) -> None:
    table = sql_catalog(tmp_path).create_table("db.t", SCHEMA, properties={"format-version": "2"})
    d1 = data_file(table, "d1", [(1, "a"), (2, "b"), (3, "c")])
    commit_row_delta(table, data_files=[d1], delete_files=[], snapshot_properties={})
    d2 = data_file(table, "d2", [(2, "b2"), (4, "d")])
    commit_row_delta(table, data_files=[d2], delete_files=[pos_deletes(table, "p1", [(d1.file_path, 1)])],
                     snapshot_properties={})  # fmt: skip
    snap = table.current_snapshot()
    assert snap is not None
    index = rebuild_from_table(tmp_path / "idx", table, ["id"])
    assert index.snapshot_id == snap.snapshot_id
    found = index.lookup([pa.array([1, 2, 3, 4, 5], pa.int64())], snap.snapshot_id)
    assert found.file_paths() == [d1.file_path, d2.file_path, d1.file_path, d2.file_path, None]
    assert found.positions.tolist() == [0, 0, 2, 1, -1]
    index.check_live(snap.snapshot_id, live_data_files(table, snap.snapshot_id))


def test_equality_deletes_are_refused(tmp_path: Path) -> None:
    table = sql_catalog(tmp_path).create_table("db.t", SCHEMA, properties={"format-version": "2"})
    commit_row_delta(table, data_files=[data_file(table, "d1", [(1, "a")])], delete_files=[], snapshot_properties={})
    commit_row_delta(table, data_files=[], delete_files=[eq_deletes(table, "e1", [1])], snapshot_properties={})
    with pytest.raises(StaleIndexError, match="equality deletes"):
        rebuild_from_table(tmp_path / "idx", table, ["id"])


def test_catch_up_follows_another_writers_commits_and_refuses_a_rollback(tmp_path: Path) -> None:
    table = sql_catalog(tmp_path).create_table("db.t", SCHEMA, properties={"format-version": "2"})
    d1 = data_file(table, "d1", [(1, "a"), (2, "b"), (3, "c")])
    d0 = data_file(table, "d0", [(9, "z")])
    commit_row_delta(table, data_files=[d1, d0], delete_files=[], snapshot_properties={})
    first = table.current_snapshot()
    assert first is not None
    index = rebuild_from_table(tmp_path / "idx", table, ["id"])
    # another writer: updates 2 (position delete + new row), inserts 4, deletes 3
    d2 = data_file(table, "d2", [(2, "b2"), (4, "d")])
    deletes = pos_deletes(table, "p1", [(d1.file_path, 1), (d1.file_path, 2)])
    commit_row_delta(table, data_files=[d2], delete_files=[deletes], snapshot_properties={})
    # ... then compacts d0 away into c0
    c0 = data_file(table, "c0", [(9, "z")])
    commit_rewrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id,  # type: ignore[union-attr]
                   remove=[d0], add_data=[c0])  # fmt: skip
    head = table.current_snapshot()
    assert head is not None
    catch_up_from_table(index, table, ["id"])
    assert index.snapshot_id == head.snapshot_id
    found = index.lookup([pa.array([1, 2, 3, 4, 9], pa.int64())], head.snapshot_id)
    assert found.file_paths() == [d1.file_path, d2.file_path, None, d2.file_path, c0.file_path]
    assert found.positions.tolist() == [0, 0, -1, 1, 0]
    index.check_live(head.snapshot_id, live_data_files(table, head.snapshot_id))
    table.manage_snapshots().set_current_snapshot(first.snapshot_id).commit()
    with pytest.raises(StaleIndexError, match="does not descend"):
        catch_up_from_table(index, table, ["id"])
