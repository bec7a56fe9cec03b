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

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC
from itertools import repeat
from typing import Any

import pyarrow as pa

from replicator.events.model import (
    ChangeEvent,
    Op,
    SourcePosition,
    TableSchema,
    event_builder,
    read_events,
)

_BLOCK_OPS = frozenset((Op.READ, Op.CREATE, Op.UPDATE))


class RowBlock:
    """One chunk's rows: an Arrow table whose columns hold the engine's Arrow types."""

    __slots__ = ("table", "names", "_index", "_values", "ops", "old")

    def __init__(
        self, table: pa.Table, ops: pa.Array | None = None, old: RowBlock | None = None
    ) -> None:
        """``ops``: each row's op ('c'/'u'/'d') when the rows mix kinds (a CDC run of
        changes; a delete's row is null in ``table``); ``old``: the old key of each row
        that carries one (a delete, an update that sent its old key), null elsewhere."""
        self.table = table
        self.ops = ops
        self.old = old
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


class BlockEvent(ChangeEvent):
    """Rows ``start:stop`` of a ``RowBlock`` as ONE 'r' event (snapshot rows, each its own
    transaction, at consecutive positions ``prefix + (first_seq + i,)``): a snapshot chunk
    travels through the reader, the batcher, the skip rule and staging as one object, and
    staging slices its Arrow columns (``pipeline/staging.py``). ``position`` is its LAST
    row's (the batch ends there; a checkpoint at or past it holds every row);
    ``first_position`` its first's; ``after`` its last row (a ``BlockRow``). A consumer that
    needs rows one by one (a column policy, a batch the vectorised staging refuses) takes
    ``events()``: the same 'r' events a row-by-row source hands out.

    A CDC source's run of inserts of one table inside one transaction travels the same way
    with ``op`` 'c' (``sources/postgres/changes.py``), a run of updates that keep their key
    with ``op`` 'u' (no ``before``: the after key is the before key): its rows share
    ``ts_ms`` and ``tx_id``, and only the last row may end the transaction
    (``last_in_tx``). A run that mixes kinds (deletes, updates that send their old key)
    has ``op`` 'u' and its rows' ops in ``block.ops`` (``row_ops``), old keys in
    ``block.old``; its ``after`` is still its last row (null values for a delete)."""

    __slots__ = ("block", "start", "stop", "prefix", "first_seq")
    block: RowBlock
    start: int
    stop: int
    prefix: tuple[Any, ...]
    first_seq: int

    def __init__(
        self, table: str, schema: TableSchema | None, block: RowBlock, start: int, stop: int,
        source: str, prefix: tuple[Any, ...], first_seq: int, op: Op = Op.READ,
        ts_ms: int | None = None, tx_id: str | None = None, last_in_tx: bool = True,
    ) -> None:  # fmt: skip
        if stop <= start:
            raise ValueError("a block event holds at least one row")
        if op not in _BLOCK_OPS:
            raise ValueError(f"a block event holds 'r', 'c' or 'u' rows, not {op.value!r}")
        # ChangeEvent's own checks hold by construction ('after' is a row, the op no 'd'):
        # the slots are set directly, as one event per run of rows is on a source's hot path.
        s = _SET
        s["table"](self, table)
        s["op"](self, op)
        s["before"](self, None)
        s["after"](self, BlockRow(block, stop - 1))
        s["position"](self, SourcePosition(source, (*prefix, first_seq + stop - start - 1)))
        s["schema_"](self, schema)
        s["ts_ms"](self, ts_ms)
        s["tx_id"](self, tx_id)
        s["last_in_tx"](self, last_in_tx)
        s["error"](self, None)
        s["block"](self, block)
        s["start"](self, start)
        s["stop"](self, stop)
        s["prefix"](self, prefix)
        s["first_seq"](self, first_seq)

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def first_position(self) -> SourcePosition:
        return SourcePosition(self.position.source, (*self.prefix, self.first_seq))

    def after_position(self, done: SourcePosition) -> BlockEvent | None:
        """The rows past ``done`` (a table's committed position): self, a tail, or None."""
        if done.source != self.position.source or self.first_position > done:
            return self
        if self.position <= done:
            return None
        skip = int(done.parts[-1]) - self.first_seq + 1  # done shares the prefix here
        return BlockEvent(self.table, self.schema_, self.block, self.start + skip, self.stop,
                          self.position.source, self.prefix, self.first_seq + skip, self.op,
                          self.ts_ms, self.tx_id, self.last_in_tx)  # fmt: skip

    def events(self) -> list[ChangeEvent]:
        """Its rows as per-row events (the row-by-row path's input)."""
        rows = map(BlockRow, repeat(self.block), range(self.start, self.stop))
        seqs = range(self.first_seq, self.first_seq + self.rows)
        if self.op is Op.READ:
            return read_events(self.table, self.schema_, rows, self.position.source,
                               ((*self.prefix, s) for s in seqs))  # fmt: skip
        build = event_builder(self.position.source)
        if self.block.ops is not None:
            return self._mixed_events(build)
        out = [build(self.table, self.op, None, row, (*self.prefix, s), self.schema_, self.ts_ms,
                     self.tx_id, False, None) for row, s in zip(rows, seqs, strict=True)]  # fmt: skip
        if self.last_in_tx:
            out[-1] = out[-1].replace(last_in_tx=True)
        return out

    def _mixed_events(self, build: Any) -> list[ChangeEvent]:
        """``events()`` of a run mixing kinds: each row's op, its old key when it carries
        one (``before``), its values unless it is a delete (``after``)."""
        block, old = self.block, self.block.old
        assert block.ops is not None
        ops = block.ops.slice(self.start, self.rows).to_pylist()
        has_old = [False] * self.rows
        if old is not None:
            has_old = old.table.column(0).slice(self.start, self.rows).is_valid().to_pylist()
        out = []
        for i, (op, keyed) in enumerate(zip(ops, has_old, strict=True)):
            row = self.start + i
            before = (
                {k: old.value(k, row) for k in old.names} if keyed and old is not None else None
            )
            after = None if op == "d" else BlockRow(block, row)
            out.append(build(self.table, Op(op), before, after, (*self.prefix, self.first_seq + i),
                             self.schema_, self.ts_ms, self.tx_id, False, None))  # fmt: skip
        if self.last_in_tx:
            out[-1] = out[-1].replace(last_in_tx=True)
        return out

    def replace(self, **changes: Any) -> ChangeEvent:
        """Refused: a copy would be one row (its ``after``), silently dropping the others;
        change its rows one by one (``events()``) instead."""
        raise TypeError(f"a block event of {self.rows} rows cannot be replaced as one row: use events()")

    def __reduce__(self) -> tuple[Any, ...]:
        return (BlockEvent, (self.table, self.schema_, self.block, self.start, self.stop,
                             self.position.source, self.prefix, self.first_seq, self.op,
                             self.ts_ms, self.tx_id, self.last_in_tx))  # fmt: skip

    def __repr__(self) -> str:
        return (f"BlockEvent(table={self.table!r}, op={self.op.value!r}, rows={self.rows}, first={self.first_position!s}, "
                f"last={self.position!s})")  # fmt: skip


# The slots' setters of a block event, by name (its own and ChangeEvent's): they bypass the
# immutable classes' ``__setattr__``.
_SET: dict[str, Any] = {
    n: getattr(cls, n).__set__ for cls in (ChangeEvent, BlockEvent) for n in cls.__slots__
}


def row_count(ev: ChangeEvent) -> int:
    """Rows an event stands for: a block event's rows, else 1."""
    return ev.stop - ev.start if type(ev) is BlockEvent else 1


def row_ops(ev: ChangeEvent) -> dict[str, int]:
    """Rows per op value an event stands for."""
    if type(ev) is not BlockEvent:
        return {ev.op.value: 1}
    ops = ev.block.ops
    if ops is None:
        return {ev.op.value: ev.rows}
    counts = ops.slice(ev.start, ev.rows).value_counts()
    return {
        str(v): int(c)
        for v, c in zip(counts.field(0).to_pylist(), counts.field(1).to_pylist(), strict=True)
    }


def first_position(ev: ChangeEvent) -> SourcePosition:
    """The position of an event's first row (a block event's first, else its own)."""
    return ev.first_position if type(ev) is BlockEvent else ev.position


def row_events(events: Iterable[ChangeEvent]) -> list[ChangeEvent]:
    """``events`` with every block event expanded into its per-row events."""
    out: list[ChangeEvent] = []
    for ev in events:
        if type(ev) is BlockEvent:
            out.extend(ev.events())
        else:
            out.append(ev)
    return out
