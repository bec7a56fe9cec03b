"""Commit table updates under requirements through the table's catalog, with public pyiceberg
calls only (``Catalog.commit_table``), instead of a ``Transaction``'s private staging.

Format-v3 metadata, which pyiceberg 0.12 refuses to write, goes through ``v3_metadata`` unless
the catalog is our ``FastCommitSqlCatalog`` (which writes it itself). After the commit the
metadata files the new metadata log no longer lists are deleted when the table says so
(``write.metadata.delete-after-commit.enabled``), as Iceberg Java (and pyiceberg's own
``Transaction``) do; the ``Table`` object is advanced to the committed metadata.
"""

from __future__ import annotations

import contextlib

from pyiceberg.table import Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.utils.properties import property_as_bool

from replicator.iceberg.catalog import unwrapped
from replicator.iceberg.sql_commit import FastCommitSqlCatalog
from replicator.iceberg.v3_metadata import commit_v3

__all__ = ["commit_table_updates", "delete_files"]


def commit_table_updates(
    table: Table, updates: tuple[TableUpdate, ...], requirements: tuple[TableRequirement, ...]
) -> Table:
    """Commit ``updates`` if ``requirements`` hold; ``table`` is advanced and returned.
    The catalog's ``CommitFailedException`` / ``CommitStateUnknownException`` propagate."""
    inner = unwrapped(table.catalog)
    if table.metadata.format_version >= 3 and not isinstance(inner, FastCommitSqlCatalog):
        metadata, location = commit_v3(table, requirements, updates, inner)
    else:
        response = table.catalog.commit_table(table, requirements, updates)
        metadata, location = response.metadata, response.metadata_location
    _delete_old_metadata(table, table.metadata, metadata)
    table.metadata = metadata
    table.metadata_location = location
    return table


def _delete_old_metadata(table: Table, base: TableMetadata, metadata: TableMetadata) -> None:
    if not property_as_bool(
        metadata.properties,
        TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED,
        TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT,
    ):
        return
    kept = {log.metadata_file for log in metadata.metadata_log}
    delete_files(table, sorted({log.metadata_file for log in base.metadata_log} - kept))


def delete_files(table: Table, paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(Exception):  # best effort: orphan cleanup catches the rest
            table.io.delete(path)
