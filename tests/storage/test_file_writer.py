"""Which columns of a data file get a Parquet dictionary (``storage.file_writer``)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from replicator.storage.file_writer import dictionary_columns


def test_dictionary_only_for_columns_that_repeat() -> None:
    n = 10_000
    rows = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"name-{i}" for i in range(n)], pa.large_string()),
        "status": pa.array(["new", "paid", "sent"] * (n // 3) + ["new"] * (n % 3)),
        "flag": pa.array([None] * n, pa.bool_()),
    })  # fmt: skip
    assert dictionary_columns(rows) == ["status", "flag"]
    assert dictionary_columns(rows.select(["id", "name"])) is False
    assert dictionary_columns(rows.slice(0, 0)) is True
    nested = pa.table({"id": [1, 2], "s": pa.array([{"a": 1}, {"a": 2}])})
    assert dictionary_columns(nested) is True
    # What the writer does with it: plain pages for the unique column, a dictionary for the other.
    out = io.BytesIO()
    pq.write_table(rows, out, use_dictionary=dictionary_columns(rows))
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["id"])
    assert any("DICTIONARY" in e for e in encodings["status"])
