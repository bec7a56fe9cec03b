"""The Iceberg schema a batch of one table's events is written with."""

from __future__ import annotations

from collections.abc import Sequence

from replicator.errors import TerminalError
from replicator.events.model import ChangeEvent, ColumnSpec, Op, TableSchema


def merged_schema(events: Sequence[ChangeEvent]) -> TableSchema:
    """All columns any event of the batch carries, in first-seen order (a column added
    mid-batch joins at the end; the latest type of a column wins)."""
    seen: dict[int, TableSchema] = {}
    for ev in events:
        if ev.schema_ is None and ev.op is Op.TRUNCATE:
            continue  # a TRUNCATE needs no columns (MySQL's may not know them)
        if ev.schema_ is None:
            raise TerminalError("event carries no table schema", table=ev.table, position=ev.position)
        seen.setdefault(id(ev.schema_), ev.schema_)
    schemas = list(seen.values())
    if len(schemas) == 1:
        return schemas[0]
    cols: dict[str, ColumnSpec] = {}
    for s in schemas:
        for c in s.columns:
            cols[c.name] = c
    last = schemas[-1]
    return TableSchema(table=last.table, columns=tuple(cols.values()), key_columns=last.key_columns)
