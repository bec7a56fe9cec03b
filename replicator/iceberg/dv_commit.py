"""Commit data files, delete files and deletion vectors as ONE snapshot, with our own manifests
and only public pyiceberg table updates and requirements.

The commit is what Iceberg Java's ``RowDelta`` does for a CDC batch:

* new data files go to a new DATA manifest (ADDED, sequence numbers inherited);
* v3: each deletion vector (data file -> deleted positions) is merged with the data file's
  live vector, if it has one, and the merged vectors are written to ONE new Puffin file, listed
  in a new DELETES manifest (format PUFFIN, ``referenced_data_file``, ``content_offset``,
  ``content_size_in_bytes``); the delete manifests that held the replaced vectors are rewritten
  with those entries DELETED and the rest EXISTING, so a data file has one vector per snapshot
  (Iceberg Java refuses two);
* v2: position and equality delete files go to a new DELETES manifest; v3 takes equality
  delete files, and deletion vectors instead of position delete files;
* a vector may only name a data file that is live in the parent snapshot or added by this
  commit: a vector for a file that is gone would be lost with it, silently bringing rows back;
* ``remove`` (a maintenance rewrite) and ``remove_all`` (a TRUNCATE) write the removed live
  entries as DELETED in rewritten manifests (the rest of those manifests EXISTING, sequence
  numbers kept); removing a data file also removes its deletion vector (the vector's entry;
  the Puffin file may hold other files' vectors, which stay);
* the other manifests of the parent are listed as they are; v3 row lineage per
  ``manifest_writer.write_manifest_list`` (snapshot ``first-row-id`` = the table's
  ``next-row-id``; ``added-rows`` = the ids assigned);
* the catalog commit carries ``AddSnapshotUpdate`` + ``SetSnapshotRefUpdate`` (+ optional
  ``SetPropertiesUpdate``) under ``AssertTableUUID`` + ``AssertRefSnapshotId(parent)``: a moved
  branch is a ``CommitConflictError``, never a silent rebase.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2, TableMetadataV3
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary, update_snapshot_summaries
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from replicator.errors import CommitConflictError, CommitStateUnknownError, TerminalError
from replicator.iceberg import puffin
from replicator.iceberg.commit_checks import check_expected_head, check_properties
from replicator.iceberg.files import POSITION_DELETE_FILE_PATH_ID
from replicator.iceberg.manifest_merge import merge_small_manifests
from replicator.iceberg.manifest_schema import (
    ContentFile,
    FileContent,
    FileEntry,
    FormatVersion,
    ListedManifest,
    ManifestContent,
    Status,
)
from replicator.iceberg.manifest_writer import (
    read_manifest,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from replicator.iceberg.roaring import Positions, union
from replicator.iceberg.snapshot_summary import summary_properties
from replicator.iceberg.table_updates import commit_table_updates, delete_files
from replicator.retry import transient_error
from replicator.secrets import scrub

__all__ = ["Committed", "commit_files", "live_deletion_vectors", "vector_targets"]

PUFFIN = "PUFFIN"


@dataclass(frozen=True)
class Committed:
    table: Table  # the table at the new snapshot
    snapshot: Snapshot


@dataclass(frozen=True)
class _Target:
    """A data file a vector is written for: its description and partition spec."""

    file: ContentFile
    spec_id: int


@dataclass(frozen=True)
class _Plan:
    """What the commit writes, gathered and checked before anything is written."""

    snapshot_id: int
    head_id: int | None
    data_files: Sequence[ContentFile]
    delete_files: Sequence[ContentFile]
    vectors: Mapping[str, Positions]
    snapshot_properties: Mapping[str, str]
    parent: list[ListedManifest]  # the parent snapshot's manifests
    targets: dict[str, _Target]  # data file -> where the vector goes
    previous: dict[str, tuple[ListedManifest, FileEntry]]  # data file -> its live vector
    removal: _Removal
    spec_ids: Mapping[str, int]  # added file -> its partition spec (default: the table's)
    data_sequence_number: int | None  # of the added data files (None: the snapshot's)
    operation: Operation | None  # None: from what is added and removed


@dataclass(frozen=True)
class _Removal:
    """The parent's live files the commit removes, and the manifests that list them."""

    paths: frozenset[str]
    every: bool  # remove_all
    manifests: dict[str, ListedManifest]
    files: list[ContentFile]

    def drops(self, entry: FileEntry) -> bool:
        if self.every:
            return True
        f = entry.file
        if f.file_format == PUFFIN:  # a vector goes with its data file
            return f.referenced_data_file in self.paths
        return f.file_path in self.paths


_NO_REMOVAL = _Removal(frozenset(), False, {}, [])


def commit_files(
    table: Table,
    *,
    data_files: Sequence[ContentFile] = (),
    delete_files: Sequence[ContentFile] = (),
    deletion_vectors: Mapping[str, Positions] | None = None,
    snapshot_properties: Mapping[str, str] | None = None,
    table_properties: Mapping[str, str] | Callable[[int], Mapping[str, str]] | None = None,
    expected_parent_snapshot_id: int | None = None,
    branch: str = MAIN_BRANCH,
    remove: Collection[str] = (),
    remove_all: bool = False,
    spec_ids: Mapping[str, int] | None = None,
    data_sequence_number: int | None = None,
    operation: Operation | None = None,
) -> Committed:
    """Commit one snapshot on ``branch`` based on ``expected_parent_snapshot_id`` (the head the
    caller's work is based on; ``None``: the branch has no snapshot yet).

    ``deletion_vectors`` (v3 only) maps a data file path to the positions to delete in it.
    ``remove``: paths of live data and delete files of the parent to remove (``ValueError``
    if one is not live); ``remove_all``: remove every live file first (a TRUNCATE).
    ``spec_ids``: the partition spec of an added file not under the default spec.
    ``data_sequence_number``: of the added data files (a compaction keeps its inputs').
    ``operation``: the snapshot's (e.g. ``replace`` for a rewrite); default from the files.
    ``table_properties``: set in the same catalog commit (a callable gets the snapshot id).
    ``CommitConflictError`` when the branch moved; ``ValueError`` on invalid input.
    """
    metadata = table.metadata
    vectors = {p: v for p, v in (deletion_vectors or {}).items() if v.size}
    _check_inputs(metadata, data_files, delete_files, vectors, spec_ids or {})
    if set(remove) & {f.file_path for f in (*data_files, *delete_files)}:
        raise ValueError("a file is both removed and added")
    head = check_expected_head(table, expected_parent_snapshot_id, branch)
    head_id = head.snapshot_id if head is not None else None
    properties = dict(snapshot_properties or {})
    check_properties(properties)
    parent = read_manifest_list(table.io, head.manifest_list) if head is not None else []
    removal = _removal(table, parent, frozenset(remove), remove_all) if remove or remove_all else _NO_REMOVAL
    targets, previous, carried = _targets(table, parent, data_files, vectors, removal)
    vectors = {p: union(v, carried[p]) if p in carried else v for p, v in vectors.items()}
    snapshot_id = _new_snapshot_id(metadata)
    plan = _Plan(
        snapshot_id, head_id, data_files, delete_files, vectors, properties, parent, targets, previous,
        removal, dict(spec_ids or {}), data_sequence_number, operation,
    )  # fmt: skip
    written: list[str] = []
    try:
        snapshot = _write_snapshot(table, plan, written)
    except BaseException:
        _discard(table, written)
        raise
    updates: tuple[TableUpdate, ...] = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate.model_validate(
            {"ref-name": branch, "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot_id}
        ),
    )
    if callable(table_properties):
        table_properties = table_properties(snapshot_id)
    if table_properties:
        check_properties(dict(table_properties))
        updates = (*updates, SetPropertiesUpdate(updates=dict(table_properties)))
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=metadata.table_uuid),
        AssertRefSnapshotId.model_validate({"ref": branch, "snapshot-id": head_id}),
    )
    return _commit(table, requirements, updates, snapshot, written)


def _version(metadata: TableMetadata) -> FormatVersion:
    version = metadata.format_version
    if version not in (2, 3):
        raise ValueError(f"format-version {version}: only 2 and 3 are written here")
    return 2 if version == 2 else 3


def _check_inputs(
    metadata: TableMetadata,
    data_files: Sequence[ContentFile],
    delete_files: Sequence[ContentFile],
    vectors: Mapping[str, Positions],
    spec_ids: Mapping[str, int],
) -> None:
    """Contents, partition specs and uniqueness of the files one commit adds."""
    version = _version(metadata)
    for f in data_files:
        if f.content != FileContent.DATA:
            raise ValueError(f"{f.file_path}: data_files entry has content {f.content.name}")
    for f in delete_files:
        if f.content == FileContent.DATA:
            raise ValueError(f"{f.file_path}: delete_files entry has content DATA")
        if f.content == FileContent.EQUALITY_DELETES and not f.equality_ids:
            raise ValueError(f"{f.file_path}: equality delete file without equality_ids")
        if version >= 3 and f.content == FileContent.POSITION_DELETES:
            raise ValueError(f"{f.file_path}: a v3 table takes deletion vectors, not position delete files")
    if vectors and version < 3:
        raise ValueError("deletion vectors need format-version 3")
    specs = metadata.specs()
    for f in (*data_files, *delete_files):
        # Any spec of the table: files written before a spec change keep theirs, and
        # equality deletes use the unpartitioned one (``partitions``).
        spec_id = spec_ids.get(f.file_path, metadata.default_spec_id)
        if spec_id not in specs:
            raise ValueError(f"{f.file_path}: spec id {spec_id} is not a spec of the table")
        if len(f.partition) != len(specs[spec_id].fields):
            raise ValueError(f"{f.file_path}: partition {f.partition!r} does not fit spec {spec_id}")
    paths = [f.file_path for f in (*data_files, *delete_files)]
    if len(paths) != len(set(paths)):
        raise ValueError("a file is listed more than once in one commit")


def _removal(table: Table, parent: list[ListedManifest], paths: frozenset[str], every: bool) -> _Removal:
    """The live entries ``paths`` (or, ``every``, all) name, and the manifests listing them."""
    found = _Removal(paths, every, {}, [])
    for content in (ManifestContent.DATA, ManifestContent.DELETES):
        for manifest, entry in _live_entries(table, parent, content, found.drops):
            found.manifests[manifest.manifest_path] = manifest
            found.files.append(entry.file)
    missing = paths - {f.file_path for f in found.files}
    if missing:
        raise ValueError(f"files to remove are not live in the parent snapshot: {sorted(missing)[:5]}")
    return found


def _targets(
    table: Table,
    parent: list[ListedManifest],
    data_files: Sequence[ContentFile],
    vectors: Mapping[str, Positions],
    removal: _Removal = _NO_REMOVAL,
) -> tuple[dict[str, _Target], dict[str, tuple[ListedManifest, FileEntry]], dict[str, Positions]]:
    """The data files the vectors are for (live or added now, positions within them), their
    live vectors, and the positions live position-delete files (Parquet: a table upgraded
    from v2) delete in them: readers apply only the vector where a data file has one, so
    those positions go into it."""
    metadata = table.metadata
    targets = {f.file_path: _Target(f, metadata.default_spec_id) for f in data_files if f.file_path in vectors}
    wanted = set(vectors) - set(targets)
    if removal.every:
        wanted = set()  # nothing of the parent stays: vectors only for files added now
    live = _live_entries(
        table, parent, ManifestContent.DATA,
        lambda e: e.file.file_path in wanted and e.file.file_path not in removal.paths,
    ) if wanted else []  # fmt: skip
    for manifest, entry in live:
        targets[entry.file.file_path] = _Target(entry.file, manifest.partition_spec_id)
    missing = sorted(set(vectors) - set(targets))
    if missing:
        raise ValueError(f"deletion vectors for data files not live in the table: {missing[:5]}")
    for path, values in vectors.items():
        count = targets[path].file.record_count
        if int(values[-1]) >= count:
            raise ValueError(f"{path}: position {int(values[-1])} past its {count} rows")
    previous: dict[str, tuple[ListedManifest, FileEntry]] = {}
    carried: dict[str, Positions] = {}
    if removal.every or not vectors:  # no vector to merge: the delete manifests are not read
        return targets, previous, carried
    for m, e in _live_entries(table, parent, ManifestContent.DELETES, lambda e: _may_apply(e.file, vectors)):
        if e.file.file_format != PUFFIN:
            for path, values in _parquet_positions(table, e.file, set(vectors)).items():
                carried[path] = union(carried[path], values) if path in carried else values
            continue
        path = e.file.referenced_data_file or ""
        if path in previous:
            raise ValueError(f"{path}: more than one live deletion vector in the parent snapshot")
        previous[path] = (m, e)
    return targets, previous, carried


def _parquet_positions(table: Table, file: ContentFile, paths: set[str]) -> dict[str, Positions]:
    """The positions a position-delete Parquet file deletes in the data files ``paths``."""
    with table.io.new_input(file.file_path).open() as stream:
        rows = pq.ParquetFile(stream).read(columns=["file_path", "pos"]).to_pydict()
    found: dict[str, list[int]] = {}
    for path, pos in zip(rows["file_path"], rows["pos"], strict=True):
        if path in paths:
            found.setdefault(path, []).append(pos)
    return {path: np.unique(np.asarray(values, dtype=np.uint64)) for path, values in found.items()}


def _may_apply(file: ContentFile, vectors: Mapping[str, Positions]) -> bool:
    """Whether a position delete file or vector may delete rows of the vectors' data files."""
    if file.content != FileContent.POSITION_DELETES:
        return False
    path = file.referenced_data_file
    if path is None and file.lower_bounds and file.upper_bounds:
        # One data file per delete file shows as equal bounds of its file_path column.
        low = file.lower_bounds.get(POSITION_DELETE_FILE_PATH_ID)
        if low is not None and low == file.upper_bounds.get(POSITION_DELETE_FILE_PATH_ID):
            path = low.decode()
    return path is None or path in vectors


def _live_entries(
    table: Table, manifests: list[ListedManifest], content: ManifestContent, keep: object
) -> list[tuple[ListedManifest, FileEntry]]:
    assert callable(keep)
    metadata = table.metadata
    found = []
    for manifest in manifests:
        if manifest.content != content or not manifest.has_live_files():
            continue
        spec = metadata.specs()[manifest.partition_spec_id]
        for entry in read_manifest(table.io, manifest, spec, metadata.schema()):
            if entry.status != Status.DELETED and keep(entry):
                found.append((manifest, entry))
    return found


def live_deletion_vectors(table: Table, snapshot_id: int | None = None) -> dict[str, Positions]:
    """Every live deletion vector of a snapshot (default: the current one), by data file path,
    read through our manifest reader and Puffin reader (any writer's vectors)."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return {}
    manifests = read_manifest_list(table.io, snapshot.manifest_list)
    entries = _live_entries(table, manifests, ManifestContent.DELETES, lambda e: e.file.file_format == PUFFIN)
    result: dict[str, Positions] = {}
    for _, entry in entries:
        path = entry.file.referenced_data_file or ""
        if path in result:
            raise ValueError(f"{path}: more than one live deletion vector")
        result[path] = _read_vector(table, entry.file)
    return result


def vector_targets(table: Table) -> dict[str, set[str]]:
    """Puffin file -> the data files its live deletion vectors (current snapshot) are for."""
    return {path: set(rows) for path, rows in vector_deleted_rows(table).items()}


def vector_deleted_rows(table: Table) -> dict[str, dict[str, int]]:
    """Puffin file -> {data file: rows its live deletion vector deletes} (current snapshot)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    manifests = read_manifest_list(table.io, snapshot.manifest_list)
    out: dict[str, dict[str, int]] = {}
    for _, entry in _live_entries(table, manifests, ManifestContent.DELETES, lambda e: e.file.file_format == PUFFIN):
        out.setdefault(entry.file.file_path, {})[entry.file.referenced_data_file or ""] = entry.file.record_count
    return out


def _read_vector(table: Table, file: ContentFile) -> Positions:
    if file.content_offset is None or file.content_size_in_bytes is None:
        raise ValueError(f"{file.file_path}: deletion vector entry without content_offset/size")
    with table.io.new_input(file.file_path).open() as stream:
        stream.seek(file.content_offset)
        blob = stream.read(file.content_size_in_bytes)
    values = puffin.read_blob(blob)
    if values.size != file.record_count:
        raise ValueError(f"{file.file_path}: vector holds {values.size}, record_count {file.record_count}")
    return values


def _write_manifests(
    table: Table, plan: _Plan, written: list[str]
) -> tuple[list[ListedManifest], dict[str, ContentFile]]:
    """Write the Puffin file and the new and rewritten manifests; return the manifests to list
    (new first, then the parent's other live ones) and the vectors' files by data file."""
    metadata = table.metadata
    new: list[ListedManifest] = []

    def write(content: ManifestContent, spec_id: int, entries: list[FileEntry]) -> ListedManifest:
        path = table.location_provider().new_metadata_location(f"{uuid.uuid4()}-m{len(written)}.avro")
        written.append(path)
        return write_manifest(
            table.io, path, version=_version(metadata), content=content,
            spec=metadata.specs()[spec_id], schema=metadata.schema(),
            snapshot_id=plan.snapshot_id, entries=entries,
        )  # fmt: skip

    def manifest(content: ManifestContent, spec_id: int, entries: list[FileEntry]) -> None:
        new.append(write(content, spec_id, entries))

    data_by_spec: dict[int, list[FileEntry]] = {}
    for f in plan.data_files:
        entry = FileEntry(Status.ADDED, f, sequence_number=plan.data_sequence_number)
        data_by_spec.setdefault(plan.spec_ids.get(f.file_path, metadata.default_spec_id), []).append(entry)
    for spec_id, entries in sorted(data_by_spec.items()):
        manifest(ManifestContent.DATA, spec_id, entries)
    dv_files = _write_vectors(table, plan, written)
    by_spec: dict[int, list[FileEntry]] = {}
    for f in plan.delete_files:
        spec_id = plan.spec_ids.get(f.file_path, metadata.default_spec_id)
        by_spec.setdefault(spec_id, []).append(FileEntry(Status.ADDED, f))
    for path, f in dv_files.items():
        by_spec.setdefault(plan.targets[path].spec_id, []).append(FileEntry(Status.ADDED, f))
    for spec_id, entries in sorted(by_spec.items()):
        manifest(ManifestContent.DELETES, spec_id, entries)
    rewritten = {m.manifest_path: m for m, _ in plan.previous.values()}
    rewritten.update(plan.removal.manifests)
    # The rewritten manifests of one content and spec become one (readers pay per manifest);
    # a rewrite then merges them with the rest (manifest_merge, merge_all).
    regrouped: dict[tuple[ManifestContent, int], list[FileEntry]] = {}
    for listed in rewritten.values():
        spec = metadata.specs()[listed.partition_spec_id]
        regrouped.setdefault((listed.content, listed.partition_spec_id), []).extend(
            replace(e, status=Status.DELETED if _replaced(e, plan) or plan.removal.drops(e) else Status.EXISTING)
            for e in read_manifest(table.io, listed, spec, metadata.schema())
            if e.status != Status.DELETED
        )
    for (content, spec_id), entries in regrouped.items():
        manifest(content, spec_id, entries)
    carried = [m for m in plan.parent if m.manifest_path not in rewritten and m.has_live_files()]
    to_list, merged = merge_small_manifests(
        table, [*new, *carried], plan.snapshot_id, write, merge_all=plan.operation == Operation.REPLACE
    )
    ours = [m.manifest_path for m in merged if m.added_snapshot_id == plan.snapshot_id]
    _discard(table, ours)  # written by this commit and merged away: nothing lists them
    written[:] = [p for p in written if p not in ours]
    return to_list, dv_files


def _write_snapshot(table: Table, plan: _Plan, written: list[str]) -> Snapshot:
    """Write the files of the commit and the manifest list; return the snapshot."""
    metadata = table.metadata
    version = _version(metadata)
    snapshot_id, head_id = plan.snapshot_id, plan.head_id
    manifests, dv_files = _write_manifests(table, plan, written)
    sequence_number = _last_sequence_number(metadata) + 1
    list_path = table.location_provider().new_metadata_location(f"snap-{snapshot_id}-1-{uuid.uuid4()}.avro")
    written.append(list_path)
    first_row_id = _next_row_id(metadata)
    _, added_rows = write_manifest_list(
        table.io, list_path, version=version, snapshot_id=snapshot_id, parent_snapshot_id=head_id,
        sequence_number=sequence_number, first_row_id=first_row_id, manifests=manifests,
    )  # fmt: skip
    removed = [*(e.file for _, e in plan.previous.values()), *plan.removal.files]
    added = [*plan.data_files, *plan.delete_files, *dv_files.values()]
    parent = metadata.snapshot_by_id(head_id) if head_id is not None else None
    operation = plan.operation or _operation(
        bool(plan.data_files), bool(plan.delete_files or dv_files or plan.removal.files)
    )
    summary = update_snapshot_summaries(
        # pyiceberg derives totals for append/overwrite/delete only; a replace changes them
        # as an overwrite with the same files would
        summary=Summary(
            operation=Operation.OVERWRITE if operation == Operation.REPLACE else operation,
            **summary_properties(added, removed),
            **plan.snapshot_properties,
        ),
        previous_summary=parent.summary if parent is not None else None,
    )
    if operation == Operation.REPLACE:
        summary = Summary(operation=Operation.REPLACE, **summary.additional_properties)
    return Snapshot.model_validate(
        {
            "snapshot-id": snapshot_id,
            "parent-snapshot-id": head_id,
            "sequence-number": sequence_number,
            "timestamp-ms": max(int(time.time() * 1000), metadata.last_updated_ms),
            "manifest-list": list_path,
            "summary": summary,
            "schema-id": metadata.current_schema_id,
            "first-row-id": first_row_id,
            "added-rows": added_rows if version >= 3 else None,
        }
    )


def _replaced(entry: FileEntry, plan: _Plan) -> bool:
    """Whether ``entry`` is a live vector this commit replaces by a merged one."""
    path = entry.file.referenced_data_file
    previous = plan.previous.get(path) if path is not None else None
    return previous is not None and previous[1] == entry


def _store_puffin(table: Table, location: str, data: bytes) -> None:
    """Write the Puffin file; a refusal retrying cannot fix is a terminal error that says so."""
    try:
        with table.io.new_output(location).create(overwrite=True) as stream:  # unique name: no existence check
            stream.write(data)
    except OSError as exc:
        if transient_error(exc) is not None:
            raise
        raise TerminalError(
            f"the object store refused the deletion-vector file {location}: {scrub(str(exc))}",
            table=".".join(table.name()),
            hint="format version 3 stores row deletes as Puffin files; some object stores (S3 "
            "'table buckets') accept only Parquet, Avro and JSON objects: use a general-purpose "
            "bucket for the warehouse, or iceberg.format_version: 2",
        ) from exc


def _write_vectors(table: Table, plan: _Plan, written: list[str]) -> dict[str, ContentFile]:
    """One Puffin file with each target's vector merged with its previous one."""
    if not plan.vectors:
        return {}
    merged = {}
    for path, values in plan.vectors.items():
        previous = plan.previous.get(path)
        merged[path] = union(_read_vector(table, previous[1].file), values) if previous else values
    data, created = puffin.write_deletion_vectors(merged)
    location = table.location_provider().new_data_location(f"{uuid.uuid4()}-deletes.puffin")
    written.append(location)
    _store_puffin(table, location, data)
    return {
        c.referenced_data_file: ContentFile(
            content=FileContent.POSITION_DELETES,
            file_path=location,
            file_format=PUFFIN,
            partition=plan.targets[c.referenced_data_file].file.partition,
            record_count=c.cardinality,
            file_size_in_bytes=len(data),
            referenced_data_file=c.referenced_data_file,
            content_offset=c.offset,
            content_size_in_bytes=c.length,
        )
        for c in created
    }


def _operation(has_data: bool, has_deletes: bool) -> Operation:
    if has_deletes and not has_data:
        return Operation.DELETE
    return Operation.OVERWRITE if has_deletes else Operation.APPEND


def _last_sequence_number(metadata: TableMetadata) -> int:
    if not isinstance(metadata, TableMetadataV2 | TableMetadataV3):
        raise ValueError(f"format-version {metadata.format_version}: no sequence numbers")
    return metadata.last_sequence_number


def _next_row_id(metadata: TableMetadata) -> int | None:
    """The snapshot's first-row-id: the table's next-row-id (v3; 0 when not yet set)."""
    if not isinstance(metadata, TableMetadataV3):
        return None
    return metadata.next_row_id or 0


def _new_snapshot_id(metadata: TableMetadata) -> int:
    taken = {s.snapshot_id for s in metadata.snapshots}
    while True:
        candidate = uuid.uuid4().int & (2**63 - 1)
        if candidate and candidate not in taken:
            return candidate


def _commit(
    table: Table,
    requirements: tuple[TableRequirement, ...],
    updates: tuple[TableUpdate, ...],
    snapshot: Snapshot,
    written: list[str],
) -> Committed:
    name = ".".join(table.name())
    # A new Table object: the caller's is advanced by its entry (table_commit) after success.
    target = Table(table.name(), table.metadata, table.metadata_location, table.io, table.catalog)
    try:
        committed = commit_table_updates(target, updates, requirements)
    except CommitFailedException as exc:
        _discard(table, written)  # the catalog certainly did not take them
        raise CommitConflictError(f"catalog rejected the commit: {exc}", table=name) from exc
    except CommitStateUnknownException as exc:
        raise CommitStateUnknownError(f"the catalog's answer to the commit was lost: {exc}", table=name) from exc
    return Committed(committed, snapshot)


def _discard(table: Table, paths: list[str]) -> None:
    delete_files(table, paths)
