"""Plain row changes kept undecoded across the transactions of a poll, so each relation's
changes are decoded column-wise in ONE pass (``change_block``) however they interleave.

A block costs about a millisecond whatever its rows (a few dozen numpy and Arrow calls per
column): a run of one table's changes in one transaction averages tens of rows in a mixed
stream, a poll's worth of one table thousands. The decoded blocks are handed out sliced
back into the runs they came from (``ChangeRun``: consecutive changes of one table in one
transaction), in the stream's order, with the Begin and Commit messages kept in between
replayed where they were: every event, position, transaction end and held-back rule is
what the row-by-row path gives (``changes.ChangeAssembler``). A relation whose block does
not decode has each run decoded on its own; a run that does not either goes row by row at
the same place.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from replicator.events.block import BlockEvent, RowBlock
from replicator.events.model import Op
from replicator.sources.postgres.change_block import change_block

# A relation's state (``changes.RelState``, which imports this module): table, selected,
# schema, rows (converters), key_idx.
RelState = Any

_INSERT = ord("I")
# Rows of one block event at most (a run is handed out in pieces): the batcher closes a
# batch, or stages a chunk of a transaction larger than a batch, after an event, so one far
# past ``batch.max_events`` would hold that much more than asked.
EVENT_MAX_ROWS = 512
# A poll's kept changes go out once each table has a block's worth on average (a block
# costs ~0.5 ms whatever its rows, so it pays past ~100 rows) and there are at least
# GROUP_MIN_ROWS (the engine waits for them: bigger would stall it longer), or at most
# GROUP_MAX_ROWS or GROUP_MAX_BYTES of messages: they are decoded and held at once.
GROUP_MIN_ROWS = 8192
GROUP_ROWS_PER_TABLE = 256
GROUP_MAX_ROWS = 65536
GROUP_MAX_BYTES = 32 << 20


class ChangeRun:
    """Rows ``start:stop`` of a relation's block: consecutive changes of one table in one
    transaction from position ``(lsn, first)`` on, held back like a change until it is known
    whether it ends its transaction."""

    __slots__ = ("rel", "block", "op", "start", "stop", "first", "lsn", "ts_ms", "xid")

    def __init__(
        self, rel: RelState, block: RowBlock, op: Op, start: int, stop: int, tx: Any
    ) -> None:
        self.rel, self.block, self.op, self.start, self.stop = rel, block, op, start, stop
        self.first, self.lsn, self.ts_ms, self.xid = tx.index, tx.lsn, tx.ts_ms, tx.xid

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def last_parts(self) -> tuple[int, int]:
        return (self.lsn, self.first + self.rows - 1)

    def event(self, last_in_tx: bool) -> BlockEvent:
        return BlockEvent(
            self.rel.table, self.rel.schema, self.block, self.start, self.stop, "postgres",
            (self.lsn,), self.first, self.op, self.ts_ms, self.xid, last_in_tx,
        )  # fmt: skip


class ChangeGroup:
    """The kept changes of a poll: per relation its messages in order, and the stream's
    order as segments ``[rel, count]`` (consecutive changes of one relation) and the Begin
    and Commit messages between them. ``tx``: the transaction the next change belongs to
    (the assembler's own state moves on only when the group is handed out)."""

    __slots__ = ("seq", "msgs", "rows", "size", "tx", "_seg")

    def __init__(self, tx: Any = None) -> None:
        self.seq: list[Any] = []
        self.msgs: dict[int, tuple[RelState, list[bytes]]] = {}
        self.rows = 0
        self.size = 0  # bytes of the kept messages
        self.tx = tx
        self._seg: list[Any] | None = None

    @property
    def full(self) -> bool:
        rows = self.rows
        if rows < GROUP_MIN_ROWS:
            return False
        return (
            rows >= len(self.msgs) * GROUP_ROWS_PER_TABLE
            or rows >= GROUP_MAX_ROWS
            or self.size >= GROUP_MAX_BYTES
        )

    def keep(self, rel: RelState, data: bytes) -> None:
        seg = self._seg
        if seg is not None and seg[0] is rel:
            seg[1] += 1
        else:
            self._seg = [rel, 1]
            self.seq.append(self._seg)
        got = self.msgs.get(id(rel))
        if got is None:
            self.msgs[id(rel)] = (rel, [data])
        else:
            got[1].append(data)
        self.rows += 1
        self.size += len(data)
        self.tx.index += 1

    def mark(self, msg: Any, tx: Any) -> None:
        """A Begin (``tx``: its transaction) or Commit (``tx`` None) between the changes."""
        self.seq.append(msg)
        self._seg = None
        self.tx = tx

    def blocks(self, min_rows: int) -> dict[int, Decoded | None]:
        """Each relation's changes column-wise (with the op of a block of one kind); None:
        that relation's changes go row by row; ``BY_RUN``: its block refused (a value that
        does not convert, a shape off somewhere), each run is decoded on its own (``decode``)
        so that only the runs with such a change go row by row."""
        out: dict[int, Decoded | None] = {}
        for key, (rel, msgs) in self.msgs.items():
            out[key] = None
            if len(msgs) >= min_rows and rel.schema is not None:
                out[key] = decode(rel, msgs) or BY_RUN
        return out


Decoded = tuple[RowBlock, Op]
BY_RUN: Decoded = (RowBlock(pa.table({})), Op.READ)


def decode(rel: RelState, msgs: list[bytes]) -> Decoded | None:
    """``msgs`` (changes of ``rel``) column-wise, or None."""
    cols = change_block(msgs, rel.rows, [c.type for c in rel.schema.columns], rel.key_idx)
    if cols is None:
        return None
    old = None if cols.old_keys is None else RowBlock(cols.old_keys)
    op = Op.CREATE if cols.ops is None and msgs[0][0] == _INSERT else Op.UPDATE
    return RowBlock(cols.after, cols.ops, old), op
