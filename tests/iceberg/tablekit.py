"""Small hand-built Iceberg tables for the producer tests (row deltas, rewrites).

Files are written with pyarrow under the table's data folder and described by
``replicator.iceberg.files``; the schema is ``(id long key, name string)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from replicator.iceberg.files import (
    data_file_from_parquet,
    equality_delete_arrow_schema,
    equality_delete_file_from_parquet,
    position_delete_arrow_schema,
    position_delete_file_from_parquet,
)

Row = tuple[int, str | None]

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    identifier_field_ids=[1],
)


def sql_catalog(tmp_path: Path) -> SqlCatalog:
    cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("db")
    return cat


def write_parquet(table: Table, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> str:
    """Write ``rows`` under the table's data folder; return the location used in manifests."""
    path = f"{table.location()}/data/{name}.parquet"
    with table.io.new_output(path).create() as stream:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), stream)
    return path


def data_file(table: Table, name: str, rows: list[Row]) -> DataFile:
    arrow = schema_to_pyarrow(table.schema())
    path = write_parquet(table, name, [{"id": i, "name": n} for i, n in rows], arrow)
    return data_file_from_parquet(table, path)


def pos_deletes(table: Table, name: str, positions: list[tuple[str, int]]) -> DataFile:
    rows = [{"file_path": p, "pos": pos} for p, pos in sorted(positions)]  # spec: sorted
    path = write_parquet(table, name, rows, position_delete_arrow_schema())
    return position_delete_file_from_parquet(table, path)


def eq_deletes(table: Table, name: str, ids: list[int]) -> DataFile:
    arrow = equality_delete_arrow_schema(table.schema(), [1])
    path = write_parquet(table, name, [{"id": i} for i in ids], arrow)
    return equality_delete_file_from_parquet(table, path, [1])


def id_name(rows: list[dict[str, Any]]) -> list[Row]:
    """Judge rows (dicts) as sorted ``(id, name)`` tuples."""
    return sorted((r["id"], r["name"]) for r in rows)


def manifest_entries(table: Table, manifest: ManifestFile) -> list[Any]:
    return manifest.fetch_manifest_entry(table.io, discard_deleted=True)


def file_count(table: Table, suffix: str) -> int:
    metadata_dir = Path(table.location().removeprefix("file://")) / "metadata"
    return sum(1 for p in metadata_dir.iterdir() if p.name.endswith(suffix))
