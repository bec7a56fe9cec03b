"""A poll's rows events decoded into one block per table version (the compiled decoder,
``rowarrow.py``) and handed out in the stream's order.

A block costs tens of microseconds of Python whatever its rows (an Arrow array per column,
the table, the block): a rows event of a mixed stream holds a few rows, a poll's worth of
one table thousands. So each rows event the compiled decoder takes is appended at once to its
table version's builder (a refusal is known at once, and that event goes the existing way at
its place), and everything the stream would hand out or move after it is recorded instead:
the event's rows as a slice of the coming block, the per-row changes of other events, the
transaction ends, the resume points. ``BinlogStream`` replays the steps in order when the
group is flushed (at the end of a poll, before a DDL statement, past ``GROUP_MAX_ROWS``):
every event, position, transaction end and resume point is what event-by-event handling
gives, only later; a consumer that stops in the middle of the replay leaves the resume
point where the handed-out events end.
"""

from __future__ import annotations

from typing import Any

from replicator.events.block import RowBlock
from replicator.events.model import Op
from replicator.sources.mysql.tablemaps import Rel

# A group is flushed once it holds this many rows: they are decoded and held at once.
GROUP_MAX_ROWS = 8192

# Steps: ("rows", rel, start, stop, parts of the first row, ts_ms, tx_id) - rows start:stop of
# rel's block; ("hold", items) - per-row changes (``BinlogStream._hold``); ("end", file,
# end_pos) - a transaction end (``BinlogStream._end_tx``); ("resume", (file, pos)).
Step = tuple[Any, ...]


class BlockSlice:
    """Rows ``start:stop`` of a block: what a held item carries as ``after`` for a rows
    event decoded into a block (``BinlogStream._emit`` makes it a ``BlockEvent``)."""

    __slots__ = ("block", "op", "start", "stop")

    def __init__(self, block: RowBlock, op: Op, start: int, stop: int) -> None:
        self.block, self.op, self.start, self.stop = block, op, start, stop


class RowGroup:
    """The recorded steps of a poll and the tables whose builders hold rows."""

    __slots__ = ("steps", "rows", "_rels")

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.rows = 0
        self._rels: dict[int, Rel] = {}

    def __bool__(self) -> bool:
        """Whatever the stream does now must be recorded (steps are waiting)."""
        return bool(self.steps)

    @property
    def full(self) -> bool:
        return self.rows >= GROUP_MAX_ROWS

    def take(self, rel: Rel, body: bytes, kind: int, parts: tuple[str, int, int], ts_ms: int,
             tx_id: str) -> int:  # fmt: skip
        """Appends a rows event's body to ``rel``'s builder and records its rows; returns
        how many, or -1: refused (nothing recorded)."""
        arrow = rel.arrow
        assert arrow is not None
        start = arrow.rows
        n = arrow.append(body, kind)
        if n < 0:
            return n
        self._rels[id(rel)] = rel
        self.steps.append(("rows", rel, start, start + n, parts, ts_ms, tx_id))
        self.rows += n
        return n

    def record(self, step: Step) -> None:
        if step[0] == "hold" and self.steps and self.steps[-1][0] == "hold":
            self.steps[-1][1].extend(step[1])
        else:
            self.steps.append(step)

    def take_all(self) -> tuple[list[Step], dict[int, tuple[RowBlock, Op]]]:
        """The steps and each table version's block (by ``id(rel)``); the group is empty
        after."""
        blocks = {key: rel.arrow.finish() for key, rel in self._rels.items() if rel.arrow is not None}
        steps = self.steps
        self.clear(drop=False)
        return steps, blocks

    def clear(self, *, drop: bool = True) -> None:
        """Empties the group (``drop``: the builders' rows too)."""
        if drop:
            for rel in self._rels.values():
                if rel.arrow is not None:
                    rel.arrow.clear()
        self.steps = []
        self.rows = 0
        self._rels = {}


def rows_item(step: Step, blocks: dict[int, tuple[RowBlock, Op]]) -> tuple[Any, ...]:
    """A "rows" step as the item ``BinlogStream._hold`` holds: its rows as a slice of the
    block, at the position of its last row."""
    _kind, rel, start, stop, (file, begin, first), ts_ms, tx_id = step
    block, op = blocks[id(rel)]
    after = BlockSlice(block, op, start, stop)
    return (rel.table, op, None, after, (file, begin, first + stop - start - 1), rel.schema, ts_ms, tx_id)
