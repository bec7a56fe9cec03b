"""A binlog rows event's rows as one block of Arrow columns (``events.block.BlockEvent``):
its inserts as one 'c' event, its updates that keep their key as one 'u' event (no before
image: the after key is the before key), instead of one ``ChangeEvent`` per row.

Only rows the fast decoder (``rowimage.py``) produced come here, so every value is the
engine value the row path would hand out and none is a dead letter (anything else went the
library's way first). The columns are built by ``blocks.column_array``, which refuses a
column whose Python values its engine type would not give back unchanged; a refused event,
an update that moves a key (or a float key: ``-0.0 == 0.0``), goes row by row as before.
Positions are the row path's: row ``i`` of the event is ``(file, begin, base | i)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from replicator.events.block import RowBlock
from replicator.events.model import TableSchema
from replicator.sources.mysql.blocks import REFUSED, column_array


def key_kept(rows: Sequence[tuple[dict[str, Any], ...]], key: Sequence[str]) -> bool:
    """Whether every update (before, after) keeps its key, value and type alike."""
    for before, after in rows:
        for k in key:
            a, b = before[k], after[k]
            if a != b or type(a) is not type(b) or type(a) is float:
                return False
    return True


def rows_block(
    rows: Sequence[tuple[dict[str, Any], ...]], image: int, schema: TableSchema
) -> RowBlock | None:
    """Image ``image`` (0: the row of an insert, 1: an update's after image) of every row as
    one block in the schema's column order, or None: a column is refused."""
    arrays: list[pa.Array] = []
    try:
        for spec in schema.columns:
            name = spec.name
            arr = column_array([r[image][name] for r in rows], spec.type)
            if arr is None:
                return None
            arrays.append(arr)
    except (KeyError, *REFUSED):
        return None
    return RowBlock(pa.Table.from_arrays(arrays, names=[c.name for c in schema.columns]))
