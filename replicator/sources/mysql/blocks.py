"""A MySQL/MariaDB snapshot chunk as Arrow columns (``events.block.RowBlock``), converted
column by column with exactly the values the row-by-row path gives.

The rows pymysql read for a chunk are turned column-wise: each column's snapshot converter
(``types.map_column``) over its values, then one ``pa.array`` in the column's engine Arrow
type (``float`` kept float64, the Python float an event carries, as the Postgres COPY path
does). A chunk is refused (None: its rows go row by row, with the dead-letter and zero-date
rules of ``RowConverter.from_snapshot``) when any converter raises (a zero date, a value
that does not convert), when a column holds a Python type its engine type does not take as
is (so Arrow never coerces a value the row path would hand out differently), or when Arrow
refuses a value (out of range, a decimal with more digits than its scale).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from replicator.events.block import RowBlock
from replicator.events.types import arrow_type, parse_decimal

# The Python types a column of each engine type may hold for its values to go into Arrow
# and come back (``RowBlock.value``) unchanged.
_PY_TYPES: dict[str, frozenset[type]] = {
    "boolean": frozenset({bool}),
    "int": frozenset({int}),
    "long": frozenset({int}),
    "float": frozenset({float}),
    "double": frozenset({float}),
    "string": frozenset({str}),
    "binary": frozenset({bytes}),
    "date": frozenset({date}),
    "timestamp": frozenset({datetime}),
    "timestamptz": frozenset({datetime}),
}
_DECIMAL = frozenset({Decimal})
_NONE = type(None)
REFUSED = (
    ValueError,
    TypeError,
    ArithmeticError,
    UnicodeDecodeError,
    OverflowError,
    pa.ArrowException,
)


def block_arrow_type(engine: str) -> pa.DataType:
    """The Arrow type of a block column (``float``: float64, as events carry it)."""
    return pa.float64() if engine == "float" else arrow_type(engine)


def column_array(values: Sequence[Any], engine: str) -> pa.Array | None:
    allowed = _DECIMAL if parse_decimal(engine) is not None else _PY_TYPES.get(engine)
    if allowed is None:
        return None
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    if not kinds <= allowed:
        return None
    if engine == "timestamp" and any(v.tzinfo is not None for v in values if v is not None):
        return None
    if engine == "timestamptz" and any(v.tzinfo is None for v in values if v is not None):
        return None
    return pa.array(values, type=block_arrow_type(engine))


def chunk_block(
    names: Sequence[str],
    engines: Sequence[str],
    converters: Sequence[tuple[int, Any]],
    rows: Sequence[tuple[Any, ...]],
) -> RowBlock | None:
    """The chunk's rows as one block (columns ``names`` of engine types ``engines``;
    ``converters``: ``RowConverter.snapshot``), or None: refused, read row by row."""
    if not rows:
        return None
    convert = dict(converters)
    arrays: list[pa.Array] = []
    try:
        for i, values in enumerate(zip(*rows, strict=True)):
            conv = convert.get(i)
            col = values if conv is None else [None if v is None else conv(v) for v in values]
            arr = column_array(col, engines[i])
            if arr is None:
                return None
            arrays.append(arr)
    except REFUSED:  # ZeroDate included: the row path applies the zero-date policy
        return None
    return RowBlock(pa.Table.from_arrays(arrays, names=list(names)))
