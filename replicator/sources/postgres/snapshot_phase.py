"""The initial snapshot of ``PostgresSource``: begin it (exported by the slot, or resumed in a
REPEATABLE READ snapshot of its own), hand out its rows as 'r' events (row by row, or blocks
read by COPY into Arrow), hand over to the stream at its end, and move its resume state as
its rows are acknowledged. Positions: ``PgPosition(snapshot_lsn, seq)`` (``position.py``);
restart rules in ``snapshot.py``.

A mixin of ``PostgresSource`` (the snapshot half of its lifecycle,
``sources.common.lifecycle``): it shares the source's connections, converters and state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from replicator.checkpoint import EXACT, ReplayWindow
from replicator.errors import SourceSetupError
from replicator.events.block import BlockEvent
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.common.snapshot import SnapshotCursor, record_boundary
from replicator.sources.postgres import setup
from replicator.sources.postgres.changes import (
    ChangeAssembler,
    RelState,
    SourceStats,
    build_rel,
    make_event,
)
from replicator.sources.postgres.copy_chunks import copy_layout
from replicator.sources.postgres.frontier import (
    carried_chunks,
    carried_frontier,
    plain_reads_after,
    record_read,
    resumed_repeats,
    whole_tables_unless_copied,
    without_changed_keys,
)
from replicator.sources.postgres.remote_copy import ChunkRunner, RemoteReads, export_snapshot
from replicator.sources.postgres.snapshot import (
    Chunk,
    SnapshotReader,
    SnapshotState,
    key_layouts,
    table_columns,
)
from replicator.sources.postgres.toast import ROW_CACHE_MIN_CHARS, RowCache, row_chars
from replicator.sources.postgres.types import ValueConversionError

log = logging.getLogger(__name__)


class PgSnapshotPhase:
    """The snapshot steps of ``PostgresSource`` (its attributes, declared here for them)."""

    slot: str
    source_id: str | None
    state_path: Path | None
    snapshot_chunk_rows: int
    snapshot_copy: bool
    snapshot_connections: int
    # Hand a chunk read by COPY out as ONE event (``events.block.BlockEvent``) instead of one
    # per row: set by a consumer that takes block events (``pipeline.reader.SourceReader``).
    snapshot_blocks: bool = False
    # Runs a COPY chunk's read as a task elsewhere (``remote_copy``; set by the pipeline
    # with ``spark.snapshot_on_executors``): chunks are then read by executors.
    chunk_runner: ChunkRunner | None = None
    chunks_per_task: int = 1  # consecutive chunks one such task reads
    dsn: str
    progress: bool | None
    poll_max_messages: int
    replay: ReplayWindow
    stats: SourceStats
    keyless_tables: frozenset[str]
    _lock: threading.RLock
    _conn: psycopg.Connection[Any] | None
    _text_conn: psycopg.Connection[Any] | None
    _asm: ChangeAssembler | None
    _toast: RowCache
    _confirmed: int
    _snap: SnapshotReader | None
    _snap_state: SnapshotState | None
    _snap_lsn: int | None
    _cursor: SnapshotCursor[Chunk] | None
    _snap_rels: dict[str, RelState]
    _snap_last_seq: int
    _snap_acked_seq: int
    _snap_read_all: bool

    def _connect(self) -> psycopg.Connection[Any]:
        raise NotImplementedError  # ``PostgresSource._connect``

    def _checked_state(
        self, state: SnapshotState | None, conn: psycopg.Connection[Any], tables: list[setup.TableInfo]
    ) -> SnapshotState | None:
        """The interrupted snapshot's state, without the saved keys of tables whose key is
        read another way now (``frontier.without_changed_keys``)."""
        return without_changed_keys(state, key_layouts(conn, tables)) if state is not None else None

    def _begin_snapshot(
        self,
        order: list[setup.TableInfo],
        snapshot_name: str | None,
        last_key: list[str | None] | None,
        next_seq: int,
        resumed: SnapshotState | None = None,
        starts: dict[str, list[str | None]] | None = None,
    ) -> None:
        assert self._text_conn is not None and self._conn is not None and self._asm is not None
        self._snap_lsn = snap_lsn = self._confirmed - 1
        columns = {t.qualified: table_columns(self._conn, t) for t in order}
        reader = SnapshotReader(
            self._text_conn, order, columns, self.snapshot_chunk_rows,
            last_key=tuple(last_key) if last_key is not None else None, next_seq=next_seq,
            starts={t: tuple(k) for t, k in (starts or {}).items()},
        )  # fmt: skip
        bound = reader.begin(snapshot_name)
        keyless = sorted(t.qualified for t in order if t.qualified in self.keyless_tables)
        if bound is not None and keyless:
            raise SourceSetupError(
                f"{', '.join(keyless)} (source.keyless_tables) would be copied by a snapshot that "
                "overlaps the stream (an interrupted initial snapshot resumed, or one the slot did not "
                "export): rows read twice cannot be told from duplicates without a primary key",
                table=keyless[0],
                hint="start the pipeline over for these tables: drop its slot, its state_dir and "
                "their Iceberg tables (or give the tables a key)",
            )
        if bound is not None:
            # A fresh snapshot is newer than the slot: rows it saw can come again from the
            # stream. Every commit it sees has its commit record below ``bound`` (see
            # ``SnapshotReader.begin``; safe under synchronous_commit = off).
            until = SourcePosition(source="postgres", parts=(bound, 2**62))
            self.replay = ReplayWindow(snapshot_rows=True, changes_until=until)
            names, done = [t.qualified for t in order], self._asm.committed
            reader.repeats = resumed_repeats(resumed, names, snap_lsn, done)
            self.replay = plain_reads_after(self.replay, snap_lsn, next_seq - 1)
        else:
            self.replay = EXACT  # exported by the slot: exactly its start point
        self._snap = reader
        for t in order:
            cols = columns[t.qualified]
            # The stream's key (changes.key_for): identity index, else primary key.
            rel = self._snap_rels[t.qualified] = build_rel(
                self._asm.mapper, t.qualified, cols, t.key_columns
            )
            layout = copy_layout(rel, t.key_columns) if self.snapshot_copy else None
            if layout is not None and t.key_columns:
                reader.layouts[t.qualified] = layout
        reader.big_row_chars = ROW_CACHE_MIN_CHARS
        if self.chunk_runner is not None and reader.layouts:
            # The reader's own export, not the slot's: tasks import it whenever they start,
            # and the slot's dies with its session (``remote_copy``).
            name = export_snapshot(reader.conn)
            reader.remote = RemoteReads(
                self.chunk_runner, self.dsn, name, self.snapshot_connections, self.chunks_per_task
            )
        elif self.snapshot_connections > 1 and reader.layouts:
            # Opened and inside the snapshot now: the slot's exporting session is still open.
            reader.share([self._connect() for _ in range(self.snapshot_connections)], snapshot_name)
        reader.repeats = whole_tables_unless_copied(reader.repeats, reader.layouts)
        self._snap_state = SnapshotState(
            self.slot, snap_lsn, [t.qualified for t in order], 0, last_key, next_seq,
            source_id=self.source_id, read_frontier=carried_frontier(resumed, snap_lsn),
            read_chunks=carried_chunks(resumed, snap_lsn, next_seq),
            repeats_all=sorted(t for t, k in reader.repeats.items() if k is None),
            key_layouts=key_layouts(self._conn, order),
        )  # fmt: skip
        if self.state_path:
            self._snap_state.save(self.state_path)
        self._cursor = SnapshotCursor(
            reader.chunks(), total=reader.estimated_rows(), desc=f"snapshot {self.slot}",
            progress=self.progress,
        )  # fmt: skip

    def _poll_snapshot(self) -> Iterator[ChangeEvent]:
        assert self._cursor is not None and self._asm is not None
        n = 0
        while n < self.poll_max_messages:
            got = self._cursor.next_rows(self.poll_max_messages - n)
            if got is None:
                self._end_snapshot()
                return
            chunk, start, stop = got
            if start == 0:
                self._take_chunk(chunk)
            n += stop - start
            if chunk.block is not None:
                yield from self._block_events(chunk, start, stop)
                continue
            for i in range(start, stop):
                seq = chunk.first_seq + i
                ev = self._snapshot_event(chunk, chunk.rows[i], seq)
                if ev is not None:
                    assert self._snap_lsn is not None
                    self._asm.last_out = (self._snap_lsn, seq)
                    self._snap_last_seq = seq
                    yield ev

    def _take_chunk(self, chunk: Chunk) -> None:
        """Before a chunk's first row leaves: its rows' policy and the durable frontier."""
        assert self._snap_lsn is not None and chunk.boundary is not None
        with self._lock:
            if chunk.repeats:
                self.replay = plain_reads_after(self.replay, self._snap_lsn, chunk.boundary.seq)
            st = self._snap_state
            bound = self._snap.repeats.get(chunk.table.qualified) if self._snap is not None else None
            if st is not None and not st.complete and self.state_path and \
                    record_read(st, chunk, bound, self._snap_acked_seq):
                st.save(self.state_path)

    def _block_events(self, chunk: Chunk, start: int, stop: int) -> Iterator[ChangeEvent]:
        """Rows ``start:stop`` of a chunk read as Arrow: ONE event for them all
        (``events.block.BlockEvent``, staged by slicing the block) when the consumer takes
        blocks, else its per-row events, whose ``after`` is a view of the block. Every value
        converted, so no dead letters here."""
        block = chunk.block
        assert block is not None and self._snap_lsn is not None and self._asm is not None
        rel = self._snap_rels[chunk.table.qualified]
        lsn, first = self._snap_lsn, chunk.first_seq
        for i, key, size in chunk.big_rows or ():  # the TOAST row cache, as row by row
            if start <= i < stop:
                self._toast.put((rel.table, key), dict(block.row(i)), size)
        ev = BlockEvent(rel.table, rel.schema, block, start, stop, "postgres", (lsn,), first + start)
        if self.snapshot_blocks:
            # Its last row's position is set before it leaves (a consumer may stop after it).
            self._asm.last_out = (lsn, first + stop - 1)
            self._snap_last_seq = first + stop - 1
            self.stats.snapshot_rows += stop - start
            yield ev
            return
        asm, stats, seq = self._asm, self.stats, first + start
        for one in ev.events():
            # The last event's position must be set before it is handed out (a consumer may
            # stop after any event): so per event, as row by row.
            asm.last_out = (lsn, seq)
            self._snap_last_seq = seq
            stats.snapshot_rows += 1
            seq += 1
            yield one

    def _snapshot_event(self, chunk: Chunk, row: tuple[Any, ...], seq: int) -> ChangeEvent | None:
        rel = self._snap_rels[chunk.table.qualified]
        assert rel.rows is not None and self._snap_lsn is not None and self._asm is not None
        parts = (self._snap_lsn, seq)
        try:
            after = rel.rows.convert(row)
        except ValueConversionError as exc:
            self._asm.dead_letter(rel, row, parts, exc)
            return None
        size = row_chars(row)
        if size >= ROW_CACHE_MIN_CHARS:
            self._toast.put((rel.table, tuple(row[i] for i in rel.key_idx)), after, size)
        self.stats.snapshot_rows += 1
        return make_event(rel.table, Op.READ, None, after, parts, rel.schema, None, None, True)

    def _end_snapshot(self) -> None:
        assert self._snap is not None
        if self._snap.remote is not None:
            log.info("snapshot chunks read per executor: %s", dict(sorted(self._snap.remote.readers.items())))
        self._snap.finish()
        self._snap_read_all = True
        with self._lock:
            self._maybe_complete_snapshot()
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None
        log.info("snapshot done: %d rows", self.stats.snapshot_rows)

    def _maybe_complete_snapshot(self) -> None:
        """Every row is read and every row handed out is committed: record the snapshot as
        complete now, not only at the first streamed acknowledgement (which may never come
        in this process; a restart would then take the finished snapshot for a half-read one)."""
        st = self._snap_state
        if st is None or st.complete or not self._snap_read_all:
            return
        if self._snap_acked_seq >= self._snap_last_seq:
            st.complete = True
            st.table_index = len(st.tables)
            if self.state_path:
                st.save(self.state_path)

    def _ack_snapshot(self, seq: int) -> None:
        self._snap_acked_seq = max(self._snap_acked_seq, seq)
        self._maybe_complete_snapshot()
        if self._snap is None or self._snap_state is None or self._snap_state.complete:
            return
        b = self._snap.boundaries.resume_point(seq)
        if b is None:
            return
        key = list(b.last_key) if b.last_key is not None else None
        record_boundary(self._snap_state, b, key, self._snap.next_seq, self.state_path)
