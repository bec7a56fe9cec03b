"""The durable read frontier of a chunked snapshot: which re-read rows may already be in a table.

A resumed snapshot re-reads from the last *acknowledged* chunk boundary (``snapshot.py``), but
the pipeline may have committed rows past it (a batch ends anywhere inside a chunk; an
acknowledgement can be lost in a crash). Those rows come again and must be applied as upserts
(an equality delete each). Without more knowledge every re-read row is treated so: a 10M-row
snapshot killed at 40% wrote 6M equality deletes on resume.

The frontier is that knowledge. Before a chunk's first row is handed out, the key of its last
row is written to the snapshot state file (``SnapshotState.read_frontier``, per table, only
ever moving forward in the table's key order). Every row the pipeline can have committed was
handed out, so a table holds no row of this snapshot with a key past its frontier. A resumed
snapshot therefore reads each table in two parts (``SnapshotReader._copy_chunks``): keys up to
the frontier, whose chunks may repeat, then the keys past it, plain inserts. The source turns
"may repeat" into the batch policy through ``ReplayWindow.plain_reads``: reads after the last
chunk that may repeat, up to the end of the snapshot, are plain.

Tables whose every row may repeat (``SnapshotState.repeats_all``): a table added to a resumed
snapshot (it may hold rows from before), every table when there is no state file, or a state
file written before the frontier was kept. A table named in the state and absent from the
frontier had no row handed out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from replicator.checkpoint import ReplayWindow
from replicator.events.model import SourcePosition
from replicator.sources.postgres.snapshot import Chunk, SnapshotState

Repeats = dict[str, tuple[str | None, ...] | None]  # table -> key rows may repeat up to; None: all
SNAPSHOT_SEQ_END = 2**62  # above every snapshot seq: the end of a snapshot's positions


def resumed_repeats(
    state: SnapshotState | None, tables: Sequence[str], snapshot_lsn: int
) -> Repeats:
    """Per table of a resumed snapshot, how far its re-read rows may already be in it."""
    known = (
        state is not None and state.snapshot_lsn == snapshot_lsn and state.read_frontier is not None
    )
    if not known:
        return dict.fromkeys(tables)
    assert state is not None and state.read_frontier is not None
    out: Repeats = {}
    for t in tables:
        if t not in state.tables or t in state.repeats_all:
            out[t] = None
        elif t in state.read_frontier:
            key = state.read_frontier[t]
            out[t] = None if key is None else tuple(key)
    return out


def carried_frontier(
    state: SnapshotState | None, snapshot_lsn: int
) -> dict[str, list[str | None] | None]:
    """The frontier a resumed snapshot's new state starts from (only of the same snapshot)."""
    if state is None or state.snapshot_lsn != snapshot_lsn or state.read_frontier is None:
        return {}
    return dict(state.read_frontier)


def record_read(state: SnapshotState, chunk: Chunk) -> bool:
    """Move the table's frontier to a chunk about to be handed out; True when it moved
    (the caller saves the state before the chunk's first row leaves). A chunk that may
    repeat lies at or before the frontier already."""
    if chunk.repeats or state.read_frontier is None or chunk.boundary is None:
        return False
    key = chunk.boundary.last_key
    state.read_frontier[chunk.table.qualified] = None if key is None else list(key)
    return True


def plain_reads_after(window: ReplayWindow, snapshot_lsn: int, seq: int) -> ReplayWindow:
    """``window`` where the snapshot's reads after ``seq`` are plain inserts."""
    return replace(
        window,
        plain_reads=(
            SourcePosition("postgres", (snapshot_lsn, seq)),
            SourcePosition("postgres", (snapshot_lsn, SNAPSHOT_SEQ_END)),
        ),
    )
