"""``pipeline.pk_indexes`` over a real SQL catalog, without Spark: which keys a batch looks
up, the index brought to the head (rebuilt, caught up after another writer's commit, a torn
index rebuilt), our own commits applied to it, and a rewrite by another writer never
answered with the file it removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ops_mapping import OP_COLUMN, MappingPolicy, before_key_column
from ops_mapping.contract import TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN
from replicator.iceberg import sql_commit
from replicator.iceberg.row_delta import commit_row_delta
from replicator.iceberg.table_commit import commit_batch, position_files_as_vectors
from replicator.iceberg.tables import TABLE_PROPERTIES, TableState
from replicator.index import StaleIndexError
from replicator.maintenance.conversion import convert_equality_deletes
from replicator.pipeline.pk_indexes import Positions, TableIndexes, candidate_keys
from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, pos_deletes, sql_catalog


def _staged(ops: list[tuple[str, int | None, int | None]]) -> pa.Table:
    return pa.table({
        OP_COLUMN: [o for o, _, _ in ops],
        before_key_column("id"): pa.array([b for _, b, _ in ops], pa.int64()),
        "id": pa.array([a for _, _, a in ops], pa.int64()),
    })  # fmt: skip


def test_candidate_keys_are_the_keys_an_event_may_delete_once_each() -> None:
    staged = _staged([("c", None, 1), ("u", 2, 2), ("u", 3, 4), ("d", 5, None), ("r", None, 6), ("d", 2, None)])
    assert sorted(candidate_keys(staged, ["id"], MappingPolicy()).column("id").to_pylist()) == [2, 3, 4, 5, 6]
    creates = MappingPolicy(upsert_creates=True, upsert_reads=False)
    assert sorted(candidate_keys(staged, ["id"], creates).column("id").to_pylist()) == [1, 2, 3, 4, 5]


def _head(state: TableState) -> int | None:
    snap = state.table.current_snapshot()
    return snap.snapshot_id if snap is not None else None


def _commit(state: TableState, data: list[Any] = (), deletes: list[Any] = ()) -> tuple[int | None, int]:  # type: ignore[assignment]
    parent = _head(state)
    snap = commit_row_delta(state.table, data_files=list(data), delete_files=list(deletes), snapshot_properties={},
                            expected_parent_snapshot_id=parent)  # fmt: skip
    state.table = state.table.refresh()
    return parent, snap.snapshot_id


def _where(indexes: TableIndexes, state: TableState, ids: list[int]) -> dict[int, tuple[str, int]]:
    got = indexes.lookup(state, _head(state), pa.table({"id": pa.array(ids, pa.int64())}))
    assert got.snapshot_id == _head(state)
    rows = got.rows.to_pylist()
    return {r["id"]: (r[TABLE_ROW_PATH_COLUMN].rsplit("/", 1)[1], r[TABLE_ROW_POS_COLUMN]) for r in rows}


@pytest.fixture
def table(tmp_path: Path) -> TableState:
    cat = sql_catalog(tmp_path)
    t = cat.create_table("db.t", SCHEMA, properties={"format-version": "2"})
    return TableState(t, "app.t", ("id",))


def test_index_follows_our_commits_and_other_writers(table: TableState, tmp_path: Path) -> None:
    state = table
    a = data_file(state.table, "a", [(1, "x"), (2, "y"), (3, "z")])
    _commit(state, [a])
    indexes = TableIndexes(tmp_path / "index")
    assert _where(indexes, state, [1, 3, 9]) == {1: ("a.parquet", 0), 3: ("a.parquet", 2)}  # rebuilt

    # Our batch: key 2's row deleted by position, key 4 written, key 1 updated.
    b = data_file(state.table, "b", [(4, "n"), (1, "x2"), (1, "x3")])
    dels = pos_deletes(state.table, "b-del", [(a.file_path, 1), (a.file_path, 0), (b.file_path, 1)])
    seen = indexes.lookup(state, _head(state), pa.table({"id": pa.array([1, 2], pa.int64())}))
    parent, snap = _commit(state, [b], [dels])
    indexes.committed(state, parent, snap, [b], [dels], seen, truncate=False)
    assert _where(indexes, state, [1, 2, 3, 4]) == {1: ("b.parquet", 2), 3: ("a.parquet", 2), 4: ("b.parquet", 0)}

    # Another writer rewrites every file into one (a compaction): the index catches up and
    # never answers with a removed file.
    c = data_file(state.table, "c", [(1, "x3"), (3, "z"), (4, "n")])
    with state.table.transaction() as tx, tx.update_snapshot().overwrite() as ow:
        ow.delete_data_file(a)
        ow.delete_data_file(b)
        ow.append_data_file(c)
    state.table = state.table.refresh()
    assert _where(indexes, state, [1, 3, 4]) == {1: ("c.parquet", 0), 3: ("c.parquet", 1), 4: ("c.parquet", 2)}

    # A new run reopens it from disk; a torn manifest is rebuilt from the table.
    assert _where(TableIndexes(tmp_path / "index"), state, [4]) == {4: ("c.parquet", 2)}
    (tmp_path / "index" / "db.t" / "MANIFEST").write_bytes(b"torn")
    assert _where(TableIndexes(tmp_path / "index"), state, [3]) == {3: ("c.parquet", 1)}


def test_commit_on_an_unexpected_parent_leaves_the_index_to_catch_up(table: TableState, tmp_path: Path) -> None:
    state = table
    _commit(state, [data_file(state.table, "a", [(1, "x")])])
    indexes = TableIndexes(tmp_path / "index")
    assert _where(indexes, state, [1]) == {1: ("a.parquet", 0)}
    b = data_file(state.table, "b", [(2, "y")])
    parent, snap = _commit(state, [b])
    indexes.committed(state, 12345, snap, [b], [], Positions(12345, pa.table({}), {}), truncate=False)
    assert _where(indexes, state, [1, 2]) == {1: ("a.parquet", 0), 2: ("b.parquet", 0)}


def test_equality_deletes_are_converted_before_the_index_is_built(table: TableState, tmp_path: Path) -> None:
    state = table
    a = data_file(state.table, "a", [(1, "x"), (2, "y")])
    _commit(state, [a])
    _commit(state, [], [eq_deletes(state.table, "eq", [1])])
    with pytest.raises(StaleIndexError, match="equality deletes"):
        TableIndexes(tmp_path / "index").lookup(state, _head(state), pa.table({"id": pa.array([2], pa.int64())}))

    converted: list[int | None] = []

    def convert_by_hand(t: Any) -> Any:  # maintenance's conversion (in this process: a small table)
        converted.append(_head(state))
        convert_equality_deletes(None, t)  # type: ignore[arg-type]
        return t.refresh()

    indexes = TableIndexes(tmp_path / "index", convert_by_hand)
    got = indexes.lookup(state, _head(state), pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert converted and got.snapshot_id == _head(state) != converted[0]  # the batch stages again
    assert got.rows.column("id").to_pylist() == [2]


def test_a_rolled_back_table_gets_its_index_rebuilt(table: TableState, tmp_path: Path) -> None:
    state = table
    a = data_file(state.table, "a", [(1, "x"), (2, "y")])
    _, first = _commit(state, [a])
    indexes = TableIndexes(tmp_path / "index")
    assert _where(indexes, state, [2]) == {2: ("a.parquet", 1)}
    seen = indexes.lookup(state, _head(state), pa.table({"id": pa.array([2], pa.int64())}))
    dels = pos_deletes(state.table, "a-del", [(a.file_path, 1)])
    parent, snap = _commit(state, [], [dels])
    indexes.committed(state, parent, snap, [], [dels], seen, truncate=False)
    assert _where(indexes, state, [2]) == {}
    # Restored to the first snapshot (key 2 lives again): the head does not descend from
    # the index's snapshot, so the index is rebuilt, never answered from the later state.
    state.table.manage_snapshots().set_current_snapshot(first).commit()
    state.table = state.table.refresh()
    assert _where(indexes, state, [2]) == {2: ("a.parquet", 1)}


def test_a_v3_batch_reaches_the_index_through_its_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Format v3: the batch's position deletes were committed as deletion vectors (their
    Parquet files are gone); ``committed`` learns the removed rows from the vectors, so the
    next lookup needs no catch-up from the table."""
    cat = sql_commit.FastCommitSqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("db")
    t = cat.create_table("db.t", SCHEMA, properties={**TABLE_PROPERTIES, "format-version": "3"})
    state = TableState(t, "app.t", ("id",))
    a = data_file(state.table, "a", [(1, "x"), (2, "y"), (3, "z")])
    commit_batch(state.table, data_files=[a], delete_files=[], snapshot_properties={}, expected_parent_snapshot_id=None)
    state.table = state.table.refresh()
    indexes = TableIndexes(tmp_path / "index")
    assert _where(indexes, state, [1, 2, 3]) == {1: ("a.parquet", 0), 2: ("a.parquet", 1), 3: ("a.parquet", 2)}

    # Our batch: key 2's row deleted, key 1 updated twice (its first new row deleted in-batch).
    b = data_file(state.table, "b", [(4, "n"), (1, "x2"), (1, "x3")])
    dels = pos_deletes(state.table, "b-del", [(a.file_path, 1), (a.file_path, 0), (b.file_path, 1)])
    seen = indexes.lookup(state, _head(state), pa.table({"id": pa.array([1, 2], pa.int64())}))
    vectors = position_files_as_vectors(state.table, [dels.file_path])  # the Parquet file is deleted
    parent = _head(state)
    commit_batch(state.table, data_files=[b], delete_files=[], vectors=vectors, snapshot_properties={},
                 expected_parent_snapshot_id=parent)  # fmt: skip
    state.table = state.table.refresh()
    snap = _head(state)
    assert snap is not None

    def no_catch_up(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the index had to catch up from the table")

    monkeypatch.setattr("replicator.pipeline.pk_indexes.catch_up_from_table", no_catch_up)
    monkeypatch.setattr("replicator.pipeline.pk_indexes.rebuild_from_table", no_catch_up)
    indexes.committed(state, parent, snap, [b], [], seen, truncate=False, vectors=vectors)
    assert _where(indexes, state, [1, 2, 3, 4]) == {1: ("b.parquet", 2), 3: ("a.parquet", 2), 4: ("b.parquet", 0)}
