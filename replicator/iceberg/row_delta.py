"""Row-delta commits for pyiceberg: add data files and position/equality delete files at once.

pyiceberg 0.12 can append data files but has no API that commits delete files. This module adds
the equivalent of Iceberg Java's ``RowDelta``: one new snapshot that keeps every manifest of the
parent snapshot and adds

* one DATA manifest (content 0) with the new data files, and
* one DELETES manifest (content 1) with the new position and equality delete files.

Manifests are merged on commit so the manifest list of the head stays bounded however many
commits there have been: when more than ``commit.manifest.min-count-to-merge`` (default
``MANIFESTS_PER_CONTENT_MAX``) manifests of one content type (DATA or DELETES) would be listed,
the ones smaller than ``commit.manifest.target-size-bytes`` are merged into one. pyiceberg's
own merge covers DATA manifests only; ours writes each content type with its own writer. A
table can opt out with ``commit.manifest-merge.enabled=false``.

All new entries are written with a null sequence number, so they inherit the snapshot's sequence
number from the manifest list (spec: "sequence number inheritance"). Equality deletes therefore
apply only to rows of earlier commits; position deletes also reach rows of the same commit.

Concurrency: the commit asserts that the branch head is still the snapshot the caller based its
work on (``AssertRefSnapshotId``); a conflict raises ``CommitConflictError`` and is never retried
or rebased here, because a CDC batch must not be re-applied on top of a state it did not see.

pyiceberg 0.12 internals this module and ``rewrite`` depend on (the one list of them; re-check
them when upgrading pyiceberg):

* ``pyiceberg.table.update.snapshot._MergeAppendFiles`` (a ``_FastAppendFiles`` /
  ``_SnapshotProducer``, plus ``_process_manifests()`` for manifest merging): the attributes
  ``_added_data_files``, ``_snapshot_id``, ``_compression``, ``_transaction``, ``_io``,
  ``_operation``, ``_parent_snapshot_id``, ``_target_branch``, ``_written_manifests``, the methods
  ``_commit()`` (writes the manifest list and returns the snapshot updates plus the
  ``AssertRefSnapshotId`` requirement), ``_manifests()``, ``_summary()``, ``_existing_manifests()``,
  ``new_manifest_writer()``, ``new_manifest_output()`` and ``_clean_all_uncommitted()``.
* ``pyiceberg.table.snapshots.update_snapshot_summaries`` refuses operation ``replace``: a
  rewrite computes its totals as an ``overwrite`` and relabels the summary.
* ``pyiceberg.manifest.ManifestWriterV2``: subclassed to write a DELETES manifest (its
  ``content()`` and the ``content`` key of its Avro metadata), and to declare
  ``data_file.equality_ids`` as ``list<int>`` (its ``_with_partition()``), which Iceberg Java
  needs to read equality delete entries (pyiceberg 0.12 writes ``list<long>``).
* ``Transaction._apply()`` and ``Transaction.commit_transaction()``; ``Transaction.table_metadata``
  is overridden by ``producer_transaction`` to cache its result per (base metadata, staged
  updates): pyiceberg recomputes it with a deep copy on every access (about 23 times per
  commit, 15% of a 100-table batch's time). Its attributes ``_table`` and ``_updates``.
  The producer is deliberately
  NOT registered with ``Transaction._register_snapshot_producer``: registered producers are rebuilt
  on a newer head and retried after a ``CommitFailedException``, which would silently defeat the
  expected-parent check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Final

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
)
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import SetPropertiesUpdate, TableUpdate
from pyiceberg.table.update.snapshot import _MergeAppendFiles
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.utils.properties import property_as_bool, property_as_int

from replicator.errors import CommitConflictError, CommitStateUnknownError
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.sql_commit import apply_updates
from replicator.iceberg.v2_manifest_writers import (
    DataManifestWriter,
    DeleteManifestWriter,
    manifest_writer_class,
)
from replicator.retry import call_with_retries

__all__ = [
    "MANIFESTS_PER_CONTENT_MAX",
    "UNSET",
    "RowDeltaProducer",
    "check_expected_head",
    "check_files",
    "check_properties",
    "commit_producer",
    "commit_row_delta",
    "manifest_writer_class",
]


class _Unset(Enum):
    UNSET = "unset"


# Default of ``expected_parent_snapshot_id``: "whatever head the given table object has loaded".
UNSET: Final = _Unset.UNSET

# Manifests of one content type listed by a snapshot before the small ones are merged (when the
# table does not set commit.manifest.min-count-to-merge).
MANIFESTS_PER_CONTENT_MAX = 16

_DELETE_CONTENTS = (DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES)

# Summary keys that Iceberg itself writes; a caller's property must not shadow them.
_RESERVED_SUMMARY_PREFIXES = (
    "operation",
    "added-",
    "deleted-",
    "removed-",
    "total-",
    "changed-partition-count",
    "partition-summaries-included",
    "partitions.",
)


def commit_row_delta(
    table: Table,
    *,
    data_files: Iterable[DataFile],
    delete_files: Iterable[DataFile],
    snapshot_properties: Mapping[str, str],
    expected_parent_snapshot_id: int | None | _Unset = UNSET,
    branch: str = MAIN_BRANCH,
    table_properties: Callable[[int], Mapping[str, str]] | None = None,
    remove_all: bool = False,
) -> Snapshot:
    """Commit new data files and delete files as ONE snapshot on ``branch``.

    Args:
        table: the table; on success its metadata is advanced to the new snapshot. After a
            ``CommitConflictError`` it is stale and must be reloaded.
        data_files: files with content DATA (see ``replicator.iceberg.files``).
        delete_files: files with content POSITION_DELETES or EQUALITY_DELETES.
        snapshot_properties: extra summary entries, e.g. ``{"replicator.position": "..."}``.
        expected_parent_snapshot_id: the branch head the caller's work is based on (``None``: the
            branch has no snapshot yet). Defaults to the head of ``table``'s loaded metadata.
        branch: the branch to commit to.
        table_properties: table properties to set in the SAME catalog commit, given the new
            snapshot's id (the engine's checkpoint, see ``replicator.checkpoint.table``).
        remove_all: first remove every live data and delete file of the parent snapshot (a
            TRUNCATE at the source): they are written as DELETED entries of this snapshot,
            so the same commit empties the table and adds ``data_files``/``delete_files``.

    Returns:
        The new snapshot. Its operation is ``append`` (data only, or nothing at all: an empty
        batch still records its properties), ``delete`` (deletes only) or ``overwrite`` (both),
        as in Iceberg Java's ``BaseRowDelta`` since 1.11 (1.10 says ``overwrite`` for data only).

    Raises:
        CommitConflictError: the branch head is not ``expected_parent_snapshot_id`` (checked
            before writing anything, and atomically again by the catalog).
        ValueError: invalid files or properties.
    """
    data = list(data_files)
    deletes = list(delete_files)
    properties = dict(snapshot_properties)
    check_files(table, data, deletes)
    check_properties(properties)

    head = table.metadata.snapshot_by_name(branch)
    head_id = head.snapshot_id if head is not None else None
    if expected_parent_snapshot_id is not UNSET:
        check_expected_head(table, expected_parent_snapshot_id, branch)

    producer = RowDeltaProducer(
        producer_transaction(table), table, data, deletes, properties, branch, remove_all=remove_all
    )
    return commit_producer(table, producer, head_id=head_id, table_properties=table_properties)


def check_expected_head(
    table: Table, expected: int | None, branch: str = MAIN_BRANCH
) -> int | None:
    """The id of ``branch``'s head; ``CommitConflictError`` unless it is ``expected``."""
    head = table.metadata.snapshot_by_name(branch)
    head_id = head.snapshot_id if head is not None else None
    if expected != head_id:
        raise CommitConflictError(
            f"branch {branch!r} is at snapshot {head_id}, expected {expected}",
            table=".".join(table.name()),
            hint="another writer committed, or the table object is stale; reload the table "
            "and decide whether this batch still applies",
        )
    return head_id


class _CachedMetadataTransaction(Transaction):
    """A transaction whose ``table_metadata`` is computed once per (base metadata, staged
    updates) instead of on every access, and without pyiceberg's closing deep copy (about a
    third of a small commit's time with a few dozen snapshots). TableMetadata is immutable
    (frozen pydantic models) and this view is only read (the catalog applies the updates to
    the metadata it loads itself), so sharing one result is safe."""

    _metadata_cache: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        cached = self._metadata_cache
        if cached is None or cached[0] is not base or cached[1] is not updates:
            cached = self._metadata_cache = (base, updates, _staged_metadata(base, updates))
        return cached[2]


def _staged_metadata(base: TableMetadata, updates: tuple[TableUpdate, ...]) -> TableMetadata:
    """``base`` with ``updates`` applied by pyiceberg's own per-update rules: what
    ``update_table_metadata`` gives, less its ``last_updated_ms`` refresh and its final deep
    copy (the catalog's commit does both on the metadata it commits)."""
    return apply_updates(base, updates)[0]


def producer_transaction(table: Table) -> Transaction:
    """The transaction a producer of this package stages its snapshot in (not autocommit)."""
    return _CachedMetadataTransaction(table, autocommit=False)


def commit_producer(
    table: Table,
    producer: RowDeltaProducer,
    *,
    head_id: int | None,
    table_properties: Callable[[int], Mapping[str, str]] | None = None,
) -> Snapshot:
    """Write ``producer``'s manifests and commit its snapshot on top of ``head_id`` atomically.

    Shared by every producer of this package (row deltas, rewrites): the catalog checks that the
    branch head is still ``head_id``; the producer's files are removed when the catalog
    certainly did not take them.
    """
    table_name = ".".join(table.name())
    branch = producer._target_branch
    transaction = producer._transaction
    try:
        # Writes the manifests and the manifest list; returns AddSnapshot + SetSnapshotRef and
        # the AssertRefSnapshotId(head_id) requirement the catalog checks atomically.
        # Manifests go to storage under fresh names on every call: safe to retry.
        updates, requirements = call_with_retries(
            producer._commit, what=f"{table_name}: writing manifests"
        )
    except BaseException:
        producer._clean_all_uncommitted()
        raise
    if table_properties is not None:
        props = dict(table_properties(producer.snapshot_id))
        check_properties(props)
        updates = (*updates, SetPropertiesUpdate(updates=props))

    try:
        transaction._apply(updates, requirements)  # stage only (no autocommit)
        transaction.commit_transaction()
    except CommitFailedException as exc:
        # CommitFailedException means the catalog did not take the commit: our files are garbage.
        # Anything else (e.g. CommitStateUnknownException) propagates and leaves them in place.
        producer._clean_all_uncommitted()
        raise CommitConflictError(
            f"catalog rejected the commit on branch {branch!r} based on snapshot {head_id}: {exc}",
            table=table_name,
            hint="another writer committed first; reload the table and decide whether this "
            "batch still applies",
        ) from exc
    except CommitStateUnknownException as exc:
        # The files may be referenced now: never delete them here.
        raise CommitStateUnknownError(
            f"the catalog's answer to the commit on branch {branch!r} was lost: {exc}",
            table=table_name,
        ) from exc

    snapshot = table.metadata.snapshot_by_id(producer.snapshot_id)
    if snapshot is None:  # pragma: no cover - the catalog accepted the commit
        raise RuntimeError(f"committed snapshot {producer.snapshot_id} not found in {table_name}")
    return snapshot


def _operation(data: list[DataFile], deletes: list[DataFile], remove_all: bool = False) -> Operation:
    if remove_all:
        return Operation.OVERWRITE if data else Operation.DELETE
    if deletes and not data:
        return Operation.DELETE
    if deletes:
        return Operation.OVERWRITE
    return Operation.APPEND


def check_files(table: Table, data: list[DataFile], deletes: list[DataFile]) -> None:
    for data_file in data:
        if data_file.content != DataFileContent.DATA:
            raise ValueError(
                f"{data_file.file_path}: data_files entry has content {data_file.content!r}"
            )
    for delete_file in deletes:
        if delete_file.content not in _DELETE_CONTENTS:
            raise ValueError(f"{delete_file.file_path}: delete_files entry has content DATA")
        if delete_file.content == DataFileContent.EQUALITY_DELETES and not delete_file.equality_ids:
            raise ValueError(f"{delete_file.file_path}: equality delete file without equality_ids")
    if deletes and table.metadata.format_version != 2:
        # v1 has no delete files; v3 requires deletion vectors instead of position-delete files.
        raise ValueError(
            f"delete files need format-version 2, table has {table.metadata.format_version}"
        )

    default_spec_id = table.metadata.default_spec_id
    specs = table.metadata.specs()
    seen: set[str] = set()
    for content_file in [*data, *deletes]:
        # Any spec of the table: files written before a spec change keep theirs, and
        # equality deletes use the unpartitioned one (``partitions``).
        spec_id = _spec_id(content_file, default_spec_id)
        if spec_id not in specs:
            raise ValueError(f"{content_file.file_path}: spec id {spec_id} is not a spec of the table")
        if len(content_file.partition) != len(specs[spec_id].fields):
            raise ValueError(
                f"{content_file.file_path}: partition {content_file.partition!r} does not fit spec {spec_id}"
            )
        # A file listed twice in a snapshot makes scans undefined.
        if content_file.file_path in seen:
            raise ValueError(f"{content_file.file_path}: listed more than once in one commit")
        seen.add(content_file.file_path)


def _by_spec(files: list[DataFile], default: int) -> dict[int, list[DataFile]]:
    groups: dict[int, list[DataFile]] = {}
    for content_file in files:
        groups.setdefault(_spec_id(content_file, default), []).append(content_file)
    return groups


def _spec_id(content_file: DataFile, default: int) -> int:
    # DataFile.from_args does not set spec_id; files built that way carry none.
    try:
        return content_file.spec_id
    except AttributeError:
        return default


def check_properties(properties: dict[str, str]) -> None:
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"snapshot property {key!r}={value!r}: keys and values must be str")
        if key.startswith(_RESERVED_SUMMARY_PREFIXES):
            raise ValueError(f"snapshot property {key!r} would shadow an Iceberg summary field")


class RowDeltaProducer(_MergeAppendFiles):
    """An append that also writes a DELETES manifest.

    ``_existing_manifests`` is pyiceberg's (every parent manifest that still has live files),
    read through ``manifests.read_manifests``. Inherited: ``_deleted_entries`` (none), the no-op concurrency validation, and the merge settings of
    ``_MergeAppendFiles`` (target size). ``_process_manifests`` is ours: it merges DATA and
    DELETES manifests alike (see the module docstring). Merged entries keep their data and file
    sequence numbers, so delete semantics are unchanged.
    """

    def __init__(
        self,
        transaction: Transaction,
        table: Table,
        data: list[DataFile],
        deletes: list[DataFile],
        properties: dict[str, str],
        branch: str,
        *,
        remove_all: bool = False,
    ) -> None:
        super().__init__(
            operation=_operation(data, deletes, remove_all),
            transaction=transaction,
            io=table.io,
            snapshot_properties=properties,
            branch=branch,
        )
        self._added_data_files = data
        self._added_delete_files = deletes
        # Data sequence number of the added data files (None: the new snapshot's). Only a
        # rewrite sets it, to keep rewritten rows under the deletes that applied to them.
        self._data_sequence_number: int | None = None
        self._remove_all = remove_all
        self._removed_all: list[DataFile] = []  # with remove_all: the parent's live files

    def _existing_manifests(self) -> list[ManifestFile]:
        if self._parent_snapshot_id is None:
            return []
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        if parent is None:
            raise ValueError(f"Snapshot could not be found: {self._parent_snapshot_id}")
        return [
            m for m in read_manifests(parent, self._io)
            if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == self._snapshot_id
        ]

    def _manifests(self) -> list[ManifestFile]:
        metadata = self._transaction.table_metadata
        new_manifests: list[ManifestFile] = []
        v2 = metadata.format_version == 2
        # A manifest holds files of ONE partition spec (it names the spec): one per spec used.
        for spec_id, files in _by_spec(self._added_data_files, metadata.default_spec_id).items():
            writer = (
                self._new_writer(DataManifestWriter, spec_id)
                if v2
                else self.new_manifest_writer(metadata.specs()[spec_id])
            )
            new_manifests.append(self._write_added(writer, files, self._data_sequence_number))
        # v2 only, checked by check_files
        for spec_id, files in _by_spec(self._added_delete_files, metadata.default_spec_id).items():
            writer = self._new_writer(DeleteManifestWriter, spec_id)
            new_manifests.append(self._write_added(writer, files))
        if self._remove_all:
            return self._process_manifests(new_manifests + self._write_removed_all())
        return self._process_manifests(new_manifests + self._existing_manifests())

    def _write_removed_all(self) -> list[ManifestFile]:
        """Every live file of the parent as a DELETED entry (data and delete manifests)."""
        self._removed_all = []
        metadata = self._transaction.table_metadata
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        if parent is None:
            return []
        by_content: dict[tuple[ManifestContent, int], list[ManifestEntry]] = {}
        for manifest in read_manifests(parent, self._io):
            entries = manifest_entries(manifest, self._io, live_only=True)
            by_content.setdefault((manifest.content, manifest.partition_spec_id), []).extend(entries)
        out: list[ManifestFile] = []
        for (content, spec_id), entries in by_content.items():
            if not entries:
                continue
            writer = self._new_writer(manifest_writer_class(content), spec_id)
            with writer:
                for entry in entries:
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.DELETED,
                            snapshot_id=self._snapshot_id,
                            # a removed file keeps the sequence numbers it was added with
                            sequence_number=entry.sequence_number,
                            file_sequence_number=entry.file_sequence_number,
                            data_file=entry.data_file,
                        )
                    )
                    self._removed_all.append(entry.data_file)
            out.append(writer.to_manifest_file())
        return out

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        properties = self._transaction.table_metadata.properties
        if not property_as_bool(properties, TableProperties.MANIFEST_MERGE_ENABLED, True):
            return manifests
        most = property_as_int(
            properties, TableProperties.MANIFEST_MIN_MERGE_COUNT, MANIFESTS_PER_CONTENT_MAX
        )
        groups: dict[tuple[ManifestContent, int], list[ManifestFile]] = {}
        for manifest in manifests:  # new manifests first, as the caller lists them
            groups.setdefault((manifest.content, manifest.partition_spec_id), []).append(manifest)
        result: list[ManifestFile] = []
        for (content, spec_id), group in groups.items():
            small = [m for m in group if m.manifest_length < self._target_size_bytes]
            if len(group) <= (most or 0) or len(small) < 2:
                result.extend(group)
                continue
            result.append(self._merge(content, spec_id, small))
            result.extend(m for m in group if m.manifest_length >= self._target_size_bytes)
            self._discard_merged(small)
        return result

    def _discard_merged(self, merged: list[ManifestFile]) -> None:
        """Delete the manifests this commit wrote and then merged away: nothing lists them
        (pyiceberg's merge leaves them behind as orphans)."""
        for manifest in merged:
            path = manifest.manifest_path
            if path in self._written_manifests:
                self._written_manifests.remove(path)
                with contextlib.suppress(Exception):  # best effort: orphan cleanup catches it
                    self._io.delete(path)

    def _merge(
        self, content: ManifestContent, spec_id: int, manifests: list[ManifestFile]
    ) -> ManifestFile:
        """One manifest with the live entries of ``manifests`` and this snapshot's removals."""
        writer = self._new_writer(manifest_writer_class(content), spec_id)
        with writer:
            for manifest in manifests:
                for entry in manifest_entries(manifest, self._io, live_only=False):
                    ours = entry.snapshot_id == self._snapshot_id
                    if entry.status == ManifestEntryStatus.DELETED:
                        if ours:  # removed by this snapshot: keep the record of it
                            writer.delete(entry)
                    elif entry.status == ManifestEntryStatus.ADDED and ours:
                        # Keeps an explicit data sequence number; null inherits this snapshot's.
                        writer.add(entry)
                    else:
                        writer.existing(entry)  # both sequence numbers as read
        return writer.to_manifest_file()

    def _new_writer(
        self, writer_class: type[DataManifestWriter], spec_id: int | None = None
    ) -> ManifestWriter:
        metadata = self._transaction.table_metadata
        return writer_class(
            spec=metadata.spec() if spec_id is None else metadata.specs()[spec_id],
            schema=self.schema(),
            output_file=self.new_manifest_output(),  # tracked for cleanup on failure
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )

    def _write_added(
        self, writer: ManifestWriter, files: list[DataFile], sequence_number: int | None = None
    ) -> ManifestFile:
        with writer:
            for content_file in files:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=self._snapshot_id,
                        # null: inherit the snapshot's sequence number from the manifest list
                        sequence_number=sequence_number,
                        file_sequence_number=None,
                        data_file=content_file,
                    )
                )
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: Mapping[str, str] = EMPTY_DICT) -> Summary:
        return self._summary_as(self._operation, self._removed_all, snapshot_properties)

    def _summary_as(
        self, operation: Operation, removed: list[DataFile], snapshot_properties: Mapping[str, str]
    ) -> Summary:
        """The summary with totals: what this snapshot adds and ``removed`` (shared with the
        rewrite producer, which passes its own removals)."""
        metadata = self._transaction.table_metadata
        collector = SnapshotSummaryCollector()
        # The collector counts data files and both kinds of delete files (added-delete-files,
        # added-position-deletes, added-equality-deletes, ...).
        specs, default = metadata.specs(), metadata.default_spec_id
        for content_file in [*self._added_data_files, *self._added_delete_files]:
            spec = specs[_spec_id(content_file, default)]
            collector.add_file(content_file, schema=metadata.schema(), partition_spec=spec)
        for content_file in removed:
            spec = specs[_spec_id(content_file, default)]
            collector.remove_file(content_file, schema=metadata.schema(), partition_spec=spec)
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        return update_snapshot_summaries(
            summary=Summary(operation=operation, **collector.build(), **snapshot_properties),
            previous_summary=parent.summary if parent is not None else None,
        )
