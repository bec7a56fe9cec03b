"""Rewrite commits: remove data and/or delete files and add others, as ONE ``replace`` snapshot.

The equivalent of Iceberg Java's ``RewriteFiles`` for the engine's own maintenance
(equality-delete conversion, compaction). The table's rows do not change, only the files that
hold them, so the snapshot's operation is ``replace`` (readers of incremental changes skip it).

Manifests of the parent snapshot that list none of the removed files are kept as they are. A
manifest that lists some of them is rewritten with the same content type: its other live
entries as EXISTING (sequence numbers kept, so deletes keep applying exactly as before) and the
removed ones as DELETED entries of the new snapshot, as Iceberg Java does.

Sequence numbers:

* added delete files inherit the new snapshot's sequence number, so they apply to every data
  file committed before this snapshot (a position delete names its data file, so that is only
  ever the file it was written for);
* added data files get ``data_sequence_number`` when given (a compaction keeps the highest
  sequence number of the files it rewrote, so deletes committed after them still apply to the
  rewritten rows, and older equality deletes do not hit them again), else the new snapshot's.

Concurrency and atomicity as in ``row_delta``: the head must still be ``expected_snapshot_id``,
checked before writing anything and atomically by the catalog (``CommitConflictError``).
Table properties (e.g. the engine's checkpoint ``replicator.checkpoint``) are not touched, so
they read back unchanged. The pyiceberg internals used are listed in ``row_delta``'s docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyiceberg.manifest import (
    DataFile,
    ManifestEntry,
    ManifestFile,
    ManifestWriter,
)
from pyiceberg.table import Table, Transaction
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import (
    Operation,
    Summary,
)
from pyiceberg.typedef import EMPTY_DICT

from replicator.checkpoint import CHECKPOINT_PROPERTY
from replicator.iceberg.manifests import manifest_entries
from replicator.iceberg.row_delta import (
    RowDeltaProducer,
    check_expected_head,
    check_files,
    check_properties,
    commit_producer,
    manifest_writer_class,
    producer_transaction,
)

__all__ = ["commit_rewrite"]


def commit_rewrite(
    table: Table,
    *,
    expected_snapshot_id: int | None,
    remove: Sequence[DataFile],
    add_data: Sequence[DataFile] = (),
    add_deletes: Sequence[DataFile] = (),
    data_sequence_number: int | None = None,
    summary: Mapping[str, str] = EMPTY_DICT,
    table_properties: Mapping[str, str] = EMPTY_DICT,
) -> Table:
    """Remove ``remove`` and add ``add_data`` + ``add_deletes`` in one ``replace`` snapshot.

    Args:
        table: the table; on success its metadata is advanced to the new snapshot.
        expected_snapshot_id: the head the caller's work is based on (``CommitConflictError``
            otherwise).
        remove: live data or delete files of that head (matched by path; ``ValueError`` if one
            is not live there).
        add_data: new data files (content DATA).
        add_deletes: new position or equality delete files.
        data_sequence_number: data sequence number of ``add_data`` (None: the new snapshot's).
        summary: extra snapshot summary entries, e.g. ``replicator.maintenance=conversion``.
        table_properties: table properties to set in the same catalog commit (e.g. a record
            of the maintenance step); other properties, the checkpoint among them, are kept.

    Returns:
        ``table`` itself, refreshed to the new snapshot.
    """
    data = list(add_data)
    deletes = list(add_deletes)
    properties = dict(summary)
    check_files(table, data, deletes)
    check_properties(properties)
    if not remove:
        raise ValueError("a rewrite must remove at least one file")
    if data_sequence_number is not None and data_sequence_number < 0:
        raise ValueError(f"data_sequence_number {data_sequence_number} is negative")
    removed_paths = {f.file_path for f in remove}
    if len(removed_paths) != len(remove):
        raise ValueError("a file is listed more than once in remove")
    if overlap := removed_paths & {f.file_path for f in [*data, *deletes]}:
        raise ValueError(f"files both removed and added: {sorted(overlap)}")
    if CHECKPOINT_PROPERTY in table_properties:
        raise ValueError("a rewrite holds no new source position: it must keep the checkpoint")
    head_id = check_expected_head(table, expected_snapshot_id)
    if head_id is None:
        raise ValueError("cannot rewrite files of a table without snapshots")

    producer = _RewriteProducer(
        producer_transaction(table), table, data, deletes, properties, removed_paths
    )
    producer._data_sequence_number = data_sequence_number
    props = dict(table_properties)
    commit_producer(
        table, producer, head_id=head_id, table_properties=(lambda _id: props) if props else None
    )
    return table


class _RewriteProducer(RowDeltaProducer):
    """A row delta that also removes files from the parent snapshot's manifests."""

    def __init__(
        self,
        transaction: Transaction,
        table: Table,
        data: list[DataFile],
        deletes: list[DataFile],
        properties: dict[str, str],
        removed_paths: set[str],
    ) -> None:
        super().__init__(transaction, table, data, deletes, properties, MAIN_BRANCH)
        self._operation = Operation.REPLACE
        self._removed_paths = removed_paths
        self._removed_files: list[DataFile] = []  # as found in the parent's manifests

    def _existing_manifests(self) -> list[ManifestFile]:
        kept: list[ManifestFile] = []
        self._removed_files = []
        for manifest in super()._existing_manifests():
            entries = manifest_entries(manifest, self._io, live_only=True)
            if not any(e.data_file.file_path in self._removed_paths for e in entries):
                kept.append(manifest)
                continue
            kept.append(self._filter_manifest(manifest, entries))
        found = {f.file_path for f in self._removed_files}
        if missing := self._removed_paths - found:
            raise ValueError(
                f"files to remove are not live in the head snapshot: {sorted(missing)}"
            )
        return kept

    def _filter_manifest(
        self, manifest: ManifestFile, entries: list[ManifestEntry]
    ) -> ManifestFile:
        writer_class = manifest_writer_class(manifest.content)
        writer: ManifestWriter = self._new_writer(writer_class, manifest.partition_spec_id)
        with writer:
            for entry in entries:
                if entry.data_file.file_path in self._removed_paths:
                    writer.delete(entry)  # status DELETED, this snapshot, sequence numbers kept
                    self._removed_files.append(entry.data_file)
                else:
                    writer.existing(entry)
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: Mapping[str, str] = EMPTY_DICT) -> Summary:
        # pyiceberg computes totals only for append/overwrite/delete; a replace changes them
        # the same way an overwrite with the same files would.
        totals = self._summary_as(Operation.OVERWRITE, self._removed_files, snapshot_properties)
        return Summary(operation=Operation.REPLACE, **totals.additional_properties)
