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

Streaming (``streaming``, PostgreSQL 14+): a transaction the server streams while it runs is kept
aside until its commit and then handed out whole, like any other (``streamed.py``).

Acknowledgements: ``acknowledge(pos)`` of a streamed position reports the transaction's end (or its
commit LSN, when only part of it is durable) as flushed, which moves the slot's
``confirmed_flush_lsn``; a snapshot position only advances the snapshot state file.

Fencing: a session advisory lock per slot, held for the source's lifetime, refuses a second engine
at ``start()`` (``FencedError``); the server refuses a second streaming reader of an active slot;
``fencing_token`` (the cluster's 64-bit xid at lock time, ever increasing) lets the pipeline stamp
commits so a zombie writer with a smaller token can be rejected. A standby (PostgreSQL 16+, in
recovery at ``start()``) is read the same way; what differs is in ``standby.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from replicator.checkpoint import Checkpoints
from replicator.errors import SourceSetupError, TerminalError, TransientError
from replicator.events.block import BlockEvent
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.sources.base import LogPosition, RetainedLog
from replicator.sources.common.identity import check_checkpoints, check_state
from replicator.sources.common.lifecycle import DatabaseSource
from replicator.sources.common.snapshot import SnapshotCursor
from replicator.sources.observe import PollSpent
from replicator.sources.postgres import setup, standby
from replicator.sources.postgres.change_group import GROUP_MAX_ROWS
from replicator.sources.postgres.changes import ChangeAssembler, RelState, SourceStats
from replicator.sources.postgres.frontier import after_committed_chunks
from replicator.sources.postgres.incremental import (
    PgIncremental,
    discover_tables,
    start_incremental,
)
from replicator.sources.postgres.partitions import PartitionWatch
from replicator.sources.postgres.pgoutput import PgOutputMessage, TupleData, decode
from replicator.sources.postgres.position import POSTGRES, PgPosition
from replicator.sources.postgres.replication import (
    ReplicationConnection,
    between_tx_wait,
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
    copied_keyless,
    plan_resumed_snapshot,
    text_loaders,
)
from replicator.sources.postgres.snapshot_phase import PgSnapshotPhase
from replicator.sources.postgres.streamed import (
    STREAM_KINDS,
    StreamedStats,
    StreamedTransactions,
    StreamingMode,
    streaming_enabled,
)
from replicator.sources.postgres.toast import RowCache
from replicator.sources.postgres.types import (
    UNCONSTRAINED_NUMERIC,
    TypeMapper,
    ValueConversionError,
    catalog_lookup,
)

log = logging.getLogger(__name__)
ROW_KINDS = frozenset(b"IUD")  # pgoutput Insert, Update and Delete messages' type bytes

__all__ = ["PostgresSource", "SourceStats"]


class PostgresSource(PgSnapshotPhase, DatabaseSource):
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
        snapshot_connections: int = 1,
        failover_slot: bool = False,
        discover_every_s: float = 30.0,
        primary_dsn: str | None = None,
        streaming: StreamingMode = "auto",
        keyless_tables: Sequence[str] = (),
        change_blocks: int = 64,
    ) -> None:
        super().__init__(dead_letters)
        self.change_blocks, self.dsn = change_blocks, dsn  # ChangeAssembler.change_blocks
        self.slot = slot
        self.publication = publication
        self.tables_config = list(tables) if tables is not None else None
        self.keyless_tables = frozenset(keyless_tables)  # replicated without a key
        self.snapshot_chunk_rows = snapshot_chunk_rows
        self.poll_max_messages = poll_max_messages
        self.state_path = Path(state_dir) / f"postgres-{slot}.snapshot.json" if state_dir else None
        self.poll_wait_s = poll_wait_s
        self.unconstrained_numeric = unconstrained_numeric
        self.progress = progress  # None: a tqdm bar only on a terminal
        # Snapshot chunks of keyed tables by COPY into Arrow (``copy_chunks``); False: the
        # row-by-row cursor (the reference the COPY path is tested and benchmarked against).
        self.snapshot_copy = snapshot_copy
        # Connections reading COPY chunks at once (``parallel_copy``); 1: the reader's own.
        self.snapshot_connections = snapshot_connections
        self.failover_slot = failover_slot  # PostgreSQL 17+: FAILOVER, kept on standbys
        self.primary_dsn = primary_dsn  # source.primary: when ``dsn`` is a standby
        self._standby: standby.Standby | None = None  # set at start when ``dsn`` is in recovery
        self.streaming = streaming  # in-progress transactions streamed (PostgreSQL 14+)
        self.state_dir = Path(state_dir) if state_dir else None
        self._streamed: StreamedTransactions | None = None
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
        self._behind = False  # the last poll stopped at its message cap (``behind``)
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

    def _start(self, checkpoints: Checkpoints) -> None:
        committed = {t: PgPosition.of(p) for t, p in checkpoints.positions(POSTGRES).items()}
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
        self._start_streamed(conn.info.server_version)
        self.source_id = source_identity(conn, self.dsn, self.slot)
        state = SnapshotState.load(self.state_path) if self.state_path else None
        if state is not None and self.state_path is not None:
            check_state(self.state_path, state.source_id, self.source_id)
        self.keepalive_seconds = setup.keepalive_seconds(conn)
        infos = setup.list_tables(conn, self.tables_config, self.keyless_tables)
        check_checkpoints(checkpoints, self.source_id, self.kind, {t.qualified for t in infos})
        setup.check_tables(conn, infos, self.keyless_tables)
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
        self._asm.change_blocks = self.change_blocks
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
        planned = {**copied_keyless(state, committed, self.keyless_tables, self.slot), **committed}
        state = self._checked_state(state if state is not None and state.slot == self.slot else None, conn, infos)
        plan = after_committed_chunks(plan_resumed_snapshot(
            infos, {t.qualified for t in added}, planned, self._confirmed, state), state, self._confirmed - 1, planned)  # fmt: skip
        plan = self._start_incremental(plan, state, planned)
        if plan is not None:
            log.info("snapshot of %d table(s), resumed after %s", len(plan.tables), plan.last_key)
            self._begin_snapshot(plan.tables, None, plan.last_key, plan.next_seq, state, plan.starts)

    def _start_streamed(self, server_version: int) -> None:
        self._streamed = None
        if not streaming_enabled(self.streaming, server_version):
            log.info("streaming of in-progress transactions: off (source.streaming: %s)", self.streaming)
            return
        where = self.state_dir / "streamed" / f"postgres-{self.slot}" if self.state_dir else None
        self._streamed = StreamedTransactions(where)
        self._streamed.raw_rows = self.change_blocks > 0
        log.info(
            "streaming of in-progress transactions: on (pgoutput protocol 2; large transactions "
            "kept under %s until their commit)", self._streamed.directory,
        )  # fmt: skip

    def _start_incremental(
        self, plan: SnapshotPlan | None, state: SnapshotState | None,
        committed: dict[str, PgPosition],
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
               and _lsn(committed.get(t.qualified)) != snap_lsn]  # fmt: skip
        late = sorted(t.qualified for t in new if t.qualified in self.keyless_tables)
        if late:
            raise SourceSetupError(
                f"{', '.join(late)} (source.keyless_tables) joined a pipeline that already streams: a table "
                "without a primary key is copied only by the initial snapshot (a later copy overlaps the "
                "stream, and without a key an overlapping row cannot be told from a duplicate)",
                table=late[0],
                hint="replicate it with its own slot and state_dir (a pipeline of its own), or give it a key",
            )
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
        return SnapshotPlan(keep, plan.last_key if keep[0] is order[0] else None, plan.next_seq, plan.starts)

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

    def close(self) -> None:
        with self._lock:
            if self._cursor is not None:
                self._cursor.close()
                self._cursor = None
            if self._snap is not None:  # after the cursor: no chunk read is in flight now
                self._snap.close_helpers()
            if self._incr is not None:
                self._incr.close()
            if self._stream is not None:
                self._stream.close()
                self._stream = None
            if self._streamed is not None:  # kept: its counters outlive the run
                self._streamed.close()
            for c in (self._text_conn, self._conn):  # closing _conn releases the fence
                if c is not None:
                    c.close()
            self._text_conn = self._conn = None

    def retained_log(self, acknowledged: SourcePosition | None) -> RetainedLog | None:
        return slot_retained(self.dsn, self.slot)

    def head_position(self) -> LogPosition | None:
        return wal_head(self.dsn)

    def reached_position(self) -> LogPosition | None:
        """Between (or after) polls, reader thread. With no transaction in flight, the stream's
        WAL end (a keepalive's, or the last commit's end) has every transaction committed
        before it: the walsender sends them whole, in commit order (a streamed one at its
        Stream Commit). A silent stream (decoding a large transaction) does not move it."""
        asm, stream = self._asm, self._stream
        if self._cursor is not None or asm is None:
            return None
        if stream is not None and asm.idle and stream.wal_end > self._reached:
            self._reached = stream.wal_end
        return lsn_position(self._reached)

    # -- polling --------------------------------------------------------------------------------
    def _before_poll(self) -> None:
        if self._conn is None:
            raise TerminalError("PostgresSource.poll() before start() (or after close())")
        if self._partitions is not None and self._partitions.due():
            self._partitions.check(self._conn)  # ATTACH/DETACH send no rows: at least say so

    def _open_stream(self) -> None:
        assert self._asm is not None
        stream = ReplicationConnection(self.dsn)
        try:  # 0/0: the server starts at the slot's confirmed position
            stream.start(
                self.slot, self.publication, 0, self._confirmed,
                messages=self._incr is not None, streaming=self._streamed is not None,
            )  # fmt: skip
        except Exception:
            stream.close()
            raise
        self._stream = stream
        self._asm.reset()
        if self._streamed is not None:  # the new session streams open transactions afresh
            self._streamed.discard_all()

    def _poll_stream(self) -> Iterator[ChangeEvent]:
        # An incremental snapshot with chunks left never polls empty (that would read as
        # idle): a chunk whose rows the stream all replaced goes on to the next one. Nor, once,
        # a poll that read only a run of changes (a block held back until the next change).
        again = 1
        while True:
            got, self._capped = False, False
            for ev in self._poll_stream_once():
                got = True
                yield ev
            busy = self._incr is not None and self._incr.busy
            if got or self._stream is None or not (busy or (self._capped and again)):
                return
            again = 0

    def _poll_stream_once(self) -> Iterator[ChangeEvent]:
        with PollSpent.reporting(self.source_observer) as spent:
            yield from self._read_stream(spent)
            if self._asm is not None:  # a run kept so far goes out with the poll's end
                yield from self._asm.flush_run()

    def _read_stream(self, spent: PollSpent | None) -> Iterator[ChangeEvent]:
        asm = self._asm
        assert asm is not None
        if self._stream is None:
            self._open_stream()
        incr = self._incr
        if incr is not None:
            with self._lock:
                self._discover()
                incr.next_chunk()
        n, started = 0, False
        # Changes as blocks (a poll reads a full group), unless a chunk window watches the rows.
        blocks = asm.change_blocks > 0 and (incr is None or incr.window is None)
        while n < (max(self.poll_max_messages, GROUP_MAX_ROWS) if blocks else self.poll_max_messages):
            # Wait up to poll_wait_s for the first message and inside a transaction (so a poll
            # rarely ends mid-transaction); between transactions only drain what is arriving.
            wait = self.poll_wait_s if not started or asm.in_transaction else between_tx_wait(self.behind)
            with self._lock:
                stream = self._stream
                if stream is None:
                    return
                try:
                    data = stream.read(wait) if spent is None else spent.timed_read(stream.read, wait)
                except TransientError as exc:
                    log.warning("replication stream lost (%s); reconnecting on next poll", exc)
                    self.stats.reconnects += 1
                    self._stream = None
                    stream.close()
                    return
            if data is None:
                self._behind = asm.filled = False  # nothing more arriving
                return
            if not data:  # keepalive: everything sent before it has been read
                yield from asm.flush_complete()  # kept for blocks: out, so this is an idle point
                self._behind = asm.filled = False  # the walsender waited for WAL: caught up
                if asm.idle:
                    self._idle_lsn, self._idle_out = stream.wal_end, asm.last_out
                    with self._lock:
                        self._advance_idle()
                continue
            started = True
            n += 1
            streamed = self._streamed
            if streamed is not None and (streamed.in_block or data[0] in STREAM_KINDS):
                # A block of an in-progress transaction is kept aside; its commit replays it whole.
                for msg, size in streamed.feed(data):
                    yield from self._handle(msg, size)
                continue
            if blocks and data[0] in ROW_KINDS:  # kept for a block (changes.py)
                raw = data if type(data) is bytes else bytes(data)
                if not asm.keep_raw(raw):
                    yield from asm.change_raw(raw)
                continue
            msg = decode(data) if spent is None else spent.timed_decode(decode, data)
            if incr is None:  # the common case inline: no generator per message
                yield from asm.handle(msg, len(data))
                continue
            yield from self._handle(msg, len(data))
        self._capped, self._behind = blocks, True  # more may be waiting

    def _handle(self, msg: PgOutputMessage | bytes, size: int) -> Iterator[ChangeEvent]:
        """One message (a streamed transaction's Insert or Update may come undecoded)."""
        asm, incr = self._asm, self._incr
        assert asm is not None
        if type(msg) is bytes:
            if incr is None or incr.window is None:  # no chunk window watches rows
                if not asm.keep_raw(msg):
                    yield from asm.change_raw(msg)
                return
            msg = decode(msg)
        assert not isinstance(msg, bytes)
        if incr is None:
            yield from asm.handle(msg, size)
            return
        for ev in asm.handle(msg, size):
            for one in ev.events() if type(ev) is BlockEvent else (ev,):  # it watches rows
                incr.on_event(one)
            yield ev
        for ev in incr.observe(msg):  # a HIGH watermark: the chunk's rows
            asm.last_out = PgPosition.of(ev.position)
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
        at = PgPosition.of(position)
        with self._lock:
            if at > self._acked:
                self._acked = at
            if at.lsn == self._snap_lsn:
                self._ack_snapshot(at.seq)
            elif self._asm is not None:
                lsn, idx = at
                ends = self._asm.tx_ends
                end = ends.get(lsn)
                # The whole transaction is durable: resume after its commit record; else at
                # it (the server resends it and positions skip the durable part).
                self._confirm(end[1] if end is not None and idx >= end[0] else lsn)
                for k in [k for k in ends if k <= lsn]:
                    del ends[k]
                if self._incr is not None:
                    self._incr.acknowledge(at)
                if self._snap_state is not None and not self._snap_state.complete:
                    self._snap_state.complete = True
                    if self.state_path:
                        self._snap_state.save(self.state_path)
            self._advance_idle()

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
    def receiving(self) -> bool:
        return self._asm is not None and self._asm.keeping  # changes kept for blocks

    @property
    def behind(self) -> bool:
        """The last poll stopped at its message cap or a full group of changes went out, and
        no keepalive (the walsender waits for WAL) or silence came since (reader thread)."""
        return self._behind or (self._asm is not None and self._asm.filled)

    @property
    def streamed_stats(self) -> StreamedStats | None:
        """Counters of streamed in-progress transactions; None when streaming is off."""
        return self._streamed.stats if self._streamed is not None else None

    @property
    def confirmed_lsn(self) -> int:
        """The slot position this source has reported as durable."""
        return self._confirmed


def _lsn(position: PgPosition | None) -> int | None:
    return None if position is None else position.lsn

