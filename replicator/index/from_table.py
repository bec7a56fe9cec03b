"""Rebuilding the index from an Iceberg table: the key columns of its live data files, net of
their position deletes and deletion vectors (pyiceberg's scan planning matches them to data
files by sequence number and partition, as every reader does).

Equality deletes cannot be applied here without rows' sequence numbers compared key by key;
a table holding them is refused (convert them first: maintenance does). Used after a crash
that tore the index, a restore, or a change by another writer the index cannot follow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import _read_deletes, schema_to_pyarrow
from pyiceberg.table import FileScanTask, Table

from replicator.index.errors import StaleIndexError
from replicator.index.pk_index import FileRows, PrimaryKeyIndex

__all__ = ["live_data_files", "live_rows", "rebuild_from_table"]


def _tasks(table: Table, snapshot_id: int | None) -> list[FileScanTask]:
    if snapshot_id is None:
        return []
    try:
        tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
    except ValueError as exc:
        if "equality deletes" not in str(exc):
            raise
        raise StaleIndexError(
            f"table {table.name()} holds equality deletes at snapshot {snapshot_id}: the index cannot be rebuilt",
            hint="convert the equality deletes to position deletes (maintenance) first",
        ) from exc
    return sorted(tasks, key=lambda t: t.file.file_path)


def live_data_files(table: Table, snapshot_id: int | None) -> frozenset[str]:
    """Paths of the data files live at ``snapshot_id`` (for ``PrimaryKeyIndex.check_live``)."""
    return frozenset(t.file.file_path for t in _tasks(table, snapshot_id))


def live_rows(table: Table, key_columns: Sequence[str], snapshot_id: int | None) -> Iterator[FileRows]:
    """Per live data file: the keys and positions of its rows not deleted at ``snapshot_id``."""
    schema = table.schema()
    types = [schema_to_pyarrow(schema.find_field(name).field_type) for name in key_columns]
    deletes: dict[str, dict[str, pa.ChunkedArray]] = {}  # delete file -> data file -> positions
    for task in _tasks(table, snapshot_id):
        path = task.file.file_path
        with table.io.new_input(path).open() as stream:
            keys = pq.read_table(stream, columns=list(key_columns))
        gone = []
        for delete_file in task.delete_files:
            if delete_file.file_path not in deletes:
                deletes[delete_file.file_path] = _read_deletes(table.io, delete_file)
            hit = deletes[delete_file.file_path].get(path)
            if hit is not None:
                gone.append(np.asarray(hit.combine_chunks() if isinstance(hit, pa.ChunkedArray) else hit, np.int64))
        positions = np.arange(keys.num_rows, dtype=np.int64)
        if gone:
            positions = np.setdiff1d(positions, np.concatenate(gone), assume_unique=False)
        cols = []
        for name, type_ in zip(key_columns, types, strict=True):
            col = keys.column(name)
            col = col.cast(type_) if col.type != type_ else col
            cols.append(col.take(pa.array(positions)) if gone else col)
        yield FileRows(path, cols, positions)


def rebuild_from_table(
    directory: Path, table: Table, key_columns: Sequence[str], snapshot_id: int | None = None
) -> PrimaryKeyIndex:
    """The index of ``table`` at ``snapshot_id`` (default: its current snapshot), rebuilt."""
    if snapshot_id is None and table.current_snapshot() is not None:
        snapshot_id = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    return PrimaryKeyIndex.rebuild(directory, snapshot_id, live_rows(table, key_columns, snapshot_id))
