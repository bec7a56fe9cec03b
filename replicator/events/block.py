"""Snapshot rows carried as Arrow columns: a chunk read in one piece stays one piece.

A source that reads a chunk of snapshot rows column-wise (``COPY ... TO STDOUT`` into Arrow)
wraps it in a ``RowBlock`` whose columns already have the engine's Arrow types
(``events.types.arrow_type``; ``float`` columns may be float64, the Python float an event
carries). Each row still travels as its own ``ChangeEvent`` (positions,
batching, the skip rule and acknowledgements are per row, unchanged), but the event's
``after`` is a ``BlockRow``: a read-only mapping onto row ``index`` of the block. Whoever
reads it gets the same Python values a per-row conversion gives (converted lazily, a column
at a time); staging (``pipeline/staging.py``) recognises runs of block rows and slices the
Arrow columns instead of rebuilding them value by value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC
from typing import Any

import pyarrow as pa


class RowBlock:
    """One chunk's rows: an Arrow table whose columns hold the engine's Arrow types."""

    __slots__ = ("table", "names", "_index", "_values")

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.names: tuple[str, ...] = tuple(table.column_names)
        self._index = {n: i for i, n in enumerate(self.names)}
        self._values: dict[str, list[Any]] = {}

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    def has(self, name: str) -> bool:
        return name in self._index

    def value(self, name: str, row: int) -> Any:
        """The Python value (as ``to_pylist`` gives it); KeyError for an unknown column."""
        values = self._values.get(name)
        if values is None:
            col = self.table.column(self._index[name])
            values = col.to_pylist()
            if pa.types.is_timestamp(col.type) and col.type.tz is not None:
                # pyarrow gives zoneinfo's UTC; events carry datetime.UTC (events/types.py)
                values = [v if v is None else v.astimezone(UTC) for v in values]
            self._values[name] = values
        return values[row]

    def row(self, index: int) -> BlockRow:
        return BlockRow(self, index)


class BlockRow(Mapping[str, Any]):
    """Row ``index`` of a ``RowBlock`` as a read-only mapping (column name -> value)."""

    __slots__ = ("block", "index")

    def __init__(self, block: RowBlock, index: int) -> None:
        self.block = block
        self.index = index

    def __getitem__(self, name: str) -> Any:
        return self.block.value(name, self.index)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.block.has(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.block.names)

    def __len__(self) -> int:
        return len(self.block.names)

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:  # pickled as its values, not the whole block
        return (dict, (dict(self),))
