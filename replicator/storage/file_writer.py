"""Writes one batch's data, position-delete and equality-delete Parquet files for one table.

Runs inside the apply stage's worker (``spark/apply_stage.py``), and in the driver for
maintenance. Data rows arrive in small slices from the mapper; they are buffered up to a row group so Parquet files get large row groups (small row groups cut
write speed 2-3x). Memory held: at most one row group per open data file.

Files are opened through pyiceberg's FileIO built from ``WriterSpec.io_properties`` (the
table's ``s3.*`` and similar properties), so the same code writes to a local warehouse and to
S3-compatible object storage (``replicator/storage/fileio.py``).

Partitioned tables (``WriterSpec.partition``): a fan-out writer. The mapper still numbers
rows per logical file in event order; each row goes to the open file of its partition, and
the writer remembers, per logical file, where each row landed (physical file, position: 8
bytes a row), so the mapper's position deletes are turned into positions in the physical
files and written as one position-delete file per partition (a position delete must be in
the partition of the data file it names). Rows are buffered per partition and a file is
opened at its first flush (a row group, or the end): a batch touching many partitions
writes one file per partition. Bounds: ``PENDING_ROWS_MAX`` rows buffered in all (past
it, the largest buffer is flushed), at most ``max_open_files`` files open (the least
recently used one is closed to open another; a later row of its partition starts a new
file), and a partition's file rolls once it has ``target_file_bytes``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replicator.storage.fileio import open_output
from replicator.storage.partitioning import PartitionKey, PartitionPlan, encode_partition

CONTENT_DATA = 0
CONTENT_POSITION_DELETES = 1
CONTENT_EQUALITY_DELETES = 2
# The data-file column of position-delete rows (the Iceberg spec's name).
POSITION_PATH = "file_path"

ROW_GROUP_ROWS = 131_072
# A data file's column is dictionary-encoded only when its first rows repeat values: at most
# this share distinct in a sample of them. Parquet's writer otherwise builds a dictionary
# page, finds it too large and falls back to plain pages: for a column of unique values
# (keys, names, amounts, timestamps) that costs 2.7x the write time and 2x the bytes
# (measured: 100k rows of the 8-column snapshot table, 252 ms / 2.4 MiB against 92 ms /
# 1.1 MiB without dictionaries).
DICTIONARY_MAX_DISTINCT_SHARE = 0.5
DICTIONARY_SAMPLE_ROWS = 8192
# Partitioned tables: data files open at once per table (each buffers up to a row group).
MAX_OPEN_FILES = 32
# ... and rows buffered over all of them before the largest buffer is flushed early.
PENDING_ROWS_MAX = 4 * ROW_GROUP_ROWS


@dataclass(frozen=True)
class WriterSpec:
    """Everything a worker needs to write one table's files for one batch (picklable)."""

    data_location: str  # e.g. file:///warehouse/cdc.db/orders/data
    batch_id: str  # unique per attempt, so a retried batch never reuses a file name
    data_schema: pa.Schema  # Iceberg schema as Arrow, with PARQUET:field_id metadata
    equality_schema: pa.Schema
    position_schema: pa.Schema
    compression: str = "zstd"
    # The spec data files are written with; None or no fields: one file per mapper file.
    partition: PartitionPlan | None = None
    # (column, "ascending" | "descending", nulls first?): rows of each row group are sorted
    # by these (the table's sort order); empty: written in event order.
    sort_by: tuple[tuple[str, str, bool], ...] = ()
    target_file_bytes: int = 0  # partitioned: a partition's file rolls past this (0: never)
    max_open_files: int = MAX_OPEN_FILES
    # FileIO properties (s3.endpoint, keys, ...): secrets, so kept out of repr and logs.
    io_properties: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # Position deletes kept as rows, no file written (``WrittenFile.rows``): a format-v3 table
    # written in the committing process commits them as deletion vectors.
    position_deletes_in_memory: bool = False


@dataclass
class WrittenFile:
    content: int
    path: str
    records: int
    size: int
    partition: PartitionKey = ()  # the file's partition tuple in the writer's spec
    spec_id: int | None = None  # the partition spec of ``partition`` (None: the writer's)
    # The footer as written (in this process only): describing the file for a manifest then
    # reads nothing back (on object storage, two requests per file saved).
    footer: pq.FileMetaData | None = field(default=None, repr=False, compare=False)
    # A position-delete "file" kept in memory (``WriterSpec.position_deletes_in_memory``):
    # its (file_path, pos) rows; ``path`` is then a name no file has.
    rows: pa.Table | None = field(default=None, repr=False, compare=False)


@dataclass
class _Open:
    writer: pq.ParquetWriter | None  # None: a fan-out file not opened yet (rows buffered)
    stream: pa.NativeFile | None
    path: str
    partition: PartitionKey = ()
    file_id: int = 0
    content: int = CONTENT_DATA
    pending: list[pa.Table] = field(default_factory=list)
    pending_rows: int = 0
    records: int = 0


def written_footer(writer: pq.ParquetWriter) -> pq.FileMetaData | None:
    """The footer a closed writer wrote; None if this pyarrow does not tell (the file's
    footer is then read back)."""
    got = getattr(getattr(writer, "writer", None), "metadata", None)
    return got if isinstance(got, pq.FileMetaData) else None


class TableFileWriter:
    def __init__(self, spec: WriterSpec) -> None:
        self.spec = spec
        self._data: dict[int, _Open] = {}
        self._eq: _Open | None = None
        self.written: list[WrittenFile] = []
        plan = spec.partition
        # Partitioned or sorted: rows are routed (and maybe reordered), so positions are
        # translated from the mapper's to the files'.
        self._fan_out = (plan is not None and not plan.unpartitioned) or bool(spec.sort_by)
        # Sorted: per physical file, the position each appended row ended up at.
        self._sorted_at: dict[int, list[np.ndarray]] = {}
        # Fan-out state: the current file of each partition (opened on its first flush),
        # the open ones (least recently used first), every physical file's partition, and
        # per logical file where each of its rows went.
        self._parts: dict[PartitionKey, _Open] = {}
        self._opened: OrderedDict[PartitionKey, _Open] = OrderedDict()
        self._physical: list[PartitionKey] = []
        self._landed: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._pending_total = 0

    def data_path(self, file_index: int) -> str:
        return f"{self.spec.data_location}/{self.spec.batch_id}-data-{file_index:05d}.parquet"

    def _open(
        self, uri: str, schema: pa.Schema, partition: PartitionKey = (), content: int = CONTENT_DATA,
        first_rows: pa.Table | None = None,
    ) -> _Open:  # fmt: skip
        stream = open_output(uri, self.spec.io_properties)
        dictionary = True if first_rows is None else dictionary_columns(first_rows)
        writer = pq.ParquetWriter(stream, schema, compression=self.spec.compression,
                                  use_dictionary=dictionary)  # fmt: skip
        return _Open(writer=writer, stream=stream, path=uri, partition=partition, content=content)

    def write_data(self, file_index: int, rows: pa.Table) -> None:
        if self._fan_out:
            self._write_fanned(file_index, rows)
            return
        handle = self._data.get(file_index)
        if handle is None:
            # The mapper rolls files in order: a new index means earlier ones are complete.
            for idx in [i for i in self._data if i < file_index]:
                self._close(self._data.pop(idx), CONTENT_DATA)
        conformed = _conform(rows, self.spec.data_schema)
        if handle is None:
            handle = self._data[file_index] = self._open(
                self.data_path(file_index), self.spec.data_schema, first_rows=conformed
            )
        self._append(handle, conformed)

    def _write_fanned(self, file_index: int, rows: pa.Table) -> None:
        """Rows of logical file ``file_index`` (its next rows, in order) to their partitions."""
        n = rows.num_rows
        plan = self.spec.partition
        codes, keys = plan.split(rows) if plan is not None else (np.zeros(n, dtype=np.int64), [()])
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
        file_ids = np.empty(n, dtype=np.int32)
        positions = np.empty(n, dtype=np.int32)  # a file holds fewer than 2**31 rows
        conformed = _conform(rows, self.spec.data_schema)
        for code, key in enumerate(keys):
            picked = order[bounds[code] : bounds[code + 1]]
            if not len(picked):
                continue
            handle = self._parts.get(key)
            if handle is None:
                file_id = len(self._physical)
                self._physical.append(key)
                handle = self._parts[key] = _Open(None, None, self.data_path(file_id), key, file_id)
            file_ids[picked] = handle.file_id
            positions[picked] = np.arange(handle.records, handle.records + len(picked))
            self._append(handle, conformed.take(pa.array(picked)))
            target = self.spec.target_file_bytes
            if target and handle.stream is not None and handle.pending_rows == 0 and handle.stream.tell() >= target:
                self._close_part(handle)
        # Bounded memory: past the limit, the largest buffers go to their files.
        while self._pending_total > PENDING_ROWS_MAX:
            self._flush(max(self._parts.values(), key=lambda h: h.pending_rows))
        self._landed.setdefault(file_index, []).append((file_ids, positions))

    def _open_part(self, handle: _Open) -> None:
        """Open a fan-out file, closing the least recently opened one past the bound (a
        later row of that partition starts a new file)."""
        while len(self._opened) >= max(1, self.spec.max_open_files):
            self._close_part(next(iter(self._opened.values())))
        opened = self._open(handle.path, self.spec.data_schema, handle.partition)
        handle.writer, handle.stream = opened.writer, opened.stream
        self._opened[handle.partition] = handle

    def _close_part(self, handle: _Open) -> None:
        if handle.writer is None:
            self._open_part(handle)  # first, while it is still listed (may close another)
        self._opened.pop(handle.partition, None)
        self._parts.pop(handle.partition, None)
        self._close(handle, CONTENT_DATA)

    def write_equality_deletes(self, keys: pa.Table) -> None:
        if keys.num_rows == 0:
            return
        if self._eq is None:
            # Always unpartitioned: the driver files it under the table's unpartitioned spec,
            # whose equality deletes apply to every partition (a moved row's old copy
            # may be in any of them).
            uri = f"{self.spec.data_location}/{self.spec.batch_id}-eqdel-00000.parquet"
            self._eq = self._open(uri, self.spec.equality_schema, content=CONTENT_EQUALITY_DELETES)
        self._append(self._eq, _conform(keys, self.spec.equality_schema))

    def write_position_deletes(self, deletes: pa.Table) -> None:
        """``deletes`` has (file_index, pos) sorted by both; the spec wants (file_path, pos)
        order, which zero-padded data file names preserve."""
        if deletes.num_rows == 0:
            return
        if self._fan_out:
            self._write_fanned_position_deletes(deletes)
            return
        indexes = deletes.column("file_index").to_pylist()
        paths = pa.array([self.data_path(i) for i in range(max(indexes) + 1)], type=pa.string())
        file_path = paths.take(deletes.column("file_index"))
        table = pa.Table.from_arrays([file_path, deletes.column("pos").cast(pa.int64())], names=[POSITION_PATH, "pos"])
        self.write_position_delete_file(0, table)

    def _write_fanned_position_deletes(self, deletes: pa.Table) -> None:
        """The mapper's (logical file, position) as (physical file, position), one
        position-delete file per partition of the files they name."""
        if self.spec.sort_by:  # where the pending rows land is known once they are sorted
            for handle in list(self._parts.values()):
                self._flush(handle)
        logical = deletes.column("file_index").to_numpy()
        pos = deletes.column("pos").to_numpy().astype(np.int64)
        file_ids = np.empty(len(pos), dtype=np.int64)
        positions = np.empty(len(pos), dtype=np.int64)
        for index in np.unique(logical):
            chunks = self._landed.get(int(index), [])
            ids = np.concatenate([c[0] for c in chunks])
            where = np.concatenate([c[1] for c in chunks])
            sel = np.nonzero(logical == index)[0]
            file_ids[sel] = ids[pos[sel]]
            positions[sel] = where[pos[sel]]
        if self._sorted_at:  # appended position -> position after each row group's sort
            for file_id in np.unique(file_ids):
                sel = np.nonzero(file_ids == file_id)[0]
                positions[sel] = np.concatenate(self._sorted_at[int(file_id)])[positions[sel]]
        # Physical file names sort by id (zero-padded): (id, pos) order is (file_path, pos).
        order = np.lexsort((positions, file_ids))
        file_ids, positions = file_ids[order], positions[order]
        by_partition: dict[PartitionKey, list[np.ndarray]] = {}
        for file_id in np.unique(file_ids):
            by_partition.setdefault(self._physical[int(file_id)], []).append(np.nonzero(file_ids == file_id)[0])
        for number, (key, parts) in enumerate(by_partition.items()):
            sel = np.concatenate(parts)
            paths = pa.array([self.data_path(int(i)) for i in file_ids[sel]], type=pa.string())
            table = pa.Table.from_arrays([paths, pa.array(positions[sel])], names=[POSITION_PATH, "pos"])
            self.write_position_delete_file(number, table, key)

    def write_position_deletes_by_home(
        self, deletes: pa.Table, homes: Mapping[str, tuple[int, PartitionKey]], kind: str = "posdel"
    ) -> list[tuple[int, WrittenFile]]:
        """Position deletes against files of earlier commits: ``deletes`` = (file_path, pos),
        sorted by both; ``homes`` maps each named data file to its (spec id, partition
        tuple). One position-delete file per home (a position delete must be in the
        partition, and spec, of the data file it names); returns (spec id, file) of each.
        ``kind`` names the files (distinct from the batch's own position deletes')."""
        if deletes.num_rows == 0:
            return []
        groups: dict[tuple[int, PartitionKey], list[int]] = {}
        for i, path in enumerate(deletes.column(POSITION_PATH).to_pylist()):
            groups.setdefault(homes[path], []).append(i)
        out: list[tuple[int, WrittenFile]] = []
        for number, ((spec_id, key), rows) in enumerate(groups.items()):  # in path order
            self.write_position_delete_file(number, deletes.take(pa.array(rows)), key, kind)
            self.written[-1].spec_id = spec_id
            out.append((spec_id, self.written[-1]))
        return out

    def write_position_delete_file(
        self, file_index: int, deletes: pa.Table, partition: PartitionKey = (), kind: str = "posdel"
    ) -> None:
        """One position-delete file from ``deletes`` = (file_path, pos), already sorted by both,
        naming data files of ``partition`` only."""
        if deletes.num_rows == 0:
            return
        uri = f"{self.spec.data_location}/{self.spec.batch_id}-{kind}-{file_index:05d}.parquet"
        if self.spec.position_deletes_in_memory:
            rows = _conform(deletes, self.spec.position_schema)
            self.written.append(WrittenFile(content=CONTENT_POSITION_DELETES, path=uri, records=rows.num_rows,
                                            size=0, partition=partition, rows=rows))  # fmt: skip
            return
        handle = self._open(uri, self.spec.position_schema, partition, CONTENT_POSITION_DELETES)
        self._append(handle, _conform(deletes, self.spec.position_schema))
        self._close(handle, CONTENT_POSITION_DELETES)

    def _append(self, handle: _Open, rows: pa.Table) -> None:
        handle.pending.append(rows)
        handle.pending_rows += rows.num_rows
        handle.records += rows.num_rows
        self._pending_total += rows.num_rows
        if handle.pending_rows >= ROW_GROUP_ROWS:
            self._flush(handle)

    def _flush(self, handle: _Open) -> None:
        if handle.pending_rows and handle.writer is None:
            self._open_part(handle)
        elif handle.partition in self._opened:
            self._opened.move_to_end(handle.partition)
        if handle.pending_rows:
            assert handle.writer is not None
            rows = pa.concat_tables(handle.pending)
            if self.spec.sort_by and handle.content == CONTENT_DATA:
                rows = self._sorted(handle, rows)
            handle.writer.write_table(rows, row_group_size=max(handle.pending_rows, 1))
        self._pending_total -= handle.pending_rows
        handle.pending = []
        handle.pending_rows = 0

    def _sorted(self, handle: _Open, rows: pa.Table) -> pa.Table:
        """``rows`` (the pending rows of one file) in sort order; remembers where each went."""
        keys = [(c, d, "at_start" if nulls_first else "at_end") for c, d, nulls_first in self.spec.sort_by]
        order = pc.sort_indices(rows, sort_keys=keys).to_numpy()
        start = handle.records - rows.num_rows  # position of the first pending row
        landed = np.empty(len(order), dtype=np.int32)
        landed[order] = np.arange(start, start + len(order))
        self._sorted_at.setdefault(handle.file_id, []).append(landed)
        return rows.take(pa.array(order))

    def _close(self, handle: _Open, content: int) -> None:
        self._flush(handle)
        assert handle.writer is not None and handle.stream is not None
        handle.writer.close()  # the footer; the stream stays open (we passed it in)
        size = handle.stream.tell()
        handle.stream.close()  # on S3: completes the upload
        self.written.append(
            WrittenFile(content=content, path=handle.path, records=handle.records, size=size,
                        partition=handle.partition, footer=written_footer(handle.writer))
        )  # fmt: skip

    def close(self) -> list[WrittenFile]:
        for idx in sorted(self._data):
            self._close(self._data.pop(idx), CONTENT_DATA)
        while self._parts:  # closing one may open another's file and close a third: re-read
            self._close_part(min(self._parts.values(), key=lambda h: h.file_id))
        if self._eq is not None:
            self._close(self._eq, CONTENT_EQUALITY_DELETES)
            self._eq = None
        self._landed.clear()
        self._sorted_at.clear()
        return self.written


WRITTEN_FILE_DDL = "content int, path string, records long, size long, partition string"


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
            [{"content": f.content, "path": f.path, "records": f.records, "size": f.size,
              "partition": encode_partition(f.partition)}],
            schema=pa.schema(
                [("content", pa.int32()), ("path", pa.string()), ("records", pa.int64()), ("size", pa.int64()),
                 ("partition", pa.string())]
            ),
        )


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast columns to the file schema (Spark hands over string, not large_string,
    and drops field-id metadata)."""
    arrays = [rows.column(f.name).cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def dictionary_columns(rows: pa.Table) -> list[str] | bool:
    """The columns worth a dictionary, judged on ``rows``' first rows (a table with a nested
    column keeps Parquet's default: every column)."""
    sample = rows.slice(0, DICTIONARY_SAMPLE_ROWS)
    if not sample.num_rows or any(pa.types.is_nested(t) for t in sample.schema.types):
        return True
    limit = sample.num_rows * DICTIONARY_MAX_DISTINCT_SHARE
    out: list[str] = []
    for name, col in zip(sample.column_names, sample.columns, strict=True):
        if pc.count_distinct(col, mode="all").as_py() <= limit:
            out.append(name)
    return out or False
