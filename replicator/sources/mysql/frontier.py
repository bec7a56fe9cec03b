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

The source turns "may repeat" into the batch policy through ``ReplayWindow.plain_reads``: the
resumed run's reads, up to the end of the snapshot, are plain, but for the seq ranges of the
repeating chunks it hands out (``ReplayWindow.repeat_reads``, added before a chunk's first row
leaves: a later table's repeat part comes after an earlier table's plain rows); a batch
holding any of those upserts all its reads.

Narrower still, after a lost acknowledgement (a kill between a commit and its acknowledgement
reaching the state file, which leaves the acknowledged boundary a batch or more behind): each
chunk handed out is recorded (``SnapshotState.read_chunks``: table, last seq, last key, and
whether it was plain, repeating up to a bound, or repeating whole). A table's checkpoint names
the last row it committed (seq S); when S ends a recorded chunk, every row up to that chunk's
key is in the table and none after S is, so the resumed read starts after that key
(``committed_starts``), and only what the chunk's own run could not rule out repeats: nothing
after a plain chunk (every earlier run handed out only keys below it), up to that run's bound
after a repeating one. Seqs never repeat across runs (a chunk's record moves the state's
``next_seq`` past it), so S names exactly one chunk; records wholly below the acknowledged seq
are dropped, but each table's newest.

Tables whose every row may repeat (``SnapshotState.repeats_all``): a table added to a resumed
snapshot (it may hold rows from before). A snapshot resumed without a frontier (no state
file, or one written before the frontier was kept) keeps none: every re-read row repeats, on
this resume and any later one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from replicator.checkpoint import ReplayWindow
from replicator.sources.common.snapshot import pruned_chunk_records
from replicator.sources.mysql.position import (
    INCREMENTAL_BASE,
    BinlogPoint,
    BinlogPosition,
    snapshot_parts,
)
from replicator.sources.mysql.snapshot import Chunk, SnapshotState, decode_key, encode_key

Repeats = dict[str, tuple[Any, ...] | None]  # table -> key its rows may repeat up to; None: all
# A chunk handed out: [table, last seq, encoded last key, kind, encoded repeat bound or None]
ChunkRecord = list[Any]
PLAIN, REPEAT, ALL = "plain", "repeat", "all"  # a chunk's kind: what of its table may repeat


class CommittedChunk(NamedTuple):
    """The recorded chunk a table's last committed row ends: read on after ``start``."""

    start: tuple[Any, ...]
    kind: str
    bound: tuple[Any, ...] | None  # REPEAT: the bound of the run that read it


def committed_chunks(state: SnapshotState | None, committed: Mapping[str, int]) -> dict[str, CommittedChunk]:
    """Per table whose last committed snapshot seq (``committed``, of ``state``'s point) ends a
    recorded chunk, that chunk."""
    if state is None or state.read_frontier is None:
        return {}
    ends = {(c[0], int(c[1])): c for c in state.read_chunks}
    out: dict[str, CommittedChunk] = {}
    for t, seq in committed.items():
        c = ends.get((t, seq))
        if c is not None:
            out[t] = CommittedChunk(decode_key(c[2]), c[3], decode_key(c[4]) if c[4] is not None else None)
    return out


def resumed_repeats(
    state: SnapshotState | None, tables: Sequence[str], at_commit: Mapping[str, CommittedChunk] | None = None,
    holds: Collection[str] | None = None, changed: Collection[str] = (),
) -> Repeats:  # fmt: skip
    """Per table of a resumed snapshot (``state``: the interrupted one's, of the same point),
    how far its re-read rows may already be in it; a table left out holds none. ``at_commit``:
    the chunks the tables' last committed rows end (``committed_chunks``); ``holds``: the
    tables with a committed position (None: not known), the others hold nothing;
    ``changed``: tables whose key is read another way than when their frontier was kept."""
    if state is None or state.read_frontier is None:
        return dict.fromkeys(tables)
    at_commit = at_commit or {}
    out: Repeats = {}
    for t in tables:
        chunk = at_commit.get(t)
        if t not in state.tables or t in state.repeats_all or t in changed:
            out[t] = None
        elif holds is not None and t not in holds:
            continue  # nothing of it committed: nothing repeats
        elif chunk is not None:
            if chunk.kind != PLAIN:
                out[t] = chunk.bound if chunk.kind == REPEAT else None
        elif t in state.read_frontier:
            out[t] = decode_key(state.read_frontier[t])
    return out


class ResumePlan(NamedTuple):
    """What a (resumed) snapshot knows of its tables' rows: how far each may repeat
    (``resumed_repeats``), the frontier and chunk records its state carries on, the key each
    table whose last commit ends a recorded chunk is read on after, and the tables whose key
    layout changed since (their saved keys are dropped: every row repeats)."""

    repeats: Repeats
    frontier: dict[str, list[Any]] | None
    starts: dict[str, tuple[Any, ...]]
    read_chunks: list[ChunkRecord]
    changed: frozenset[str] = frozenset()


def fresh_plan() -> ResumePlan:
    """A first snapshot's: nothing handed out before, every row plain (new containers: the
    state mutates its frontier and records)."""
    return ResumePlan({}, {}, {}, [])


def plan_resume(
    resumed: SnapshotState | None, point: BinlogPoint, tables: Sequence[str],
    committed: Mapping[str, BinlogPosition], layouts: Mapping[str, list[str]],
) -> ResumePlan:  # fmt: skip
    """The plan of a snapshot resumed at ``point`` (its rows' positions), ``resumed`` the
    interrupted one's state, ``committed`` the tables' checkpoint positions, ``layouts`` their
    key layouts now (``snapshot.key_layouts``)."""
    if resumed is not None and tuple(resumed.point) != tuple(point):
        resumed = None  # another snapshot's frontier says nothing about this one
    changed: frozenset[str] = frozenset()
    if resumed is not None:
        handed = set(resumed.read_frontier or {}) | {c[0] for c in resumed.read_chunks}
        changed = frozenset(t for t in tables if t in handed and resumed.key_layouts.get(t) != layouts.get(t))
    seqs = {t: p.snapshot_seq for t, p in committed.items()
            if p.is_snapshot and p.point == tuple(point) and t not in changed}  # fmt: skip
    at_commit = {t: c for t, c in committed_chunks(resumed, seqs).items() if t in tables}
    frontier = carried_frontier(resumed)
    if frontier is not None:
        frontier = {t: k for t, k in frontier.items() if t not in changed}
    records = [c for c in resumed.read_chunks if c[0] not in changed] if resumed is not None else []
    return ResumePlan(
        resumed_repeats(resumed, tables, at_commit, holds=set(committed), changed=changed), frontier,
        {t: c.start for t, c in at_commit.items()}, records if frontier is not None else [], changed,
    )  # fmt: skip


def carried_frontier(state: SnapshotState | None) -> dict[str, list[Any]] | None:
    """The frontier a resumed snapshot's new state starts from (None: not known)."""
    if state is None or state.read_frontier is None:
        return None
    return dict(state.read_frontier)


def record_read(state: SnapshotState, chunk: Chunk, bound: tuple[Any, ...] | None, acked_seq: int) -> bool:
    """Record a chunk before its first row is handed out (``bound``: how far its table's rows
    may repeat, for a repeating chunk) and move its table's frontier to its last key; True
    when the state changed (the caller saves it first)."""
    key = chunk.boundary.last_key
    if state.read_frontier is None or key is None:
        return False  # not kept, or a keyless table (never resumed at a key)
    table = chunk.table.info.qualified
    kind = PLAIN if not chunk.repeats else REPEAT if bound is not None else ALL
    record = [table, chunk.boundary.seq, encode_key(key), kind, encode_key(bound) if bound is not None else None]
    state.read_chunks = pruned_chunk_records([*state.read_chunks, record], acked_seq, 1)
    state.next_seq = max(state.next_seq, chunk.boundary.seq + 1)  # a resumed run's seqs start above
    if kind == PLAIN:
        state.read_frontier[table] = encode_key(key)
    return True


def plain_reads_after(window: ReplayWindow, point: BinlogPoint, seq: int) -> ReplayWindow:
    """``window`` where the snapshot's reads after ``seq`` are plain inserts."""
    end = BinlogPosition(point.file, point.pos, INCREMENTAL_BASE - 1)  # above every snapshot seq
    after = BinlogPosition(*snapshot_parts(point.file, point.pos, seq))
    return replace(window, plain_reads=(after.source_position(), end.source_position()))


def with_repeating_chunk(window: ReplayWindow, point: BinlogPoint, first: int, last: int) -> ReplayWindow:
    """``window`` where the snapshot's reads with seqs ``first`` to ``last`` may repeat (a
    range right after the previous one extends it)."""
    lo = BinlogPosition(*snapshot_parts(point.file, point.pos, first)).source_position()
    hi = BinlogPosition(*snapshot_parts(point.file, point.pos, last)).source_position()
    ranges = window.repeat_reads
    if ranges and BinlogPosition.of(ranges[-1][1]).row + 1 == BinlogPosition.of(lo).row:
        return replace(window, repeat_reads=(*ranges[:-1], (ranges[-1][0], hi)))
    return replace(window, repeat_reads=(*ranges, (lo, hi)))
