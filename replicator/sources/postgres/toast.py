"""Unchanged TOAST values ('u' in pgoutput) and where the source finds them.

With REPLICA IDENTITY DEFAULT an UPDATE that leaves a large, out-of-line ("TOASTed") column
alone does not carry that column's value. The engine's events must hold the full new row,
so the source fills each such column, in this order:

1. the old row image, when the table has REPLICA IDENTITY FULL (exact; the server inlines
   TOASTed values into the old image);
2. ``RowCache``: the last after-image this process saw for that key, in the stream or the
   snapshot (exact: the value did not change since that image). Only rows that can hold
   TOASTed values are kept (see ``ROW_CACHE_MIN_CHARS``), least recently used first out,
   within a byte budget;
3. the row as it is *now* in the source table (``SELECT ... WHERE key = ...``). This value
   may be newer than the event; every later change of that column is itself in the stream
   with its value, so after the following events the row is right again (it converges; a
   reader of an intermediate Iceberg snapshot could see the newer value early). When the row
   no longer exists, a later event in the stream deletes it (or moves its key): the update
   is dropped as superseded (counted in ``stats.toast_superseded``), never emitted with a
   placeholder or null.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

# PostgreSQL TOASTs a row only when it exceeds TOAST_TUPLE_THRESHOLD (about 2 kB on 8 kB
# pages). A row's text form is never much smaller than its stored form, so rows below this
# (with margin) cannot hold out-of-line values and are not cached. A table with a lowered
# toast_tuple_target can TOAST smaller rows; those fall through to rule 3.
ROW_CACHE_MIN_CHARS = 1024


def row_chars(values: Any) -> int:
    """Approximate size of a tuple of text values (None and markers count 0)."""
    return sum(len(v) for v in values if v.__class__ is str or v.__class__ is bytes)


class RowCache:
    """LRU of recent after-images of large rows, keyed by (table, text key)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.size = 0
        self._rows: OrderedDict[Hashable, tuple[dict[str, Any], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def empty(self) -> bool:
        return not self._rows

    def get(self, key: Hashable) -> dict[str, Any] | None:
        hit = self._rows.get(key)
        if hit is None:
            return None
        self._rows.move_to_end(key)
        return hit[0]

    def put(self, key: Hashable, row: dict[str, Any], size: int) -> None:
        if size > self.budget:
            self.pop(key)
            return
        old = self._rows.pop(key, None)
        if old is not None:
            self.size -= old[1]
        self._rows[key] = (row, size)
        self.size += size
        while self.size > self.budget:
            _, (_, s) = self._rows.popitem(last=False)
            self.size -= s

    def pop(self, key: Hashable) -> None:
        old = self._rows.pop(key, None)
        if old is not None:
            self.size -= old[1]
