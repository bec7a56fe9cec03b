"""Our own spec-exact writer and reader of Iceberg manifests and manifest lists (v2 and v3).

pyiceberg 0.12 writes no v3 manifest and no delete manifest through its public API; this module
writes both content kinds (DATA, DELETES) in format 2 and 3 with the schemas of
``manifest_schema``, through pyiceberg's Avro encoder (public ``pyiceberg.avro.file``), and
reads any writer's manifests (Iceberg Java's, pyiceberg's, ours) by field id.

Rules it applies (Iceberg spec):

* Manifest Avro metadata: ``schema``, ``schema-id``, ``partition-spec``, ``partition-spec-id``,
  ``format-version``, ``content`` (``data`` | ``deletes``).
* Entries ADDED by the snapshot being written carry null sequence numbers: they inherit the
  snapshot's from the manifest list ("sequence number inheritance"); EXISTING and DELETED
  entries keep the ones they were added with.
* Manifest list metadata: ``snapshot-id``, ``parent-snapshot-id``, ``sequence-number``,
  ``format-version`` and, in v3, ``first-row-id``.
* v3 row lineage ("First Row ID Assignment"): a data manifest without ``first_row_id`` gets the
  next row id, which then advances by its added + existing row counts; existing values are kept;
  delete manifests have none. The snapshot's ``added-rows`` is how far the ids advanced.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, construct_partition_summaries
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from replicator.iceberg.avro_io import avro_bytes, read_avro
from replicator.iceberg.manifest_schema import (
    ContentFile,
    FileContent,
    FileEntry,
    FormatVersion,
    ListedManifest,
    ManifestContent,
    PartitionSummary,
    Status,
    entry_schema,
    manifest_list_schema,
)

__all__ = [
    "content_file",
    "read_manifest",
    "read_manifest_list",
    "write_manifest",
    "write_manifest_list",
]

_CODEC = {"avro.codec": "deflate"}
_CONTENT_NAMES = {ManifestContent.DATA: "data", ManifestContent.DELETES: "deletes"}


def _store(file_io: FileIO, path: str, data: bytes) -> None:
    with file_io.new_output(path).create(overwrite=True) as stream:  # unique name: no existence check
        stream.write(data)


def content_file(data_file: DataFile) -> ContentFile:
    """Our model of a file described by pyiceberg (e.g. ``replicator.iceberg.files``)."""
    return ContentFile(
        content=FileContent(int(data_file.content)),
        file_path=data_file.file_path,
        file_format=str(data_file.file_format.value),
        partition=tuple(data_file.partition[i] for i in range(len(data_file.partition))),
        record_count=data_file.record_count,
        file_size_in_bytes=data_file.file_size_in_bytes,
        column_sizes=data_file.column_sizes or None,
        value_counts=data_file.value_counts or None,
        null_value_counts=data_file.null_value_counts or None,
        nan_value_counts=data_file.nan_value_counts or None,
        lower_bounds=data_file.lower_bounds or None,
        upper_bounds=data_file.upper_bounds or None,
        key_metadata=data_file.key_metadata,
        split_offsets=tuple(data_file.split_offsets) if data_file.split_offsets else None,
        equality_ids=tuple(data_file.equality_ids) if data_file.equality_ids else None,
        sort_order_id=data_file.sort_order_id,
    )


def _file_record(version: FormatVersion, f: ContentFile) -> Record:
    values: list[Any] = [
        int(f.content), f.file_path, f.file_format, Record(*f.partition), f.record_count,
        f.file_size_in_bytes, f.column_sizes, f.value_counts, f.null_value_counts,
        f.nan_value_counts, f.lower_bounds, f.upper_bounds, f.key_metadata,
        list(f.split_offsets) if f.split_offsets is not None else None,
        list(f.equality_ids) if f.equality_ids is not None else None,
        f.sort_order_id,
    ]  # fmt: skip
    if version >= 3:
        values.append(f.first_row_id)
    values.append(f.referenced_data_file)
    if version >= 3:
        values += [f.content_offset, f.content_size_in_bytes]
    elif f.content_offset is not None or f.first_row_id is not None:
        raise ValueError(f"{f.file_path}: content_offset and first_row_id need format v3")
    return Record(*values)


def write_manifest(
    file_io: FileIO,
    path: str,
    *,
    version: FormatVersion,
    content: ManifestContent,
    spec: PartitionSpec,
    schema: Schema,
    snapshot_id: int,
    entries: Sequence[FileEntry],
) -> ListedManifest:
    """Write one manifest of ``entries`` at ``path``; returns its manifest-list record
    (``sequence_number`` None until ``write_manifest_list`` assigns this snapshot's)."""
    for entry in entries:
        is_data = entry.file.content == FileContent.DATA
        if is_data != (content == ManifestContent.DATA):
            raise ValueError(f"{entry.file.file_path}: {entry.file.content.name} in a {content.name} manifest")
        if entry.status != Status.ADDED and (entry.sequence_number is None or entry.snapshot_id is None):
            raise ValueError(f"{entry.file.file_path}: {entry.status.name} entry without its sequence numbers")
    partition_type = spec.partition_type(schema)
    file_schema = entry_schema(version, partition_type)
    metadata = {
        "schema": schema.model_dump_json(),
        "schema-id": str(schema.schema_id),
        "partition-spec": json.dumps(json.loads(spec.model_dump_json())["fields"]),
        "partition-spec-id": str(spec.spec_id),
        "format-version": str(version),
        "content": _CONTENT_NAMES[content],
        **_CODEC,
    }
    records = [
        Record(
            int(e.status),
            snapshot_id if e.status != Status.EXISTING else e.snapshot_id,
            e.sequence_number,
            e.file_sequence_number,
            _file_record(version, e.file),
        )
        for e in entries
    ]
    data = avro_bytes(file_schema, "manifest_entry", metadata, records)
    _store(file_io, path, data)
    return _listed(path, len(data), spec, schema, content, snapshot_id, entries)


def _listed(
    path: str,
    length: int,
    spec: PartitionSpec,
    schema: Schema,
    content: ManifestContent,
    snapshot_id: int,
    entries: Sequence[FileEntry],
) -> ListedManifest:
    def count(status: Status) -> tuple[int, int]:
        chosen = [e for e in entries if e.status == status]
        return len(chosen), sum(e.file.record_count for e in chosen)

    added, added_rows = count(Status.ADDED)
    existing, existing_rows = count(Status.EXISTING)
    deleted, deleted_rows = count(Status.DELETED)
    # ADDED entries without one get this snapshot's (None here), which is above every earlier
    # one: the min is over the known ones, and the snapshot's only when none is known. (A merged
    # manifest holds both: taking the snapshot's made readers that prune delete manifests by
    # the data manifests' min sequence number, pyiceberg among them, skip older deletes.)
    known = [e.sequence_number for e in entries if e.status != Status.DELETED and e.sequence_number is not None]
    min_seq = min(known) if known else None
    summaries = None
    if spec.fields:
        records = [Record(*e.file.partition) for e in entries if e.status != Status.DELETED]
        summaries = tuple(
            PartitionSummary(s.contains_null, s.contains_nan, s.lower_bound, s.upper_bound)
            for s in construct_partition_summaries(spec, schema, records)
        )
    return ListedManifest(
        manifest_path=path,
        manifest_length=length,
        partition_spec_id=spec.spec_id,
        content=content,
        sequence_number=None,
        min_sequence_number=min_seq,
        added_snapshot_id=snapshot_id,
        added_files_count=added,
        existing_files_count=existing,
        deleted_files_count=deleted,
        added_rows_count=added_rows,
        existing_rows_count=existing_rows,
        deleted_rows_count=deleted_rows,
        partitions=summaries if summaries is not None else (),
    )


def write_manifest_list(
    file_io: FileIO,
    path: str,
    *,
    version: FormatVersion,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    first_row_id: int | None,
    manifests: Iterable[ListedManifest],
) -> tuple[list[ListedManifest], int]:
    """Write the manifest list of a new snapshot.

    Assigns ``sequence_number`` to the manifests this snapshot wrote and, in v3, first row ids
    (from ``first_row_id``, the table's next-row-id) to data manifests without one. Returns
    the manifests as listed and the number of row ids assigned (the snapshot's ``added-rows``).
    """
    if version >= 3 and first_row_id is None:
        raise ValueError("a v3 manifest list needs the snapshot's first-row-id")
    listed: list[ListedManifest] = []
    next_row_id = first_row_id
    for manifest in manifests:
        if manifest.sequence_number is None:
            if manifest.added_snapshot_id != snapshot_id:
                raise ValueError(f"{manifest.manifest_path}: no sequence number, not written by this snapshot")
            manifest = replace(manifest, sequence_number=sequence_number)
        if manifest.min_sequence_number is None:
            manifest = replace(manifest, min_sequence_number=sequence_number)
        if version >= 3 and manifest.content == ManifestContent.DATA and manifest.first_row_id is None:
            assert next_row_id is not None
            manifest = replace(manifest, first_row_id=next_row_id)
            next_row_id += manifest.added_rows_count + manifest.existing_rows_count
        listed.append(manifest)
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": str(parent_snapshot_id) if parent_snapshot_id is not None else "null",
        "sequence-number": str(sequence_number),
        "format-version": str(version),
        **_CODEC,
    }
    if version >= 3:
        metadata["first-row-id"] = str(first_row_id)
    records = [_manifest_record(version, m) for m in listed]
    _store(file_io, path, avro_bytes(manifest_list_schema(version), "manifest_file", metadata, records))
    _remember_list(path, [_as_read(version, m) for m in listed])
    added_rows = (next_row_id - first_row_id) if next_row_id is not None and first_row_id is not None else 0
    return listed, added_rows


def _manifest_record(version: FormatVersion, m: ListedManifest) -> Record:
    partitions = (
        [Record(p.contains_null, p.contains_nan, p.lower_bound, p.upper_bound) for p in m.partitions]
        if m.partitions is not None
        else None
    )
    values: list[Any] = [
        m.manifest_path, m.manifest_length, m.partition_spec_id, int(m.content), m.sequence_number,
        m.min_sequence_number, m.added_snapshot_id, m.added_files_count, m.existing_files_count,
        m.deleted_files_count, m.added_rows_count, m.existing_rows_count, m.deleted_rows_count,
        partitions, m.key_metadata,
    ]  # fmt: skip
    if version >= 3:
        values.append(m.first_row_id if m.content == ManifestContent.DATA else None)
    return Record(*values)


# Manifest lists this process wrote or read, by path: a file is never rewritten (its name is
# unique), so the next commit on a table reads its parent's list from here, without a storage
# round trip. Bounded (least recently used first out); entries are frozen.
CACHED_MANIFEST_LISTS = 512
_lists: OrderedDict[str, tuple[ListedManifest, ...]] = OrderedDict()
_lists_lock = threading.Lock()


def _remember_list(path: str, manifests: Sequence[ListedManifest]) -> None:
    with _lists_lock:
        _lists[path] = tuple(manifests)
        _lists.move_to_end(path)
        while len(_lists) > CACHED_MANIFEST_LISTS:
            _lists.popitem(last=False)


def _as_read(version: FormatVersion, m: ListedManifest) -> ListedManifest:
    """``m`` as ``read_manifest_list`` decodes it from a list written at ``version``."""
    keeps_row_id = version >= 3 and m.content == ManifestContent.DATA
    return m if keeps_row_id or m.first_row_id is None else replace(m, first_row_id=None)


def read_manifest_list(file_io: FileIO, path: str) -> list[ListedManifest]:
    """The manifests a manifest list names (any writer, v2 or v3)."""
    with _lists_lock:
        cached = _lists.get(path)
        if cached is not None:
            _lists.move_to_end(path)
    if cached is not None:
        return list(cached)
    found = [_listed_from_record(r) for r in read_avro(file_io.new_input(path), manifest_list_schema(3))]
    _remember_list(path, found)
    return found


def _listed_from_record(r: Record) -> ListedManifest:
    partitions = (
        tuple(PartitionSummary(p[0], p[1], p[2], p[3]) for p in r[13]) if r[13] is not None else None
    )
    return ListedManifest(
        manifest_path=r[0], manifest_length=r[1], partition_spec_id=r[2],
        content=ManifestContent(r[3]), sequence_number=r[4], min_sequence_number=r[5],
        added_snapshot_id=r[6], added_files_count=r[7], existing_files_count=r[8],
        deleted_files_count=r[9], added_rows_count=r[10], existing_rows_count=r[11],
        deleted_rows_count=r[12], partitions=partitions, key_metadata=r[14], first_row_id=r[15],
    )  # fmt: skip


def read_manifest(
    file_io: FileIO, manifest: ListedManifest, spec: PartitionSpec, schema: Schema
) -> list[FileEntry]:
    """Every entry of ``manifest`` with inherited values filled in: snapshot id, sequence
    numbers (ADDED entries), and v3 first row ids of data files."""
    read_schema = entry_schema(3, spec.partition_type(schema))
    records = read_avro(file_io.new_input(manifest.manifest_path), read_schema)
    next_row_id = manifest.first_row_id
    entries = []
    for r in records:
        status = Status(r[0])
        file = _file_from_record(r[4])
        if next_row_id is not None and file.content == FileContent.DATA and file.first_row_id is None:
            file = replace(file, first_row_id=next_row_id)
            next_row_id += file.record_count
        inherit = status == Status.ADDED
        entries.append(
            FileEntry(
                status=status,
                file=file,
                snapshot_id=r[1] if r[1] is not None else manifest.added_snapshot_id,
                sequence_number=r[2] if r[2] is not None or not inherit else manifest.sequence_number,
                file_sequence_number=r[3] if r[3] is not None or not inherit else manifest.sequence_number,
            )
        )
    return entries


def _file_from_record(d: Record) -> ContentFile:
    partition = d[3]
    return ContentFile(
        content=FileContent(d[0]), file_path=d[1], file_format=str(d[2]).upper(),
        partition=tuple(partition[i] for i in range(len(partition))),
        record_count=d[4], file_size_in_bytes=d[5], column_sizes=d[6], value_counts=d[7],
        null_value_counts=d[8], nan_value_counts=d[9], lower_bounds=d[10], upper_bounds=d[11],
        key_metadata=d[12], split_offsets=tuple(d[13]) if d[13] is not None else None,
        equality_ids=tuple(d[14]) if d[14] is not None else None, sort_order_id=d[15],
        first_row_id=d[16], referenced_data_file=d[17], content_offset=d[18],
        content_size_in_bytes=d[19],
    )  # fmt: skip
