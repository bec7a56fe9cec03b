"""Writes one batch's data, position-delete and equality-delete Parquet files for one table.

Runs inside the apply stage's worker. Data rows arrive in small slices from the mapper; they
are buffered up to a row group so Parquet files get large row groups (small row groups cut
write speed 2-3x). Memory held: at most one row group per open data file.

Files are opened through pyiceberg's FileIO built from ``WriterSpec.io_properties`` (the
table's ``s3.*`` and similar properties), so the same code writes to a local warehouse and to
S3-compatible object storage (spark/object_storage.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from spark.object_storage import open_output

CONTENT_DATA = 0
CONTENT_POSITION_DELETES = 1
CONTENT_EQUALITY_DELETES = 2

ROW_GROUP_ROWS = 131_072


@dataclass(frozen=True)
class WriterSpec:
    """Everything a worker needs to write one table's files for one batch (picklable)."""

    data_location: str  # e.g. file:///warehouse/cdc.db/orders/data
    batch_id: str  # unique per attempt, so a retried batch never reuses a file name
    data_schema: pa.Schema  # Iceberg schema as Arrow, with PARQUET:field_id metadata
    equality_schema: pa.Schema
    position_schema: pa.Schema
    compression: str = "zstd"
    # FileIO properties (s3.endpoint, keys, ...): secrets, so kept out of repr and logs.
    io_properties: dict[str, str] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class WrittenFile:
    content: int
    path: str
    records: int
    size: int


@dataclass
class _Open:
    writer: pq.ParquetWriter
    stream: pa.NativeFile
    path: str
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0
    records: int = 0


class TableFileWriter:
    def __init__(self, spec: WriterSpec) -> None:
        self.spec = spec
        self._data: dict[int, _Open] = {}
        self._eq: _Open | None = None
        self.written: list[WrittenFile] = []

    def data_path(self, file_index: int) -> str:
        return f"{self.spec.data_location}/{self.spec.batch_id}-data-{file_index:05d}.parquet"

    def _open(self, uri: str, schema: pa.Schema) -> _Open:
        stream = open_output(uri, self.spec.io_properties)
        writer = pq.ParquetWriter(stream, schema, compression=self.spec.compression)
        return _Open(writer=writer, stream=stream, path=uri)

    def write_data(self, file_index: int, rows: pa.Table) -> None:
        handle = self._data.get(file_index)
        if handle is None:
            # The mapper rolls files in order: a new index means earlier ones are complete.
            for idx in [i for i in self._data if i < file_index]:
                self._close(self._data.pop(idx), CONTENT_DATA)
            handle = self._data[file_index] = self._open(self.data_path(file_index), self.spec.data_schema)
        self._append(handle, _conform(rows, self.spec.data_schema))

    def write_equality_deletes(self, keys: pa.Table) -> None:
        if keys.num_rows == 0:
            return
        if self._eq is None:
            uri = f"{self.spec.data_location}/{self.spec.batch_id}-eqdel-00000.parquet"
            self._eq = self._open(uri, self.spec.equality_schema)
        self._append(self._eq, _conform(keys, self.spec.equality_schema))

    def write_position_deletes(self, deletes: pa.Table) -> None:
        """``deletes`` has (file_index, pos) sorted by both; the spec wants (file_path, pos)
        order, which zero-padded data file names preserve."""
        if deletes.num_rows == 0:
            return
        indexes = deletes.column("file_index").to_pylist()
        paths = pa.array([self.data_path(i) for i in range(max(indexes) + 1)], type=pa.string())
        file_path = paths.take(deletes.column("file_index"))
        table = pa.Table.from_arrays([file_path, deletes.column("pos").cast(pa.int64())], names=["file_path", "pos"])
        self.write_position_delete_file(0, table)

    def write_position_delete_file(self, file_index: int, deletes: pa.Table) -> None:
        """One position-delete file from ``deletes`` = (file_path, pos), already sorted by both."""
        if deletes.num_rows == 0:
            return
        uri = f"{self.spec.data_location}/{self.spec.batch_id}-posdel-{file_index:05d}.parquet"
        handle = self._open(uri, self.spec.position_schema)
        self._append(handle, _conform(deletes, self.spec.position_schema))
        self._close(handle, CONTENT_POSITION_DELETES)

    def _append(self, handle: _Open, rows: pa.Table) -> None:
        handle.pending.append(rows)
        handle.pending_rows += rows.num_rows
        handle.records += rows.num_rows
        if handle.pending_rows >= ROW_GROUP_ROWS:
            self._flush(handle)

    def _flush(self, handle: _Open) -> None:
        if handle.pending_rows:
            handle.writer.write_table(pa.concat_tables(handle.pending), row_group_size=max(handle.pending_rows, 1))
        handle.pending = []
        handle.pending_rows = 0

    def _close(self, handle: _Open, content: int) -> None:
        self._flush(handle)
        handle.writer.close()  # the footer; the stream stays open (we passed it in)
        size = handle.stream.tell()
        handle.stream.close()  # on S3: completes the upload
        self.written.append(WrittenFile(content=content, path=handle.path, records=handle.records, size=size))

    def close(self) -> list[WrittenFile]:
        for idx in sorted(self._data):
            self._close(self._data.pop(idx), CONTENT_DATA)
        if self._eq is not None:
            self._close(self._eq, CONTENT_EQUALITY_DELETES)
            self._eq = None
        return self.written


WRITTEN_FILE_DDL = "content int, path string, records long, size long"


def write_position_delete_partition(
    spec: WriterSpec, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the (file_path, pos) rows of one Spark partition, sorted by both,
    become one position-delete file named after the partition; yields its ``WrittenFile``
    (``WRITTEN_FILE_DDL``), or nothing for an empty partition."""
    from pyspark import TaskContext

    context = TaskContext.get()
    index = context.partitionId() if context is not None else 0
    received = [b for b in batches if b.num_rows]
    if not received:
        return
    rows = pa.Table.from_batches(received)
    writer = TableFileWriter(spec)
    writer.write_position_delete_file(index, rows)
    for f in writer.close():
        yield pa.RecordBatch.from_pylist(
            [{"content": f.content, "path": f.path, "records": f.records, "size": f.size}],
            schema=pa.schema(
                [("content", pa.int32()), ("path", pa.string()), ("records", pa.int64()), ("size", pa.int64())]
            ),
        )


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast columns to the file schema (Spark hands over string, not large_string,
    and drops field-id metadata)."""
    arrays = [rows.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
