"""Table-map events -> what the stream needs to turn a table's rows events into changes
(``Rel``): its engine schema and key, the row converter of the library path, and the row
decoders of the fast paths (``rowimage.py``; the compiled one, ``rowarrow.py``).

A table map is sent before every statement's rows events; one built ``Rel`` serves every
table map with the same columns (the library's parse is cached by the event's bytes, so the
column objects repeat) at the same schema-history version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from replicator.errors import SchemaChangeError, TerminalError
from replicator.events.model import TableSchema
from replicator.sources.mysql import setup
from replicator.sources.mysql.rowarrow import RowArrow
from replicator.sources.mysql.rowimage import RowImageDecoder, column_signature, compile_table
from replicator.sources.mysql.schema_history import SchemaHistory
from replicator.sources.mysql.types import (
    RowConverter,
    ValueConversionError,
    def_from_binlog,
    map_column,
)

_CACHE_MAX = 4096


@dataclass
class Rel:
    table: str
    selected: bool
    schema: TableSchema | None = None
    rows: RowConverter | None = None
    key: tuple[str, ...] = ()
    decoder: RowImageDecoder | None = None  # the fast path, None: every row by the library
    keyless: bool = False  # in source.keyless_tables: every image must be FULL
    arrow: RowArrow | None = None  # the compiled decoder into blocks, None: not here


NOT_SELECTED = Rel("", False)


class TableMaps:
    """The ``Rel`` of each table-map event (cached)."""

    def __init__(
        self,
        tables: Mapping[str, setup.TableInfo],
        history: SchemaHistory,
        keyless: frozenset[str],
        zero_dates: str,
        *,
        fast_rows: bool,
        blocks: bool,
    ) -> None:
        self.tables = tables
        self.history = history
        self.keyless = keyless
        self.zero_dates = zero_dates
        self.fast_rows = fast_rows  # rowimage.py decoders
        self.blocks = blocks  # compiled decoders into blocks (with fast_rows only)
        self.converters: list[RowConverter] = []
        self._cache: dict[tuple[Any, ...], Rel] = {}
        self._by_columns: dict[int, tuple[list[Any], int, Rel]] = {}

    def rel(self, ev: Any, where: str) -> Rel:
        """The ``Rel`` of table-map event ``ev`` (``where``: its binlog position, for errors)."""
        table = f"{ev.schema}.{ev.table}"
        if table not in self.tables:
            return NOT_SELECTED
        cols = ev.columns
        version = self.history.version(table)
        seen = self._by_columns.get(id(cols))  # a cached table map: same column objects
        if seen is not None and seen[0] is cols and seen[1] == version:
            return seen[2]
        meta = ev.optional_metadata
        key_idx = sorted(set(meta.simple_primary_key_list) | set(meta.primary_keys_with_prefix))
        keyless = table in self.keyless
        key_idx = [] if keyless else key_idx  # a key added later changes nothing (a multiset)
        sig = (table, version, tuple(key_idx), tuple(map(column_signature, cols)))
        rel = self._cache.get(sig)
        if rel is None:
            rel = self._build(table, cols, key_idx, keyless, where)
            self._cache[sig] = rel
            if len(self._cache) > _CACHE_MAX:  # unbounded DDL churn: start over
                self._cache = {sig: rel}
        if len(self._by_columns) > _CACHE_MAX:
            self._by_columns.clear()
        self._by_columns[id(cols)] = (cols, version, rel)
        return rel

    def last_schema(self, table: str) -> TableSchema | None:
        """The table's last schema seen in this stream, if any."""
        return next((r.schema for r in reversed(list(self._cache.values())) if r.table == table), None)

    def _build(self, table: str, cols: list[Any], key_idx: list[int], keyless: bool, where: str) -> Rel:
        if any(c.name is None for c in cols):
            raise TerminalError(
                f"the table map of {table} has no column names",
                table=table,
                hint="SET GLOBAL binlog_row_metadata = 'FULL';",
            )
        if not key_idx and not keyless:
            raise SchemaChangeError(
                f"{table} no longer has a primary key: updates and deletes cannot be applied",
                table=table,
                position=where,
                hint=f"ALTER TABLE {self.tables[table].sql} ADD PRIMARY KEY (...);  -- then "
                "re-snapshot the table (drop its Iceberg table)",
            )
        hints = self.history.get(table)
        key = tuple(cols[i].name for i in key_idx)
        defs = [
            def_from_binlog(c, is_bool=hints.is_bool(c.name), is_json=hints.is_json(c.name))
            for c in cols
        ]
        try:
            mappings = [map_column(d, key=d.name in key) for d in defs]
        except ValueConversionError as exc:
            raise SchemaChangeError(str(exc), table=table) from None
        schema = TableSchema(table=table, columns=tuple(m.spec for m in mappings), key_columns=key)
        rows = RowConverter.build(mappings, key, self.zero_dates)
        self.converters.append(rows)
        decoder = compile_table(cols, defs) if self.fast_rows else None
        arrow = None
        if decoder is not None and self.blocks and not keyless:
            arrow = RowArrow.build(cols, defs, schema, key_idx)
        return Rel(table, True, schema, rows, key, decoder, keyless, arrow)
