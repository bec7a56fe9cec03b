"""The initial snapshot: existing rows as 'r' events, consistent with a binlog position.

Consistency. MariaDB: ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and the session status
``binlog_snapshot_file`` / ``binlog_snapshot_position`` give the exact binlog point of the
snapshot without any lock. MySQL: ``FLUSH TABLES WITH READ LOCK`` (briefly, needs RELOAD),
``SHOW MASTER STATUS``, ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, ``UNLOCK TABLES``.
Rows are read inside that one REPEATABLE READ transaction, table by table in primary-key
order, ``chunk_rows`` at a time (keyset pagination: ``WHERE pk > last ORDER BY pk LIMIT n``),
with a tqdm progress bar, the next chunk's query running while a chunk is converted
(``read_ahead``: on the snapshot's own connection, in a helper thread). Streaming then
starts at the snapshot point P: every row is in exactly one of snapshot and stream.

Positions. Snapshot rows get ``(P.file, P.pos, SNAPSHOT_BASE + seq)`` with ``SNAPSHOT_BASE =
-2**62`` and ``seq`` counting up from 0 across all tables. A streamed row has ``(file,
tx_begin >= P.pos or a later file, index >= 0)``, so every snapshot row sorts before every
binlog row after P and after everything before P; a negative third part marks a snapshot
position (and P can be read back from it).

Resume. The reader records a boundary (last seq, table index, last key) after each chunk. When
the pipeline acknowledges a snapshot position, the last boundary at or below it is saved to
``<state_dir>/mysql-<server_id>.snapshot.json`` (atomic replace). A restart whose committed
positions still sit at that snapshot point continues at (table, key > last key) in a *new*
consistent snapshot, giving new rows seqs above every committed one; the stream still starts
at P. Rows changed between P and the new snapshot appear in the snapshot (newer state) and
again in the stream (older states, then the newest): applied in position order as upserts
(what the pipeline does with 'r', 'c' and 'u') the table ends right, because every binlog
event carries full row images. Re-reading a chunk is harmless for the same reason. Without a
state directory, an interrupted snapshot re-reads the affected tables from their start. Which
re-read rows need the upsert: only those up to the durable read frontier (``frontier.py``);
past it they are plain inserts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeAlias

import pymysql
from pymysql.cursors import Cursor

from replicator.errors import SourceSetupError
from replicator.events.block import RowBlock
from replicator.events.model import TableSchema
from replicator.sources.common.snapshot import Boundary, BoundaryLog
from replicator.sources.common.state import JsonStateFile
from replicator.sources.mysql.blocks import chunk_block
from replicator.sources.mysql.position import (  # noqa: F401 - re-exported
    INCREMENTAL_BASE as INCREMENTAL_BASE,
)
from replicator.sources.mysql.position import (
    SNAPSHOT_BASE as SNAPSHOT_BASE,
)
from replicator.sources.mysql.position import (
    is_snapshot_parts as is_snapshot_parts,
)
from replicator.sources.mysql.position import (
    snapshot_parts as snapshot_parts,
)
from replicator.sources.mysql.position import (
    snapshot_seq as snapshot_seq,
)
from replicator.sources.mysql.rawchunk import RawChunk
from replicator.sources.mysql.setup import TableInfo, current_user, master_status, query
from replicator.sources.mysql.types import (
    ColumnDef,
    ColumnMapping,
    RowConverter,
    def_from_information_schema,
    map_column,
    quote_ident,
)

# -- resume state ------------------------------------------------------------------------------


def encode_key(values: Sequence[Any]) -> list[Any]:
    """A primary key as JSON (type-tagged, so the keyset query gets the same types back)."""
    out: list[Any] = []
    for v in values:
        if v is None:
            out.append(None)
        elif isinstance(v, bool | int):
            out.append(["i", int(v)])
        elif isinstance(v, str):
            out.append(["s", v])
        elif isinstance(v, bytes | bytearray):
            out.append(["b", bytes(v).hex()])
        elif isinstance(v, Decimal):
            out.append(["d", str(v)])
        elif isinstance(v, float):
            out.append(["f", repr(v)])
        elif isinstance(v, datetime):
            out.append(["T", v.isoformat()])
        elif isinstance(v, date):
            out.append(["D", v.isoformat()])
        elif isinstance(v, timedelta):
            out.append(["t", (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds])
        else:
            out.append(["s", str(v)])
    return out


def decode_key(raw: Sequence[Any]) -> tuple[Any, ...]:
    dec = {
        "i": int,
        "s": str,
        "b": bytes.fromhex,
        "d": Decimal,
        "f": float,
        "T": datetime.fromisoformat,
        "D": date.fromisoformat,
        "t": lambda us: timedelta(microseconds=us),
    }
    return tuple(None if r is None else dec[r[0]](r[1]) for r in raw)  # type: ignore[operator]


@dataclass
class SnapshotState(JsonStateFile):
    """What survives a restart: where the committed part of the snapshot ends."""

    point: list[Any]  # [binlog file, position] the snapshot positions use
    tables: list[str]  # qualified names, in reading order
    table_index: int = 0  # first table not completely committed
    last_key: list[Any] | None = None  # encoded key of its last committed row
    next_seq: int = 0  # above every seq handed out so far
    complete: bool = False
    source_id: str | None = None  # whose snapshot this is (``sources.common.identity``)
    # The durable read frontier (``frontier.py``): per table, the encoded key of the last row
    # handed out, written before a chunk's first row leaves. None: not kept (a state file
    # written before it was, or a snapshot resumed without one): every re-read row may repeat.
    read_frontier: dict[str, list[Any]] | None = None
    repeats_all: list[str] = field(default_factory=list)  # tables whose every row may repeat
    read_chunks: list[list[Any]] = field(default_factory=list)  # chunks handed out (``frontier.py``)
    # Per table, its key columns with their types and collations when the frontier was kept:
    # a key read another way since (an ALTER while stopped) makes the saved keys meaningless.
    key_layouts: dict[str, list[str]] = field(default_factory=dict)

    def done_tables(self) -> set[str]:
        return set(self.tables if self.complete else self.tables[: self.table_index])


def _key_after(pk: Sequence[str], key: Sequence[Any], params: list[Any]) -> str:
    """``pk > key`` in keyset order, as (a > x) OR (a = x AND b > y) ...: every server
    optimises this form (``params`` gets its values)."""
    ors = []
    for i in range(len(pk)):
        terms = [f"{quote_ident(pk[j])} = %s" for j in range(i)]
        terms.append(f"{quote_ident(pk[i])} > %s")
        ors.append("(" + " AND ".join(terms) + ")")
        params.extend(key[: i + 1])
    return "(" + " OR ".join(ors) + ")"


# -- table descriptions ------------------------------------------------------------------------


def describe_tables(
    conn: pymysql.Connection[Cursor], tables: Sequence[TableInfo]
) -> dict[str, list[ColumnDef]]:
    """Column definitions from information_schema (JSON: MySQL's type, or MariaDB's
    ``json_valid(col)`` check on a LONGTEXT)."""
    if not tables:
        return {}
    schemas = sorted({t.schema for t in tables})
    marks = ", ".join(["%s"] * len(schemas))
    json_cols: set[tuple[str, str, str]] = set()
    try:
        for s, t, clause in query(
            conn,
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CHECK_CLAUSE "
            "FROM information_schema.CHECK_CONSTRAINTS "
            f"WHERE CONSTRAINT_SCHEMA IN ({marks})",
            schemas,
        ):
            text = str(clause).strip()
            if text.lower().startswith("json_valid(`") and text.endswith("`)"):
                json_cols.add(
                    (str(s), str(t), text[len("json_valid(`") : -2].replace("``", "`").lower())
                )
    except pymysql.err.MySQLError:
        pass  # servers without CHECK_CONSTRAINTS have no MariaDB-style JSON either
    rows = query(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, "
        "NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_OCTET_LENGTH "
        f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({marks}) "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
        schemas,
    )
    names = (
        "TABLE_SCHEMA",
        "TABLE_NAME",
        "COLUMN_NAME",
        "DATA_TYPE",
        "COLUMN_TYPE",
        "CHARACTER_SET_NAME",
        "NUMERIC_PRECISION",
        "NUMERIC_SCALE",
        "DATETIME_PRECISION",
        "CHARACTER_OCTET_LENGTH",
    )
    wanted = {t.qualified for t in tables}
    out: dict[str, list[ColumnDef]] = {q: [] for q in wanted}
    for r in rows:
        row = dict(zip(names, r, strict=True))
        q = f"{row['TABLE_SCHEMA']}.{row['TABLE_NAME']}"
        if q in wanted:
            key = (
                str(row["TABLE_SCHEMA"]),
                str(row["TABLE_NAME"]),
                str(row["COLUMN_NAME"]).lower(),
            )
            out[q].append(def_from_information_schema(row, is_json=key in json_cols))
    return out


def key_layouts(conn: pymysql.Connection[Cursor], tables: Sequence[TableInfo]) -> dict[str, list[str]]:
    """Per table, its primary-key columns in key order, each with its column type and
    collation: what decides how the keyset queries order and compare its keys."""
    if not tables:
        return {}
    schemas = sorted({t.schema for t in tables})
    marks = ", ".join(["%s"] * len(schemas))
    rows = query(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME "
        f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({marks})",
        schemas,
    )
    cols = {(str(r[0]), str(r[1]), str(r[2]).lower()): f"{r[3]} {r[4]}" for r in rows}
    return {
        t.qualified: [f"{c} {cols.get((t.schema, t.name, c.lower()), '?')}" for c in t.pk_columns]
        for t in tables
    }


@dataclass
class SnapTable:
    info: TableInfo
    mappings: list[ColumnMapping]
    schema: TableSchema
    rows: RowConverter


def snap_table(info: TableInfo, defs: Sequence[ColumnDef], zero_dates: str) -> SnapTable:
    """Key columns are listed in column order, as the binlog side lists them."""
    key = tuple(d.name for d in defs if d.name in info.pk_columns)
    mappings = [map_column(d, key=d.name in info.pk_columns) for d in defs]
    schema = TableSchema(
        table=info.qualified, columns=tuple(m.spec for m in mappings), key_columns=key
    )
    return SnapTable(info, mappings, schema, RowConverter.build(mappings, key, zero_dates))


# -- reading ----------------------------------------------------------------------------------


def open_consistent_snapshot(conn: pymysql.Connection[Cursor], is_mariadb: bool) -> tuple[str, int]:
    """Start the snapshot transaction on ``conn``; returns its binlog point (file, pos)."""
    query(conn, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    if is_mariadb:
        query(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        status = {
            str(k).lower(): str(v) for k, v in query(conn, "SHOW STATUS LIKE 'binlog_snapshot_%'")
        }
        return status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
    try:
        query(conn, "FLUSH TABLES WITH READ LOCK")
    except pymysql.err.OperationalError as exc:
        raise SourceSetupError(
            f"FLUSH TABLES WITH READ LOCK failed ({exc.args[-1]}); the snapshot needs it to pin "
            "its binlog position",
            hint=f"GRANT RELOAD ON *.* TO {current_user(conn)};",
        ) from None
    try:
        point = master_status(conn)
        query(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
    finally:
        query(conn, "UNLOCK TABLES")
    return point


Fetched: TypeAlias = RawChunk | list[tuple[Any, ...]]  # a chunk off the wire (``_fetch``)


def _done(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """``fn(*args)`` now, as a finished future (no read ahead)."""
    f: Future[Any] = Future()
    f.set_result(fn(*args))
    return f


@dataclass
class Chunk:
    table: SnapTable
    rows: list[tuple[Any, ...]]
    first_seq: int
    boundary: Boundary
    block: RowBlock | None = None  # its rows as Arrow columns (``blocks.py``); None: row by row
    repeats: bool = False  # its rows may already be in the table (``frontier.py``)

    def __len__(self) -> int:
        return len(self.rows) if self.block is None else self.block.num_rows


@dataclass
class SnapshotReader:
    """Reads the planned tables in primary-key order inside one consistent snapshot."""

    conn: pymysql.Connection[Cursor]  # dedicated to the snapshot transaction
    tables: list[SnapTable]
    chunk_rows: int
    table_index: int = 0
    last_key: tuple[Any, ...] | None = None
    next_seq: int = 0
    boundaries: BoundaryLog = field(default_factory=BoundaryLog)
    blocks: bool = True  # convert each chunk column-wise into a ``RowBlock`` when it can
    # Query the next chunk (in a helper thread, on ``conn``) while this one is converted and
    # handed on; off for a reader that takes one chunk and stops (incremental snapshots).
    read_ahead: bool = True
    # Per table (qualified name), how far a resumed snapshot's re-read rows may already be in
    # it (``frontier.resumed_repeats``): up to a key (read first, up to it, as repeating
    # chunks), or None: every row; a table not named has none.
    repeats: dict[str, tuple[Any, ...] | None] = field(default_factory=dict)
    # Per table, the key a resumed read starts after when it is not the acknowledged one
    # (``frontier.committed_chunks``: its last committed row ends a recorded chunk).
    starts: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def estimated_rows(self) -> int:
        total = 0
        for t in self.tables[self.table_index :]:
            got = query(
                self.conn,
                "SELECT TABLE_ROWS FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (t.info.schema, t.info.name),
            )
            total += int(got[0][0] or 0) if got else 0
        return total

    def _sql(self, t: SnapTable) -> tuple[str, list[str], list[int]]:
        names = [m.spec.name for m in t.mappings]
        pk = list(t.info.pk_columns)
        key_idx = [names.index(k) for k in pk]
        select = ", ".join(m.select for m in t.mappings)
        return f"SELECT {select} FROM {t.info.sql}", pk, key_idx

    def _keyless_chunks(self, t: SnapTable, sql: str) -> Iterator[Chunk]:
        """A table without a primary key (``source.keyless_tables``): one unbuffered scan, in
        chunks; never resumed at a key (``keyless.refuse_overlap``)."""
        with self.conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(sql)
            while rows := list(cur.fetchmany(self.chunk_rows)):
                first = self.next_seq
                self.next_seq += len(rows)
                b = Boundary(self.next_seq - 1, self.table_index, None)
                self.boundaries.append(b)
                yield Chunk(t, rows, first, b)

    def chunks(self) -> Iterator[Chunk]:
        with ThreadPoolExecutor(1, thread_name_prefix="snapshot-read") as pool:
            run: Callable[..., Future[Fetched]] = pool.submit if self.read_ahead else _done
            while self.table_index < len(self.tables):
                t = self.tables[self.table_index]
                base, pk, key_idx = self._sql(t)
                if not pk:
                    yield from self._keyless_chunks(t, base)
                if self.last_key is None:
                    self.last_key = self.starts.get(t.info.qualified)
                repeat_all = t.info.qualified in self.repeats and self.repeats[t.info.qualified] is None
                upper = self.repeats.get(t.info.qualified) if pk else None  # the repeat part's end
                pending = run(self._fetch, *self._keyset(base, pk, upper)) if pk else None
                while pending is not None:
                    fetched = pending.result()
                    last = self._last(fetched)
                    n = len(fetched)
                    repeats = repeat_all or upper is not None
                    key = None if last is None else tuple(last[i] for i in key_idx)
                    self.last_key = key if key is not None else self.last_key
                    if upper is not None and n < self.chunk_rows:
                        # Every key up to the frontier is read: on after it, plain inserts
                        # (rows between the chunk's last key and it are not there).
                        self.last_key, upper = upper, None
                        pending = run(self._fetch, *self._keyset(base, pk))
                    else:
                        pending = run(self._fetch, *self._keyset(base, pk, upper)) if n >= self.chunk_rows else None
                    if key is None:
                        continue
                    rows, block = self._convert(t, fetched)
                    first = self.next_seq
                    self.next_seq += n
                    b = Boundary(self.next_seq - 1, self.table_index, key)
                    self.boundaries.append(b)
                    yield Chunk(t, rows, first, b, block, repeats)
                self.table_index += 1
                self.last_key = None
                self.boundaries.append(Boundary(self.next_seq - 1, self.table_index, None))

    def _keyset(
        self, base: str, pk: Sequence[str], upper: tuple[Any, ...] | None = None
    ) -> tuple[str, list[Any]]:
        """The query of the chunk after ``last_key`` (keyset pagination), up to ``upper``
        (inclusive) if given, and its params."""
        sql, params, where = base, list[Any](), []
        if self.last_key is not None:
            where.append(_key_after(pk, self.last_key, params))
        if upper is not None:
            where.append("NOT " + _key_after(pk, upper, params))  # key columns are never null
        if where:
            sql += " WHERE " + " AND ".join(where)
        order = " ORDER BY " + ", ".join(quote_ident(k) for k in pk)
        return f"{sql}{order} LIMIT {int(self.chunk_rows)}", params

    def _fetch(self, sql: str, params: list[Any]) -> Fetched:
        """A chunk's rows off the wire: undecoded packets (``RawChunk``), or pymysql's rows."""
        if not self.blocks:
            return query(self.conn, sql, params)
        return RawChunk(self.conn, sql, params)

    @staticmethod
    def _last(fetched: Fetched) -> tuple[Any, ...] | None:
        """The chunk's last row as pymysql decodes it (None: empty)."""
        if not len(fetched):
            return None
        return fetched.row(len(fetched) - 1) if isinstance(fetched, RawChunk) else fetched[-1]

    def _convert(self, t: SnapTable, fetched: Fetched) -> tuple[list[tuple[Any, ...]], RowBlock | None]:
        """A chunk: (its rows as pymysql tuples, unless the block holds them; its block)."""
        if not isinstance(fetched, RawChunk):
            return fetched, None
        engines = [m.spec.type for m in t.mappings]
        block = fetched.block(t.rows.names, engines, t.rows.snapshot)
        if block is not None:
            return [], block
        rows = fetched.rows()  # column-wise from pymysql's values, else row by row
        return rows, chunk_block(t.rows.names, engines, t.rows.snapshot, rows)

    def finish(self) -> None:
        try:
            query(self.conn, "COMMIT")
        finally:
            self.conn.close()
