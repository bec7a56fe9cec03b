"""The initial snapshot: existing rows as 'r' events, consistent with the slot.

Positions. Snapshot rows get ``(snapshot_lsn, seq)`` with ``snapshot_lsn = slot's confirmed
position - 1`` and ``seq`` counting up from 0. Every change the slot will stream has
``commit_lsn >= confirmed position``, so snapshot rows sort before all of them; and a slot
created later (after a lost slot) has a larger confirmed position, so its snapshot sorts
after everything committed before. ``acknowledge`` never moves the slot for snapshot
positions (they are recognised by ``snapshot_lsn``).

Consistency. A new slot exports its snapshot (``CREATE_REPLICATION_SLOT ... (SNAPSHOT
'export')``) and the reader imports it (``SET TRANSACTION SNAPSHOT``): rows as of exactly the
slot's consistent point, so snapshot + stream = every row exactly once. A *resumed* or
*added-table* snapshot cannot import the old snapshot (it died with its session); it reads a
fresh REPEATABLE READ snapshot, taken after the slot's confirmed position. Rows changed in
between appear in both the snapshot (newer state) and the stream (older states, then the
newest), so a consumer that applies events in position order as upserts ('c'/'r'/'u' replace
the row with that key, 'd' of a missing key is a no-op) ends at the right state.

Resume. Tables are read one by one in a fixed order, each in key order,
``snapshot_chunk_rows`` rows at a time: by default one ``COPY (SELECT ... WHERE key > last
ORDER BY key LIMIT n) TO STDOUT`` per chunk (read whole by ``copy_out``, the next one on a
helper thread while a chunk is handed out), parsed into Arrow (``copy_chunks``; the events
carry a view of the chunk, ``events.block``); with ``helpers`` (``source.snapshot_connections``
> 1) the chunks are key ranges COPYed by that many connections inside the same snapshot and
handed on in the same order (``parallel_copy``); else (``snapshot_copy=False``) through a
server-side cursor, row by row. After each chunk the reader
records a *boundary* (seq of the chunk's last row, table index, last key as text). When the
pipeline acknowledges a snapshot position, the last boundary at or below it is written to
``<state_dir>/postgres-<slot>.snapshot.json`` (atomically), stamped with the source's identity
(a file of another server or database is refused). A restart with that file resumes
at (table, key > last key) instead of starting over; new rows get seqs above every committed
one, so none is skipped as "already committed". The key is ``TableInfo.key_columns`` (the
replica identity index when set, else the primary key): the one the stream keys on. Without a state
directory, an interrupted snapshot is redone in full (see ``PostgresSource`` for the rule).
Before a chunk's first row is handed out, the state also records it (the durable read
frontier, ``frontier.py``): a resumed snapshot re-reads as upserts only the keys up to the
chunk of each table's last committed row, the rest as plain inserts.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg import sql as pgsql
from psycopg.types.string import TextLoader

from replicator.events.block import RowBlock
from replicator.sources.common.snapshot import Boundary, BoundaryLog
from replicator.sources.common.state import JsonStateFile
from replicator.sources.postgres.copy_chunks import (
    KEY_TEXT_PREFIX,
    CopyLayout,
    ParsedChunk,
    parse_chunk,
)
from replicator.sources.postgres.copy_out import copy_out
from replicator.sources.postgres.parallel_copy import key_ranges, read_in_order, share_snapshot
from replicator.sources.postgres.pgoutput import str_to_lsn
from replicator.sources.postgres.position import PgPosition
from replicator.sources.postgres.remote_copy import RemoteReads
from replicator.sources.postgres.setup import TableInfo, quote_ident

log = logging.getLogger(__name__)


# Read by a fresh snapshot's first statement (``SnapshotReader.begin``). On a standby
# (``standby.py``) a transaction becomes visible when its commit record is replayed, and the
# replay position moves only after that record's redo: the *received* position (every
# replayed record was received first) is past every visible commit; the replay position
# where WAL is not streamed (an archive only) and received stays NULL.
SNAPSHOT_BOUND_QUERY = """
SELECT CASE WHEN pg_is_in_recovery()
    THEN greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
    ELSE pg_current_wal_insert_lsn() END::text
"""


@dataclass
class SnapshotState(JsonStateFile):
    """What survives a restart: where the committed part of the snapshot ends."""

    slot: str
    snapshot_lsn: int
    tables: list[str]  # qualified names, in reading order
    table_index: int = 0  # first table not completely committed
    last_key: list[str | None] | None = None  # text key of its last committed row
    next_seq: int = 0  # above every seq handed out so far
    complete: bool = False
    source_id: str | None = None  # whose snapshot this is (``sources.common.identity``)
    # The durable read frontier (``frontier.py``): per table, the text key of the last row
    # handed out as a plain insert (None: keyless); tables whose every row may repeat. None:
    # a file written before the frontier was kept (every re-read row may repeat).
    read_frontier: dict[str, list[str | None] | None] | None = None
    repeats_all: list[str] = field(default_factory=list)
    read_chunks: list[list[Any]] = field(default_factory=list)  # see ``frontier.py``
    # Per table, its key columns with their types and collations when the frontier was kept:
    # a key read another way since (an ALTER while stopped) makes the saved keys meaningless.
    key_layouts: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Chunk:
    table: TableInfo
    table_index: int
    columns: tuple[str, ...]
    rows: list[tuple[str | None, ...]]
    key_indexes: tuple[int, ...]
    first_seq: int = 0
    boundary: Boundary | None = None
    # Read by COPY (``copy_chunks``): the converted rows as Arrow (``rows`` is then empty
    # unless the chunk had a value that does not convert: then only ``rows``, as text).
    block: RowBlock | None = None
    count: int = -1  # rows in the chunk (-1: len(rows))
    big_rows: list[tuple[int, tuple[str | None, ...], int]] | None = None  # (row, text key, size)
    repeats: bool = False  # its rows may already be in the table (``frontier.py``)

    def __len__(self) -> int:
        return self.count if self.count >= 0 else len(self.rows)


@dataclass
class SnapshotReader:
    """Reads the planned tables in key order inside one REPEATABLE READ transaction."""

    conn: psycopg.Connection[Any]  # dedicated; all values load as text
    tables: Sequence[TableInfo]
    columns: dict[str, list[tuple[str, int, int]]]  # table -> [(name, type oid, typmod)]
    chunk_rows: int
    table_index: int = 0
    last_key: tuple[str | None, ...] | None = None
    next_seq: int = 0
    boundaries: BoundaryLog = field(default_factory=BoundaryLog)
    # table -> how COPY reads it; a table with a key and a layout is read by COPY chunks
    # (``copy_chunks``), any other table through the server-side cursor.
    layouts: dict[str, CopyLayout] = field(default_factory=dict)
    big_row_chars: int = 1 << 62  # rows at least this big (approximately) are reported
    # Rows a resumed snapshot may have handed out before (``frontier.py``): table -> key up
    # to which its rows may repeat, None for all of them; a table not named: none repeat.
    repeats: dict[str, tuple[str | None, ...] | None] = field(default_factory=dict)
    # Tables a resumed snapshot reads after a key instead of from their start: every row up
    # to it is committed (``frontier.after_committed_chunks``); the first table's is ``last_key``.
    starts: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    # More connections in the same snapshot (``parallel_copy``): COPY chunks are then read by
    # them, several at once; none: by ``conn``, one chunk read ahead.
    helpers: list[psycopg.Connection[Any]] = field(default_factory=list)
    # Chunks read by tasks elsewhere (``remote_copy``: Spark executors) instead of helpers.
    remote: RemoteReads | None = None

    def begin(self, snapshot_name: str | None) -> int | None:
        """Open the snapshot: the slot's exported one (returns None), or a fresh one; then
        returns a WAL position at or above the commit record of every transaction it sees.

        That bound is read by the snapshot's own first statement: REPEATABLE READ takes the
        snapshot when that statement starts, before the function runs, and a transaction
        becomes visible only after its commit record is inserted. So the *insert* position
        read then is past every visible commit. ``pg_current_wal_lsn()`` (the *write*
        position) is not: with ``synchronous_commit = off`` a commit is visible while its
        record still waits in the WAL buffers, above that position; and read on another
        session before the snapshot exists, it also misses commits made in between."""
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        if snapshot_name is not None:
            self.conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot_name}'")
            return None
        row = self.conn.execute(SNAPSHOT_BOUND_QUERY).fetchone()
        assert row is not None
        return str_to_lsn(str(row[0]))

    @property
    def done(self) -> bool:
        return self.table_index >= len(self.tables)

    def estimated_rows(self) -> int:
        """Rows left to read, as the planner estimates them: whole tables by ``reltuples``,
        and a table resumed after ``last_key`` by the plan of the rest (a resumed snapshot's
        progress counts what this run reads, so its total must be what is left)."""
        tables = self.tables[self.table_index :]
        resumed = (
            tables[0] if tables and self.last_key is not None and tables[0].key_columns else None
        )
        oids = [t.oid for t in tables if t is not resumed]
        # A partitioned table's rows are its leaf partitions' (the root has no storage).
        total = self.conn.execute(
            "SELECT coalesce(sum(greatest(reltuples, 0)), 0)::bigint FROM pg_class "
            "WHERE relkind <> 'p' AND (oid = ANY(%s) OR oid IN ("
            "  SELECT t.relid FROM unnest(%s::oid[]) r(oid), pg_partition_tree(r.oid) t))",
            (oids, oids),
        ).fetchone()
        rows = int(total[0]) if total else 0
        if resumed is not None:
            rows += self._rows_after_last_key(resumed)
        return rows

    def _rows_after_last_key(self, t: TableInfo) -> int:
        assert self.last_key is not None
        only = "" if t.relkind == "p" else "ONLY "
        order = ", ".join(quote_ident(k) for k in t.key_columns)
        lits = ", ".join(pgsql.Literal(v).as_string(self.conn) for v in self.last_key)
        # A savepoint: an estimate that fails must not abort the snapshot's transaction.
        self.conn.execute("SAVEPOINT replicator_estimate")
        try:
            row = self.conn.execute(
                f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {only}{t.sql} WHERE ({order}) > ({lits})"
            ).fetchone()
            self.conn.execute("RELEASE SAVEPOINT replicator_estimate")
        except psycopg.Error as exc:
            self.conn.execute("ROLLBACK TO SAVEPOINT replicator_estimate")
            log.warning("no row estimate for the rest of %s: %s", t.qualified, exc)
            return 0
        try:
            plan = row[0] if row else None
            if isinstance(plan, str):
                plan = orjson.loads(plan)
            return max(int(plan[0]["Plan"]["Plan Rows"]), 0)  # type: ignore[index]
        except (LookupError, TypeError, ValueError):
            return 0  # no estimate: the bar shows a count without a total share

    def chunks(self) -> Iterator[Chunk]:
        """Chunks of rows; ``chunk.boundary`` says where to resume after it."""
        while not self.done:
            t = self.tables[self.table_index]
            if t.key_columns and t.qualified in self.starts:
                self.last_key = self.starts[t.qualified]
            cols = self.columns[t.qualified]
            names = tuple(c[0] for c in cols)
            key_cols = t.key_columns
            key_idx = tuple(names.index(k) for k in key_cols)
            # ONLY: inheritance children stream as their own relations; a partitioned root
            # (published via the root) must include its partitions.
            only = "" if t.relkind == "p" else "ONLY "
            layout = self.layouts.get(t.qualified)
            if key_cols and layout is not None:
                yield from self._copy_chunks(t, layout, names, key_idx, only)
                self._next_table()
                continue
            sql = f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {only}{t.sql}"
            params: list[Any] = []
            if key_cols:
                if self.last_key is not None:
                    lhs = ", ".join(quote_ident(k) for k in key_cols)
                    rhs = ", ".join(["%s"] * len(key_cols))
                    sql += f" WHERE ({lhs}) > ({rhs})"
                    params = list(self.last_key)
                sql += " ORDER BY " + ", ".join(quote_ident(k) for k in key_cols)
            with self.conn.cursor(name=f"replicator_snapshot_{self.table_index}") as cur:
                cur.itersize = self.chunk_rows
                cur.execute(sql, params)
                while True:
                    rows = cur.fetchmany(self.chunk_rows)
                    if not rows:
                        break
                    chunk = Chunk(t, self.table_index, names, rows, key_idx, self.next_seq)
                    chunk.repeats = t.qualified in self.repeats  # row by row: no split
                    self.next_seq += len(rows)
                    if key_cols:
                        self.last_key = tuple(rows[-1][i] for i in key_idx)
                    chunk.boundary = Boundary(self.next_seq - 1, self.table_index, self.last_key)
                    self.boundaries.append(chunk.boundary)
                    yield chunk
            self._next_table()

    def _next_table(self) -> None:
        self.table_index += 1
        self.last_key = None
        self.boundaries.append(Boundary(self.next_seq - 1, self.table_index, None))

    def _copy_chunks(
        self, t: TableInfo, layout: CopyLayout, names: tuple[str, ...],
        key_idx: tuple[int, ...], only: str,
    ) -> Iterator[Chunk]:  # fmt: skip
        """The table in key order, ``chunk_rows`` rows per ``COPY (SELECT ... WHERE key >
        last ORDER BY key LIMIT n)``: each chunk is one statement of the same REPEATABLE READ
        transaction, so the chunks together are exactly the snapshot's rows.

        The next chunk's COPY runs on a helper thread while this chunk's rows are handed out
        (the server's part of a chunk costs about as much as the engine's): it starts once
        this chunk is parsed (its query needs the chunk's last key) and is the connection's
        only user until it ends; stopping early waits for it (the pool's exit).

        A table with a read frontier ``upto`` (``self.repeats``) is read in two parts: keys up
        to it (rows that may repeat), then keys past it (plain inserts); the server compares
        the keys, in the key's own order (collations included)."""
        key_cols = t.key_columns
        q = quote_ident
        select = ", ".join([
            *(q(n) for n in names), *(f"{q(k)} AS {q(KEY_TEXT_PREFIX + k)}" for k in key_cols)
        ])  # fmt: skip
        order = ", ".join(q(k) for k in key_cols)
        upto = self.repeats.get(t.qualified)
        repeating = t.qualified in self.repeats

        if self.helpers or self.remote is not None:
            yield from self._parallel_copy_chunks(t, layout, names, key_idx, f"{only}{t.sql}", select)
            return

        def lits(key: Sequence[str | None]) -> str:
            return ", ".join(pgsql.Literal(v).as_string(self.conn) for v in key)

        def query() -> str:
            conds = [] if self.last_key is None else [f"({order}) > ({lits(self.last_key)})"]
            if upto is not None:
                conds.append(f"({order}) {'<=' if repeating else '>'} ({lits(upto)})")
            where = " WHERE " + " AND ".join(conds) if conds else ""
            return (
                f"COPY (SELECT {select} FROM {only}{t.sql}{where} ORDER BY {order} "
                f"LIMIT {int(self.chunk_rows)}) TO STDOUT (FORMAT csv)"
            )

        with ThreadPoolExecutor(1, thread_name_prefix="snapshot-copy") as pool:
            pending = pool.submit(copy_out, self.conn, query())
            while True:
                data = pending.result()
                if not data and not (repeating and upto is not None):
                    return
                if not data:  # nothing (more) up to the frontier: the keys past it
                    repeating = False
                    pending = pool.submit(copy_out, self.conn, query())
                    continue
                chunk = self._copy_chunk(t, layout, names, key_idx, data)
                chunk.repeats = repeating
                n = len(chunk)
                more = n >= self.chunk_rows or (repeating and upto is not None)
                if n < self.chunk_rows:
                    repeating = False
                if more:  # read the next chunk meanwhile
                    pending = pool.submit(copy_out, self.conn, query())
                self.next_seq += n
                chunk.boundary = Boundary(self.next_seq - 1, self.table_index, self.last_key)
                self.boundaries.append(chunk.boundary)
                yield chunk
                if not more:
                    return

    def _parallel_copy_chunks(
        self, t: TableInfo, layout: CopyLayout, names: tuple[str, ...],
        key_idx: tuple[int, ...], source: str, select: str,
    ) -> Iterator[Chunk]:  # fmt: skip
        """The table's chunks read by the helpers (or by remote tasks, ``remote_copy``),
        several at once, handed on in key order (``parallel_copy``); the same chunks,
        boundaries and repeat flags as ``conn`` alone."""
        keys = [quote_ident(k) for k in t.key_columns]
        order, n = ", ".join(keys), int(self.chunk_rows)

        def sql(where: str) -> str:
            return f"COPY (SELECT {select} FROM {source}{where} ORDER BY {order} LIMIT {n}) TO STDOUT (FORMAT csv)"

        def read(conn: psycopg.Connection[Any], where: str) -> ParsedChunk | None:
            data = copy_out(conn, sql(where))
            return parse_chunk(layout, data, key_idx, self.big_row_chars) if data else None

        upto = self.repeats.get(t.qualified)
        ranges = key_ranges(
            self.conn, source, keys, n, self.last_key, upto, t.qualified in self.repeats
        )
        reads = (
            self.remote.chunks(t.qualified, ((sql(w), rep) for w, rep in ranges), layout, key_idx, self.big_row_chars)
            if self.remote is not None else read_in_order(self.helpers, ranges, read)
        )  # fmt: skip
        for parsed, repeats in reads:
            chunk = self._copy_chunk(t, layout, names, key_idx, parsed)
            chunk.repeats = repeats
            self.next_seq += len(chunk)
            chunk.boundary = Boundary(self.next_seq - 1, self.table_index, self.last_key)
            self.boundaries.append(chunk.boundary)
            yield chunk

    def _copy_chunk(
        self, t: TableInfo, layout: CopyLayout, names: tuple[str, ...],
        key_idx: tuple[int, ...], data: bytes | ParsedChunk,
    ) -> Chunk:  # fmt: skip
        p = data if isinstance(data, ParsedChunk) else parse_chunk(layout, data, key_idx, self.big_row_chars)
        self.last_key = p.last_key
        if p.block is None:  # goes row by row (``parse_chunk``)
            return Chunk(t, self.table_index, names, p.rows, key_idx, self.next_seq)
        return Chunk(
            t, self.table_index, names, [], key_idx, self.next_seq,
            block=RowBlock(p.block), count=p.block.num_rows, big_rows=p.big_rows,
        )  # fmt: skip

    def share(self, helpers: Sequence[psycopg.Connection[Any]], snapshot_name: str | None) -> None:
        """Let ``helpers`` read COPY chunks inside this snapshot (after ``begin``)."""
        self.helpers = list(helpers)
        share_snapshot(self.conn, self.helpers, snapshot_name)

    def finish(self) -> None:
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.conn.execute("COMMIT")
        self.close_helpers()

    def close_helpers(self) -> None:
        """Close the helper connections (no chunk read may be in flight: the chunks'
        generator is closed first)."""
        helpers, self.helpers = self.helpers, []
        for conn in helpers:
            conn.close()


def table_columns(conn: psycopg.Connection[Any], table: TableInfo) -> list[tuple[str, int, int]]:
    """(name, type oid, typmod) of the columns pgoutput sends: not dropped, not generated."""
    rows = conn.execute(
        "SELECT attname, atttypid, atttypmod FROM pg_attribute "
        "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped AND attgenerated = '' "
        "ORDER BY attnum",
        (table.oid,),
    ).fetchall()
    return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]


def key_layouts(conn: psycopg.Connection[Any], tables: Sequence[TableInfo]) -> dict[str, list[str]]:
    """Per table, its key columns in key order, each with its type and collation: what
    decides how the chunk queries order and compare its keys."""
    out: dict[str, list[str]] = {}
    for t in tables:
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), coalesce(c.collname, '') "
            "FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation "
            "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
            (t.oid,),
        ).fetchall()
        cols = {str(r[0]): f"{r[1]} {r[2]}" for r in rows}
        out[t.qualified] = [f"{k} {cols.get(k, '?')}" for k in t.key_columns]
    return out


def text_loaders(conn: psycopg.Connection[Any]) -> None:
    """Make ``conn`` return every value as the type's text output: the same text pgoutput
    sends, so one set of converters serves snapshot and stream. psycopg loads OIDs it has no
    loader for (enums, domains over text, ...) as text already; this covers the rest."""
    for info in psycopg.postgres.types:
        for oid in (info.oid, getattr(info, "array_oid", 0)):
            if oid:
                conn.adapters.register_loader(oid, TextLoader)


@dataclass(frozen=True)
class SnapshotPlan:
    tables: list[TableInfo]  # in reading order
    last_key: list[str | None] | None  # resume after this key in the first table
    next_seq: int
    # Tables read after a key, not from their start (``frontier.after_committed_chunks``).
    starts: dict[str, list[str | None]] = field(default_factory=dict)


def copied_keyless(
    state: SnapshotState | None, committed: Mapping[str, PgPosition], keyless: Collection[str], slot: str
) -> dict[str, PgPosition]:
    """Keyless tables this slot's completed initial snapshot copied with nothing committed for
    them (they were empty, and none of their changes was committed since): for planning, they
    count as committed at the snapshot, so a restart after the slot moved on does not take
    them for tables joining a streaming pipeline (refused for keyless tables)."""
    if state is None or not committed or not state.complete or state.slot != slot:
        return {}
    end = PgPosition(state.snapshot_lsn, max(state.next_seq - 1, 0))
    return {t: end for t in sorted(keyless) if t in state.tables and t not in committed}


def plan_resumed_snapshot(
    tables: Sequence[TableInfo],
    added: set[str],
    committed: Mapping[str, PgPosition],
    confirmed_lsn: int,
    state: SnapshotState | None,
) -> SnapshotPlan | None:
    """What to (re)read when the slot already exists (rules in the module docstring and in
    ``PostgresSource``). None: nothing, stream only."""
    snap_lsn = confirmed_lsn - 1
    by_name = {t.qualified: t for t in tables}
    if state is not None and state.snapshot_lsn != snap_lsn:
        state = None  # the slot moved on since: that snapshot completed

    def needs(t: TableInfo) -> bool:
        p = committed.get(t.qualified)
        return t.qualified in added or p is None or p.lsn == snap_lsn

    last_key: list[str | None] | None = None
    if state is not None:
        remaining = [] if state.complete else state.tables[state.table_index :]
        order = [by_name[n] for n in remaining if n in by_name]
        if order and remaining and remaining[0] == order[0].qualified:
            last_key = state.last_key
        order += [t for t in tables if t.qualified not in state.tables and needs(t)]
    else:
        order = [t for t in tables if needs(t)]
    if not order:
        return None
    # New seqs above every committed one: re-read rows must not be skipped as "done".
    seqs = [p.seq for p in committed.values() if p.lsn == snap_lsn]
    next_seq = max([s + 1 for s in seqs] + [state.next_seq if state else 0])
    return SnapshotPlan(order, last_key, next_seq)
