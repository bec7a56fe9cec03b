"""Incremental snapshots: a table copied in key-ordered chunks while the stream goes on, with
no long transaction on the source (the watermark algorithm of Netflix DBLog, as Debezium's
incremental snapshots and Flink CDC's newly-added-table scan use it). Pure: no I/O.

For each chunk the source writes a LOW watermark into its change log, reads the chunk (rows
with key > the table's frontier, in key order, at most ``chunk_rows``), then writes a HIGH
watermark. The chunk's rows wait in a ``ChunkWindow``. Every change the stream hands out
for a key of the chunk, from the moment the chunk was read until the HIGH watermark comes
through the stream, drops that key from the window: the stream carries every change of that
key up to the HIGH point, so its version is at least as new as the chunk's. At the HIGH
watermark the rows left are handed out as 'r' events, positioned at the HIGH watermark,
which the pipeline applies as upserts.

Why the window opens when the chunk is read, not only at the LOW watermark: a transaction
whose commit record precedes LOW may still be invisible to the chunk's read (the server
makes a commit visible a moment after logging it). The reader therefore also notes the
transactions in progress for its read (``in_progress``); a chunk is refused
(``chunk_consistent``) when one of them was already handed out by the stream before the read,
and read again.

Durability: a chunk's key range counts as copied (the table's *frontier* moves past it) only
once every row it handed out is committed (``ChunkLedger``); a restart resumes at the frontier.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from replicator.sources.common.state import JsonStateFile

WATERMARK_PREFIX = "replicator"  # the logical message prefix / signal table owner
RECENT_TRANSACTIONS = 100_000  # transactions remembered for the consistency check

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Watermark:
    """A mark written into the change log around a chunk read."""

    kind: str  # "low" | "high"
    run: str  # the engine process that wrote it (marks of another run are ignored)
    chunk: int
    table: str

    def encode(self) -> str:
        return json.dumps(
            {"kind": self.kind, "run": self.run, "chunk": self.chunk, "table": self.table}
        )

    @staticmethod
    def decode(text: str | bytes) -> Watermark | None:
        """The watermark in a message, or None when it is not one of ours."""
        try:
            raw = json.loads(text)
            wm = Watermark(str(raw["kind"]), str(raw["run"]), int(raw["chunk"]), str(raw["table"]))
        except (ValueError, TypeError, KeyError):
            return None
        return wm if wm.kind in ("low", "high") else None


class ChunkWindow(Generic[K, R]):
    """One chunk's rows, by key, until its HIGH watermark comes through the stream."""

    def __init__(self, table: str, chunk: int, rows: Iterable[tuple[K, R]]) -> None:
        self.table = table
        self.chunk = chunk
        self._rows: dict[K, R] = dict(rows)
        self.read = len(self._rows)
        self.dropped = 0

    def on_change(self, table: str, keys: Iterable[K]) -> None:
        """A change of the stream (its old and new key): the stream's version wins."""
        if table != self.table:
            return
        for key in keys:
            if self._rows.pop(key, None) is not None:
                self.dropped += 1

    def truncated(self, table: str) -> None:
        """The table was emptied at the source (TRUNCATE): none of the chunk's rows is
        current any more; rows written after the TRUNCATE come through the stream."""
        if table == self.table:
            self.dropped += len(self._rows)
            self._rows.clear()

    def close(self) -> list[R]:
        """At the HIGH watermark: the rows to hand out, in key order."""
        rows = list(self._rows.values())
        self._rows.clear()
        return rows


def chunk_consistent(in_progress: Iterable[int], recent: RecentTransactions) -> bool:
    """A chunk read is usable unless a transaction it did not see (in progress for the read)
    was already handed out by the stream before it."""
    return not any(x in recent for x in in_progress)


class RecentTransactions:
    """The ids of the last transactions the stream handed out (bounded)."""

    def __init__(self, size: int = RECENT_TRANSACTIONS) -> None:
        self._order: deque[int] = deque()
        self._set: set[int] = set()
        self._size = size

    def add(self, xid: int) -> None:
        if xid in self._set:
            return
        self._order.append(xid)
        self._set.add(xid)
        if len(self._order) > self._size:
            self._set.discard(self._order.popleft())

    def __contains__(self, xid: object) -> bool:
        return xid in self._set


@dataclass(frozen=True, slots=True)
class ChunkDone:
    """A chunk handed out: where its last row is, and what its key range finishes."""

    table: str
    position: tuple[Any, ...] | None  # of its last row handed out (None: no row yet at all)
    last_key: list[Any] | None  # the frontier once committed (None: nothing read)
    final: bool  # the table's last chunk


class ChunkLedger:
    """Chunks handed out, oldest first, until the pipeline commits their rows."""

    def __init__(self) -> None:
        self._pending: list[ChunkDone] = []

    def handed_out(self, done: ChunkDone) -> None:
        if done.position is None and self._pending:  # committed with the chunk before it
            done = ChunkDone(done.table, self._pending[-1].position, done.last_key, done.final)
        self._pending.append(done)

    def committed(self, position: tuple[Any, ...]) -> list[ChunkDone]:
        """The chunks whose rows are all committed once ``position`` is (in order). A chunk
        that handed out no row is done with the chunks before it."""
        out: list[ChunkDone] = []
        while self._pending:
            c = self._pending[0]
            if c.position is not None and c.position > position:
                break
            out.append(self._pending.pop(0))
        return out

    @property
    def pending(self) -> Sequence[ChunkDone]:
        return tuple(self._pending)


@dataclass
class IncrementalState(JsonStateFile):
    """What survives a restart: the tables still to copy and how far each is copied."""

    source_id: str | None = None
    tables: list[str] = field(default_factory=list)  # in copy order
    frontier: dict[str, list[Any] | None] = field(default_factory=dict)  # committed last key
    # table -> why it is copied: "added" (new to the engine) or "resnapshot" (copied again).
    reason: dict[str, str] = field(default_factory=dict)
    next_seq: int = 0  # sources whose chunk positions need a counter (MariaDB)

    def add(self, table: str, reason: str) -> bool:
        if table in self.tables:
            return False
        self.tables.append(table)
        self.frontier[table] = None
        self.reason[table] = reason
        return True

    def advance(self, done: ChunkDone) -> bool:
        """Record a committed chunk; True when its table is now completely copied."""
        if done.table not in self.tables:
            return False
        if done.final:
            self.tables.remove(done.table)
            self.frontier.pop(done.table, None)
            self.reason.pop(done.table, None)
            return True
        if done.last_key is not None:
            self.frontier[done.table] = done.last_key
        return False
