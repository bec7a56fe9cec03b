"""The durable read frontier of a MySQL/MariaDB snapshot: which re-read rows may already be in
a table (issue 27, item 5; the Postgres counterpart is ``sources/postgres/frontier.py``).

A resumed snapshot re-reads from the last *acknowledged* chunk boundary (``snapshot.py``) in a
new consistent snapshot, but the pipeline may have committed rows past it (a batch ends
anywhere inside a chunk; an acknowledgement can be lost in a crash). Those rows come again and
must be applied as upserts (an equality delete each). Without more knowledge every re-read
row is treated so: the rest of every unfinished table.

The frontier is that knowledge. Before a chunk's first row is handed out, the key of its last
row is written to the snapshot state file (``SnapshotState.read_frontier``, per table; chunks
are handed out in key order, so it only moves forward). Every row the pipeline can have
committed was handed out, so a table holds no row of this snapshot with a key past its
frontier, and a table the state names without a frontier holds none at all. A resumed
snapshot therefore reads a table with a frontier in two parts (``SnapshotReader.chunks``):
keys up to the frontier, whose chunks may repeat (``Chunk.repeats``), then the keys past it,
plain inserts; a table without one is plain throughout. Rows inserted on the server after the
old snapshot are plain too: the table never held them, and their binlog inserts, which the
stream replays, are upserts anyway (``ReplayWindow.changes_until``).

The source turns "may repeat" into the batch policy through ``ReplayWindow.plain_reads``:
reads after the last repeating chunk handed out, up to the end of the snapshot, are plain; a
batch holding any other read upserts them all.

Tables whose every row may repeat (``SnapshotState.repeats_all``): a table added to a resumed
snapshot (it may hold rows from before). A snapshot resumed without a frontier (no state
file, or one written before the frontier was kept) keeps none: every re-read row repeats, on
this resume and any later one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from replicator.checkpoint import ReplayWindow
from replicator.sources.mysql.position import (
    INCREMENTAL_BASE,
    BinlogPoint,
    BinlogPosition,
    snapshot_parts,
)
from replicator.sources.mysql.snapshot import Chunk, SnapshotState, decode_key, encode_key

Repeats = dict[str, tuple[Any, ...] | None]  # table -> key its rows may repeat up to; None: all


def resumed_repeats(state: SnapshotState | None, tables: Sequence[str]) -> Repeats:
    """Per table of a resumed snapshot (``state``: the interrupted one's, of the same point),
    how far its re-read rows may already be in it; a table left out holds none."""
    if state is None or state.read_frontier is None:
        return dict.fromkeys(tables)
    out: Repeats = {}
    for t in tables:
        if t not in state.tables or t in state.repeats_all:
            out[t] = None
        elif t in state.read_frontier:
            out[t] = decode_key(state.read_frontier[t])
    return out


def carried_frontier(state: SnapshotState | None) -> dict[str, list[Any]] | None:
    """The frontier a resumed snapshot's new state starts from (None: not known)."""
    if state is None or state.read_frontier is None:
        return None
    return dict(state.read_frontier)


def record_read(state: SnapshotState, chunk: Chunk) -> bool:
    """Move the chunk's table's frontier to its last key before its first row is handed out;
    True when the state changed (the caller saves it first)."""
    key = chunk.boundary.last_key
    if state.read_frontier is None or chunk.repeats or key is None:
        return False  # not kept, inside the repeat part, or a keyless table (never resumed)
    state.read_frontier[chunk.table.info.qualified] = encode_key(key)
    return True


def plain_reads_after(window: ReplayWindow, point: BinlogPoint, seq: int) -> ReplayWindow:
    """``window`` where the snapshot's reads after ``seq`` are plain inserts."""
    end = BinlogPosition(point.file, point.pos, INCREMENTAL_BASE - 1)  # above every snapshot seq
    after = BinlogPosition(*snapshot_parts(point.file, point.pos, seq))
    return replace(window, plain_reads=(after.source_position(), end.source_position()))
