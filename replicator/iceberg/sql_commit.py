"""A cheaper commit path for pyiceberg's SQL catalog (the default catalog of the engine).

Each ``SqlCatalog.commit_table`` re-reads and re-parses the table's current metadata file and
ends by deep-copying the updated metadata (``update_table_metadata``'s defensive copy): with
the snapshots a table keeps, that was about half of a small commit (100 commits of one data
file on a table of ~130 snapshots: 38 ms each; the parse 5.6 ms, the copy 12.6 ms).

Both are safe to skip, and so is the catalog's SELECT of the table's row before the UPDATE
(``commit_table``): when the caller's table is at a metadata file this catalog has parsed, the
requirements are checked against that file's metadata and the row is updated under the same
compare-and-swap pyiceberg uses (``WHERE metadata_location = <the base's>``, through a plain
connection, not an ORM session); if the row moved, nothing is changed and pyiceberg's own path
(load, check, swap) decides, so every outcome is the one pyiceberg's ``commit_table`` gives.

A SQLite catalog file is switched to write-ahead-log mode (``journal_mode=WAL``, kept in the
file): in its default rollback-journal mode every commit creates, syncs and deletes a journal
file beside the database, 0.5-2 ms of each table's commit (100 tables' commits of a mixed
batch: 0.62 s against 0.43 s under /tmp, 0.44 against 0.39 under /var/tmp, ``python -m
benchmarks.catalog_journal``). Every commit is still synced before it returns
(``synchronous`` stays FULL): the source is acknowledged only after it. Readers and writers
in other processes on the same machine keep working (SQLite's WAL); a file that cannot
switch (locked by another process, a read-only or network filesystem) stays as it is, with
a warning.

A metadata file is never rewritten (each commit writes a new one), so its parsed
``TableMetadata`` is cached by location, seeded by the commit that writes it. And metadata
models are immutable (pyiceberg builds new ones with ``model_copy(update=...)``), so the
updated metadata may share parts with the base instead of being a deep copy. A subclass of
``SqlCatalog`` (``FastCommitSqlCatalog``) overrides these steps and ``commit_table``; every
other catalog is left as it is. Format-v3 metadata, which pyiceberg 0.12 reads but refuses to write, is
written by ``v3_metadata``, so every commit of a v3 table (creation, schema and property
changes) works on this catalog.

pyiceberg internals overridden or used (pinned in ``tests/iceberg/test_pyiceberg_internals.py``):
``SqlCatalog._convert_orm_to_iceberg``, ``_write_metadata``, ``_update_and_stage_table``,
``_parse_metadata_version``; ``update._apply_table_update``,
``_TableMetadataUpdateContext`` and ``_update_table_metadata_log``.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from datetime import datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis
from sqlalchemy import Engine, bindparam
from sqlalchemy import update as sql_update

from replicator.iceberg.v3_metadata import with_next_row_id, write_v3_metadata

log = logging.getLogger(__name__)

# Parsed metadata files kept per catalog (a few per table the engine writes).
CACHED_METADATA_FILES = 256


# pyiceberg's UPDATE of a table's row in ``SqlCatalog.commit_table`` (supports_sane_rowcount).
_SWAP = (
    sql_update(IcebergTables)
    .where(
        IcebergTables.catalog_name == bindparam("catalog"),
        IcebergTables.table_namespace == bindparam("namespace"),
        IcebergTables.table_name == bindparam("table"),
        IcebergTables.metadata_location == bindparam("expected"),
    )
    .values(metadata_location=bindparam("new"), previous_metadata_location=bindparam("expected"))
)


class FastCommitSqlCatalog(SqlCatalog):
    """pyiceberg's ``SqlCatalog`` with the cached parse and the copy-free update (module
    docstring); ``catalog.open_catalog`` opens a SQL catalog as this class."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._parsed: OrderedDict[str, TableMetadata] = OrderedDict()
        use_write_ahead_log(self.engine)

    def _remember(self, location: str, metadata: TableMetadata) -> None:
        self._parsed[location] = metadata
        self._parsed.move_to_end(location)
        while len(self._parsed) > CACHED_METADATA_FILES:
            self._parsed.popitem(last=False)

    def _convert_orm_to_iceberg(self, orm_table: Any) -> Table:
        location = orm_table.metadata_location
        metadata = self._parsed.get(location) if location else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)
            self._remember(table.metadata_location, table.metadata)
            return table
        self._parsed.move_to_end(location)
        return Table(
            identifier=(*self.identifier_to_tuple(orm_table.table_namespace), orm_table.table_name),
            metadata=metadata,
            metadata_location=location,
            io=load_file_io({**self.properties, **metadata.properties}, location),
            catalog=self,
        )

    # pyiceberg's is a staticmethod; ours needs the instance's cache (callers use self.).
    def _write_metadata(self, metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:  # type: ignore[override]
        if metadata.format_version >= 3:  # pyiceberg 0.12 refuses to serialize v3 metadata
            # and leaves a new table's next-row-id unset, which stops row ids advancing
            metadata = with_next_row_id(metadata)
            write_v3_metadata(io, metadata_path, metadata)
        else:
            super()._write_metadata(metadata, io, metadata_path)
        self._remember(metadata_path, metadata)

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """pyiceberg's ``commit_table`` without its SELECT when ``table`` is at a metadata file
        this catalog has parsed (module docstring); otherwise, or when the row moved, pyiceberg's."""
        location = table.metadata_location
        base = self._parsed.get(location) if location else None
        if base is None or not self.engine.dialect.supports_sane_rowcount:
            return super().commit_table(table, requirements, updates)
        current = Table(identifier=table.name(), metadata=base, metadata_location=location,
                        io=table.io, catalog=self)  # fmt: skip
        try:
            staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        except CommitFailedException:
            return super().commit_table(table, requirements, updates)  # the base may be stale
        if staged.metadata == base:  # nothing to change: pyiceberg answers with the current row's
            return super().commit_table(table, requirements, updates)
        self._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
        if self._swap(table, location, staged.metadata_location):
            return CommitTableResponse.model_validate(
                {"metadata": staged.metadata, "metadata-location": staged.metadata_location}
            )
        with contextlib.suppress(Exception):  # never referenced (the row had moved); best effort
            staged.io.delete(staged.metadata_location)
        return super().commit_table(table, requirements, updates)

    def _swap(self, table: Table, expected: str, new: str) -> bool:
        """pyiceberg's compare-and-swap of the table's row (the same UPDATE, through a plain
        connection instead of an ORM session): whether the row was at ``expected``."""
        identifier = table.name()
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        with self.engine.connect() as connection, connection.begin() as transaction:
            result = connection.execute(
                _SWAP,
                {
                    "catalog": self.name,
                    "namespace": namespace,
                    "table": Catalog.table_name_from(identifier),
                    "expected": expected,
                    "new": new,
                },
            )
            if result.rowcount < 1:
                transaction.rollback()
                return False
        return True

    def _update_and_stage_table(
        self,
        current_table: Table | None,
        table_identifier: Any,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        if current_table is None:  # a new table: pyiceberg's validated path
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = updated_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=load_file_io({**self.properties, **metadata.properties}, location),
            catalog=self,
        )


def use_write_ahead_log(engine: Engine) -> str | None:
    """Switch a SQLite catalog file to WAL mode (module docstring); the journal mode it is in
    after, or None for another database or an in-memory one."""
    if engine.dialect.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return None
    try:
        with engine.connect() as connection:
            mode = str(connection.exec_driver_sql("PRAGMA journal_mode=WAL").scalar()).lower()
    except Exception as exc:  # locked, read-only: the catalog works as it is
        log.warning("the SQLite catalog %s stays in its journal mode (WAL refused: %s)",
                    engine.url.database, exc)  # fmt: skip
        return None
    if mode != "wal":
        log.warning("the SQLite catalog %s stays in journal mode %s (WAL refused)", engine.url.database, mode)
    return mode


def updated_metadata(base: TableMetadata, updates: tuple[TableUpdate, ...], location: str) -> TableMetadata:
    """What pyiceberg's ``update_table_metadata(base, updates, metadata_location=location)``
    gives, without its final deep copy."""
    metadata, changed = apply_updates(base, updates)
    if changed:
        metadata = _update_table_metadata_log(metadata, location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            now = datetime_to_millis(datetime.now().astimezone())
            metadata = metadata.model_copy(update={"last_updated_ms": now})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


def apply_updates(base: TableMetadata, updates: tuple[TableUpdate, ...]) -> tuple[TableMetadata, bool]:
    """``base`` with ``updates`` applied by pyiceberg's own per-update rules, and whether any
    of them changed something (no clock, no metadata log, no copy)."""
    context = _TableMetadataUpdateContext()
    metadata = base
    for update in updates:
        metadata = _apply_table_update(update, metadata, context)
    return metadata, context.has_changes()
