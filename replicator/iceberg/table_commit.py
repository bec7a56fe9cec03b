"""The engine's commits: one entry for a CDC batch (``commit_batch``) and one for a maintenance
rewrite (``commit_replace``), both through ``dv_commit.commit_files`` (our own manifests, only
public pyiceberg table updates and requirements) whatever the table's format version:

* format v2: position and equality delete files (sequence numbers inherited from the snapshot);
* format v3: row deletes are deletion vectors (Puffin), each merged with the data file's live
  vector; equality delete files as in v2; no position-delete file is ever committed to a v3
  table.

The stage writes a batch's position deletes as Parquet files (``spark.file_writer``); on a v3
table ``vectors_from_position_files`` turns them into vectors per data file before the commit
(and the files are deleted, never committed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Snapshot

from replicator.checkpoint import CHECKPOINT_PROPERTY
from replicator.iceberg.commit_checks import UNSET, _Unset, file_spec_id
from replicator.iceberg.dv_commit import commit_files
from replicator.iceberg.manifest_writer import content_file
from replicator.iceberg.roaring import Positions, union
from replicator.storage.file_writer import POSITION_PATH

__all__ = [
    "commit_batch", "commit_replace", "position_files_as_vectors", "uses_vectors",
    "vectors_from_position_files",
]  # fmt: skip

PUFFIN = "PUFFIN"


def uses_vectors(table: Table) -> bool:
    """Whether the table takes deletion vectors instead of position-delete files (v3+)."""
    return table.metadata.format_version >= 3


def _spec_ids(table: Table, files: Sequence[DataFile]) -> dict[str, int]:
    default = table.metadata.default_spec_id
    return {f.file_path: file_spec_id(f, default) for f in files}


def vectors_from_position_files(table: Table, paths: Sequence[str]) -> dict[str, Positions]:
    """The positions the position-delete Parquet files ``paths`` name, per data file."""
    out: dict[str, Positions] = {}
    for path in paths:
        with table.io.new_input(path).open() as stream:
            add_positions(out, pq.ParquetFile(stream).read(columns=[POSITION_PATH, "pos"]))
    return out


def add_positions(out: dict[str, Positions], rows: pa.Table) -> None:
    """Position-delete rows (``file_path``, ``pos``) added to ``out``'s positions per data file
    (one sort by data file, not a scan of every row per file)."""
    if rows.num_rows == 0:
        return
    paths = pc.dictionary_encode(rows.column(POSITION_PATH).combine_chunks())
    codes = paths.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    codes, pos = codes[order], rows.column("pos").to_numpy().astype(np.uint64)[order]
    cuts = np.flatnonzero(np.diff(codes)) + 1
    names = paths.dictionary.to_pylist()
    for at, values in zip(np.concatenate(([0], cuts)), np.split(pos, cuts), strict=True):
        name, values = str(names[codes[at]]), np.unique(values)
        out[name] = union(out[name], values) if name in out else values


def position_files_as_vectors(table: Table, paths: Sequence[str]) -> dict[str, Positions]:
    """``vectors_from_position_files``, then the files are deleted (never committed)."""
    vectors = vectors_from_position_files(table, paths)
    for path in paths:
        with contextlib.suppress(Exception):  # best effort: orphan cleanup catches the rest
            table.io.delete(path)
    return vectors


def commit_batch(
    table: Table,
    *,
    data_files: Sequence[DataFile],
    delete_files: Sequence[DataFile],
    vectors: Mapping[str, Positions] | None = None,
    snapshot_properties: Mapping[str, str],
    table_properties: Callable[[int], Mapping[str, str]] | None = None,
    expected_parent_snapshot_id: int | None | _Unset = UNSET,
    branch: str = MAIN_BRANCH,
    remove_all: bool = False,
) -> Snapshot:
    """ONE snapshot with a batch's files on ``branch`` (``remove_all``: a TRUNCATE first);
    ``CommitConflictError`` / ``CommitStateUnknownError`` as the commit functions raise them.
    ``vectors`` (v3): positions to delete per data file; a v2 table takes none.
    ``expected_parent_snapshot_id`` defaults to the branch head ``table`` has loaded.
    On success ``table`` is advanced to the new snapshot, which is returned."""
    if vectors and not uses_vectors(table):
        raise ValueError(f"{'.'.join(table.name())}: deletion vectors need format-version 3")
    if isinstance(expected_parent_snapshot_id, _Unset):
        head = table.metadata.snapshot_by_name(branch)
        expected_parent_snapshot_id = head.snapshot_id if head is not None else None
    committed = commit_files(
        table, data_files=[content_file(f) for f in data_files],
        delete_files=[content_file(f) for f in delete_files], deletion_vectors=vectors,
        spec_ids=_spec_ids(table, [*data_files, *delete_files]), snapshot_properties=snapshot_properties,
        table_properties=table_properties, expected_parent_snapshot_id=expected_parent_snapshot_id,
        branch=branch, remove_all=remove_all,
        # a TRUNCATE deletes rows even from an empty table (as Iceberg Java's RowDelta says)
        operation=(Operation.OVERWRITE if data_files else Operation.DELETE) if remove_all else None,
    )  # fmt: skip
    _advance(table, committed.table)
    return committed.snapshot


def _advance(table: Table, committed: Table) -> None:
    """``table`` at the committed metadata (callers keep using their table object)."""
    table.metadata = committed.metadata
    table.metadata_location = committed.metadata_location


def commit_replace(
    table: Table,
    *,
    expected_snapshot_id: int | None,
    remove: Sequence[DataFile],
    add_data: Sequence[DataFile] = (),
    add_deletes: Sequence[DataFile] = (),
    vectors: Mapping[str, Positions] | None = None,
    data_sequence_number: int | None = None,
    summary: Mapping[str, str] | None = None,
    table_properties: Mapping[str, str] | None = None,
) -> Table:
    """A maintenance rewrite as ONE ``replace`` snapshot on main; returns the table at it.

    v3: a removed data file's deletion vector goes with it (Puffin entries in ``remove`` are
    skipped: the Puffin file may hold other files' vectors); ``vectors`` (converted equality
    deletes) are merged with the files' live ones."""
    if vectors and not uses_vectors(table):
        raise ValueError(f"{'.'.join(table.name())}: deletion vectors need format-version 3")
    if data_sequence_number is not None and data_sequence_number < 0:
        raise ValueError(f"data_sequence_number {data_sequence_number} is negative")
    if len({f.file_path for f in remove}) != len(remove):
        raise ValueError("a file is listed more than once in remove")
    if table_properties and CHECKPOINT_PROPERTY in table_properties:
        raise ValueError("a rewrite holds no new source position: it must keep the checkpoint")
    if expected_snapshot_id is None:
        raise ValueError("cannot rewrite files of a table without snapshots")
    if uses_vectors(table) and any(
        f.content == DataFileContent.POSITION_DELETES and str(f.file_format.value) != PUFFIN for f in add_deletes
    ):
        raise ValueError("a v3 table takes deletion vectors, not position-delete files")
    removed = [f.file_path for f in remove if str(f.file_format.value).upper() != PUFFIN]
    if not removed and not vectors:
        raise ValueError("a rewrite must remove at least one file")
    committed = commit_files(
        table, data_files=[content_file(f) for f in add_data],
        delete_files=[content_file(f) for f in add_deletes], deletion_vectors=vectors,
        spec_ids=_spec_ids(table, [*add_data, *add_deletes]), snapshot_properties=summary or {},
        table_properties=table_properties or None, expected_parent_snapshot_id=expected_snapshot_id,
        remove=removed, data_sequence_number=data_sequence_number, operation=Operation.REPLACE,
    )  # fmt: skip
    _advance(table, committed.table)
    return table
