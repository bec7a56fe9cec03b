"""Describe Parquet files that were already written as pyiceberg ``DataFile`` entries.

The engine writes data, position-delete and equality-delete Parquet files itself (from Arrow
schemas that carry Iceberg field ids, see the ``*_arrow_schema`` helpers), then commits them with
``replicator.iceberg.row_delta.commit_row_delta``. This module reads only each file's Parquet
footer to build the manifest entry: record count, size, and per-column value counts, null counts
and lower/upper bounds, honouring the table's ``write.metadata.metrics.*`` properties.

Columns are matched to Iceberg fields by the field ids stored in the Parquet schema, never by
name, so a file written before a column rename is still described correctly.

Partitions: each file is described under the spec it was written with (``spec_id``, default:
the table's default spec) and its partition tuple (``partition``, the transformed values in
the spec's field order, as the fan-out writer reports them). Equality deletes are written
under an UNPARTITIONED spec of the table, whatever its default (``partitions.global_spec_id``):
Iceberg applies those to every partition, so a delete reaches a row that moved.

pyiceberg 0.12 internals used (all in ``pyiceberg.io.pyarrow``): ``compute_statistics_plan``,
``parquet_path_to_id_mapping``, ``data_file_statistics_from_parquet_metadata`` and
``DataFileStatistics.to_serialized_dict`` (``pyiceberg.io.fileformat``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import Table, TableProperties
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, PrimitiveType, StringType

from ops_mapping.contract import POSITION_DELETE_FILE_PATH_ID, POSITION_DELETE_POS_ID
from replicator.retry import call_with_retries
from replicator.storage.partitioning import PartitionKey

__all__ = [
    "POSITION_DELETE_FILE_PATH_ID",
    "POSITION_DELETE_POS_ID",
    "POSITION_DELETE_SCHEMA",
    "data_file_from_parquet",
    "equality_delete_arrow_schema",
    "equality_delete_file_from_parquet",
    "equality_delete_schema",
    "position_delete_arrow_schema",
    "position_delete_file_from_parquet",
]


POSITION_DELETE_SCHEMA = Schema(
    NestedField(POSITION_DELETE_FILE_PATH_ID, "file_path", StringType(), required=True),
    NestedField(POSITION_DELETE_POS_ID, "pos", LongType(), required=True),
)

# Iceberg Java (MetricsConfig.forPositionDelete) always keeps full metrics for file_path and pos:
# untruncated file_path bounds let readers match a delete file to the one data file it targets.
_POSITION_DELETE_METRICS = {TableProperties.DEFAULT_WRITE_METRICS_MODE: "full"}


def position_delete_arrow_schema() -> pa.Schema:
    """Arrow schema (with Parquet field ids) that position-delete writers must use.

    Rows must be sorted by ``file_path`` then ``pos`` (a requirement of the Iceberg spec).
    """
    return schema_to_pyarrow(POSITION_DELETE_SCHEMA)


def equality_delete_schema(table_schema: Schema, field_ids: Iterable[int]) -> Schema:
    """The Iceberg schema of an equality-delete file keyed on ``field_ids``."""
    ids = _check_equality_ids(table_schema, field_ids)
    return prune_columns(table_schema, set(ids), select_full_types=False)


def equality_delete_arrow_schema(table_schema: Schema, field_ids: Iterable[int]) -> pa.Schema:
    """Arrow schema (with Parquet field ids) for an equality-delete file keyed on ``field_ids``.

    The columns keep the table's field ids, names, types and nullability, in table order.
    """
    return schema_to_pyarrow(equality_delete_schema(table_schema, field_ids))


def data_file_from_parquet(
    table: Table,
    path: str,
    *,
    file_size: int | None = None,
    spec_id: int | None = None,
    partition: PartitionKey = (),
    footer: pq.FileMetaData | None = None,
) -> DataFile:
    """Describe a Parquet data file written with the table's field ids.

    Args:
        table: the target table (its current schema, properties and default spec are used).
        path: the file's location as it must appear in the manifest (same URI scheme as the table).
        file_size: the file's size in bytes when the caller knows it; saves a ``stat`` call.
        spec_id: the partition spec it was written with (default: the table's default spec).
        partition: its partition tuple in that spec (empty for an unpartitioned spec).
        footer: the file's footer as its writer wrote it (with ``file_size``: nothing is read).
    """
    return _describe(
        table,
        path,
        content=DataFileContent.DATA,
        stats_schema=table.schema(),
        properties=table.metadata.properties,
        file_size=file_size,
        spec_id=spec_id,
        partition=partition,
        footer=footer,
    )


def position_delete_file_from_parquet(
    table: Table,
    path: str,
    *,
    file_size: int | None = None,
    spec_id: int | None = None,
    partition: PartitionKey = (),
    footer: pq.FileMetaData | None = None,
) -> DataFile:
    """Describe a Parquet position-delete file (columns ``file_path``, ``pos``).

    Metrics for both columns are always full, so a file whose rows all reference one data file
    gets ``lower_bound == upper_bound == that data file's path`` for ``file_path``; readers
    (Iceberg Java's ``ContentFileUtil.referencedDataFile``) use that to apply it to that file only.
    ``spec_id`` and ``partition`` must be those of the data files it names.
    """
    return _describe(
        table,
        path,
        content=DataFileContent.POSITION_DELETES,
        stats_schema=POSITION_DELETE_SCHEMA,
        properties=_POSITION_DELETE_METRICS,
        file_size=file_size,
        required_ids=[POSITION_DELETE_FILE_PATH_ID, POSITION_DELETE_POS_ID],
        spec_id=spec_id,
        partition=partition,
        footer=footer,
    )


def equality_delete_file_from_parquet(
    table: Table,
    path: str,
    equality_field_ids: list[int],
    *,
    file_size: int | None = None,
    spec_id: int | None = None,
    footer: pq.FileMetaData | None = None,
) -> DataFile:
    """Describe a Parquet equality-delete file whose rows delete by ``equality_field_ids``.

    The file must contain every equality column (with the table's field ids); statistics follow
    the table's metrics configuration, as Iceberg Java does for equality deletes.
    ``spec_id`` must name an unpartitioned spec (default: the table's default spec, which
    must then be unpartitioned): such deletes apply in every partition.
    """
    ids = _check_equality_ids(table.schema(), equality_field_ids)
    return _describe(
        table,
        path,
        content=DataFileContent.EQUALITY_DELETES,
        stats_schema=table.schema(),
        properties=table.metadata.properties,
        file_size=file_size,
        required_ids=ids,
        equality_ids=ids,
        spec_id=spec_id,
        footer=footer,
    )


def _check_equality_ids(table_schema: Schema, field_ids: Iterable[int]) -> list[int]:
    ids = list(field_ids)
    if not ids:
        raise ValueError("An equality delete needs at least one equality field id")
    if len(set(ids)) != len(ids):
        raise ValueError(f"Duplicate equality field ids: {ids}")
    for field_id in ids:
        field = table_schema.find_field(field_id)  # raises ValueError for unknown ids
        if not isinstance(field.field_type, PrimitiveType):
            raise ValueError(f"Equality field {field.name} (id {field_id}) is not a primitive type")
    return ids


def _describe(
    table: Table,
    path: str,
    *,
    content: DataFileContent,
    stats_schema: Schema,
    properties: Mapping[str, str],
    file_size: int | None,
    required_ids: list[int] | None = None,
    equality_ids: list[int] | None = None,
    spec_id: int | None = None,
    partition: PartitionKey = (),
    footer: pq.FileMetaData | None = None,
) -> DataFile:
    metadata = table.metadata
    spec_id = metadata.default_spec_id if spec_id is None else spec_id
    spec = metadata.specs().get(spec_id)
    if spec is None:
        raise ValueError(f"{path}: table {'.'.join(table.name())} has no partition spec {spec_id}")
    if len(partition) != len(spec.fields):
        raise ValueError(
            f"{path}: partition {partition!r} does not fit spec {spec_id} of "
            f"{'.'.join(table.name())} ({len(spec.fields)} field(s))"
        )
    if equality_ids and spec.fields:
        raise ValueError(
            f"{path}: equality deletes must be written under an unpartitioned spec (spec "
            f"{spec_id} of {'.'.join(table.name())} is partitioned; they would reach only "
            "their own partition)"
        )

    input_file = table.io.new_input(path)

    def read_footer() -> pq.FileMetaData:
        with input_file.open() as stream:
            return pq.read_metadata(stream)

    parquet_metadata = (
        footer if footer is not None
        else call_with_retries(read_footer, what=f"reading the footer of {path}")
    )  # fmt: skip

    file_schema, column_mapping = _file_schema(parquet_metadata, path, metadata.format_version)
    file_ids = file_schema.field_ids
    for field_id in file_ids:
        try:
            stats_schema.find_field(field_id)
        except ValueError:
            raise ValueError(
                f"{path}: column with field id {field_id} "
                f"({file_schema.find_column_name(field_id)}) is not in the expected schema"
            ) from None
    if missing := [i for i in required_ids or [] if i not in file_ids]:
        raise ValueError(f"{path}: required field ids {missing} are missing from the file")

    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=parquet_metadata,
        stats_columns=_statistics_plan(stats_schema, properties),
        # Map Parquet column paths through the file's own names and ids: robust to renames.
        parquet_column_mapping=column_mapping,
    )
    data_file = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition),
        file_size_in_bytes=file_size if file_size is not None else len(input_file),
        # Position deletes are sorted by (file_path, pos), not by a table sort order; the engine
        # does not promise a sort order for the other kinds either.
        sort_order_id=None,
        equality_ids=equality_ids,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    # spec_id is not a manifest field (readers inherit it from the manifest), so from_args
    # ignores it; set it explicitly for code that groups files by spec.
    data_file.spec_id = spec_id
    return data_file


# The per-schema work of describing a file, done once per schema: a batch describes a few
# files of each of its tables, all with the same few schemas. Keyed by the Arrow schema's IPC
# bytes (field ids included) and by schema identity (the cached Schema is kept, so its id
# stays its own); bounded, cleared when full.
_CACHED_SCHEMAS = 256
_file_schemas: dict[tuple[bytes, int], tuple[Schema, dict[str, int]]] = {}
_plans: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[Schema, dict[int, StatisticsCollector]]] = {}


def _statistics_plan(schema: Schema, properties: Mapping[str, str]) -> dict[int, StatisticsCollector]:
    """``compute_statistics_plan(schema, properties)``, computed once per schema and properties."""
    key = (id(schema), tuple(sorted(properties.items())))
    hit = _plans.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    plan = compute_statistics_plan(schema, dict(properties))
    if len(_plans) >= _CACHED_SCHEMAS:
        _plans.clear()
    _plans[key] = (schema, plan)
    return plan


def _file_schema(parquet_metadata: pq.FileMetaData, path: str, format_version: int) -> tuple[Schema, dict[str, int]]:
    """The file's Iceberg schema (by its field ids) and its Parquet column paths' field ids."""
    arrow_schema = parquet_metadata.schema.to_arrow_schema()
    key = (arrow_schema.serialize().to_pybytes(), format_version)
    hit = _file_schemas.get(key)
    if hit is not None:
        return hit
    try:
        schema = pyarrow_to_schema(arrow_schema, format_version=format_version)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(
            f"{path}: Parquet schema lacks Iceberg field ids; write it with an Arrow schema from "
            "pyiceberg.io.pyarrow.schema_to_pyarrow (or the helpers in this module)"
        ) from exc
    found = (schema, parquet_path_to_id_mapping(schema))
    if len(_file_schemas) >= _CACHED_SCHEMAS:
        _file_schemas.clear()
    _file_schemas[key] = found
    return found
