"""Incremental snapshots on PostgreSQL: tables copied chunk by chunk while the stream goes on
(the algorithm and its reasons: ``sources.common.incremental``).

Watermarks are transactional logical messages, ``pg_logical_emit_message(true, 'replicator',
<json>)``, each in its own transaction on the engine's catalog session; pgoutput sends them
with the option ``messages 'true'`` (PostgreSQL 14+). A chunk is read in its own short
REPEATABLE READ transaction (``SELECT ... WHERE key > frontier ORDER BY key LIMIT n``) whose
first statement also lists the transactions in progress for it.

Positions: the rows of a chunk are handed out at its HIGH watermark as ``(commit LSN of the
HIGH transaction, i)``; that transaction holds no row change, so no stream event shares
these positions, and they sort after every change the stream handed out before. A restart
reads the chunk again (new watermarks, larger LSN): the watermarks of an earlier run are
ignored (``Watermark.run``).

State: ``<state_dir>/postgres-<slot>.incremental.json`` (``IncrementalState``): the tables
still to copy and the committed frontier of each.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql as pgsql

from replicator.events.model import ChangeEvent, Op
from replicator.sources.common.incremental import (
    WATERMARK_PREFIX,
    ChunkDone,
    ChunkWindow,
    IncrementalState,
    RecentTransactions,
    Watermark,
    chunk_consistent,
)
from replicator.sources.common.incremental_copy import IncrementalCopier, load_incremental_state
from replicator.sources.postgres.changes import RelState, build_rel, make_event
from replicator.sources.postgres.pgoutput import Begin, Message, PgOutputMessage
from replicator.sources.postgres.setup import TableInfo, quote_ident
from replicator.sources.postgres.snapshot import table_columns
from replicator.sources.postgres.types import TypeMapper, ValueConversionError

log = logging.getLogger(__name__)

MESSAGES_MIN_SERVER = 140000  # pgoutput's ``messages`` option


class PgIncremental(IncrementalCopier[list[Any]]):
    """The incremental snapshots of one PostgresSource: driven from its reader thread
    (``next_chunk``, ``observe``, ``on_event``) and its acknowledgements (``acknowledge``)."""

    def __init__(
        self,
        *,
        conn: psycopg.Connection[Any],  # autocommit: writes the watermarks
        read_conn: psycopg.Connection[Any],  # autocommit, values as text: reads the chunks
        tables: Mapping[str, TableInfo],
        mapper: TypeMapper,
        state: IncrementalState,
        state_path: Path | None,
        chunk_rows: int,
        dead_letter: Callable[[RelState, tuple[Any, ...], tuple[int, int], ValueConversionError], None],
        progress: bool | None,
    ) -> None:
        super().__init__(
            tables=tables, state=state, state_path=state_path, chunk_rows=chunk_rows,
            progress=progress,
        )  # fmt: skip
        self.tables: Mapping[str, TableInfo] = tables
        self.conn = conn
        self.read_conn = read_conn
        self.mapper = mapper
        self.dead_letter = dead_letter
        self.run = uuid.uuid4().hex
        self.recent = RecentTransactions()
        self.window: ChunkWindow[tuple[Any, ...], dict[str, Any]] | None = None
        self._chunk_no = 0
        self._window_final = False
        self._window_key: list[Any] | None = None
        self._bad: list[tuple[tuple[Any, ...], ValueConversionError]] = []
        self._rel: RelState | None = None
        self._reading = dict(state.frontier)
        self._tx_lsn = 0
        self._last_pos: tuple[int, int] | None = None

    @property
    def busy(self) -> bool:
        """A chunk waits for its HIGH watermark, or a table has chunks left to read."""
        return self.window is not None or self._next_table() is not None

    # -- chunks --------------------------------------------------------------------------------
    def next_chunk(self) -> None:
        """Read the next chunk between its watermarks, unless one is waiting for its HIGH."""
        if self.window is not None:
            return
        table = self._next_table()
        if table is None:
            return
        info = self.tables[table]
        self._chunk_no += 1
        self._emit(Watermark("low", self.run, self._chunk_no, table))
        cols = table_columns(self.read_conn, info)
        rel = self._rel = build_rel(self.mapper, table, cols, info.key_columns)
        rows, in_progress = self._read_chunk(info, [c[0] for c in cols], self._reading.get(table))
        if not chunk_consistent(in_progress, self.recent):
            log.info("%s: chunk read missed a transaction the stream already handed out; "
                     "reading it again", table)  # fmt: skip
            return
        key_idx = [c[0] for c in cols].index
        kpos = [key_idx(k) for k in info.key_columns]
        entries = []
        self._bad = []
        for row in rows:
            assert rel.rows is not None
            try:
                after = rel.rows.convert(row)
            except ValueConversionError as exc:
                self._bad.append((row, exc))  # dead-lettered at the HIGH mark (its position)
                continue
            entries.append((tuple(after[k] for k in info.key_columns), after))
        self.window = ChunkWindow(table, self._chunk_no, entries)
        self._window_final = len(rows) < self.chunk_rows
        self._window_key = [rows[-1][i] for i in kpos] if rows else self._reading.get(table)
        self._emit(Watermark("high", self.run, self._chunk_no, table))

    def _read_chunk(
        self, info: TableInfo, names: list[str], after: list[Any] | None
    ) -> tuple[list[tuple[Any, ...]], list[int]]:
        q = quote_ident
        only = "" if info.relkind == "p" else "ONLY "
        order = ", ".join(q(k) for k in info.key_columns)
        where = ""
        if after is not None:
            lits = ", ".join(pgsql.Literal(v).as_string(self.read_conn) for v in after)
            where = f" WHERE ({order}) > ({lits})"
        conn = self.read_conn
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            # The first statement takes the snapshot: the transactions it does not see.
            xip = conn.execute("SELECT txid_snapshot_xip(txid_current_snapshot())").fetchall()
            rows = conn.execute(
                f"SELECT {', '.join(q(n) for n in names)} FROM {only}{info.sql}{where} "
                f"ORDER BY {order} LIMIT {int(self.chunk_rows)}"
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        return [tuple(r) for r in rows], [int(r[0]) % (1 << 32) for r in xip]

    def _emit(self, wm: Watermark) -> None:
        self.conn.execute(
            "SELECT pg_logical_emit_message(true, %s, %s)", (WATERMARK_PREFIX, wm.encode())
        )

    # -- the stream ----------------------------------------------------------------------------
    def observe(self, msg: PgOutputMessage) -> Iterator[ChangeEvent]:
        """A decoded message, before the assembler sees it: transactions are remembered, and
        this run's HIGH watermark hands the chunk's rows out."""
        t = type(msg)
        if t is Begin:
            assert isinstance(msg, Begin)
            self._tx_lsn = msg.final_lsn
            self.recent.add(msg.xid)
        elif t is Message:
            assert isinstance(msg, Message)
            if msg.prefix != WATERMARK_PREFIX:
                return
            wm = Watermark.decode(msg.content)
            w = self.window
            if wm is None or wm.kind != "high" or w is None or wm.run != self.run or wm.chunk != w.chunk:
                return
            yield from self._close_window(w)

    def on_event(self, ev: ChangeEvent) -> None:
        w = self.window
        if w is None or ev.table != w.table:
            return
        if ev.op is Op.TRUNCATE:
            w.truncated(ev.table)
            return
        info = self.tables[w.table]
        keys = []
        for image in (ev.before, ev.after):
            if image is not None and all(k in image for k in info.key_columns):
                keys.append(tuple(image[k] for k in info.key_columns))
        w.on_change(ev.table, keys)

    def _close_window(self, w: ChunkWindow[tuple[Any, ...], dict[str, Any]]) -> Iterator[ChangeEvent]:
        rel = self._rel
        assert rel is not None
        rows = w.close()
        self.window = None
        lsn = self._tx_lsn
        for i, after in enumerate(rows):
            self._last_pos = (lsn, i)
            yield make_event(rel.table, Op.READ, None, after, (lsn, i), rel.schema, None, None, True)
        for j, (row, exc) in enumerate(self._bad):
            self.dead_letter(rel, row, (lsn, len(rows) + j), exc)
        self._bad = []
        self._reading[w.table] = self._window_key
        if self._window_final:
            self._read_all.add(w.table)
        pos = (lsn, len(rows) - 1) if rows else None
        self.ledger.handed_out(ChunkDone(w.table, pos, self._window_key, self._window_final))
        if self._counted(w.table, len(rows), force_log=not self.active):
            log.info("incremental snapshot: %s rows copied in this run (%s at its chunk %d; "
                     "%d of its rows changed by the stream meanwhile)", f"{self.rows:,}", w.table,
                     self._chunk_no, w.dropped)  # fmt: skip

    @property
    def last_position(self) -> tuple[int, int] | None:
        """The last position handed out (the owner's skip rule must know it)."""
        return self._last_pos



def start_incremental(
    conn: psycopg.Connection[Any],
    *,
    state_path: Path | None,
    source_id: str,
    selected: Mapping[str, TableInfo],
    candidates: list[TableInfo],
    committed_tables: set[str],
    make: Callable[[IncrementalState], PgIncremental],
) -> tuple[PgIncremental | None, list[TableInfo]]:
    """The incremental snapshots of this run, and the tables left to the blocking snapshot.

    ``candidates``: tables the slot's stream has never carried into Iceberg (added to the
    publication, or without a committed position). Needs a state directory (the frontier
    must survive a restart) and PostgreSQL 14+ (logical messages in pgoutput)."""
    server = conn.info.server_version
    if state_path is None or server < MESSAGES_MIN_SERVER:
        if candidates and state_path is not None:
            log.info("PostgreSQL %d has no logical messages in pgoutput: added tables are "
                     "copied before streaming resumes", server)  # fmt: skip
        return None, candidates
    incr = make(load_incremental_state(state_path, source_id, selected, committed_tables))
    for t in candidates:
        incr.add(t.qualified, "added")
    incr.save()
    return incr, []


def discover_tables(
    conn: psycopg.Connection[Any], publication: str, known: Mapping[str, TableInfo]
) -> list[TableInfo]:
    """Tables that appeared in the source since the selection was made (no ``source.tables``:
    every table is selected): checked and added to the publication; a table the engine cannot
    replicate (no key) is skipped with a warning, as it would be at a restart's check."""
    from replicator.errors import SourceSetupError
    from replicator.sources.postgres import setup

    row = conn.execute(
        "SELECT puballtables FROM pg_publication WHERE pubname = %s", (publication,)
    ).fetchone()
    if row is None or row[0]:
        # FOR ALL TABLES: the stream may already have described a new table as not selected
        # (pgoutput sends a relation once per session): it is picked up at the next start.
        return []
    new = [t for t in setup.list_tables(conn, None) if t.qualified not in known]
    usable = []
    for t in new:
        try:
            setup.check_tables(conn, [t])
        except SourceSetupError as exc:
            log.warning("new table %s is not replicated: %s", t.qualified, exc)
            continue
        usable.append(t)
    if usable:
        setup.ensure_publication(conn, publication, usable)
    return usable
