"""DDL statements in the binlog (QUERY events) applied to the schema history."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from replicator.errors import SchemaChangeError
from replicator.events.model import SourcePosition
from replicator.sources.mysql.emit import Parts, SourceStats
from replicator.sources.mysql.schema_history import SchemaHistory, parse_ddl

log = logging.getLogger(__name__)


def apply_ddl(
    query: str,
    db: str | None,
    at: Parts,
    tables: Mapping[str, Any],
    history: SchemaHistory,
    stats: SourceStats,
) -> list[str]:
    """Applies the schema changes of a statement (run in database ``db``, at ``at``) to the
    history; returns the replicated tables it truncates. A replicated table renamed or
    dropped stops the source (``SchemaChangeError``)."""
    truncated: list[str] = []
    where = SourcePosition(source="mysql", parts=at)
    for ch in parse_ddl(query, db):
        if ch.table not in tables:
            continue
        if ch.kind == "rename" or (ch.kind == "alter" and ch.new_name):
            raise SchemaChangeError(
                f"table {ch.table} was renamed to {ch.new_name}; the source stops here",
                table=ch.table,
                position=where,
                hint=f"replicate it under its new name: drop its Iceberg table and put "
                f"{ch.new_name} in source.tables (it is snapshotted), or remove "
                f"{ch.table} from source.tables to go on without it",
            )
        if ch.kind == "drop":
            raise SchemaChangeError(
                f"table {ch.table} was dropped; the source stops here (the Iceberg table "
                "keeps its rows)",
                table=ch.table,
                position=where,
                hint=f"remove {ch.table} from source.tables to go on without it",
            )
        if ch.kind == "truncate":
            stats.truncates += 1
            truncated.append(ch.table)
            continue
        for old, new in ch.renamed_columns:
            log.warning(
                "%s: column %s renamed to %s; it continues as a new column (the old "
                "one stays in Iceberg, null from here on)",
                ch.table,
                old,
                new,
            )
        history.apply(ch, at)
    return truncated
