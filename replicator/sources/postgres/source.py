"""PostgresSource: initial snapshot, then pgoutput changes over the replication protocol.

Positions: ``SourcePosition("postgres", (commit_lsn, index_in_tx))`` for streamed changes
(``index_in_tx`` counts every row change of the transaction from 0, emitted or not, so it is
stable across restarts), ``(snapshot_lsn, seq)`` for snapshot rows (see ``snapshot.py``).
Events of a transaction share ``tx_id`` (the xid); the last emitted one has
``last_in_tx=True``. Snapshot rows have ``tx_id=None`` and ``last_in_tx=True``: each is its
own transaction, so the pipeline may commit anywhere inside the snapshot.

Restart rules (``start(checkpoints)``):
* no slot: create it with an exported snapshot and snapshot every selected table;
* slot exists: table T is (re)snapshotted when it was just added to the publication, has no
  committed position, or its committed position is a snapshot position of the slot's
  current confirmed point (the snapshot may be incomplete: nothing has moved the slot since).
  With ``state_dir`` an interrupted snapshot resumes at the acknowledged (table, key);
* streamed events at or below ``committed[table]`` are skipped, and within a process every
  position at or below the last one handed out (after a reconnect the server resends from
  the slot's confirmed position).

Acknowledgements: ``acknowledge(pos)`` of a streamed position reports the transaction's end
(or its commit LSN, when only part of it is durable) as flushed, which moves the slot's
``confirmed_flush_lsn``; a snapshot position only advances the snapshot state file.

Fencing: a session advisory lock per slot, held for the source's lifetime, refuses a second
engine at ``start()`` (``FencedError``); the server refuses a second streaming reader of an
active slot; ``fencing_token`` (the cluster's 64-bit xid at lock time, ever increasing) lets
the pipeline stamp commits so a zombie writer with a smaller token can be rejected.

A standby (PostgreSQL 16+, in recovery at ``start()``) is read the same way; what differs
(publication, fencing token, slot creation, no incremental snapshots) is in ``standby.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from itertools import repeat
from pathlib import Path
from typing import Any

import psycopg

from replicator.checkpoint import EXACT, Checkpoints, ReplayWindow
from replicator.errors import TerminalError, TransientError
from replicator.events.block import BlockRow
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition, read_events
from replicator.sources.base import ChangeSource, LogPosition, RetainedLog
from replicator.sources.common.identity import check_checkpoints, check_state
from replicator.sources.common.snapshot import SnapshotCursor
from replicator.sources.postgres import setup, standby
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
)
from replicator.sources.postgres.incremental import (
    PgIncremental,
    discover_tables,
    start_incremental,
)
from replicator.sources.postgres.partitions import PartitionWatch
from replicator.sources.postgres.pgoutput import TupleData, decode
from replicator.sources.postgres.replication import (
    ReplicationConnection,
    check_failover_supported,
    ensure_failover_slot,
    session_conninfo,
    source_identity,
)
from replicator.sources.postgres.retained import lsn_position, slot_retained, wal_head
from replicator.sources.postgres.slot_wait import SlotCreationProgress, describe_standby_wait
from replicator.sources.postgres.snapshot import (
    Chunk,
    SnapshotPlan,
    SnapshotReader,
    SnapshotState,
    plan_resumed_snapshot,
    table_columns,
    text_loaders,
)
from replicator.sources.postgres.toast import ROW_CACHE_MIN_CHARS, RowCache, row_chars
from replicator.sources.postgres.types import (
    UNCONSTRAINED_NUMERIC,
    TypeMapper,
    ValueConversionError,
    catalog_lookup,
)

log = logging.getLogger(__name__)

__all__ = ["PostgresSource", "SourceStats"]


class PostgresSource(ChangeSource):
    kind = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        dead_letters: DeadLetterSink,
        slot: str = "replicator",
        publication: str = "replicator",
        tables: Sequence[str] | None = None,
        snapshot_chunk_rows: int = 10000,
        poll_max_messages: int = 10000,
        state_dir: str | Path | None = None,
        poll_wait_s: float = 0.5,
        toast_cache_bytes: int = 64 << 20,
        unconstrained_numeric: str = UNCONSTRAINED_NUMERIC,
        progress: bool | None = None,
        snapshot_copy: bool = True,
        failover_slot: bool = False,
        discover_every_s: float = 30.0,
        primary_dsn: str | None = None,
    ) -> None:
        super().__init__(dead_letters)
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.tables_config = list(tables) if tables is not None else None
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self.poll_max_messages = poll_max_messages
        self.state_path = Path(state_dir) / f"postgres-{slot}.snapshot.json" if state_dir else None
        self.poll_wait_s = poll_wait_s
        self.unconstrained_numeric = unconstrained_numeric
        self.progress = progress  # None: a tqdm bar only on a terminal
        # Snapshot chunks of keyed tables by COPY into Arrow (``copy_chunks``); False: the
        # row-by-row cursor (the reference the COPY path is tested and benchmarked against).
        self.snapshot_copy = snapshot_copy
        self.failover_slot = failover_slot  # PostgreSQL 17+: FAILOVER, kept on standbys
        self.primary_dsn = primary_dsn  # source.primary: when ``dsn`` is a standby
        self._standby: standby.Standby | None = None  # set at start when ``dsn`` is in recovery
        self.stats = SourceStats()
        self.fencing_token: int | None = None
        self._toast = RowCache(toast_cache_bytes)
        self._lock = threading.RLock()  # acknowledge() may come from another thread
        self._conn: psycopg.Connection[Any] | None = None  # fence, catalog
        self._text_conn: psycopg.Connection[Any] | None = None  # snapshot, TOAST reads
        self._stream: ReplicationConnection | None = None
        self._tables: dict[str, setup.TableInfo] = {}
        self._partitions: PartitionWatch | None = None
        self._asm: ChangeAssembler | None = None
        self._confirmed = 0  # the slot's confirmed position as we last reported it
        self._acked: tuple[int, ...] = ()
        self._idle_lsn = 0  # keepalive position seen while nothing was in flight
        # Every change logged before it has been handed out (``reached_position``).
        self._reached = 0
        self._idle_out: tuple[int, ...] = ()
        self._snap: SnapshotReader | None = None
        self._snap_state: SnapshotState | None = None
        self._snap_lsn: int | None = None
        self._cursor: SnapshotCursor[Chunk] | None = None  # set while the snapshot is read
        self._snap_rels: dict[str, RelState] = {}
        self._snap_last_seq = -1  # last snapshot row handed out
        self._snap_acked_seq = -1  # last snapshot row the pipeline committed
        self._snap_read_all = False
        self._incr: PgIncremental | None = None  # tables copied while streaming
        self._checkpointed: list[str] = []  # tables with a committed position at start
        self.discover_every_s = discover_every_s  # new tables, when every table is selected
        self._discovered_at = time.monotonic()

    # -- lifecycle ------------------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(session_conninfo(self.dsn), autocommit=True)
        except psycopg.OperationalError as exc:
            raise TransientError(f"cannot connect to PostgreSQL: {exc}") from exc

    def start(self, checkpoints: Checkpoints) -> None:
        try:
            self._start(checkpoints)
        except BaseException:
            self.close()  # releases the fence: a failed check must not block the next try
            raise

    def _start(self, checkpoints: Checkpoints) -> None:
        committed = {t: p.parts for t, p in checkpoints.positions("postgres").items()}
        self._checkpointed = sorted(committed)
        conn = self._conn = self._connect()
        sb = self._standby = standby.detect(conn, self.primary_dsn)
        if sb is None:
            self.fencing_token = setup.acquire_fence(conn, self.slot)
        else:
            sb.check(conn, failover_slot=self.failover_slot)
            self.fencing_token = setup.acquire_fence(conn, self.slot, sb.fencing_token)
        setup.check_server(conn)
        setup.check_role(conn)
        self.source_id = source_identity(conn, self.dsn, self.slot)
        state = SnapshotState.load(self.state_path) if self.state_path else None
        if state is not None and self.state_path is not None:
            check_state(self.state_path, state.source_id, self.source_id)
        self.keepalive_seconds = _keepalive_seconds(conn)
        infos = setup.list_tables(conn, self.tables_config)
        check_checkpoints(checkpoints, self.source_id, self.kind, {t.qualified for t in infos})
        setup.check_tables(conn, infos)
        self._tables = {t.qualified: t for t in infos}
        self._partitions = PartitionWatch(
            self.state_path.with_name(f"postgres-{self.slot}.partitions.json")
            if self.state_path else None, self.source_id, infos,
        )  # fmt: skip
        self._partitions.check(conn)
        added = (setup.ensure_publication if sb is None else sb.publication)(conn, self.publication, infos)
        mapper = TypeMapper(catalog_lookup(conn), unconstrained_numeric=self.unconstrained_numeric)
        self._asm = ChangeAssembler(
            tables=self._tables, mapper=mapper, committed=committed, toast=self._toast,
            stats=self.stats, dead_letters=self.dead_letters, fetch_current=self._fetch_current,
        )  # fmt: skip
        slot = setup.slot_info(conn, self.slot)
        if slot is not None:
            setup.check_slot(slot, conn.info.dbname)
            if sb is not None:
                sb.check_slot(conn, self.slot)
            if self.failover_slot and ensure_failover_slot(conn, self.dsn, self.slot):
                log.info("slot %s is now a failover slot", self.slot)
        elif self.failover_slot:
            check_failover_supported(conn.info.server_version)
        self._text_conn = self._connect()
        text_loaders(self._text_conn)
        if slot is None:
            repl = ReplicationConnection(self.dsn)
            try:
                wait = None if sb is None else describe_standby_wait(self.slot, sb.primary_dsn is not None)
                with SlotCreationProgress(self.dsn, self.slot, repl.pgconn.backend_pid, standby=wait), \
                        sb.creating_slot() if sb is not None else nullcontext():
                    self._confirmed, snapshot_name = repl.create_slot_exported(
                        self.slot, failover=self.failover_slot
                    )
                self._reached = self._confirmed  # the snapshot holds what came before
                log.info("created slot %s at %s", self.slot, self._confirmed)
                # Import while the exporting session is still open and idle.
                self._begin_snapshot(infos, snapshot_name, None, 0)
            finally:
                repl.close()
            self._start_incremental(None, None, committed)
            return
        self._reached = self._confirmed = slot.confirmed_flush
        if state is not None and state.slot != self.slot:
            state = None
        plan = plan_resumed_snapshot(
            infos, {t.qualified for t in added}, committed, self._confirmed, state
        )
        plan = self._start_incremental(plan, state, committed)
        if plan is not None:
            log.info("snapshot of %d table(s), resumed after %s", len(plan.tables), plan.last_key)
            self._begin_snapshot(plan.tables, None, plan.last_key, plan.next_seq, state)

    def _start_incremental(
        self, plan: SnapshotPlan | None, state: SnapshotState | None,
        committed: dict[str, tuple[int | str, ...]],
    ) -> SnapshotPlan | None:  # fmt: skip
        """Tables new to the stream are copied incrementally (``incremental.py``) when the
        server can; the rest of ``plan`` (an interrupted initial snapshot) as before."""
        assert self._conn is not None and self._text_conn is not None and self._asm is not None
        order = plan.tables if plan is not None else []
        snap_lsn = self._confirmed - 1
        initial = set(state.tables) if state is not None and not state.complete else set()
        # Only a pipeline that already holds tables adds some: a first copy (nothing
        # committed anywhere) stays one snapshot before streaming.
        new = [t for t in order if committed and t.qualified not in initial
               and (committed.get(t.qualified) or (None,))[0] != snap_lsn]  # fmt: skip
        asm = self._asm
        path = self.state_path.with_name(f"postgres-{self.slot}.incremental.json") if self.state_path else None
        if self._standby is not None and path is not None:
            log.info("incremental snapshots are off on a standby (their watermarks are written "
                     "to the source): tables added later are copied before streaming resumes")  # fmt: skip
            path = None
        self._incr, rest = start_incremental(
            self._conn, state_path=path, source_id=self.source_id or "", selected=self._tables,
            candidates=new, committed_tables=set(committed),
            make=lambda st: PgIncremental(
                conn=self._conn, read_conn=self._text_conn, tables=self._tables,  # type: ignore[arg-type]
                mapper=asm.mapper, state=st, state_path=path, chunk_rows=self.snapshot_chunk_rows,
                dead_letter=asm.dead_letter, progress=self.progress,
            ),
        )  # fmt: skip
        if self._incr is not None and self._incr.active:
            self.replay = replace(self.replay, snapshot_rows=True)  # chunk rows are upserts
        keep = [t for t in order if t not in new or t in rest]
        if plan is None or not keep:
            return None
        return SnapshotPlan(keep, plan.last_key if keep[0] is order[0] else None, plan.next_seq)

    def _discover(self) -> None:
        """Every table selected (no ``source.tables``): a table that appears in the source
        is published and copied incrementally, without a restart."""
        now = time.monotonic()
        if self.tables_config is not None or now - self._discovered_at < self.discover_every_s:
            return
        self._discovered_at = now
        assert self._conn is not None and self._incr is not None
        for t in discover_tables(self._conn, self.publication, self._tables):
            self._tables[t.qualified] = t
            log.info("new table %s in the source: copied while the others stream", t.qualified)
            self._incr.add(t.qualified, "added")
            self.replay = replace(self.replay, snapshot_rows=True)

    def request_snapshot(self, tables: Sequence[str], reason: str) -> list[str]:
        """Copy ``tables`` again, incrementally, while streaming (a running engine's
        resnapshot); returns the ones that cannot be (not selected, or no incremental
        snapshots on this server / without a state directory)."""
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
        """Tables whose incremental snapshot is not committed yet, and tables this source
        does not replicate (a copy of theirs cannot be complete either)."""
        with self._lock:
            pending = list(self._incr.state.tables) if self._incr is not None else []
            return pending + [t for t in self._checkpointed if t not in self._tables]

    @property
    def incremental_active(self) -> bool:
        """An incremental snapshot has rows not yet committed (or chunks not yet read)."""
        return self._incr is not None and self._incr.active

    @property
    def incremental_finished(self) -> list[str]:
        """Tables whose incremental snapshot is committed, once each (taken by the caller)."""
        with self._lock:
            if self._incr is None:
                return []
            out, self._incr.finished = self._incr.finished, []
            return out

    def _begin_snapshot(
        self,
        order: list[setup.TableInfo],
        snapshot_name: str | None,
        last_key: list[str | None] | None,
        next_seq: int,
        resumed: SnapshotState | None = None,
    ) -> None:
        assert self._text_conn is not None and self._conn is not None and self._asm is not None
        self._snap_lsn = snap_lsn = self._confirmed - 1
        columns = {t.qualified: table_columns(self._conn, t) for t in order}
        reader = SnapshotReader(
            self._text_conn, order, columns, self.snapshot_chunk_rows,
            last_key=tuple(last_key) if last_key is not None else None, next_seq=next_seq,
        )  # fmt: skip
        bound = reader.begin(snapshot_name)
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
        reader.repeats = whole_tables_unless_copied(reader.repeats, reader.layouts)
        self._snap_state = SnapshotState(
            self.slot, snap_lsn, [t.qualified for t in order], 0, last_key, next_seq,
            source_id=self.source_id, read_frontier=carried_frontier(resumed, snap_lsn),
            read_chunks=carried_chunks(resumed, snap_lsn, next_seq),
            repeats_all=sorted(t for t, k in reader.repeats.items() if k is None),
        )  # fmt: skip
        if self.state_path:
            self._snap_state.save(self.state_path)
        self._cursor = SnapshotCursor(
            reader.chunks(), total=reader.estimated_rows(), desc=f"snapshot {self.slot}",
            progress=self.progress,
        )  # fmt: skip

    def close(self) -> None:
        with self._lock:
            if self._cursor is not None:
                self._cursor.close()
                self._cursor = None
            if self._incr is not None:
                self._incr.close()
            if self._stream is not None:
                self._stream.close()
                self._stream = None
            for c in (self._text_conn, self._conn):  # closing _conn releases the fence
                if c is not None:
                    c.close()
            self._text_conn = self._conn = None

    def retained_log(self, acknowledged: SourcePosition | None) -> RetainedLog | None:
        return slot_retained(self.dsn, self.slot)

    def head_position(self) -> LogPosition | None:
        return wal_head(self.dsn)

    def reached_position(self) -> LogPosition | None:
        """Called between (or after) polls on the reader thread. No transaction is in flight:
        the stream's WAL end (a keepalive's position, or the end of the last commit sent) has
        every transaction committed before it sent, because the walsender sends transactions
        whole, in commit order. A silent stream (the walsender decoding a large transaction)
        does not move it: that is not "caught up"."""
        asm, stream = self._asm, self._stream
        if self._cursor is not None or asm is None:
            return None
        if stream is not None and asm.idle and stream.wal_end > self._reached:
            self._reached = stream.wal_end
        return lsn_position(self._reached)

    # -- polling --------------------------------------------------------------------------------
    def poll(self) -> Iterator[ChangeEvent]:
        if self._conn is None:
            raise TerminalError("PostgresSource.poll() before start() (or after close())")
        if self._partitions is not None and self._partitions.due():
            self._partitions.check(self._conn)  # ATTACH/DETACH send no rows: at least say so
        if self._cursor is not None:
            yield from self._poll_snapshot()
        else:
            yield from self._poll_stream()

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
        """Rows ``start:stop`` of a chunk read as Arrow: events whose ``after`` is a view
        of the block (``events.block``). Every value converted, so no dead letters here."""
        block = chunk.block
        assert block is not None and self._snap_lsn is not None and self._asm is not None
        rel = self._snap_rels[chunk.table.qualified]
        lsn, table, schema, first = self._snap_lsn, rel.table, rel.schema, chunk.first_seq
        for i, key, size in chunk.big_rows or ():  # the TOAST row cache, as row by row
            if start <= i < stop:
                self._toast.put((table, key), dict(block.row(i)), size)
        rows = map(BlockRow, repeat(block), range(start, stop))
        events = read_events(table, schema, rows, "postgres", zip(repeat(lsn), range(first + start, first + stop)))
        asm, stats, seq = self._asm, self.stats, first + start
        for ev in events:
            # The last event's position must be set before it is handed out (a consumer may
            # stop after any event): so per event, as row by row.
            asm.last_out = (lsn, seq)
            self._snap_last_seq = seq
            stats.snapshot_rows += 1
            seq += 1
            yield ev

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
        self._snap.finish()
        self._snap_read_all = True
        with self._lock:
            self._maybe_complete_snapshot()
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None
        log.info("snapshot done: %d rows", self.stats.snapshot_rows)

    def _open_stream(self) -> None:
        assert self._asm is not None
        stream = ReplicationConnection(self.dsn)
        try:  # 0/0: the server starts at the slot's confirmed position
            stream.start(self.slot, self.publication, 0, self._confirmed, messages=self._incr is not None)
        except Exception:
            stream.close()
            raise
        self._stream = stream
        self._asm.reset()

    def _poll_stream(self) -> Iterator[ChangeEvent]:
        # An incremental snapshot with chunks left never polls empty (that would read as
        # idle): a chunk whose rows the stream all replaced goes on to the next one.
        while True:
            got = False
            for ev in self._poll_stream_once():
                got = True
                yield ev
            if got or self._stream is None or self._incr is None or not self._incr.busy:
                return

    def _poll_stream_once(self) -> Iterator[ChangeEvent]:
        asm = self._asm
        assert asm is not None
        if self._stream is None:
            self._open_stream()
        incr = self._incr
        if incr is not None:
            with self._lock:
                self._discover()
                incr.next_chunk()
        n = 0
        started = False
        while n < self.poll_max_messages:
            # Wait up to poll_wait_s for the first message and inside a transaction (so a poll
            # rarely ends mid-transaction); between transactions only drain what is arriving.
            wait = self.poll_wait_s if not started or asm.in_transaction else 0.005
            with self._lock:
                stream = self._stream
                if stream is None:
                    return
                try:
                    data = stream.read(wait)
                except TransientError as exc:
                    log.warning("replication stream lost (%s); reconnecting on next poll", exc)
                    self.stats.reconnects += 1
                    self._stream = None
                    stream.close()
                    return
            if data is None:
                return
            if not data:  # keepalive: everything sent before it has been read
                if asm.idle:
                    self._idle_lsn, self._idle_out = stream.wal_end, asm.last_out
                    with self._lock:
                        self._advance_idle()
                continue
            started = True
            n += 1
            msg = decode(data)
            if incr is None:
                yield from asm.handle(msg, len(data))
                continue
            for ev in asm.handle(msg, len(data)):
                incr.on_event(ev)
                yield ev
            for ev in incr.observe(msg):  # a HIGH watermark: the chunk's rows
                asm.last_out = tuple(int(p) for p in ev.position.parts)
                yield ev

    def _fetch_current(self, rel: RelState, new: TupleData, cols: list[int]) -> list[Any] | None:
        """The row's current text values (positions as in ``new``); None if it is gone."""
        assert self._text_conn is not None and rel.rows is not None
        names = rel.rows.names
        q = setup.quote_ident
        sql = (
            f"SELECT {', '.join(q(names[i]) for i in cols)} FROM {self._tables[rel.table].sql}"
            f" WHERE {' AND '.join(f'{q(names[i])} = %s' for i in rel.key_idx)}"
        )
        try:
            got = self._text_conn.execute(sql, [new[i] for i in rel.key_idx]).fetchone()
        except psycopg.Error as exc:
            raise ValueConversionError("*", "", f"unchanged TOAST value unreadable: {exc}") from exc
        if got is None:
            return None
        out: list[Any] = list(new)
        for i, v in zip(cols, got, strict=True):
            out[i] = v
        return out

    # -- acknowledgements -----------------------------------------------------------------------
    def acknowledge(self, position: SourcePosition) -> None:
        if position.source != "postgres":
            raise TypeError(f"not a postgres position: {position}")
        parts = tuple(int(p) for p in position.parts)
        with self._lock:
            if parts > self._acked:
                self._acked = parts
            if parts[0] == self._snap_lsn:
                self._ack_snapshot(parts[1])
            elif self._asm is not None:
                lsn, idx = parts
                ends = self._asm.tx_ends
                end = ends.get(lsn)
                # The whole transaction is durable: resume after its commit record; else at
                # it (the server resends it and positions skip the durable part).
                self._confirm(end[1] if end is not None and idx >= end[0] else lsn)
                for k in [k for k in ends if k <= lsn]:
                    del ends[k]
                if self._incr is not None:
                    self._incr.acknowledge(parts)
                if self._snap_state is not None and not self._snap_state.complete:
                    self._snap_state.complete = True
                    if self.state_path:
                        self._snap_state.save(self.state_path)
            self._advance_idle()

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
        st = self._snap_state
        st.table_index = b.table_index
        st.last_key = list(b.last_key) if b.last_key is not None else None
        st.next_seq = self._snap.next_seq
        st.complete = b.table_index >= len(st.tables)
        if self.state_path:
            st.save(self.state_path)

    def keepalive(self) -> None:
        """The pipeline is busy (not polling): report the confirmed position again so the
        server does not end the session (``wal_sender_timeout``); confirms nothing new."""
        with self._lock:
            if self._stream is None:
                return
            try:
                self._stream.send_status()
            except TransientError as exc:  # the next poll reconnects
                log.warning("could not send a keepalive: %s", exc)

    def _confirm(self, lsn: int) -> None:
        if lsn > self._confirmed:
            self._confirmed = lsn
            if self._stream is not None:
                try:
                    self._stream.send_status(lsn)
                except TransientError as exc:  # the next poll reconnects and reports it
                    log.warning("could not report position %s: %s", lsn, exc)

    def _advance_idle(self) -> None:
        # Everything handed out before an idle keepalive is durable: let the slot move to that
        # keepalive's position so WAL of unrelated activity is not retained forever.
        if self._idle_lsn and self._acked >= self._idle_out and self._cursor is None:
            self._confirm(self._idle_lsn)
            self._idle_lsn = 0

    # -- introspection --------------------------------------------------------------------------
    @property
    def snapshot_in_progress(self) -> bool:
        # An incremental snapshot too: a table partly copied makes no consistent cut.
        return self._cursor is not None or (self._incr is not None and self._incr.active)

    @property
    def confirmed_lsn(self) -> int:
        """The slot position this source has reported as durable."""
        return self._confirmed


def _keepalive_seconds(conn: psycopg.Connection[Any]) -> float:
    """A quarter of the server's ``wal_sender_timeout`` (as this role sees it), within
    0.5-10 s: the server ends a replication session that has not replied for that long."""
    row = conn.execute(
        "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'"
    ).fetchone()
    timeout_ms = int(row[0]) if row is not None else 60_000
    if timeout_ms <= 0:  # disabled
        return 10.0
    return min(10.0, max(0.5, timeout_ms / 4000))
