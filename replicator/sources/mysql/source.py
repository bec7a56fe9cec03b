"""MySQLSource: initial snapshot, then row events from the binlog (MariaDB 10.5+, MySQL 8.0.14+).

Positions: ``SourcePosition("mysql", (binlog_file, tx_begin, row_index))``.
``tx_begin`` is the offset of the transaction's first event (its GTID event, or ``BEGIN``
without GTIDs) and ``row_index = (rows_event_ordinal_in_tx << 32) | row_in_event``, counting
the rows events of every table (selected or not, decoded or not), so a position does not
depend on the table selection and re-reading a transaction from its start reproduces it
exactly. Tuples compare in commit order: the binlog is written in commit order, a
transaction never spans two files, and file names compare lexicographically because the
server zero-pads the sequence to six digits (``binlog.000009 < binlog.000010``; a basename
change or more than 999999 files would break that, and a changed basename is refused).
Snapshot rows use a negative ``row_index`` (see ``snapshot.py``).

Transactions: events of one transaction share ``tx_id`` (the GTID, e.g. MariaDB ``0-1-42``,
else ``file:tx_begin``); the source holds back one event and marks the last one of the
transaction ``last_in_tx=True`` at XID / ``COMMIT`` (or after a standalone statement).

Resume (``start(checkpoints)``): the stream restarts at ``(file, tx_begin)`` of the smallest
committed position of the selected tables, raised to the last acknowledged position recorded
in ``<state_dir>/mysql-<server_id>.offsets.json`` when there is one (tables without changes
would otherwise pin an old position), and skips every row at or below its table's committed
position (and at or below the acknowledged one). A resume file that is no longer on the
server (``SHOW BINARY LOGS``) is a terminal error: the missing changes cannot be replayed.
Tables with no committed position, or whose committed position is a snapshot position not
known to be complete, are snapshotted first (rules in ``snapshot.py``); the snapshot rows
sort below the resume point, above anything committed there.

State (``state_dir``, optional; files named after ``server_id``, which must stay the same
across restarts, and stamped with the server's identity: a file of another server is refused,
see ``replicator.sources.common.identity``): ``.snapshot.json`` (where an interrupted snapshot continues, which tables
finished), ``.offsets.json`` (last acknowledged position; trusted only when some table's
committed position is at least as far, i.e. it belongs to this catalog), ``.schema.json``
(schema history). Without it: an interrupted snapshot restarts its tables, a table whose
last committed row is a snapshot row is re-read at every start, the stream restarts at the
smallest committed position, and the history is re-seeded from information_schema.
The table selection is fixed at ``start()``: a table created later is picked up (and
snapshotted) at the next start.

Replays (``self.replay``): exact only for a fresh start (one consistent snapshot, the stream
starts exactly at its point); a resumed or added-table snapshot is newer than the resume
point, so ``replay.changes_until`` is set to its binlog point ``(file, pos, -1)``: the stream
repeats every transaction written before it, and the pipeline applies those inserts as
upserts. Fencing: MariaDB cuts off an older binlog reader with the same server_id, so the
source holds ``GET_LOCK('replicator.mysql.<server_id>')`` on its control connection (a second
engine gets ``FencedError``); ``fencing_token`` is the server clock in microseconds at that
moment (grows with each new owner unless the server clock is set back).

Schema: columns, types and the primary key come from each table-map event (binlog_row_metadata
FULL); ``schema_history.py`` supplies what the binlog lacks (tinyint(1), MariaDB JSON).
``ALTER TABLE .. ADD/DROP/MODIFY COLUMN`` shows up as a new ``TableSchema`` on later events.
RENAME TABLE / ``ALTER TABLE .. RENAME`` / DROP TABLE of a replicated table stop the source
with ``SchemaChangeError`` at that statement (every restart stops there again): re-snapshot
the table under its new name (drop its Iceberg table), or take it out of ``source.tables``
(list the tables explicitly when none are configured). A committed table that is gone (or
lost its primary key) by the time the engine starts is still followed through the binlog up
to that statement, also when the tables are selected by default (see ``setup.list_tables``):
otherwise it would silently leave the selection with its Iceberg table stale.
TRUNCATE is dead-lettered (not replicated), as in the Postgres source.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql

from replicator.checkpoint import EXACT, Checkpoints, ReplayWindow
from replicator.errors import TerminalError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.base import ChangeSource, LogPosition, RetainedLog
from replicator.sources.common.identity import check_checkpoints, check_state
from replicator.sources.common.incremental import IncrementalState
from replicator.sources.common.snapshot import SnapshotCursor
from replicator.sources.mysql import setup
from replicator.sources.mysql.incremental import MyIncremental
from replicator.sources.mysql.retained import binlog_head, binlog_position
from replicator.sources.mysql.schema_history import SchemaHistory, hints_from_columns
from replicator.sources.mysql.snapshot import (
    SNAPSHOT_BASE,
    Chunk,
    SnapshotReader,
    SnapshotState,
    SnapTable,
    decode_key,
    describe_tables,
    encode_key,
    is_snapshot_parts,
    open_consistent_snapshot,
    snap_table,
    snapshot_parts,
    snapshot_seq,
)
from replicator.sources.mysql.stream import BinlogStream, SourceStats, dead_letter, make_event
from replicator.sources.mysql.types import (
    ZERO_DATE_POLICIES,
    ColumnDef,
    RowConverter,
    ValueConversionError,
    check_types,
)

log = logging.getLogger(__name__)
FENCE_PING_SECONDS = 60.0


class MySQLSource(ChangeSource):
    kind = "mysql"

    def __init__(
        self,
        dsn: str,
        *,
        dead_letters: DeadLetterSink,
        server_id: int = 4242,
        tables: Sequence[str] | None = None,
        snapshot_chunk_rows: int = 10000,
        state_dir: str | Path | None = None,
        poll_max_events: int = 20000,
        zero_dates: str = "null",
        progress: bool | None = None,
        row_decoder: str = "fast",
    ) -> None:
        super().__init__(dead_letters)
        if zero_dates not in ZERO_DATE_POLICIES:
            raise ValueError(f"zero_dates must be one of {ZERO_DATE_POLICIES}")
        if row_decoder not in ("fast", "library"):
            raise ValueError("row_decoder must be 'fast' or 'library'")
        self.params = setup.parse_dsn(dsn)
        self.server_id = server_id
        self.tables_config = list(tables) if tables is not None else None
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self.poll_max_events = poll_max_events
        self.zero_dates = zero_dates
        self.fast_rows = row_decoder == "fast"
        self.progress = progress
        state = Path(state_dir) if state_dir else None
        self.snapshot_path = state / f"mysql-{server_id}.snapshot.json" if state else None
        self.offsets_path = state / f"mysql-{server_id}.offsets.json" if state else None
        self.history = SchemaHistory(state / f"mysql-{server_id}.schema.json" if state else None)
        self.stats = SourceStats()
        self.server: setup.ServerInfo | None = None
        self._lock = threading.RLock()  # acknowledge() may come from another thread
        self._fence_checked = 0.0
        self._conn: pymysql.Connection[Any] | None = None
        self._tables: dict[str, setup.TableInfo] = {}
        self._committed: dict[str, tuple[Any, ...]] = {}
        self._defs: dict[str, list[ColumnDef]] = {}
        self._converters: list[RowConverter] = []
        # stream (created when the snapshot is done)
        self._stream: BinlogStream | None = None
        self._resume: tuple[str, int] = ("", 4)
        self._last_out: tuple[Any, ...] = ()
        # snapshot
        self._snap: SnapshotReader | None = None
        self._cursor: SnapshotCursor[Chunk] | None = None  # set while the snapshot is read
        self._snap_point: tuple[str, int] | None = None
        self._snap_state: SnapshotState | None = None
        self._incr: MyIncremental | None = None  # tables copied while streaming (MariaDB)
        self._checkpointed: list[str] = []
        self.incremental_path = state / f"mysql-{server_id}.incremental.json" if state else None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, checkpoints: Checkpoints) -> None:
        try:
            self._start(checkpoints)
        except BaseException:
            self.close()
            raise

    def _start(self, checkpoints: Checkpoints) -> None:
        committed: Mapping[str, SourcePosition] = checkpoints.positions()
        conn = self._conn = setup.connect(self.params)
        self.fencing_token = setup.acquire_fence(conn, self.server_id)
        self._fence_checked = time.monotonic()
        self.server = setup.check_server(conn, source_server_id=self.server_id)
        setup.check_privileges(conn)
        self.source_id = setup.source_identity(conn, self.server.is_mariadb)
        state = SnapshotState.load(self.snapshot_path) if self.snapshot_path else None
        if state is not None and self.snapshot_path is not None:
            check_state(self.snapshot_path, state.source_id, self.source_id)
        listed = setup.list_tables(
            conn,
            self.tables_config,
            self.params.database,
            committed=[t for t, p in committed.items() if p.source == "mysql"],
        )
        check_checkpoints(checkpoints, self.source_id, self.kind, {t.qualified for t in listed})
        # Committed tables renamed, dropped or stripped of their key while the engine was
        # stopped: streamed (never snapshotted) up to that statement, where the stream stops.
        infos = [i for i in listed if i.pk_columns]
        for g in listed:
            if not g.pk_columns:
                log.warning(
                    "%s is no longer on the server as a table with a primary key; following "
                    "the binlog to the statement that changed it",
                    g.qualified,
                )
        setup.check_select(conn, infos)
        self._defs = describe_tables(conn, infos)  # now: type checks and (maybe) history seeds
        check_types(self._defs, {t.qualified: t for t in infos})
        self._tables = {t.qualified: t for t in listed}
        self._committed = {
            t: tuple(p.parts)
            for t, p in committed.items()
            if p.source == "mysql" and t in self._tables
        }
        files = setup.binary_logs(conn)
        basename = setup.binlog_basename(list(files)[-1]) if files else ""
        self._checkpointed = sorted(t for t, p in committed.items() if p.source == "mysql")
        if not self._committed:
            self._begin_snapshot(infos, None, None, 0)
            self.replay = EXACT  # one consistent snapshot, the stream starts at it
            self._start_incremental([])
            return
        for t, p in self._committed.items():
            if setup.binlog_basename(str(p[0])) != basename:
                raise TerminalError(
                    f"committed position {p[0]} is from binlog "
                    f"{setup.binlog_basename(str(p[0]))!r}, "
                    f"the server writes {basename!r}: positions cannot be compared",
                    table=t,
                    hint="re-snapshot: drop this source's Iceberg tables and restart",
                )
        resume = min((str(p[0]), int(p[1])) for p in self._committed.values())
        acked = self._load_acked(basename)
        if acked is not None and (acked[0], acked[1]) > resume:
            resume = (acked[0], acked[1])
            self._last_out = acked  # durable for every table: never hand it out again
        setup.check_resume_file(
            files, resume[0], resume[1], SourcePosition(source="mysql", parts=(*resume, 0))
        )
        self._resume = resume
        log.info("resuming the binlog at %s:%d", *resume)
        points = {(str(p[0]), int(p[1])) for p in self._committed.values() if is_snapshot_parts(p)}
        if state is not None and tuple(state.point) not in points:
            state = None  # no committed row of that snapshot is left to judge: ignore it
        done = state.done_tables() if state else set()

        def finished(p: tuple[Any, ...], table: str) -> bool:
            """A streamed position, or the end of a snapshot the state file saw complete."""
            if not is_snapshot_parts(p):
                return True
            return state is not None and (p[0], p[1]) == tuple(state.point) and table in done

        needs = [
            t
            for t in infos
            if t.qualified not in self._committed
            or not finished(self._committed[t.qualified], t.qualified)
        ]
        # Tables new to this pipeline are copied while streaming (MariaDB, with a state dir).
        needs = self._start_incremental(needs)
        self._seed_history([t for t in infos if t not in needs], resume)
        if not needs:
            return
        seqs = [
            snapshot_seq(p)
            for p in self._committed.values()
            if is_snapshot_parts(p) and (p[0], p[1]) == resume
        ]
        next_seq = max([s + 1 for s in seqs] + [state.next_seq if state else 0])
        last_key = None
        if state is not None and not state.complete and state.table_index < len(state.tables):
            current = state.tables[state.table_index]
            needs.sort(key=lambda t: (t.qualified != current, t.qualified))  # resume it first
            if state.last_key is not None and needs and needs[0].qualified == current:
                last_key = decode_key(state.last_key)
        self._begin_snapshot(needs, resume, last_key, next_seq)

    def _start_incremental(self, needs: list[setup.TableInfo]) -> list[setup.TableInfo]:
        """Set up incremental snapshots; returns the tables left to the snapshot before
        streaming (an interrupted first copy, or no incremental snapshots here)."""
        assert self.server is not None
        if self.incremental_path is None or not self.server.is_mariadb:
            return needs
        state = IncrementalState.load(self.incremental_path)
        if state is None or state.source_id not in (None, self.source_id):
            state = IncrementalState(source_id=self.source_id)
        state.source_id = self.source_id
        for gone in [t for t in state.tables if t not in self._tables]:
            log.info("incremental snapshot of %s dropped: the table is no longer selected", gone)
            state.tables.remove(gone)
        for gone in [t for t in self._checkpointed if t not in self._tables]:
            log.info("%s is no longer selected: its changes are not replicated any more; its "
                     "Iceberg table is kept as it is", gone)  # fmt: skip
        self._incr = MyIncremental(
            params=self.params, tables=self._tables, snap_table=self._snap_table, state=state,
            state_path=self.incremental_path, chunk_rows=self.snapshot_chunk_rows,
            dead_letter=self._dead_letter_row, progress=self.progress,
        )  # fmt: skip
        new = [t for t in needs if t.qualified not in self._committed or t.qualified in state.tables]
        for t in new:
            self._incr.add(t.qualified, "added")
        self._incr.save()
        if self._incr.active:
            self.replay = replace(self.replay, snapshot_rows=True)  # chunk rows are upserts
        return [t for t in needs if t not in new]

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

    def request_snapshot(self, tables: Sequence[str], reason: str) -> list[str]:
        """Copy ``tables`` again while streaming; returns the ones that cannot be."""
        with self._lock:
            if self._incr is None:
                return list(tables)
            refused = [t for t in tables if t not in self._tables]
            for t in tables:
                if t in self._tables:
                    self._incr.add(t, reason)
            self.replay = replace(self.replay, snapshot_rows=True)
            return refused

    @property
    def incremental_pending(self) -> list[str]:
        with self._lock:
            pending = list(self._incr.state.tables) if self._incr is not None else []
            return pending + [t for t in self._checkpointed if t not in self._tables]

    @property
    def incremental_active(self) -> bool:
        """An incremental snapshot has rows not yet committed (or chunks not yet read)."""
        return self._incr is not None and self._incr.active

    @property
    def incremental_finished(self) -> list[str]:
        with self._lock:
            if self._incr is None:
                return []
            out, self._incr.finished = self._incr.finished, []
            return out

    def _load_acked(self, basename: str) -> tuple[Any, ...] | None:
        if self.offsets_path is None:
            return None
        try:
            raw = json.loads(self.offsets_path.read_text())
            acked = tuple(raw["acked"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        assert self.source_id is not None
        check_state(self.offsets_path, raw.get("source_id"), self.source_id)
        # Trust it only when it matches this catalog: some table committed at least that far.
        if (
            setup.binlog_basename(str(acked[0])) != basename
            or is_snapshot_parts(acked)
            or acked > max(self._committed.values())
        ):
            return None
        return acked

    def _seed_history(self, infos: list[setup.TableInfo], at: tuple[str, int]) -> None:
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

    def _begin_snapshot(
        self,
        order: list[setup.TableInfo],
        point: tuple[str, int] | None,
        last_key: tuple[Any, ...] | None,
        next_seq: int,
    ) -> None:
        assert self.server is not None and self._conn is not None
        conn = setup.connect(self.params)
        try:
            snap_at = open_consistent_snapshot(conn, self.server.is_mariadb)
            defs = describe_tables(conn, order)  # right after the snapshot opened: see history
        except BaseException:
            conn.close()
            raise
        if point is None:  # a fresh start: the stream continues where the snapshot was taken
            point = snap_at
        else:
            # Newer than the resume point: the stream repeats what the snapshot saw, i.e. every
            # transaction written before its binlog point (inserts must become upserts).
            self.replay = ReplayWindow(
                snapshot_rows=True,
                changes_until=SourcePosition(source="mysql", parts=(*snap_at, -1)),
            )
            if self.offsets_path is not None:  # from an earlier life of these tables
                self.offsets_path.unlink(missing_ok=True)
        log.info(
            "snapshot of %d table(s) at %s:%d (binlog resumes at %s:%d)",
            len(order),
            *snap_at,
            *point,
        )
        tables: list[SnapTable] = []
        for t in order:
            cols = defs[t.qualified]
            if not self.history.version(t.qualified):
                self.history.record(
                    t.qualified,
                    hints_from_columns((d.name, d.is_bool, d.is_json) for d in cols),
                    (*point, SNAPSHOT_BASE - 1),
                )
            hints = self.history.get(t.qualified)  # the stream decodes with the same hints
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
        self._resume = point
        self._snap_point = point
        reader = SnapshotReader(
            conn, tables, self.snapshot_chunk_rows, last_key=last_key, next_seq=next_seq
        )
        self._snap = reader
        self._snap_state = SnapshotState(
            list(point),
            [t.qualified for t in order],
            0,
            encode_key(last_key) if last_key else None,
            next_seq,
            source_id=self.source_id,
        )
        if self.snapshot_path:
            self._snap_state.save(self.snapshot_path)
        self._cursor = SnapshotCursor(
            reader.chunks(),
            total=reader.estimated_rows(),
            desc="snapshot mysql",
            progress=self.progress,
        )

    def close(self) -> None:
        with self._lock:
            if self._cursor is not None:
                self._cursor.close()
                self._cursor = None
            if self._stream is not None:
                self._stream.close()
            if self._incr is not None:
                self._incr.close()
            if self._snap is not None:
                with contextlib.suppress(pymysql.err.Error):
                    self._snap.conn.close()
            if self._conn is not None:
                with contextlib.suppress(pymysql.err.Error):
                    setup.release_fence(self._conn, self.server_id)
                with contextlib.suppress(pymysql.err.Error):
                    self._conn.close()
                self._conn = None

    def head_position(self) -> LogPosition | None:
        return binlog_head(self.params)

    def reached_position(self) -> LogPosition | None:
        if self._cursor is not None:
            return None
        at = self._stream.reached_now() if self._stream is not None else self._resume
        return binlog_position(*at) if at[0] else None

    def retained_log(self, acknowledged: SourcePosition | None) -> RetainedLog | None:
        from replicator.sources.mysql.retained import binlog_retained

        committed = None
        if acknowledged is not None and acknowledged.source == "mysql":
            # A snapshot row's position carries the binlog point the stream starts from.
            committed = (str(acknowledged.parts[0]), int(acknowledged.parts[1]))
        return binlog_retained(self.params, committed)

    # -- polling ------------------------------------------------------------------------------
    def poll(self) -> Iterator[ChangeEvent]:
        if self._conn is None:
            raise TerminalError("MySQLSource.poll() before start()")
        self._keep_fence()
        if self._cursor is not None:
            yield from self._poll_snapshot()
            if self._cursor is not None:
                return
        # No snapshot (left): stream. A poll that finishes the snapshot streams on, so that an
        # empty poll always means idle.
        if self._stream is None:
            self._stream = BinlogStream(
                self.params,
                self.server_id,
                self._tables,
                self._committed,
                self.history,
                self.dead_letters,
                self.stats,
                self.zero_dates,
                self._resume,
                self._last_out,
                fast_rows=self.fast_rows,
            )
            if self._incr is not None:
                self._stream.at_boundary = self._incr.at_boundary
        incr = self._incr
        while True:  # with chunks left, never an empty poll (it would read as idle)
            if incr is not None:
                with self._lock:
                    incr.next_chunk()
            got = False
            for ev in self._stream.poll(self.poll_max_events):
                got = True
                yield ev
            if got or incr is None or not incr.busy:
                return

    def _keep_fence(self) -> None:
        """The fence lives as long as the control connection: keep it from idling out (the
        server drops idle sessions after wait_timeout) and take the lock again if it did."""
        if self._conn is None or time.monotonic() - self._fence_checked < FENCE_PING_SECONDS:
            return
        self._fence_checked = time.monotonic()
        try:
            self._conn.ping(reconnect=False)
        except pymysql.err.Error:
            with contextlib.suppress(pymysql.err.Error):
                self._conn.close()
            self._conn = setup.connect(self.params)
            self.fencing_token = setup.acquire_fence(self._conn, self.server_id)

    def _poll_snapshot(self) -> Iterator[ChangeEvent]:
        assert self._snap_point is not None
        file, pos = self._snap_point
        n = 0
        while n < self.poll_max_events:
            row = self._cursor.next_row() if self._cursor is not None else None
            if row is None:
                self._end_snapshot()
                return
            chunk, i = row
            n += 1
            t = chunk.table
            parts = snapshot_parts(file, pos, chunk.first_seq + i)
            done = self._committed.get(t.info.qualified)
            if done is not None and parts <= done:
                self.stats.skipped += 1
                continue
            try:
                after = t.rows.from_snapshot(chunk.rows[i])
            except ValueConversionError as exc:
                names = t.rows.names
                dead_letter(
                    self.dead_letters,
                    self.stats,
                    t.info.qualified,
                    t.schema,
                    dict(zip(names, chunk.rows[i], strict=False)),
                    parts,
                    exc,
                )
                continue
            self.stats.snapshot_rows += 1
            yield make_event(
                t.info.qualified, Op.READ, None, after, parts, t.schema, None, None, True
            )

    def _end_snapshot(self) -> None:
        if self._snap is not None:
            self._snap.finish()
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None
        log.info("snapshot done: %d rows", self.stats.snapshot_rows)

    # -- acknowledgements ---------------------------------------------------------------------
    def acknowledge(self, position: SourcePosition) -> None:
        if position.source != "mysql":
            raise TypeError(f"not a mysql position: {position}")
        parts = tuple(position.parts)
        with self._lock:
            st = self._snap_state
            if is_snapshot_parts(parts):
                if (
                    st is not None
                    and self._snap is not None
                    and (parts[0], parts[1]) == tuple(st.point)
                ):
                    b = self._snap.boundaries.resume_point(snapshot_seq(parts))
                    if b is not None:
                        st.table_index = b.table_index
                        st.last_key = encode_key(b.last_key) if b.last_key is not None else None
                        st.next_seq = self._snap.next_seq
                        st.complete = b.table_index >= len(st.tables)
                        if self.snapshot_path:
                            st.save(self.snapshot_path)
                return
            if self._incr is not None:
                self._incr.acknowledge(parts)
            if st is not None and not st.complete:
                st.complete = True  # a streamed position: every snapshot row before it is durable
                if self.snapshot_path:
                    st.save(self.snapshot_path)
            if self.offsets_path is not None:
                self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.offsets_path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"acked": list(parts), "source_id": self.source_id}))
                os.replace(tmp, self.offsets_path)

    # -- introspection --------------------------------------------------------------------------
    @property
    def snapshot_in_progress(self) -> bool:
        # An incremental snapshot too: a table partly copied makes no consistent cut.
        return self._cursor is not None or (self._incr is not None and self._incr.active)

    @property
    def zero_dates_nulled(self) -> int:
        stream = self._stream.converters if self._stream is not None else []
        return sum(c.zero_count for c in [*self._converters, *stream])

    @property
    def resume_position(self) -> tuple[str, int]:
        """Where the binlog stream (re)starts: the next transaction not fully read."""
        return self._stream.resume if self._stream is not None else self._resume
