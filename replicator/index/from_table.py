"""Rebuilding the index from an Iceberg table: the key columns of its live data files, net of
their position deletes and deletion vectors (pyiceberg's scan planning matches them to data
files by sequence number and partition, as every reader does).

``catch_up_from_table`` follows commits made after the index's snapshot (another writer's
compaction, a MERGE/DELETE with position deletes, appends) without a rebuild: it diffs live
files and reads only the deleted rows' keys of the files it keeps. A head that does not
descend from the index's snapshot (a rollback or restore: rows deleted since may be live
again) is refused: rebuild.

Equality deletes cannot be applied here without rows' sequence numbers compared key by key;
a table holding them is refused (convert them first: maintenance does). Used after a crash
that tore the index, a restore, or a change by another writer the index cannot follow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile

from replicator.index.errors import StaleIndexError
from replicator.index.pk_index import FileRows, PrimaryKeyIndex

__all__ = [
    "catch_up_from_table",
    "key_arrow_types",
    "live_data_files",
    "live_file_homes",
    "live_images",
    "live_rows",
    "read_images",
    "rebuild_from_table",
]


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


def live_file_homes(table: Table, snapshot_id: int | None) -> dict[str, tuple[int, tuple[object, ...]]]:
    """Each data file live at ``snapshot_id`` -> its (partition spec id, partition tuple): where
    a position delete naming it must go."""
    out: dict[str, tuple[int, tuple[object, ...]]] = {}
    for task in _tasks(table, snapshot_id):
        f = task.file
        out[f.file_path] = (f.spec_id, tuple(f.partition[i] for i in range(len(f.partition))))
    return out


def key_arrow_types(table: Table, key_columns: Sequence[str]) -> list[pa.DataType]:
    """The Arrow types the index's keys of ``table`` are given in (its Iceberg schema's)."""
    return _types(table, key_columns)


def live_rows(table: Table, key_columns: Sequence[str], snapshot_id: int | None) -> Iterator[FileRows]:
    """Per live data file: the keys and positions of its rows not deleted at ``snapshot_id``."""
    types = _types(table, key_columns)
    deletes: dict[str, dict[str, pa.ChunkedArray]] = {}  # delete file -> data file -> positions
    for task in _tasks(table, snapshot_id):
        path = task.file.file_path
        with table.io.new_input(path).open() as stream:
            keys = pq.ParquetFile(stream).read(columns=list(key_columns))
        gone = _deleted_positions(table, task, deletes)
        positions = np.arange(keys.num_rows, dtype=np.int64)
        if len(gone):
            positions = np.setdiff1d(positions, gone, assume_unique=True)
        cols = []
        for name, type_ in zip(key_columns, types, strict=True):
            col = keys.column(name)
            col = col.cast(type_) if col.type != type_ else col
            cols.append(col.take(pa.array(positions)) if len(gone) else col)
        yield FileRows(path, cols, positions)


def read_images(table: Table, path: str, names: Sequence[str], types: Sequence[pa.DataType]) -> pa.Table:
    """Every column of a data file (a table without a primary key: the row is its identity),
    in the table's current types; a column the file predates is null."""
    with table.io.new_input(path).open() as stream:
        got = pq.read_table(stream)
    cols = []
    for name, type_ in zip(names, types, strict=True):
        if name in got.column_names:
            col = got.column(name)
            cols.append(col.cast(type_) if col.type != type_ else col)
        else:
            cols.append(pa.nulls(got.num_rows, type_))
    return pa.table(cols, names=list(names))


def live_images(table: Table, snapshot_id: int | None) -> Iterator[tuple[str, list[pa.ChunkedArray], np.ndarray]]:
    """Per live data file: every column of its rows not deleted at ``snapshot_id``, and their
    positions (``index.multiset.numbered_files`` keys them)."""
    names = [f.name for f in table.schema().fields]
    types = _types(table, names)
    deletes: dict[str, dict[str, pa.ChunkedArray]] = {}
    for task in _tasks(table, snapshot_id):
        path = task.file.file_path
        rows = read_images(table, path, names, types)
        gone = _deleted_positions(table, task, deletes)
        positions = np.arange(rows.num_rows, dtype=np.int64)
        if len(gone):
            positions = np.setdiff1d(positions, gone, assume_unique=True)
            rows = rows.take(pa.array(positions))
        yield path, list(rows.columns), positions


def _descends(table: Table, head: int, ancestor: int | None) -> bool:
    if ancestor is None:
        return True
    current: int | None = head
    while current is not None:
        if current == ancestor:
            return True
        snap = table.snapshot_by_id(current)
        current = snap.parent_snapshot_id if snap is not None else None
    return False


def catch_up_from_table(
    index: PrimaryKeyIndex, table: Table, key_columns: Sequence[str], snapshot_id: int | None = None
) -> None:
    """Bring ``index`` to ``snapshot_id`` (default: the table's current snapshot) from the
    table's live files; StaleIndexError when that snapshot does not descend from the index's
    (rebuild then), or the table holds equality deletes."""
    if snapshot_id is None:
        current = table.current_snapshot()
        snapshot_id = current.snapshot_id if current is not None else None
    if snapshot_id == index.snapshot_id:
        return
    if snapshot_id is None or not _descends(table, snapshot_id, index.snapshot_id):
        raise StaleIndexError(
            f"table {table.name()} snapshot {snapshot_id} does not descend from the index's {index.snapshot_id}",
            hint="rolled back or restored (or the history expired): rebuild the index",
        )
    tasks = _tasks(table, snapshot_id)
    live = {t.file.file_path for t in tasks}
    known = index.live_files
    added = [rows for rows in live_rows(table, key_columns, snapshot_id) if rows.path not in known]
    removed: list[pa.Table] = []
    deletes: dict[str, dict[str, pa.ChunkedArray]] = {}
    for task in tasks:
        path = task.file.file_path
        if path not in known or not task.delete_files:
            continue
        gone = _deleted_positions(table, task, deletes)
        if len(gone) == 0:
            continue
        with table.io.new_input(path).open() as stream:
            keys = pq.ParquetFile(stream).read(columns=list(key_columns)).take(pa.array(gone))
        keys = keys.cast(pa.schema([(n, t) for n, t in zip(key_columns, _types(table, key_columns), strict=True)]))
        found = index.lookup(keys, index.snapshot_id)
        ids = {i for i, p in found.paths.items() if p == path}
        newly = found.found & np.isin(found.file_ids, list(ids)) & (found.positions == gone)
        if newly.any():  # rows the index still had there: deleted since
            removed.append(keys.filter(pa.array(newly)))
    removed_keys = pa.concat_tables(removed) if removed else None
    index.catch_up(index.snapshot_id, snapshot_id, removed_files=sorted(known - live), added=added,
                   removed=removed_keys)  # fmt: skip


def _types(table: Table, key_columns: Sequence[str]) -> list[pa.DataType]:
    schema = table.schema()
    return [schema_to_pyarrow(schema.find_field(name).field_type) for name in key_columns]


def _deleted_positions(table: Table, task: FileScanTask, cache: dict[str, dict[str, pa.ChunkedArray]]) -> np.ndarray:
    """Sorted positions of the task's data file that its delete files remove."""
    path = task.file.file_path
    gone = []
    for delete_file in task.delete_files:
        if delete_file.file_path not in cache:
            cache[delete_file.file_path] = _read_deletes(table, delete_file)
        hit = cache[delete_file.file_path].get(path)
        if hit is not None:
            gone.append(np.asarray(hit.combine_chunks() if isinstance(hit, pa.ChunkedArray) else hit, np.int64))
    return np.unique(np.concatenate(gone)) if gone else np.empty(0, np.int64)


def rebuild_from_table(
    directory: Path, table: Table, key_columns: Sequence[str], snapshot_id: int | None = None
) -> PrimaryKeyIndex:
    """The index of ``table`` at ``snapshot_id`` (default: its current snapshot), rebuilt."""
    if snapshot_id is None and table.current_snapshot() is not None:
        snapshot_id = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    return PrimaryKeyIndex.rebuild(directory, snapshot_id, live_rows(table, key_columns, snapshot_id))


def _read_deletes(table: Table, delete_file: DataFile) -> dict[str, pa.ChunkedArray | pa.Array]:
    """Data file path -> the positions a position-delete file (Parquet) or the deletion
    vectors of a Puffin file delete in it."""
    with table.io.new_input(delete_file.file_path).open() as stream:
        if delete_file.file_format == FileFormat.PUFFIN:
            vectors = deletion_vectors_from_puffin_file(PuffinFile(stream.read()))
            return {dv.referenced_data_file: dv.to_vector() for dv in vectors}
        rows = pq.ParquetFile(stream).read(columns=["file_path", "pos"])
    paths = rows.column("file_path")
    return {
        str(name): rows.column("pos").filter(pc.equal(paths, pa.scalar(name)))
        for name in pc.unique(paths).to_pylist()
    }
