"""Format-v3 table metadata through pyiceberg 0.12's SQL catalog, which reads v3 but refuses to
write it (``TableMetadataV3.model_dump_json`` raises, apache/iceberg-python#1551).

* ``metadata_json``: v3 metadata serialized by the serializer every other pyiceberg metadata
  model uses (``IcebergBaseModel.model_dump_json``: aliases, no nulls); the v3 fields pyiceberg
  models (``next-row-id``, snapshots' ``first-row-id``/``added-rows``) come out as the spec
  names them. Independent readers (Iceberg Java, DuckDB) check the result in the tests.
* ``create_v3_table``: new metadata by pyiceberg's public ``new_table_metadata``, written here,
  then ``register_table`` (public).
* ``commit_v3``: what ``SqlCatalog.commit_table`` does (validate the requirements against the
  current metadata, apply the updates with the public ``update_table_metadata``, write the next
  metadata file, swap the catalog row only if it still names the metadata the updates were
  validated against), with our serializer. Other catalogs (REST: the server writes the
  metadata) get ``commit_table`` itself.
"""

from __future__ import annotations

import re
import uuid

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, TableMetadataV3, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import TableRequirement, TableUpdate, update_table_metadata
from pyiceberg.typedef import IcebergBaseModel, Identifier
from sqlalchemy import update
from sqlalchemy.orm import Session

__all__ = ["commit_v3", "create_v3_table", "metadata_json", "with_next_row_id", "write_v3_metadata"]

_VERSION = re.compile(r"(\d+)-[^/]*\.metadata\.json$")


def metadata_json(metadata: TableMetadata) -> str:
    """The metadata file's JSON (any format version)."""
    return IcebergBaseModel.model_dump_json(metadata)


def with_next_row_id(metadata: TableMetadata) -> TableMetadata:
    """v3 metadata without a ``next-row-id`` (pyiceberg's new metadata leaves it unset) with
    0: no row ids assigned yet. pyiceberg advances it on a snapshot only when it is set."""
    if isinstance(metadata, TableMetadataV3) and metadata.next_row_id is None:
        return metadata.model_copy(update={"next_row_id": 0})
    return metadata


def write_v3_metadata(file_io: FileIO, location: str, metadata: TableMetadata) -> None:
    """Write a metadata file (any format version; see ``with_next_row_id``)."""
    metadata = with_next_row_id(metadata)
    with file_io.new_output(location).create(overwrite=False) as stream:
        stream.write(metadata_json(metadata).encode())


_write = write_v3_metadata


def create_v3_table(
    catalog: Catalog,
    identifier: str | Identifier,
    schema: Schema,
    *,
    location: str,
    partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
    properties: dict[str, str] | None = None,
) -> Table:
    """Create a format-version 3 table at ``location`` and register it in ``catalog``."""
    metadata = new_table_metadata(
        schema, partition_spec, UNSORTED_SORT_ORDER, location.rstrip("/"),
        {**(properties or {}), "format-version": "3"},
    )  # fmt: skip
    # pyiceberg leaves next-row-id unset; v3 requires it (no row ids assigned yet: 0).
    metadata = metadata.model_copy(update={"next_row_id": 0})
    provider = load_location_provider(metadata.location, metadata.properties)
    metadata_location = provider.new_table_metadata_file_location(0)
    _write(load_file_io({**catalog.properties, **metadata.properties}, metadata.location), metadata_location, metadata)
    return catalog.register_table(identifier, metadata_location)


def commit_v3(
    table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...],
    sql: Catalog,
) -> tuple[TableMetadata, str]:
    """Commit ``updates`` under ``requirements``; returns the new metadata and its location.

    ``CommitFailedException`` when a requirement fails or another writer swapped the metadata
    first (nothing of ours is referenced then).
    """
    catalog = table.catalog  # ``sql``: the pyiceberg catalog behind it (catalog.unwrapped)
    if not isinstance(sql, SqlCatalog):
        response = catalog.commit_table(table, requirements, updates)
        return response.metadata, response.metadata_location
    current = catalog.load_table(table.name())
    for requirement in requirements:
        requirement.validate(current.metadata)
    metadata = update_table_metadata(
        current.metadata, updates, metadata_location=current.metadata_location
    )
    match = _VERSION.search(current.metadata_location)
    version = int(match.group(1)) + 1 if match else 1
    provider = load_location_provider(metadata.location, metadata.properties)
    location = provider.new_table_metadata_file_location(version)
    if location == current.metadata_location:  # pragma: no cover - uuid per file
        location = location.replace(".metadata.json", f"-{uuid.uuid4()}.metadata.json")
    _write(table.io, location, metadata)
    namespace = Catalog.namespace_to_string(Catalog.namespace_from(table.name()))
    with Session(sql.engine) as session:
        result = session.execute(
            update(IcebergTables)
            .where(
                IcebergTables.catalog_name == sql.name,
                IcebergTables.table_namespace == namespace,
                IcebergTables.table_name == Catalog.table_name_from(table.name()),
                IcebergTables.metadata_location == current.metadata_location,
            )
            .values(
                metadata_location=location, previous_metadata_location=current.metadata_location
            )
        )
        if result.rowcount < 1:  # type: ignore[attr-defined]
            session.rollback()
            table.io.delete(location)  # ours, and referenced by nothing
            raise CommitFailedException(f"table {'.'.join(table.name())} moved during the commit")
        session.commit()
    return metadata, location
