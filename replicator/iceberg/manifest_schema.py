"""The Avro schemas of Iceberg manifests and manifest lists (format v2 and v3), and our models of
their records.

Field ids, names, types and optionality follow the Iceberg table spec ("Manifests", "Manifest
Lists"); the Avro record names (``r2``, ``r102``, ``r508``) are the ones Iceberg Java writes.
v3 adds to ``data_file``: ``first_row_id`` (142, row lineage), ``content_offset`` (144) and
``content_size_in_bytes`` (145) (where a deletion vector sits in its Puffin file); and to the
manifest list: ``first_row_id`` (520). ``referenced_data_file`` (143) exists from v2 on.
``equality_ids`` is ``list<int>`` (pyiceberg 0.12 declares ``list<long>``, which Iceberg Java
cannot read back for equality delete entries).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

__all__ = [
    "ContentFile",
    "FileContent",
    "FileEntry",
    "FormatVersion",
    "ListedManifest",
    "ManifestContent",
    "PartitionSummary",
    "Status",
    "entry_schema",
    "manifest_list_schema",
]

FormatVersion = Literal[2, 3]


class Status(IntEnum):
    EXISTING = 0
    ADDED = 1
    DELETED = 2


class FileContent(IntEnum):
    DATA = 0
    POSITION_DELETES = 1
    EQUALITY_DELETES = 2


class ManifestContent(IntEnum):
    DATA = 0
    DELETES = 1


@dataclass(frozen=True)
class ContentFile:
    """One data or delete file, as a manifest's ``data_file`` struct describes it."""

    content: FileContent
    file_path: str
    file_format: str  # PARQUET, AVRO, ORC, PUFFIN
    partition: tuple[Any, ...]  # in the partition spec's field order
    record_count: int
    file_size_in_bytes: int
    column_sizes: dict[int, int] | None = None
    value_counts: dict[int, int] | None = None
    null_value_counts: dict[int, int] | None = None
    nan_value_counts: dict[int, int] | None = None
    lower_bounds: dict[int, bytes] | None = None
    upper_bounds: dict[int, bytes] | None = None
    key_metadata: bytes | None = None
    split_offsets: tuple[int, ...] | None = None
    equality_ids: tuple[int, ...] | None = None
    sort_order_id: int | None = None
    first_row_id: int | None = None  # v3
    referenced_data_file: str | None = None
    content_offset: int | None = None  # v3
    content_size_in_bytes: int | None = None  # v3


@dataclass(frozen=True)
class FileEntry:
    """A manifest entry. Written with ``None`` sequence numbers (and snapshot id), it inherits
    them from the manifest list; read entries have them filled in."""

    status: Status
    file: ContentFile
    snapshot_id: int | None = None
    sequence_number: int | None = None  # the data sequence number
    file_sequence_number: int | None = None


@dataclass(frozen=True)
class PartitionSummary:
    contains_null: bool
    contains_nan: bool | None
    lower_bound: bytes | None
    upper_bound: bytes | None


@dataclass(frozen=True)
class ListedManifest:
    """A manifest list's record of one manifest (``sequence_number`` None: this snapshot's)."""

    manifest_path: str
    manifest_length: int
    partition_spec_id: int
    content: ManifestContent
    sequence_number: int | None
    min_sequence_number: int | None
    added_snapshot_id: int
    added_files_count: int
    existing_files_count: int
    deleted_files_count: int
    added_rows_count: int
    existing_rows_count: int
    deleted_rows_count: int
    partitions: tuple[PartitionSummary, ...] | None = None
    key_metadata: bytes | None = None
    first_row_id: int | None = None  # v3, data manifests only

    def has_live_files(self) -> bool:
        return self.added_files_count > 0 or self.existing_files_count > 0


def _map(field_id: int, name: str, key_id: int, value_type: Any) -> NestedField:
    value_id = key_id + 1
    map_type = MapType(key_id, IntegerType(), value_id, value_type, value_required=True)
    return NestedField(field_id, name, map_type, required=False)


def data_file_type(version: FormatVersion, partition_type: StructType) -> StructType:
    """The ``data_file`` struct of a manifest entry (ids 100-145)."""
    fields = [
        NestedField(134, "content", IntegerType(), required=True),
        NestedField(100, "file_path", StringType(), required=True),
        NestedField(101, "file_format", StringType(), required=True),
        NestedField(102, "partition", partition_type, required=True),
        NestedField(103, "record_count", LongType(), required=True),
        NestedField(104, "file_size_in_bytes", LongType(), required=True),
        _map(108, "column_sizes", 117, LongType()),
        _map(109, "value_counts", 119, LongType()),
        _map(110, "null_value_counts", 121, LongType()),
        _map(137, "nan_value_counts", 138, LongType()),
        _map(125, "lower_bounds", 126, BinaryType()),
        _map(128, "upper_bounds", 129, BinaryType()),
        NestedField(131, "key_metadata", BinaryType(), required=False),
        NestedField(132, "split_offsets", ListType(133, LongType(), True), required=False),
        NestedField(135, "equality_ids", ListType(136, IntegerType(), True), required=False),
        NestedField(140, "sort_order_id", IntegerType(), required=False),
    ]
    if version >= 3:
        fields.append(NestedField(142, "first_row_id", LongType(), required=False))
    fields.append(NestedField(143, "referenced_data_file", StringType(), required=False))
    if version >= 3:
        fields.append(NestedField(144, "content_offset", LongType(), required=False))
        fields.append(NestedField(145, "content_size_in_bytes", LongType(), required=False))
    return StructType(*fields)


@functools.cache
def entry_schema(version: FormatVersion, partition_type: StructType) -> Schema:
    """The ``manifest_entry`` schema of a manifest of ``version`` for ``partition_type``."""
    return Schema(
        NestedField(0, "status", IntegerType(), required=True),
        NestedField(1, "snapshot_id", LongType(), required=False),
        NestedField(3, "sequence_number", LongType(), required=False),
        NestedField(4, "file_sequence_number", LongType(), required=False),
        NestedField(2, "data_file", data_file_type(version, partition_type), required=True),
    )


_PARTITION_SUMMARY = StructType(
    NestedField(509, "contains_null", BooleanType(), required=True),
    NestedField(518, "contains_nan", BooleanType(), required=False),
    NestedField(510, "lower_bound", BinaryType(), required=False),
    NestedField(511, "upper_bound", BinaryType(), required=False),
)


@functools.cache
def manifest_list_schema(version: FormatVersion) -> Schema:
    """The ``manifest_file`` schema of a manifest list of ``version``."""
    fields = [
        NestedField(500, "manifest_path", StringType(), required=True),
        NestedField(501, "manifest_length", LongType(), required=True),
        NestedField(502, "partition_spec_id", IntegerType(), required=True),
        NestedField(517, "content", IntegerType(), required=True),
        NestedField(515, "sequence_number", LongType(), required=True),
        NestedField(516, "min_sequence_number", LongType(), required=True),
        NestedField(503, "added_snapshot_id", LongType(), required=True),
        NestedField(504, "added_files_count", IntegerType(), required=True),
        NestedField(505, "existing_files_count", IntegerType(), required=True),
        NestedField(506, "deleted_files_count", IntegerType(), required=True),
        NestedField(512, "added_rows_count", LongType(), required=True),
        NestedField(513, "existing_rows_count", LongType(), required=True),
        NestedField(514, "deleted_rows_count", LongType(), required=True),
        NestedField(507, "partitions", ListType(508, _PARTITION_SUMMARY, True), required=False),
        NestedField(519, "key_metadata", BinaryType(), required=False),
    ]
    if version >= 3:
        fields.append(NestedField(520, "first_row_id", LongType(), required=False))
    return Schema(*fields)
