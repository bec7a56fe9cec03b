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
lost its primary key, unless it is in ``source.keyless_tables``) by the time the engine starts is still followed through the binlog up
to that statement, also when the tables are selected by default (see ``setup.list_tables``):
otherwise it would silently leave the selection with its Iceberg table stale.
TRUNCATE is dead-lettered (not replicated), as in the Postgres source.

Polling: the stream reads the binlog without blocking (``stream.py``: the server sends what
it has, then EOF), so a read between two transactions finds nothing. The pipeline takes an
empty poll for an idle source and commits at once, not after ``batch.linger_seconds`` (at
5,000 events/s: ~4x the commits, each of a few transactions, and the compaction of their small
files overran its maintenance slices by up to 9 s, holding the next batch). So a poll whose
read found nothing waits up to ``poll_wait_s`` (0.5 s, as the Postgres source) for the binlog
to grow, asking ``SHOW MASTER STATUS`` on the control connection every ``HEAD_CHECK_SECONDS``
and reading again only when the binlog's end moved.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql

from replicator.checkpoint import EXACT, Checkpoints
from replicator.errors import TerminalError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.sources.base import LogPosition, RetainedLog
from replicator.sources.common.identity import check_checkpoints, check_state
from replicator.sources.common.incremental_copy import load_incremental_state
from replicator.sources.common.lifecycle import DatabaseSource
from replicator.sources.common.snapshot import SnapshotCursor, record_boundary
from replicator.sources.mysql import setup
from replicator.sources.mysql.emit import SourceStats
from replicator.sources.mysql.incremental import MyIncremental
from replicator.sources.mysql.keyless import check_keyless, copied_keyless, refuse_overlap
from replicator.sources.mysql.position import (
    MYSQL,
    BinlogPoint,
    BinlogPosition,
)
from replicator.sources.mysql.retained import binlog_head, binlog_position
from replicator.sources.mysql.rowarrow import describe_decoders
from replicator.sources.mysql.schema_history import SchemaHistory
from replicator.sources.mysql.snapshot import (
    Chunk,
    SnapshotReader,
    SnapshotState,
    decode_key,
    describe_tables,
    encode_key,
)
from replicator.sources.mysql.snapshot_phase import MySnapshotPhase
from replicator.sources.mysql.stream import BinlogStream
from replicator.sources.mysql.types import (
    ZERO_DATE_POLICIES,
    ColumnDef,
    RowConverter,
    check_types,
)

log = logging.getLogger(__name__)
FENCE_PING_SECONDS = 60.0
# While a poll waits for changes (``poll_wait_s``): how often it asks the server where the
# binlog ends (a query on the open control connection, ~10x cheaper than a binlog connection),
# and, after a read that found nothing although the binlog had grown (changes of tables not
# replicated), up to how long it waits before the next read (doubling from the check interval).
HEAD_CHECK_SECONDS = 0.01
EMPTY_READ_PAUSE_MAX = 0.1


class MySQLSource(MySnapshotPhase, DatabaseSource):
    kind = "mysql"
    streams_in_the_snapshot_poll = True  # an empty poll always means idle

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
        keyless_tables: Sequence[str] = (),
        change_blocks: int = 1,
        poll_wait_s: float = 0.5,
    ) -> None:
        super().__init__(dead_letters)
        if zero_dates not in ZERO_DATE_POLICIES:
            raise ValueError(f"zero_dates must be one of {ZERO_DATE_POLICIES}")
        if row_decoder not in ("fast", "library"):
            raise ValueError("row_decoder must be 'fast' or 'library'")
        self.params = setup.parse_dsn(dsn)
        self.server_id = server_id
        self.tables_config = list(tables) if tables is not None else None
        self.keyless_tables = frozenset(keyless_tables)  # replicated without a key
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self.poll_max_events = poll_max_events
        # An empty poll means this long without a change (as for Postgres; see "Polling").
        self.poll_wait_s = poll_wait_s
        self.zero_dates = zero_dates
        self.fast_rows = row_decoder == "fast"
        self.change_blocks = change_blocks  # BinlogStream.change_blocks
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
        self._committed: dict[str, BinlogPosition] = {}
        self._defs: dict[str, list[ColumnDef]] = {}
        self._converters: list[RowConverter] = []
        # stream (created when the snapshot is done)
        self._stream: BinlogStream | None = None
        self._resume = BinlogPoint("", 4)
        self._last_out: tuple[Any, ...] = ()
        # snapshot
        self._snap: SnapshotReader | None = None
        self._cursor: SnapshotCursor[Chunk] | None = None  # set while the snapshot is read
        self._snap_point: BinlogPoint | None = None
        self._snap_state: SnapshotState | None = None
        self._snap_acked_seq = -1
        self._incr: MyIncremental | None = None  # tables copied while streaming (MariaDB)
        self._checkpointed: list[str] = []
        self.incremental_path = state / f"mysql-{server_id}.incremental.json" if state else None

    # -- lifecycle ----------------------------------------------------------------------------
    def _start(self, checkpoints: Checkpoints) -> None:
        committed: Mapping[str, SourcePosition] = checkpoints.positions()
        conn = self._conn = setup.connect(self.params)
        self.fencing_token = setup.acquire_fence(conn, self.server_id)
        self._fence_checked = time.monotonic()
        self.server = setup.check_server(conn, source_server_id=self.server_id)
        setup.check_privileges(conn)
        self.source_id = setup.source_identity(conn, self.server.is_mariadb)
        log.info("decoders: %s", describe_decoders("fast" if self.fast_rows else "library", self.change_blocks))
        state = SnapshotState.load(self.snapshot_path) if self.snapshot_path else None
        if state is not None and self.snapshot_path is not None:
            check_state(self.snapshot_path, state.source_id, self.source_id)
        infos = self._select_tables(conn, checkpoints)
        self._committed = {
            t: BinlogPosition.of(p)
            for t, p in committed.items()
            if p.source == MYSQL and t in self._tables
        }
        self._committed.update(copied_keyless(state, self._committed, self.keyless_tables))
        files = setup.binary_logs(conn)
        basename = setup.binlog_basename(list(files)[-1]) if files else ""
        self._checkpointed = sorted(t for t, p in committed.items() if p.source == "mysql")
        if not self._committed:
            self._begin_snapshot(infos, None, None, 0)
            self.replay = EXACT  # one consistent snapshot, the stream starts at it
            self._start_incremental([])
            return
        resume = self._resume_point(files, basename)
        self._resume_snapshot(infos, resume, state)

    def _select_tables(
        self, conn: pymysql.Connection[Any], checkpoints: Checkpoints
    ) -> list[setup.TableInfo]:
        """The tables to replicate (checked; ``_tables``); returns those with a key."""
        assert self.source_id is not None
        committed = checkpoints.positions()
        listed = setup.list_tables(
            conn,
            self.tables_config,
            self.params.database,
            committed=[t for t, p in committed.items() if p.source == "mysql"],
            keyless=self.keyless_tables,
        )
        check_keyless(listed, self.keyless_tables)
        check_checkpoints(checkpoints, self.source_id, self.kind, {t.qualified for t in listed})
        # Committed tables renamed, dropped or stripped of their key while the engine was
        # stopped: streamed (never snapshotted) up to that statement, where the stream stops.
        infos = [i for i in listed if not i.gone]
        for g in listed:
            if g.gone:
                log.warning(
                    "%s is no longer on the server as a table with a primary key; following "
                    "the binlog to the statement that changed it",
                    g.qualified,
                )
        setup.check_select(conn, infos)
        self._defs = describe_tables(conn, infos)  # now: type checks and (maybe) history seeds
        check_types(self._defs, {t.qualified: t for t in infos})
        self._tables = {t.qualified: t for t in listed}
        return infos

    def _resume_point(self, files: Mapping[str, int], basename: str) -> BinlogPoint:
        """Where the stream resumes after the committed positions (checked on the server)."""
        for t, p in self._committed.items():
            if setup.binlog_basename(p.file) != basename:
                raise TerminalError(
                    f"committed position {p.file} is from binlog "
                    f"{setup.binlog_basename(p.file)!r}, "
                    f"the server writes {basename!r}: positions cannot be compared",
                    table=t,
                    hint="re-snapshot: drop this source's Iceberg tables and restart",
                )
        resume = min(p.point for p in self._committed.values())
        acked = self._load_acked(basename)
        if acked is not None and acked.point > resume:
            resume = acked.point
            self._last_out = acked  # durable for every table: never hand it out again
        setup.check_resume_file(
            files, resume.file, resume.pos, BinlogPosition(*resume, 0).source_position()
        )
        self._resume = resume
        log.info("resuming the binlog at %s:%d", *resume)
        return resume

    def _resume_snapshot(
        self, infos: list[setup.TableInfo], resume: BinlogPoint, state: SnapshotState | None
    ) -> None:
        """Snapshot the tables whose snapshot is not known complete (an interrupted one
        continues at its key), before streaming or incrementally."""
        points = {p.point for p in self._committed.values() if p.is_snapshot}
        if state is not None and tuple(state.point) not in points:
            state = None  # no committed row of that snapshot is left to judge: ignore it
        done = state.done_tables() if state else set()

        def finished(p: BinlogPosition, table: str) -> bool:
            """A streamed position, or the end of a snapshot the state file saw complete."""
            if not p.is_snapshot:
                return True
            return state is not None and p.point == tuple(state.point) and table in done

        needs = [
            t
            for t in infos
            if t.qualified not in self._committed
            or not finished(self._committed[t.qualified], t.qualified)
        ]
        refuse_overlap(needs, self.keyless_tables)  # a keyless table: the first snapshot only
        # Tables new to this pipeline are copied while streaming (MariaDB, with a state dir);
        # those the interrupted snapshot had yet to reach go on in it, plain past its frontier.
        interrupted = set()
        if state is not None and not state.complete and state.read_frontier is not None:
            interrupted = set(state.tables)
        needs = self._start_incremental(needs, interrupted)
        self._seed_history([t for t in infos if t not in needs], resume)
        if not needs:
            return
        seqs = [
            p.snapshot_seq for p in self._committed.values() if p.is_snapshot and p.point == resume
        ]
        next_seq = max([s + 1 for s in seqs] + [state.next_seq if state else 0])
        last_key = None
        if state is not None and not state.complete and state.table_index < len(state.tables):
            current = state.tables[state.table_index]
            needs.sort(key=lambda t: (t.qualified != current, t.qualified))  # resume it first
            if state.last_key is not None and needs and needs[0].qualified == current:
                last_key = decode_key(state.last_key)
        self._begin_snapshot(needs, resume, last_key, next_seq, state)

    def _start_incremental(
        self, needs: list[setup.TableInfo], interrupted: Collection[str] = ()
    ) -> list[setup.TableInfo]:
        """Set up incremental snapshots; returns the tables left to the snapshot before
        streaming (an interrupted first copy, tables of ``interrupted`` (the interrupted
        snapshot's) with nothing committed, or no incremental snapshots here)."""
        assert self.server is not None
        if self.incremental_path is None or not self.server.is_mariadb:
            return needs
        assert self.source_id is not None
        state = load_incremental_state(
            self.incremental_path, self.source_id, self._tables, self._checkpointed
        )
        self._incr = MyIncremental(
            params=self.params, tables=self._tables, snap_table=self._snap_table, state=state,
            state_path=self.incremental_path, chunk_rows=self.snapshot_chunk_rows,
            dead_letter=self._dead_letter_row, progress=self.progress,
        )  # fmt: skip
        new = [t for t in needs if t.qualified in state.tables
               or (t.qualified not in self._committed and t.qualified not in interrupted)]  # fmt: skip
        for t in new:
            self._incr.add(t.qualified, "added")
        self._incr.save()
        if self._incr.active:
            self.replay = replace(self.replay, snapshot_rows=True)  # chunk rows are upserts
        return [t for t in needs if t not in new]

    def _load_acked(self, basename: str) -> BinlogPosition | None:
        if self.offsets_path is None:
            return None
        try:
            raw = json.loads(self.offsets_path.read_text())
            acked = BinlogPosition.from_parts(raw["acked"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        assert self.source_id is not None
        check_state(self.offsets_path, raw.get("source_id"), self.source_id)
        # Trust it only when it matches this catalog: some table committed at least that far.
        if (
            setup.binlog_basename(acked.file) != basename
            or acked.is_snapshot
            or acked > max(self._committed.values())
        ):
            return None
        return acked

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
            committed = BinlogPosition.of(acknowledged).point
        return binlog_retained(self.params, committed)

    # -- polling ------------------------------------------------------------------------------
    def _before_poll(self) -> None:
        if self._conn is None:
            raise TerminalError("MySQLSource.poll() before start()")
        self._keep_fence()

    def _poll_stream(self) -> Iterator[ChangeEvent]:
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
                keyless=self.keyless_tables,
                change_blocks=self.change_blocks,
            )
            if self._incr is not None:
                self._stream.at_boundary = self._incr.at_boundary
                self._stream.boundary_wanted = lambda: self._incr is not None and self._incr.holding
        incr = self._incr
        deadline, pause = time.monotonic() + self.poll_wait_s, HEAD_CHECK_SECONDS
        while True:  # with chunks left, never an empty poll (it would read as idle)
            if incr is not None:
                with self._lock:
                    incr.next_chunk()
            head = self._binlog_head() if self.poll_wait_s > 0 else None  # before the read
            got = False
            for ev in self._stream.poll(self.poll_max_events, self.source_observer):
                got = True
                yield ev
            if got:
                return
            if (incr is None or not incr.busy) and not self._head_moved(head, deadline, pause):
                return
            pause = min(pause * 2, EMPTY_READ_PAUSE_MAX)

    def _binlog_head(self) -> tuple[str, int] | None:
        """Where the binlog ends now; None: not known (the next poll checks the fence)."""
        with self._lock:
            try:
                return setup.master_status(self._conn) if self._conn is not None else None
            except pymysql.err.Error:
                self._fence_checked = 0.0  # the control connection may be gone
                return None

    def _head_moved(self, head: tuple[str, int] | None, deadline: float, pause: float) -> bool:
        """Wait (``pause`` at least) until the binlog ends past ``head`` (read before a read
        that found nothing: a change committed after it moves it); False at ``deadline``."""
        wait = pause
        while head is not None and time.monotonic() < deadline:
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
            wait = HEAD_CHECK_SECONDS
            now = self._binlog_head()
            if now != head:
                return now is not None
        return False

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

    # -- acknowledgements ---------------------------------------------------------------------
    def acknowledge(self, position: SourcePosition) -> None:
        at = BinlogPosition.of(position)
        with self._lock:
            st = self._snap_state
            if at.is_snapshot:
                if st is not None and self._snap is not None and at.point == tuple(st.point):
                    self._snap_acked_seq = at.snapshot_seq
                    b = self._snap.boundaries.resume_point(at.snapshot_seq)
                    if b is not None:
                        key = encode_key(b.last_key) if b.last_key is not None else None
                        record_boundary(st, b, key, self._snap.next_seq, self.snapshot_path)
                return
            if self._incr is not None:
                self._incr.acknowledge(at)
            if st is not None and not st.complete:
                st.complete = True  # a streamed position: every snapshot row before it is durable
                if self.snapshot_path:
                    st.save(self.snapshot_path)
            if self.offsets_path is not None:
                self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.offsets_path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"acked": list(at), "source_id": self.source_id}))
                os.replace(tmp, self.offsets_path)

    # -- introspection --------------------------------------------------------------------------
    @property
    def zero_dates_nulled(self) -> int:
        stream = self._stream.converters if self._stream is not None else []
        return sum(c.zero_count for c in [*self._converters, *stream])

    @property
    def resume_position(self) -> BinlogPoint:
        """Where the binlog stream (re)starts: the next transaction not fully read."""
        return BinlogPoint(*self._stream.resume) if self._stream is not None else self._resume
