"""Iceberg tables for source tables: catalog access, creation and schema evolution.

The engine's checkpoint also lives in the table (``replicator.checkpoint``), committed with
the data it describes; reading and writing it is ``replicator.checkpoint``'s job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from replicator.config import IcebergConfig
from replicator.errors import ConfigError, SchemaChangeError
from replicator.events.model import TableSchema
from replicator.events.types import can_promote, parse_decimal
from replicator.iceberg.catalog import (
    open_catalog as open_catalog,  # re-exported: callers import it from here
)
from replicator.iceberg.partitions import ensure_global_spec, set_partition_spec, set_sort_order

log = logging.getLogger(__name__)

SOURCE_TABLE_PROPERTY = "replicator.source-table"

# Metadata files (metadata.json) kept besides the current one; older ones are deleted on commit.
METADATA_PREVIOUS_VERSIONS_MAX = 20

# Set on tables the engine creates, and added to existing tables that lack them when loaded (a
# value the user set is kept): without them every commit's metadata.json stays forever.
HYGIENE_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_PREVIOUS_VERSIONS_MAX),
}

TABLE_PROPERTIES = {
    **HYGIENE_PROPERTIES,
    "format-version": "2",
    # Row-level changes are written as delete files (merge-on-read), never by rewriting.
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
}

_SIMPLE: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamptz": TimestamptzType(),
    "string": StringType(),
    "binary": BinaryType(),
}


def iceberg_type(type_: str) -> IcebergType:
    if type_ in _SIMPLE:
        return _SIMPLE[type_]
    dec = parse_decimal(type_)
    if dec is None:
        raise ValueError(f"unknown column type {type_!r}")
    return DecimalType(*dec)


# By class: each of those types has no parameters (a pydantic ``==`` per entry cost ~4 us, 16
# lookups per table per batch).
_ENGINE_NAMES = {type(it): name for name, it in _SIMPLE.items()}


def engine_type(t: IcebergType) -> str:
    """The inverse of ``iceberg_type`` for the types the engine writes."""
    if isinstance(t, DecimalType):
        return f"decimal({t.precision},{t.scale})"
    name = _ENGINE_NAMES.get(type(t))
    if name is None:
        raise ValueError(f"Iceberg type {t} is not one the engine writes")
    return name


def iceberg_table_name(cfg: IcebergConfig, source_table: str) -> str:
    """``<namespace>.<table>`` where ``<table>`` is the source table's last name component
    (``public.orders`` -> ``cdc.orders``), unless ``iceberg.table_names`` maps it."""
    name = cfg.table_names.get(source_table) or source_table.rsplit(".", 1)[-1]
    return f"{cfg.namespace}.{name}"


@dataclass
class TableState:
    table: Table
    source_table: str
    key_columns: tuple[str, ...]
    # A table without a primary key (``source.keyless_tables``): a multiset of whole rows.
    keyless: bool = False

    @property
    def identity_columns(self) -> tuple[str, ...]:
        """What names a row for updates and deletes: the key, or every column when keyless."""
        if self.keyless:
            return tuple(f.name for f in self.table.schema().fields)
        return self.key_columns

    @property
    def identifier(self) -> str:
        return ".".join(self.table.name())


def ensure_hygiene_properties(table: Table) -> None:
    """Add the ``HYGIENE_PROPERTIES`` ``table`` lacks (one properties-only commit, if any)."""
    missing = {k: v for k, v in HYGIENE_PROPERTIES.items() if k not in table.properties}
    if missing:
        with table.transaction() as transaction:
            transaction.set_properties(missing)
        log.info("%s: set %s", ".".join(table.name()), ", ".join(f"{k}={v}" for k, v in missing.items()))


def _find_field(schema: Schema, name: str) -> NestedField | None:
    try:
        return schema.find_field(name, case_sensitive=True)
    except ValueError:
        return None


class TableManager:
    """Finds, creates and evolves the Iceberg table of each source table."""

    def __init__(
        self, catalog: Catalog, cfg: IcebergConfig, *, crash: Callable[[str], None] | None = None,
        keyless: frozenset[str] = frozenset(),
    ) -> None:
        self.catalog = catalog
        self.cfg = cfg
        self.keyless = keyless  # source tables replicated without a primary key
        # Crash-test hook, injected by the pipeline (called as "schema-evolved").
        self._crash = crash or (lambda _point: None)
        self._tables: dict[str, TableState] = {}
        self._owners: dict[str, str] = {}  # iceberg identifier -> source table

    def load_existing(self, source_table: str) -> TableState | None:
        if source_table in self._tables:
            return self._tables[source_table]
        ident = self._claim(source_table)
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            return None
        owner = table.properties.get(SOURCE_TABLE_PROPERTY)
        if owner is not None and owner != source_table:
            raise ConfigError(
                f"Iceberg table {ident} holds source table {owner}, not {source_table}",
                table=source_table,
                hint=f"map one of them elsewhere with iceberg.table_names: {{{source_table!r}: <name>}}",
            )
        ensure_hygiene_properties(table)
        if owner == source_table and table.format_version >= 3 and table.current_snapshot() is None:
            self._shape(table, source_table)  # a v3 creation cut short between its two commits
        ensure_global_spec(table)  # a partitioned table needs one for its equality deletes
        keys = tuple(table.schema().find_column_name(i) or "" for i in table.schema().identifier_field_ids)
        keyless = source_table in self.keyless
        if keyless and keys:
            raise ConfigError(
                f"source.keyless_tables lists {source_table}, but its Iceberg table {ident} has the key {keys}",
                table=source_table,
                hint="remove it from source.keyless_tables, or map it to a new Iceberg table",
            )
        state = TableState(table=table, source_table=source_table, key_columns=keys, keyless=keyless)
        self._tables[source_table] = state
        return state

    def _claim(self, source_table: str) -> str:
        ident = iceberg_table_name(self.cfg, source_table)
        other = self._owners.setdefault(ident, source_table)
        if other != source_table:
            raise ConfigError(
                f"source tables {other} and {source_table} both map to Iceberg table {ident}",
                table=source_table,
                hint="give one of them its own name under iceberg.table_names",
            )
        return ident

    def ensure(self, schema: TableSchema) -> TableState:
        """The table for ``schema.table``, created or evolved so the schema's columns fit."""
        state = self.load_existing(schema.table)
        if state is None:
            return self._create(schema)
        self._evolve(state, schema)
        return state

    def _create(self, schema: TableSchema) -> TableState:
        keyless = schema.table in self.keyless
        if not schema.key_columns and not keyless:
            raise SchemaChangeError(
                "table has no primary key; the engine needs one to apply updates and deletes",
                table=schema.table,
                hint="add a primary key, set source.primary_keys (debezium-json) or list it in "
                "source.keyless_tables (replicated as a multiset of whole rows)",
            )
        key_columns = () if keyless else schema.key_columns
        fields = []
        key_ids = []
        for i, col in enumerate(schema.columns, start=1):
            is_key = col.name in key_columns
            fields.append(NestedField(i, col.name, iceberg_type(col.type), required=is_key))
            if is_key:
                key_ids.append(i)
        ice_schema = Schema(*fields, identifier_field_ids=key_ids)
        ident = self._claim(schema.table)
        props = {**TABLE_PROPERTIES, "format-version": str(self.cfg.format_version)}
        props[SOURCE_TABLE_PROPERTY] = schema.table
        partition_by = self.cfg.partition_by.get(schema.table)
        table = self._create_table(ident, ice_schema, props, partition_by, self.cfg.sort_by.get(schema.table))
        log.info(
            "created Iceberg table %s (format v%d) for %s (key %s%s)", ident, table.format_version,
            schema.table, ", ".join(key_columns) or "none: a multiset of whole rows",
            f"; partitioned by {', '.join(partition_by)}" if partition_by else "",
        )  # fmt: skip
        state = TableState(table=table, source_table=schema.table, key_columns=key_columns, keyless=keyless)
        self._tables[schema.table] = state
        return state

    def _create_table(
        self, ident: str, schema: Schema, props: dict[str, str], partition_by: list[str] | None,
        sort_by: list[str] | None,
    ) -> Table:
        """Create the table in the catalog: a SQL catalog writes v3 metadata through
        ``v3_metadata`` (``sql_commit.install``); another catalog is asked for the version in
        the ``format-version`` property, and a table that does not come out at the configured
        version is refused, not used."""
        try:
            if self.cfg.format_version >= 3:
                # pyiceberg 0.12 cannot stage a v3 create with more (its transaction refuses the
                # format upgrade it adds): create, then shape in a second commit (redone by
                # load_existing while the table has no snapshot, if a crash came between).
                table = self.catalog.create_table(ident, schema=schema, properties=props)
                self._shape(table, props[SOURCE_TABLE_PROPERTY])
            elif partition_by or sort_by:
                # One creation commit: spec 0 unpartitioned (for equality deletes, which then
                # reach every partition), the configured spec as the default; the sort order.
                transaction = self.catalog.create_table_transaction(ident, schema=schema, properties=props)
                if partition_by:
                    set_partition_spec(transaction, partition_by, ident)
                if sort_by:
                    set_sort_order(transaction, sort_by, ident)
                transaction.commit_transaction()
                table = self.catalog.load_table(ident)
            else:
                table = self.catalog.create_table(ident, schema=schema, properties=props)
        except NotImplementedError as exc:  # pyiceberg writing metadata it cannot (v3)
            raise ConfigError(
                f"cannot create {ident} at format version {self.cfg.format_version}: {exc}",
                hint="use iceberg.format_version: 2, or a catalog that writes v3 (SQL, or a REST server)",
            ) from None
        if table.format_version != self.cfg.format_version:
            raise ConfigError(
                f"the catalog created {ident} at format version {table.format_version}, "
                f"not the configured {self.cfg.format_version}",
                hint="the catalog server does not take format-version "
                f"{self.cfg.format_version}; drop the table and set iceberg.format_version to what it supports",
            )
        return table

    def _shape(self, table: Table, source_table: str) -> None:
        """Give a new v3 table the configured spec and sort order, unless it has them."""
        partition_by = self.cfg.partition_by.get(source_table)
        sort_by = self.cfg.sort_by.get(source_table)
        name = ".".join(table.name())
        todo_spec = bool(partition_by) and table.spec().is_unpartitioned()
        todo_sort = bool(sort_by) and table.sort_order().is_unsorted
        if not todo_spec and not todo_sort:
            return
        with table.transaction() as transaction:
            if todo_spec and partition_by:
                set_partition_spec(transaction, partition_by, name)
            if todo_sort and sort_by:
                set_sort_order(transaction, sort_by, name)

    def _evolve(self, state: TableState, schema: TableSchema) -> None:
        current = state.table.schema()
        adds: list[tuple[str, str]] = []
        promotions: list[tuple[str, str, str]] = []
        for col in schema.columns:
            field = _find_field(current, col.name)
            if field is None:
                adds.append((col.name, col.type))
                continue
            have = engine_type(field.field_type)
            if have == col.type or can_promote(col.type, have):
                continue  # same, or the source narrowed: values still fit the wider column
            if can_promote(have, col.type):
                promotions.append((col.name, have, col.type))
                continue
            raise SchemaChangeError(
                f"column {col.name} changed type from {have} to {col.type}, which Iceberg cannot promote",
                table=schema.table,
                hint="committed data is intact; recreate the Iceberg table (or map the table elsewhere) to continue",
            )
        if not state.keyless and set(schema.key_columns) != set(state.key_columns):
            raise SchemaChangeError(
                f"primary key changed from {state.key_columns} to {schema.key_columns}",
                table=schema.table,
                hint="committed data is intact; a key change needs a new Iceberg table",
            )
        if not adds and not promotions:
            return
        with state.table.update_schema() as update:
            for name, type_ in adds:
                update.add_column(name, iceberg_type(type_))
            for name, _old, new in promotions:
                update.update_column(name, field_type=iceberg_type(new))
        state.table = state.table.refresh()
        self._crash("schema-evolved")
        for name, type_ in adds:
            log.info("%s: added column %s %s", state.identifier, name, type_)
        for name, old, new in promotions:
            log.info("%s: widened column %s %s -> %s", state.identifier, name, old, new)
