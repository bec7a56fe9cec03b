"""``BatchMapper(table_rows=...)``: deletes of earlier batches' rows become position deletes
of the rows the caller looked up; never an equality delete (``delete_mode: position``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ops_mapping import (
    OP_COLUMN,
    SEQ_COLUMN,
    BatchMapper,
    MappingPolicy,
    OpsMappingError,
    before_key_column,
)
from ops_mapping.contract import TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN

DATA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _events(rows: list[tuple[str, int | None, int | None, str | None]]) -> pa.RecordBatch:
    """(op, before id, after id, v) per event."""
    return pa.RecordBatch.from_pydict(
        {
            SEQ_COLUMN: pa.array(range(1, len(rows) + 1), pa.int64()),
            OP_COLUMN: [r[0] for r in rows],
            before_key_column("id"): pa.array([r[1] for r in rows], pa.int64()),
            "id": pa.array([r[2] for r in rows], pa.int64()),
            "v": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def _table_rows(rows: dict[int, tuple[str, int]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(rows), pa.int64()),
            TABLE_ROW_PATH_COLUMN: [p for p, _ in rows.values()],
            TABLE_ROW_POS_COLUMN: pa.array([q for _, q in rows.values()], pa.int64()),
        }
    )


def _map(rows: list[tuple[str, int | None, int | None, str | None]], table: dict[int, tuple[str, int]],
         policy: MappingPolicy | None = None) -> tuple[list[dict[str, object]], pa.Table, pa.Table, int]:
    mapper = BatchMapper(["id"], DATA, policy, table_rows=_table_rows(table))
    chunk = mapper.map_chunk(_events(rows))
    tail = mapper.finish()
    return tail.table_position_deletes.to_pylist(), tail.position_deletes, chunk.equality_deletes, \
        tail.stats.table_position_deletes


def test_earlier_rows_are_deleted_by_position_never_by_equality() -> None:
    table = {1: ("f-b", 7), 2: ("f-a", 3), 3: ("f-a", 0)}
    got, in_batch, equality, count = _map(
        [("u", 1, 1, "x"), ("d", 2, None, None), ("u", 1, 1, "y"), ("d", 9, None, None), ("u", 3, 4, "z")], table
    )
    # sorted by (file_path, pos); key 1's table row deleted once, its batch row by position
    assert got == [{"file_path": "f-a", "pos": 0}, {"file_path": "f-a", "pos": 3}, {"file_path": "f-b", "pos": 7}]
    assert count == 3
    assert in_batch.num_rows == 1  # the first update of key 1 within the batch
    assert equality.num_rows == 0  # key 9 is not in the table: nothing to delete


def test_upserted_reads_delete_the_table_row_by_position() -> None:
    got, _in_batch, equality, _n = _map([("r", None, 5, "a"), ("r", None, 6, "b")], {5: ("f", 2)})
    assert got == [{"file_path": "f", "pos": 2}]
    assert equality.num_rows == 0


def test_equality_mode_is_unchanged() -> None:
    mapper = BatchMapper(["id"], DATA)
    chunk = mapper.map_chunk(_events([("d", 1, None, None)]))
    assert chunk.equality_deletes.column("id").to_pylist() == [1]
    assert mapper.finish().table_position_deletes.num_rows == 0


def test_table_rows_naming_a_key_twice_is_refused() -> None:
    rows = pa.concat_tables([_table_rows({1: ("f", 0)}), _table_rows({1: ("g", 0)})])
    with pytest.raises(OpsMappingError, match="twice"):
        BatchMapper(["id"], DATA, table_rows=rows)
