"""The initial snapshot of ``MySQLSource``: begin it in one consistent snapshot at a binlog
point (decoding hints seeded into the schema history), hand out its rows as 'r' events
positioned at that point (``position.py``), and hand over to the binlog stream at its end.
Restart rules and resume state: ``snapshot.py``.

A mixin of ``MySQLSource`` (the snapshot half of its lifecycle, ``sources.common.lifecycle``):
it shares the source's connections, converters, history and state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql

from replicator.checkpoint import ReplayWindow
from replicator.events.block import BlockEvent
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op
from replicator.sources.common.snapshot import SnapshotCursor
from replicator.sources.mysql import setup
from replicator.sources.mysql.emit import Parts, SourceStats, dead_letter, make_event
from replicator.sources.mysql.frontier import (
    fresh_plan,
    plain_reads_after,
    plan_resume,
    record_read,
    with_repeating_chunk,
)
from replicator.sources.mysql.position import (
    MYSQL,
    SNAPSHOT_BASE,
    BinlogPoint,
    BinlogPosition,
    snapshot_parts,
)
from replicator.sources.mysql.schema_history import SchemaHistory, hints_from_columns
from replicator.sources.mysql.snapshot import (
    Chunk,
    SnapshotReader,
    SnapshotState,
    SnapTable,
    describe_tables,
    encode_key,
    key_layouts,
    open_consistent_snapshot,
    snap_table,
)
from replicator.sources.mysql.types import ColumnDef, RowConverter, ValueConversionError

log = logging.getLogger(__name__)


class MySnapshotPhase:
    """The snapshot steps of ``MySQLSource`` (its attributes, declared here for them)."""

    params: setup.ConnParams
    server: setup.ServerInfo | None
    source_id: str | None
    history: SchemaHistory
    zero_dates: str
    progress: bool | None
    snapshot_chunk_rows: int
    poll_max_events: int
    snapshot_path: Path | None
    offsets_path: Path | None
    replay: ReplayWindow
    dead_letters: DeadLetterSink
    stats: SourceStats
    # Hand a chunk converted column-wise out as ONE event (``events.block.BlockEvent``)
    # instead of one per row: set by a consumer that takes block events
    # (``pipeline.reader.SourceReader``).
    snapshot_blocks: bool = False
    _conn: pymysql.Connection[Any] | None
    _defs: dict[str, list[ColumnDef]]
    _converters: list[RowConverter]
    _committed: dict[str, BinlogPosition]
    _resume: BinlogPoint
    _snap: SnapshotReader | None
    _cursor: SnapshotCursor[Chunk] | None
    _snap_point: BinlogPoint | None
    _snap_state: SnapshotState | None
    _lock: threading.RLock  # acknowledge() may come from another thread
    _snap_acked_seq: int  # the last snapshot seq acknowledged (older chunk records are dropped)
    _snap_begin_seq: int  # the reader's first seq in this run

    def _begin_snapshot(
        self,
        order: list[setup.TableInfo],
        point: BinlogPoint | None,
        last_key: tuple[Any, ...] | None,
        next_seq: int,
        resumed: SnapshotState | None = None,
    ) -> None:
        """Open the snapshot and its reader; ``point``: where a resumed one's rows sit (None:
        a fresh start, at the new snapshot), ``resumed``: the interrupted snapshot's state
        (of ``point``; its read frontier, ``frontier.py``), if any."""
        assert self.server is not None and self._conn is not None
        conn = setup.connect(self.params)
        try:
            snap_at = BinlogPoint(*open_consistent_snapshot(conn, self.server.is_mariadb))
            defs = describe_tables(conn, order)  # right after the snapshot opened: see history
            layouts = key_layouts(conn, order)
        except BaseException:
            conn.close()
            raise
        names = [t.qualified for t in order]
        plan = fresh_plan()
        if point is None:  # a fresh start: the stream continues where the snapshot was taken
            point = snap_at
        else:
            # Newer than the resume point: the stream repeats what the snapshot saw, i.e. every
            # transaction written before its binlog point (inserts must become upserts).
            self.replay = ReplayWindow(
                snapshot_rows=True,
                changes_until=BinlogPosition(*snap_at, -1).source_position(),
            )
            if self.offsets_path is not None:  # from an earlier life of these tables
                self.offsets_path.unlink(missing_ok=True)
            plan = plan_resume(resumed, point, names, self._committed, layouts)
            if names and names[0] in plan.starts:  # past the acknowledged boundary: it lags
                last_key = plan.starts[names[0]]
            elif names and names[0] in plan.changed:
                last_key = None  # a key saved in another layout: the table from its start
            if plan.frontier is not None:  # re-read rows past the frontier are plain inserts
                self.replay = plain_reads_after(self.replay, point, next_seq - 1)
        log.info(
            "snapshot of %d table(s) at %s:%d (binlog resumes at %s:%d)",
            len(order),
            *snap_at,
            *point,
        )
        tables = self._snap_tables(order, defs, point)
        self._resume = point
        self._snap_point = point
        reader = SnapshotReader(
            conn, tables, self.snapshot_chunk_rows, last_key=last_key, next_seq=next_seq,
            repeats=plan.repeats, starts=plan.starts,
        )  # fmt: skip
        self._snap = reader
        self._snap_state = SnapshotState(
            list(point), names, 0, encode_key(last_key) if last_key else None, next_seq,
            source_id=self.source_id, read_frontier=plan.frontier,
            repeats_all=sorted(t for t, k in plan.repeats.items() if k is None), read_chunks=plan.read_chunks,
            key_layouts=layouts,
        )  # fmt: skip
        self._snap_acked_seq, self._snap_begin_seq = -1, next_seq
        if self.snapshot_path:
            self._snap_state.save(self.snapshot_path)
        self._cursor = SnapshotCursor(
            reader.chunks(),
            total=reader.estimated_rows(),
            desc="snapshot mysql",
            progress=self.progress,
        )

    def _snap_tables(
        self, order: list[setup.TableInfo], defs: dict[str, list[ColumnDef]], point: BinlogPoint
    ) -> list[SnapTable]:
        """How each table is read and converted (decoding hints recorded in the history at
        ``point`` for tables it does not know: the stream decodes with the same hints)."""
        tables: list[SnapTable] = []
        for t in order:
            cols = defs[t.qualified]
            if not self.history.version(t.qualified):
                self.history.record(
                    t.qualified,
                    hints_from_columns((d.name, d.is_bool, d.is_json) for d in cols),
                    (*point, SNAPSHOT_BASE - 1),
                )
            hints = self.history.get(t.qualified)
            cols = [
                replace(
                    d,
                    is_bool=d.data_type == "tinyint" and hints.is_bool(d.name),
                    is_json=d.data_type == "json"
                    or (d.data_type == "text" and hints.is_json(d.name)),
                )
                for d in cols
            ]
            st = snap_table(t, cols, self.zero_dates)
            self._converters.append(st.rows)
            tables.append(st)
        return tables

    def _seed_history(self, infos: list[setup.TableInfo], at: BinlogPoint) -> None:
        """Hints for tables the history does not know yet (information_schema at start)."""
        known = self.history.load((*at, SNAPSHOT_BASE - 1))
        for t in infos:
            if t.qualified not in known:
                defs = self._defs[t.qualified]
                self.history.record(
                    t.qualified,
                    hints_from_columns((d.name, d.is_bool, d.is_json) for d in defs),
                    (*at, SNAPSHOT_BASE - 1),
                )

    def _snap_table(self, conn: Any, info: setup.TableInfo) -> SnapTable:
        """How a chunk of ``info`` is read and converted now (hints as the stream's)."""
        cols = describe_tables(conn, [info])[info.qualified]
        hints = self.history.get(info.qualified)
        cols = [
            replace(d, is_bool=d.data_type == "tinyint" and hints.is_bool(d.name),
                    is_json=d.data_type == "json" or (d.data_type == "text" and hints.is_json(d.name)))
            for d in cols
        ]  # fmt: skip
        return snap_table(info, cols, self.zero_dates)

    def _dead_letter_row(
        self, t: SnapTable, row: tuple[Any, ...], parts: tuple[Any, ...], exc: ValueConversionError
    ) -> None:
        names = t.rows.names
        dead_letter(self.dead_letters, self.stats, t.info.qualified, t.schema,
                    dict(zip(names, row, strict=False)), parts, exc)  # fmt: skip

    def _poll_snapshot(self) -> Iterator[ChangeEvent]:
        assert self._snap_point is not None
        file, pos = self._snap_point
        n = 0
        while n < self.poll_max_events:
            got = self._cursor.next_rows(self.poll_max_events - n) if self._cursor is not None else None
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
                ev = self._snapshot_event(chunk, i, snapshot_parts(file, pos, chunk.first_seq + i))
                if ev is not None:
                    yield ev

    def _take_chunk(self, chunk: Chunk) -> None:
        """Before a chunk's first row leaves: its rows' policy and the durable frontier."""
        assert self._snap_point is not None
        with self._lock:
            if chunk.repeats:
                self.replay = with_repeating_chunk(self.replay, self._snap_point, chunk.first_seq, chunk.boundary.seq)
            st, bound = self._snap_state, self._snap.repeats.get(chunk.table.info.qualified) if self._snap else None
            if st is not None and not st.complete and self.snapshot_path and \
                    record_read(st, chunk, bound, self._snap_acked_seq):
                st.save(self.snapshot_path)

    def _snapshot_event(self, chunk: Chunk, i: int, parts: Parts) -> ChangeEvent | None:
        """Row ``i`` of a chunk read row by row: its event, or None (skipped, dead-lettered)."""
        t = chunk.table
        done = self._committed.get(t.info.qualified)
        if done is not None and parts <= done:
            self.stats.skipped += 1
            return None
        try:
            after = t.rows.from_snapshot(chunk.rows[i])
        except ValueConversionError as exc:
            self._dead_letter_row(t, chunk.rows[i], parts, exc)
            return None
        self.stats.snapshot_rows += 1
        return make_event(t.info.qualified, Op.READ, None, after, parts, t.schema, None, None, True)

    def _block_events(self, chunk: Chunk, start: int, stop: int) -> Iterator[ChangeEvent]:
        """Rows ``start:stop`` of a chunk converted column-wise (``blocks.py``): ONE event
        for them all (``events.block.BlockEvent``) when the consumer takes blocks, else their
        per-row events (``after`` a view of the block). Rows at or below the table's committed
        position are skipped, as row by row; every value converted, so no dead letters."""
        assert self._snap_point is not None and chunk.block is not None
        t = chunk.table
        file, pos = self._snap_point
        first = SNAPSHOT_BASE + chunk.first_seq  # the row part of the chunk's row 0
        done = self._committed.get(t.info.qualified)
        if done is not None and (file, pos, first + start) <= done:
            if (file, pos, first + stop - 1) <= done:
                self.stats.skipped += stop - start
                return
            covered = done.row - (first + start) + 1  # done shares the snapshot point here
            self.stats.skipped += covered
            start += covered
        ev = BlockEvent(t.info.qualified, t.schema, chunk.block, start, stop, MYSQL, (file, pos), first + start)
        self.stats.snapshot_rows += stop - start
        if self.snapshot_blocks:
            yield ev
        else:
            yield from ev.events()

    def _end_snapshot(self) -> None:
        if self._snap is not None:
            self._snap.finish()
            self._complete_if_nothing_read()
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None
        log.info("snapshot done: %d rows", self.stats.snapshot_rows)

    def _complete_if_nothing_read(self) -> None:
        """A resumed snapshot that found no row left to read (its tables' last commits ended
        their recorded chunks, and nothing follows): every row is committed, and no batch will
        come whose acknowledgement would say so, so the state says it now."""
        assert self._snap is not None
        with self._lock:
            st = self._snap_state
            if st is not None and not st.complete and self._snap.next_seq == self._snap_begin_seq:
                st.complete = True
                if self.snapshot_path:
                    st.save(self.snapshot_path)
