"""TEMPORARY stand-in for conv's ``replicator.iceberg.rewrite.commit_rewrite`` (the agreed
interface), deleted once that module is merged. Writes the new snapshot's manifests from
scratch: one DATA manifest and one DELETES manifest with every file that stays (EXISTING,
original sequence numbers) plus the added ones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _MergeAppendFiles

from replicator.errors import CommitConflictError
from replicator.iceberg import row_delta as rd


def commit_rewrite(
    table: Table,
    *,
    expected_snapshot_id: int | None,
    remove: Sequence[DataFile],
    add_data: Sequence[DataFile] = (),
    add_deletes: Sequence[DataFile] = (),
    data_sequence_number: int | None = None,
    summary: Mapping[str, str] = {},  # noqa: B006 - the agreed interface
) -> Table:
    head = table.current_snapshot()
    if (head.snapshot_id if head else None) != expected_snapshot_id:
        raise CommitConflictError(f"head moved: expected {expected_snapshot_id}", table=".".join(table.name()))
    assert head is not None
    removed = {f.file_path for f in remove}
    keep_data: list[ManifestEntry] = []
    keep_deletes: list[ManifestEntry] = []
    for m in head.manifests(table.io):
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True):
            if e.data_file.file_path in removed:
                continue
            (keep_data if e.data_file.content == DataFileContent.DATA else keep_deletes).append(e)
    tx = table.transaction()
    producer = _Producer(tx, table, list(add_data), list(add_deletes), dict(summary))
    producer.keep = (keep_data, keep_deletes)
    producer.seq = data_sequence_number
    updates, requirements = producer._commit()
    tx._apply(updates, requirements)
    return tx.commit_transaction()


class _Producer(rd._RowDeltaProducer):
    keep: tuple[list[ManifestEntry], list[ManifestEntry]]
    seq: int | None

    def __init__(self, tx, table, data, deletes, props) -> None:  # type: ignore[no-untyped-def]
        _MergeAppendFiles.__init__(self, operation=Operation.OVERWRITE, transaction=tx, io=table.io,
                                   snapshot_properties=props, branch="main")
        self._added_data_files = data
        self._added_delete_files = deletes

    def _manifests(self) -> list[ManifestFile]:
        out = []
        for cls, kept, added, seq in (
            (rd._DataManifestWriter, self.keep[0], self._added_data_files, self.seq),
            (rd._DeleteManifestWriter, self.keep[1], self._added_delete_files, None),
        ):
            if not kept and not added:
                continue
            writer = self._new_writer(cls)
            with writer:
                for e in kept:
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id,
                        sequence_number=e.sequence_number, file_sequence_number=e.file_sequence_number,
                        data_file=e.data_file))
                for f in added:
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                        sequence_number=seq, file_sequence_number=None, data_file=f))
            out.append(writer.to_manifest_file())
        return out
