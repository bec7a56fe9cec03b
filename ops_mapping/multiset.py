"""One batch of a table without a primary key: a multiset of whole rows.

The table's identity is the whole row (``row_identity``): two equal rows are two entries, and
an update or delete, which names its row by the full old image, removes exactly ONE row equal
to it, by position, never by equality (an equality delete on the whole row would remove every
duplicate). Per event, in sequence order:

- 'c' / 'r': append the row (no upsert: without a key a repeated insert is a second row).
- 'u' / 'd': remove one live row equal to the before image: the newest such row this batch
  wrote (a position delete of this batch's row), else the LAST row ``table_rows`` lists for
  that image not yet removed (a position delete of an earlier batch's row); else nothing is
  removed and the event is counted in ``MappingStats.unmatched_deletes``. Then 'u' appends
  its after image.

``table_rows`` (columns ``ROW_ID_HI_COLUMN``, ``ROW_ID_LO_COLUMN``, ``TABLE_ROW_PATH_COLUMN``,
``TABLE_ROW_POS_COLUMN``) may list one image several times, once per live duplicate; the
caller orders them so the one to remove first is last (the index removes its top copies).
The input contract is ``BatchMapper``'s with every data column as a key column: each
``__rep_bk__<column>`` carries the before image. Nulls are ordinary values here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ops_mapping.contract import (
    ROW_ID_HI_COLUMN,
    ROW_ID_LO_COLUMN,
    TABLE_ROW_PATH_COLUMN,
    TABLE_ROW_POS_COLUMN,
    MappedChunk,
    MappedTail,
    MappingPolicy,
)
from ops_mapping.errors import OpsMappingError
from ops_mapping.mapper import BatchMapper
from ops_mapping.row_identity import row_fingerprints, row_identities

__all__ = ["MultisetMapper"]

_BEFORE_OPS = pa.array(["u", "d"], pa.string())


class MultisetMapper(BatchMapper):
    """Maps one keyless table's events of one batch; feed chunks in order, then ``finish``."""

    def __init__(
        self, data_schema: pa.Schema, policy: MappingPolicy | None = None, table_rows: pa.Table | None = None
    ) -> None:
        super().__init__(data_schema.names, data_schema, policy)
        # row image -> batch ordinals of its live rows this batch wrote, oldest first
        self._copies: dict[int, list[int]] = {}
        # row image -> (file path, pos) of its live rows of earlier batches, next to remove last
        self._earlier = {} if table_rows is None else _earlier_rows(table_rows)

    def map_chunk(self, events: pa.RecordBatch) -> MappedChunk:
        """Map the next RecordBatch of this batch's events (state carries over chunks)."""
        cols = self._open_chunk(events)
        n = events.num_rows
        if n == 0:
            return MappedChunk((), self._key_schema.empty_table())
        seq, ops = self._validate(events, cols)
        is_delete = pc.equal(ops, "d")
        deletes = pc.sum(is_delete).as_py() or 0
        changes = pc.sum(pc.is_in(ops, value_set=_BEFORE_OPS)).as_py() or 0
        after: Iterable[int | None] = repeat(None, n)
        if deletes < n:
            after = row_identities([events.column(i) for i in cols.after_keys])
        before: Iterable[int | None] = repeat(None, n)
        if changes:
            before = row_identities(
                [self._key_typed(events, i, k) for i, k in zip(cols.before_keys, self.key_columns, strict=True)]
            )
        first_ordinal = self._roller.rows
        self._apply_multiset(ops.to_pylist(), before, after)
        self._events += n
        self._last_seq = seq[n - 1].as_py()
        slices = self._place_rows(events, cols, is_delete if deletes else None, first_ordinal)
        return MappedChunk(slices, self._key_schema.empty_table())

    def _apply_multiset(self, ops: list[str], before: Iterable[Any], after: Iterable[Any]) -> None:
        copies, earlier = self._copies, self._earlier
        pos_delete = self._pos_ordinals.append
        table_delete = self._table_deletes.append
        ordinal = self._roller.rows
        for op, b, a in zip(ops, before, after, strict=True):
            if op == "u" or op == "d":
                mine = copies.get(b)
                if mine:
                    pos_delete(mine.pop())
                else:
                    theirs = earlier.get(b)
                    if theirs:
                        table_delete(theirs.pop())
                    else:
                        self._unmatched += 1
                if op == "d":
                    continue
            held = copies.get(a)
            if held is None:
                copies[a] = [ordinal]
            else:
                held.append(ordinal)
            ordinal += 1

    def finish(self) -> MappedTail:
        tail = super().finish()
        self._copies.clear()
        self._earlier.clear()
        return tail


def _earlier_rows(rows: pa.Table) -> dict[int, list[tuple[str, int]]]:
    names = (ROW_ID_HI_COLUMN, ROW_ID_LO_COLUMN, TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN)
    missing = [c for c in names if c not in rows.column_names]
    if missing:
        raise OpsMappingError(f"table_rows lacks columns {missing}")
    his = rows.column(ROW_ID_HI_COLUMN).cast(pa.uint64()).to_pylist()
    los = rows.column(ROW_ID_LO_COLUMN).cast(pa.uint64()).to_pylist()
    paths = rows.column(TABLE_ROW_PATH_COLUMN).to_pylist()
    positions = rows.column(TABLE_ROW_POS_COLUMN).to_pylist()
    out: dict[int, list[tuple[str, int]]] = {}
    seen: set[tuple[str, int]] = set()
    for hi, lo, path, pos in zip(his, los, paths, positions, strict=True):
        if (path, pos) in seen:
            raise OpsMappingError(f"table_rows names row {path}#{pos} twice")
        seen.add((path, pos))
        out.setdefault((hi << 64) | lo, []).append((path, pos))
    return out


def table_row_identities(columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Table:
    """``ROW_ID_HI_COLUMN`` / ``ROW_ID_LO_COLUMN`` of rows, as ``table_rows`` names them."""
    hi, lo = row_fingerprints(columns)
    return pa.table({ROW_ID_HI_COLUMN: pa.array(hi, pa.uint64()), ROW_ID_LO_COLUMN: pa.array(lo, pa.uint64())})
