"""Where a MySQL/MariaDB change sits in the binlog: the one definition of a binlog position.

``BinlogPosition(file, tx_begin, row)`` is what ``SourcePosition("mysql", parts)`` carries as
its parts. ``tx_begin`` is the offset of the transaction's first event (its GTID event, or
``BEGIN`` without GTIDs) and ``row = (rows_event_ordinal_in_tx << 32) | row_in_event``,
counting the rows events of every table, so a position does not depend on the table
selection. Tuples compare in commit order (file names compare lexicographically: the server
zero-pads the sequence). Snapshot rows carry the snapshot's binlog point and a negative
``row`` (``SNAPSHOT_BASE + seq``); rows of incremental snapshots ``INCREMENTAL_BASE + n``.

Named tuples: immutable, ordered, and serialized exactly as the bare tuples were
(checkpoints, snapshot summaries and offsets files of earlier versions read back unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from replicator.events.model import SourcePosition

MYSQL = "mysql"  # SourcePosition.source of every MySQL/MariaDB position
SNAPSHOT_BASE = -(1 << 62)
# Rows of incremental snapshots (``incremental.py``): negative too (they sort before the
# transaction at their binlog point) but above every initial-snapshot seq, and streamed-like:
# not snapshot positions for the restart rules.
INCREMENTAL_BASE = -(1 << 61)


class BinlogPoint(NamedTuple):
    """A point between transactions in the binlog: where a stream (re)starts."""

    file: str
    pos: int

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


class BinlogPosition(NamedTuple):
    file: str
    pos: int  # the transaction's first event (a snapshot row: the snapshot's point)
    row: int

    @classmethod
    def of(cls, position: SourcePosition) -> BinlogPosition:
        """The binlog position ``position`` carries (TypeError for another source's)."""
        if position.source != MYSQL:
            raise TypeError(f"not a mysql position: {position}")
        return cls.from_parts(position.parts)

    @classmethod
    def from_parts(cls, parts: Sequence[Any]) -> BinlogPosition:
        file, pos, row = parts
        return cls(str(file), int(pos), int(row))

    @property
    def point(self) -> BinlogPoint:
        """The binlog point of its transaction (a snapshot row: of its snapshot)."""
        return BinlogPoint(self.file, self.pos)

    @property
    def is_snapshot(self) -> bool:
        """A row of an initial snapshot (not of an incremental one)."""
        return self.row < INCREMENTAL_BASE

    @property
    def snapshot_seq(self) -> int:
        return self.row - SNAPSHOT_BASE

    def source_position(self) -> SourcePosition:
        return SourcePosition(MYSQL, self)


def snapshot_parts(file: str, pos: int, seq: int) -> tuple[str, int, int]:
    return (file, pos, SNAPSHOT_BASE + seq)


def is_snapshot_parts(parts: Sequence[Any]) -> bool:
    return len(parts) == 3 and int(parts[2]) < INCREMENTAL_BASE


def snapshot_seq(parts: Sequence[Any]) -> int:
    return int(parts[2]) - SNAPSHOT_BASE
