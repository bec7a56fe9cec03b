"""Describing the stage's files for a manifest (``pipeline.written``): from the footer the
writer kept, the entries are those a read of the file gives, and nothing is read back."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import PyArrowFile, schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from replicator.iceberg.files import equality_delete_arrow_schema, position_delete_arrow_schema
from replicator.iceberg.v3_metadata import create_v3_table
from replicator.pipeline.written import describe
from replicator.storage.file_writer import CONTENT_POSITION_DELETES, TableFileWriter, WriterSpec
from spark.apply_stage import StageResult
from tests.iceberg.tablekit import sql_catalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "amount", DecimalType(12, 2), required=False),
    NestedField(4, "score", DoubleType(), required=False),
    NestedField(5, "at", TimestamptzType(), required=False),
    NestedField(6, "ok", BooleanType(), required=False),
    NestedField(7, "day", DateType(), required=False),
    identifier_field_ids=[1],
)


def _table(tmp_path: Path) -> Table:
    return sql_catalog(tmp_path).create_table("db.t", SCHEMA)


def _written(table: Table) -> StageResult:
    spec = WriterSpec(
        data_location=f"{table.location()}/data", batch_id="b1",
        data_schema=schema_to_pyarrow(table.schema()),
        equality_schema=equality_delete_arrow_schema(table.schema(), [1]),
        position_schema=position_delete_arrow_schema(),
    )  # fmt: skip
    n = 500
    utc = dt.UTC
    rows = pa.Table.from_pylist([
        {"id": i, "name": None if i % 7 == 0 else f"name-{i}", "amount": Decimal(i) / 4,
         "score": float("nan") if i == 3 else i * 0.5,
         "at": dt.datetime(2026, 1, 1, tzinfo=utc) + dt.timedelta(seconds=i),
         "ok": None if i % 5 == 0 else i % 2 == 0, "day": dt.date(2026, 1, 1) + dt.timedelta(days=i % 40)}
        for i in range(n)
    ], schema=spec.data_schema)  # fmt: skip
    writer = TableFileWriter(spec)
    writer.write_data(0, rows)
    writer.write_data(1, rows.slice(100, 50))
    writer.write_equality_deletes(pa.table({"id": pa.array([7, 3, 99], pa.int64())}))
    writer.write_position_deletes(pa.table({"file_index": pa.array([0, 0, 1], pa.int32()),
                                            "pos": pa.array([1, 10, 4], pa.int64())}))  # fmt: skip
    return StageResult(files=writer.close(), stats={})


def test_entries_from_the_kept_footer_equal_those_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(tmp_path)
    result = _written(table)
    assert len(result.files) == 4 and all(f.footer is not None for f in result.files)
    # A footer kept by the writer: describing reads no file (nor asks for its size).
    opened: list[str] = []
    real_open, real_len = PyArrowFile.open, PyArrowFile.__len__

    def watch_open(self: PyArrowFile, *a: object, **k: object) -> object:
        opened.append(self.location)
        return real_open(self, *a, **k)  # type: ignore[arg-type]

    def watch_len(self: PyArrowFile) -> int:
        opened.append(self.location)
        return real_len(self)

    monkeypatch.setattr(PyArrowFile, "open", watch_open)
    monkeypatch.setattr(PyArrowFile, "__len__", watch_len)
    kept = describe(table, result)
    assert opened == []
    # The same files described by reading them: the entries are equal, field by field.
    for f in result.files:
        f.footer = None
    read = describe(table, result)
    assert len(opened) == 4
    for mine, theirs in zip(kept.data + kept.deletes, read.data + read.deletes, strict=True):
        assert mine.file_path == theirs.file_path
        for name in ("content", "record_count", "file_size_in_bytes", "column_sizes", "value_counts",
                     "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds",
                     "split_offsets", "equality_ids", "partition", "spec_id"):  # fmt: skip
            assert getattr(mine, name) == getattr(theirs, name), (mine.file_path, name)
    assert (kept.rows_written, kept.equality_deletes, kept.position_deletes) == (550, 3, 3)


def test_v3_position_deletes_kept_in_memory_give_the_vectors_the_files_give(tmp_path: Path) -> None:
    """In the committing process a v3 table's position deletes stay rows (no file written,
    read back and deleted): the deletion vectors are those of the files."""
    table = create_v3_table(sql_catalog(tmp_path), "db.t", SCHEMA, location=f"file://{tmp_path}/db/t")
    spec = WriterSpec(
        data_location=f"{table.location()}/data", batch_id="b1", data_schema=schema_to_pyarrow(table.schema()),
        equality_schema=equality_delete_arrow_schema(table.schema(), [1]),
        position_schema=position_delete_arrow_schema(),
    )  # fmt: skip
    deletes = pa.table({"file_index": pa.array([0, 0, 1, 1], pa.int32()), "pos": pa.array([1, 10, 4, 5], pa.int64())})
    results = {}
    for kept in (False, True):
        writer = TableFileWriter(dataclasses.replace(spec, batch_id=f"b{kept:d}", position_deletes_in_memory=kept))
        writer.write_data(0, pa.Table.from_pylist([{"id": i} for i in range(20)], schema=spec.data_schema))
        writer.write_data(1, pa.Table.from_pylist([{"id": i} for i in range(20, 30)], schema=spec.data_schema))
        writer.write_position_deletes(deletes)
        results[kept] = StageResult(files=writer.close(), stats={})
    [in_memory] = [f for f in results[True].files if f.content == CONTENT_POSITION_DELETES]
    assert in_memory.rows is not None and in_memory.records == 4
    assert not Path(in_memory.path.removeprefix("file://")).exists()
    by_file, by_rows = describe(table, results[False]), describe(table, results[True])
    assert by_rows.position_deletes == by_file.position_deletes == 4 and not by_rows.deletes
    rename = {f.path.replace("b0-", "b1-"): f.path for f in results[False].files}
    assert {rename.get(k, k): list(v) for k, v in by_rows.vectors.items()} == {
        k: list(v) for k, v in by_file.vectors.items()
    } and len(by_file.vectors) == 2
    # A v2 table takes no positions kept in memory: position-delete files are its only form.
    (tmp_path / "v2").mkdir()
    v2 = sql_catalog(tmp_path / "v2").create_table("db.t", SCHEMA)
    with pytest.raises(AssertionError, match="kept in memory"):
        describe(v2, results[True])
