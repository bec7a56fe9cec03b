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

Narrower still: the table's own checkpoint says which row it committed last (its position
``(snapshot_lsn, S)``), and the state keeps the recent chunks handed out
(``SnapshotState.read_chunks``: table, first and last seq, key bound). The chunk holding S bounds
what the table can hold: its own last key, or, for a chunk that was itself inside the repeat
part of an earlier resume, that resume's bound. A table with no committed row of this snapshot
holds none. Only when S is in no recorded chunk does the frontier (every row handed out) bound
it. Seqs of a resumed run start above every committed one; recorded chunks at or above that
start were never committed and are dropped, so the recorded chunks never share a seq.

When S is the *last* row of a recorded chunk, every row of the table up to that chunk's own
last key (kept with the record) is in it: the resumed read starts after that key
(``committed_starts``) instead of at the acknowledged boundary, which lags when the kill came
between a commit and its acknowledgement reaching the state file (the benchmark's kill, polled
right after a commit, re-read a whole committed batch as upserts). The acknowledged boundary
is never past that key (acknowledgements follow commits). Only the chunk that ENDS at S: an
earlier chunk may be another run's read-ahead that was never committed (its seqs are below
the resumed run's, the state's ``next_seq`` counts the read-ahead), and S, a seq of exactly
one run, tells the run. A record cut where a resumed run's seqs start does not end at its
chunk's last row and keeps no key.

Tables whose every row may repeat (``SnapshotState.repeats_all``): a table added to a resumed
snapshot (it may hold rows from before), every table when there is no state file, or a state
file written before the frontier was kept. A table named in the state and absent from the
frontier had no row handed out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from replicator.checkpoint import ReplayWindow
from replicator.events.model import SourcePosition
from replicator.sources.common.snapshot import pruned_chunk_records
from replicator.sources.postgres.snapshot import Chunk, SnapshotPlan, SnapshotState

# [table, first seq, last seq, key bound (text key or None), text key of the row at the last
# seq (None: not known; absent in files written before)]
ChunkRecord = list[Any]
Repeats = dict[str, tuple[str | None, ...] | None]  # table -> key rows may repeat up to; None: all
SNAPSHOT_SEQ_END = 2**62  # above every snapshot seq: the end of a snapshot's positions


def resumed_repeats(
    state: SnapshotState | None,
    tables: Sequence[str],
    snapshot_lsn: int,
    committed: Mapping[str, tuple[int | str, ...]] | None = None,
) -> Repeats:
    """Per table of a resumed snapshot, how far its re-read rows may already be in it
    (``committed``: the tables' checkpoint positions)."""
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
        elif committed is not None and not _holds_snapshot_rows(committed.get(t), snapshot_lsn):
            continue  # no row of this snapshot committed: none repeats
        elif (bound := _committed_chunk(state, t, committed)) is not None:
            out[t] = None if bound[0] is None else tuple(bound[0])
        elif t in state.read_frontier:
            key = state.read_frontier[t]
            out[t] = None if key is None else tuple(key)
    return out


def _holds_snapshot_rows(position: tuple[int | str, ...] | None, snapshot_lsn: int) -> bool:
    return position is not None and position[0] == snapshot_lsn


def _committed_chunk(
    state: SnapshotState, table: str, committed: Mapping[str, tuple[int | str, ...]] | None
) -> tuple[list[str | None] | None] | None:
    """The key bound of the recorded chunk holding the table's last committed row, or None."""
    pos = committed.get(table) if committed is not None else None
    if pos is None:
        return None
    seq = int(pos[1])
    for c in state.read_chunks:
        if c[0] == table and c[1] <= seq <= c[2]:
            return (c[3],)
    return None


def committed_starts(
    state: SnapshotState | None, tables: Sequence[str], snapshot_lsn: int,
    committed: Mapping[str, tuple[int | str, ...]],
) -> dict[str, list[str | None]]:  # fmt: skip
    """Per table of a resumed snapshot, the key its read may start after: its last committed
    row ends a recorded chunk, so every row up to that chunk's last key is in the table."""
    if state is None or state.snapshot_lsn != snapshot_lsn or state.read_frontier is None:
        return {}
    out: dict[str, list[str | None]] = {}
    for t in tables:
        pos = committed.get(t)
        if t not in state.tables or not _holds_snapshot_rows(pos, snapshot_lsn):
            continue
        assert pos is not None
        for c in state.read_chunks:
            if c[0] == t and c[2] == int(pos[1]) and len(c) > 4 and c[4] is not None:
                out[t] = list(c[4])
    return out


def after_committed_chunks(
    plan: SnapshotPlan | None, state: SnapshotState | None, snapshot_lsn: int,
    committed: Mapping[str, tuple[int | str, ...]],
) -> SnapshotPlan | None:  # fmt: skip
    """``plan`` (``snapshot.plan_resumed_snapshot``) with each table whose last committed row
    ends a recorded chunk read after that chunk (``committed_starts``): the acknowledged
    ``last_key`` lags when the kill came before the acknowledgement."""
    if plan is None:
        return None
    starts = committed_starts(state, [t.qualified for t in plan.tables], snapshot_lsn, committed)
    first = starts.get(plan.tables[0].qualified, plan.last_key)
    return replace(plan, last_key=first, starts=starts)


def without_changed_keys(
    state: SnapshotState | None, layouts: Mapping[str, list[str]]
) -> SnapshotState | None:  # fmt: skip
    """``state`` where each table whose key is read another way now (``layouts``, from
    ``snapshot.key_layouts``) than when its keys were saved has them dropped: every re-read
    row of it repeats (``repeats_all``), its read starts over. A state saved without layouts
    names none (its keys are trusted as before)."""
    if state is None or state.read_frontier is None or not state.key_layouts:
        return state
    changed = {t for t in state.tables if t in layouts and state.key_layouts.get(t) != layouts[t]}
    if not changed:
        return state
    current = state.tables[state.table_index] if state.table_index < len(state.tables) else None
    return replace(
        state,
        read_frontier={t: k for t, k in state.read_frontier.items() if t not in changed},
        read_chunks=[c for c in state.read_chunks if c[0] not in changed],
        repeats_all=sorted({*state.repeats_all, *changed}),
        last_key=None if current in changed else state.last_key,
    )


def carried_chunks(
    state: SnapshotState | None, snapshot_lsn: int, next_seq: int
) -> list[ChunkRecord]:
    """The recorded chunks a resumed snapshot keeps: those that may hold a committed row,
    cut below ``next_seq`` (where the resumed run's own chunks start: no seq in two)."""
    if state is None or state.snapshot_lsn != snapshot_lsn:
        return []
    return [
        # a cut chunk no longer ends at its last key
        [*c[:2], min(c[2], next_seq - 1), c[3], c[4] if c[2] < next_seq and len(c) > 4 else None]
        for c in state.read_chunks
        if c[1] < next_seq
    ]


def carried_frontier(
    state: SnapshotState | None, snapshot_lsn: int
) -> dict[str, list[str | None] | None]:
    """The frontier a resumed snapshot's new state starts from (only of the same snapshot)."""
    if state is None or state.snapshot_lsn != snapshot_lsn or state.read_frontier is None:
        return {}
    return dict(state.read_frontier)


def record_read(
    state: SnapshotState, chunk: Chunk, bound: tuple[str | None, ...] | None, acked_seq: int
) -> bool:
    """Record a chunk about to be handed out (its key bound: its last key, or ``bound`` for a
    chunk that may repeat; and its last key) and move the table's frontier past it; True when
    the state changed (the caller saves it before the chunk's first row leaves). Chunks wholly
    below the acknowledged seq are dropped, but the newest of each table (it may hold that
    table's last committed row)."""
    if state.read_frontier is None or chunk.boundary is None:
        return False
    table = chunk.table.qualified
    if chunk.repeats and bound is None:
        return False  # every row of the table may repeat (``repeats_all``): nothing to know
    last = None if chunk.boundary.last_key is None else list(chunk.boundary.last_key)
    key = list(bound) if chunk.repeats and bound is not None else last
    first = chunk.boundary.seq - len(chunk) + 1
    state.read_chunks = pruned_chunk_records(
        [*state.read_chunks, [table, first, chunk.boundary.seq, key, last]], acked_seq, 2
    )
    if not chunk.repeats:
        state.read_frontier[table] = last
    return True


def whole_tables_unless_copied(repeats: Repeats, copied: Mapping[str, object]) -> Repeats:
    """A table read row by row (no COPY layout, or no key) is not split at its frontier: all
    its re-read rows may repeat (and stay so on a later resume: ``repeats_all``)."""
    return {t: (k if t in copied else None) for t, k in repeats.items()}


def plain_reads_after(window: ReplayWindow, snapshot_lsn: int, seq: int) -> ReplayWindow:
    """``window`` where the snapshot's reads after ``seq`` are plain inserts."""
    return replace(
        window,
        plain_reads=(
            SourcePosition("postgres", (snapshot_lsn, seq)),
            SourcePosition("postgres", (snapshot_lsn, SNAPSHOT_SEQ_END)),
        ),
    )
