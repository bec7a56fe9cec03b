"""A table shape plus one converter per column, shared by every line of that shape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from replicator.events.debezium.convert import Bad, Converter, show
from replicator.events.model import ColumnSpec, TableSchema
from replicator.events.unavailable import PLACEHOLDER_VALUES, mark_unavailable


class Plan:
    """A table shape plus one converter per column; shared by every line of that shape."""

    __slots__ = ("_placeholder_columns", "convs", "key_columns", "names", "schema")

    def __init__(self, schema: TableSchema, convs: Sequence[tuple[str, Converter]]) -> None:
        self.schema = schema
        self.convs: tuple[tuple[str, Converter], ...] = tuple(convs)
        self.names = frozenset(n for n, _ in convs)
        self.key_columns = schema.key_columns
        # Only string and binary columns can hold Debezium's unavailable-value placeholder.
        cols = [c.name for c in schema.columns if c.type in ("string", "binary")]
        self._placeholder_columns: Callable[[dict[str, Any]], Any] | None = (
            None if not cols else _getter(cols)
        )

    def mark_unavailable(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with placeholder values replaced by ``UNAVAILABLE`` (``unavailable``);
        the same dict, cheaply, when it has none."""
        get = self._placeholder_columns
        if get is None or PLACEHOLDER_VALUES.isdisjoint(get(row)):
            return row
        return mark_unavailable(row)

    def convert(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self.names.issuperset(row):
            extra = sorted(k for k in row if k not in self.names)
            raise Bad(f"fields {extra} are not in the record's schema")
        get = row.get
        try:
            # A comprehension is markedly faster than a loop of stores; on failure the
            # slow loop below finds the column for the message.
            return {n: None if (v := get(n)) is None else c(v) for n, c in self.convs}
        except (Bad, ValueError, OverflowError, TypeError):
            pass
        for name, conv in self.convs:
            v = get(name)
            if v is None:
                continue
            try:
                conv(v)
            except Bad as exc:
                raise Bad(f"column {name!r}: {exc}") from None
            except (ValueError, OverflowError, TypeError) as exc:
                # datetime range errors and the like
                raise Bad(f"column {name!r}: value {show(v)} is out of range: {exc}") from None
        raise AssertionError("unreachable: a converter failed only once")  # pragma: no cover


def _getter(cols: list[str]) -> Callable[[dict[str, Any]], Any]:
    if len(cols) == 1:
        (only,) = cols
        return lambda row: (row.get(only),)
    return itemgetter(*cols)


def make_schema(
    table: str, columns: tuple[ColumnSpec, ...], key_columns: tuple[str, ...]
) -> TableSchema:
    names = {c.name for c in columns}
    missing = [k for k in key_columns if k not in names]
    if missing:
        raise Bad(f"key columns {missing} are not columns of the record")
    return TableSchema(table=table, columns=columns, key_columns=key_columns)
