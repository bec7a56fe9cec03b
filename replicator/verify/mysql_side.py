"""The MySQL/MariaDB side of a diff (``SourceSide`` in ``sides``).

Snapshot. ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` at an exact binlog position P (the
MySQL source's own ``open_consistent_snapshot``: MariaDB reads the point from
``binlog_snapshot_file/position`` without a lock; MySQL takes FLUSH TABLES WITH READ LOCK for
a moment). Transactions whose binlog events start before P are in the snapshot, later ones
are not: the cut the engine's positions ``(file, tx_begin, row)`` use.

Values are read with the MySQL source's SELECT expressions and snapshot converters
(``snap_table``), so they arrive as the engine's values. The scan is one unbuffered
(server-side streaming) query in key order; string keys are ordered by their UTF-8 bytes
(``CAST(CONVERT(col USING utf8mb4) AS BINARY)``: code point order, no collation, no pad
space), so the server's order is the diff's comparison order; every key is checked to arrive
in increasing order.

Engine progress and changes after P come from the binlog itself, read with mysql-replication
under a server id of the diff's own (a reader with the engine's server id would cut the
engine off).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
from pymysql.cursors import SSCursor
from tqdm import tqdm

from replicator.events.model import SourcePosition
from replicator.sources.mysql import compat, setup
from replicator.sources.mysql.framing import TxStarts
from replicator.sources.mysql.position import BinlogPoint, BinlogPosition
from replicator.sources.mysql.snapshot import (
    SnapshotState,
    SnapTable,
    describe_tables,
    open_consistent_snapshot,
    snap_table,
)
from replicator.sources.mysql.types import (
    ColumnMapping,
    RowConverter,
    ValueConversionError,
    quote_ident,
)
from replicator.verify.digest import (
    RowCodec,
    RowEncoder,
    RowRecord,
    SourceRanges,
    scan_ranges,
)
from replicator.verify.sides import EngineProgress

log = logging.getLogger(__name__)

Point = BinlogPoint  # (binlog file, offset): where a transaction starts


@dataclass
class MySQLTable:
    info: setup.TableInfo
    snap: SnapTable
    key_exprs: dict[str, str]  # key column -> ORDER BY expression
    key_params: dict[str, str]  # key column -> placeholder compared to it

    @property
    def name(self) -> str:
        return self.info.qualified

    @property
    def short_name(self) -> str:
        return self.info.name

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(m.spec.name for m in self.snap.mappings)

    @property
    def engine_types(self) -> dict[str, str]:
        return {m.spec.name: m.spec.type for m in self.snap.mappings}

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.info.pk_columns  # index order: the primary key serves the scan

    def mappings(self, names: Sequence[str]) -> list[ColumnMapping]:
        by_name = {m.spec.name: m for m in self.snap.mappings}
        return [by_name[n] for n in names]


class MySQLSide:
    kind = "mysql"
    exact = True

    def __init__(
        self, dsn: str, *, server_id: int, state_dir: Path, zero_dates: str = "null",
        keyless_tables: Collection[str] = (),
    ) -> None:
        self.params = setup.parse_dsn(dsn)
        self.keyless_tables = keyless_tables  # listed by ``tables``, skipped by the diff
        self.server_id = server_id  # the engine's
        # A binlog reader of our own: never the engine's id (MariaDB would cut it off).
        self.reader_id = 0x7F000000 + (os.getpid() & 0xFFFF) * 8 + (server_id & 7)
        self.state_dir = state_dir
        self.zero_dates = zero_dates
        self.point = BinlogPoint("", 0)
        self._aux: pymysql.Connection[Any] | None = None
        self._snap: pymysql.Connection[Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> None:
        db = self.params.database
        self._aux = setup.connect(self.params, database=db)
        server = setup.check_server(self._aux, source_server_id=self.server_id)
        self._snap = setup.connect(self.params, database=db)
        self.point = BinlogPoint(*open_consistent_snapshot(self._snap, server.is_mariadb))
        log.info("source snapshot at %s", self.point_label())

    def close(self) -> None:
        for c in (self._snap, self._aux):
            if c is not None and c.open:
                c.close()
        self._snap = self._aux = None

    def point_label(self) -> str:
        return f"binlog {self.point}"

    def snapshot_how(self) -> str:
        return (
            "START TRANSACTION WITH CONSISTENT SNAPSHOT at that binlog position: exactly the "
            "transactions written to the binlog before it"
        )

    def past(self, position: SourcePosition) -> bool:
        return BinlogPosition.of(position).point >= self.point

    @property
    def snap(self) -> pymysql.Connection[Any]:
        assert self._snap is not None, "open() first"
        return self._snap

    @property
    def aux(self) -> pymysql.Connection[Any]:
        assert self._aux is not None, "open() first"
        return self._aux

    # -- tables ------------------------------------------------------------------------------
    def tables(self, configured: Sequence[str] | None) -> list[MySQLTable]:
        infos = setup.list_tables(self.aux, configured, self.params.database, keyless=self.keyless_tables)
        defs = describe_tables(self.aux, infos)
        out = []
        for info in infos:
            snap = snap_table(info, defs[info.qualified], self.zero_dates)
            types = {m.spec.name: m.spec.type for m in snap.mappings}
            exprs, params = {}, {}
            for k in info.pk_columns:
                col = quote_ident(k)
                if types[k] == "string":  # code point order, whatever the collation
                    exprs[k] = f"CAST(CONVERT({col} USING utf8mb4) AS BINARY)"
                    params[k] = "CAST(CONVERT(%s USING utf8mb4) AS BINARY)"
                else:  # numbers, dates, times, binary strings: the value order already
                    exprs[k], params[k] = col, "%s"
            out.append(MySQLTable(info, snap, exprs, params))
        return out

    def has_rows(self, table: MySQLTable) -> bool:
        return bool(setup.query(self.snap, f"SELECT 1 FROM {table.info.sql} LIMIT 1"))

    def estimated_rows(self, table: MySQLTable) -> int:
        got = setup.query(
            self.aux,
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (table.info.schema, table.info.name),
        )
        return int(got[0][0] or 0) if got else 0

    # -- reading -----------------------------------------------------------------------------
    def _select(
        self, t: MySQLTable, codec: RowCodec, lo: Sequence[Any] | None, hi: Sequence[Any] | None
    ) -> tuple[str, list[Any]]:
        keys = codec.key_names
        lhs = ", ".join(t.key_exprs[k] for k in keys)
        where, params = [], []
        for bound, op in ((lo, ">"), (hi, "<=")):
            if bound is not None:
                where.append(f"({lhs}) {op} ({', '.join(t.key_params[k] for k in keys)})")
                params += list(bound)
        select = ", ".join(m.select for m in t.mappings(codec.names))
        sql = f"SELECT {select} FROM {t.info.sql}"
        return sql + (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY {lhs}", params

    def _rows(self, sql: str, params: list[Any], batch: int) -> Iterator[list[tuple[Any, ...]]]:
        with self.snap.cursor(SSCursor) as cur:  # unbuffered: the server streams the rows
            cur.execute(sql, params or None)
            while rows := cur.fetchmany(batch):
                yield list(rows)

    def scan(
        self, table: MySQLTable, codec: RowCodec, chunk_rows: int, bar: tqdm[Any] | None = None
    ) -> tuple[SourceRanges, int]:
        sql, params = self._select(table, codec, None, None)
        batches = self._rows(sql, params, chunk_rows)
        return scan_ranges(batches, _encoder(table, codec, self.zero_dates), codec, chunk_rows, bar)

    def fetch_range(
        self, table: MySQLTable, codec: RowCodec, lo: Sequence[Any] | None,
        hi: Sequence[Any] | None, batch: int,
    ) -> list[RowRecord]:  # fmt: skip
        sql, params = self._select(table, codec, lo, hi)
        encode = _encoder(table, codec, self.zero_dates)
        return [
            codec.record(encode(raw)) for rows in self._rows(sql, params, batch) for raw in rows
        ]

    # -- the binlog --------------------------------------------------------------------------
    def _binlog_rows(
        self, start: Point, stop: Point, tables: set[str]
    ) -> Iterator[tuple[Point, str, Any]]:
        """(transaction start, table, rows event) for the rows events of ``tables`` in
        transactions starting at or after ``start`` and before ``stop``."""
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (
            GtidEvent,
            MariadbGtidEvent,
            QueryEvent,
            RotateEvent,
            XidEvent,
        )
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        rows_events = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
        reader = BinLogStreamReader(
            connection_settings=self.params.replication_settings(),
            server_id=self.reader_id,
            resume_stream=True,
            blocking=False,  # the server sends what it has, then EOF
            log_file=start.file,
            log_pos=start.pos,
            only_events=[
                GtidEvent,
                MariadbGtidEvent,
                QueryEvent,
                RotateEvent,
                XidEvent,
                *rows_events,
            ],  # fmt: skip
            only_schemas=sorted({t.split(".", 1)[0] for t in tables}),
            freeze_schema=False,
            enable_logging=False,
            pymysql_wrapper=compat.connect,
        )
        file, starts = start.file, TxStarts()
        try:
            while (ev := reader.fetchone()) is not None:
                t = type(ev)
                if t is RotateEvent:
                    file = ev.next_binlog
                    continue
                where = BinlogPoint(file, starts.see(ev))  # the stream's framing
                if where >= stop:
                    return
                if t in rows_events and f"{ev.schema}.{ev.table}" in tables:
                    yield (
                        where,
                        f"{ev.schema}.{ev.table}",
                        ev,
                    )
        except pymysql.err.MySQLError as exc:
            setup.raise_replication_error(exc, f"{file}:{starts.begin}")
        finally:
            reader.close()

    def _binlog_end(self) -> Point:
        return BinlogPoint(*setup.master_status(self.aux))

    def changed_keys(
        self, limits: Sequence[tuple[MySQLTable, RowCodec, SourcePosition]]
    ) -> dict[str, set[tuple[Any, ...]] | None]:
        """Canonical keys of the rows changed by transactions between the snapshot and each
        table's limit (the position of the Iceberg snapshot it is compared with), read from
        the binlog."""
        wanted = {
            t.name: (_KeyReader(t, codec), BinlogPosition.of(p).point)
            for t, codec, p in limits
            if self.past(p)
        }
        if not wanted:
            return {}
        last = max(limit for _, limit in wanted.values())
        out: dict[str, set[tuple[Any, ...]] | None] = {name: set() for name in wanted}
        for where, table, ev in self._binlog_rows(self.point, BinlogPoint(last.file, last.pos + 1), set(wanted)):
            reader, limit = wanted[table]
            keys = out[table]
            if where <= limit and keys is not None:
                for row in ev.rows:
                    for image in ("values", "before_values", "after_values"):
                        if image in row and (key := reader.key(row[image])) is not None:
                            keys.add(key)
        return out

    def difference_hint(self, table: MySQLTable) -> str:
        return ""

    def change_counter(self, tables: Sequence[MySQLTable]) -> int | None:
        """Row changes to these tables written to the binlog since the snapshot."""
        try:
            names = {t.name for t in tables}
            return sum(
                len(ev.rows)
                for _, _, ev in self._binlog_rows(self.point, self._binlog_end(), names)
            )
        except Exception as exc:  # informational only: never fail the diff for it
            log.warning("cannot count changes during the diff: %s", exc)
            return None

    # -- the engine's progress ---------------------------------------------------------------
    def engine_progress(self, positions: dict[str, SourcePosition | None]) -> EngineProgress:
        """Has the engine applied every change written before the snapshot point?

        Not while a table's committed position is a snapshot row (negative row index) that the
        engine's snapshot state does not list as finished. Otherwise yes when every table's
        committed position is at or past the point, or when the binlog between the engine's
        positions and the point holds no change to a compared table the engine has not
        committed.
        """
        ours = {t: p for t, p in positions.items() if p is not None and p.source == "mysql"}
        state = SnapshotState.load(self.state_dir / f"mysql-{self.server_id}.snapshot.json")
        done = state.done_tables() if state is not None else set()
        # (Rows of an incremental snapshot are negative too, but stand at their binlog point.)
        unfinished = sorted(
            t for t, p in ours.items() if BinlogPosition.of(p).is_snapshot and t not in done
        )
        if unfinished:
            return EngineProgress(
                False, f"the engine's initial snapshot of {', '.join(unfinished)} may be "
                "unfinished (let the engine run until idle)",
            )  # fmt: skip
        if len(ours) == len(positions) and all(self.past(p) for p in ours.values()):
            return EngineProgress(True, "every table's committed position is at or past it")
        # Full positions: a snapshot row (negative index) sorts below every row of the
        # transaction starting at its point, which that snapshot does not hold.
        committed = {t: BinlogPosition.of(p) for t, p in ours.items()}
        start = min((c.point for c in committed.values()), default=None)
        acked = self._acknowledged()
        if start is None or len(committed) < len(positions):
            start = None if acked is None else acked  # a table with no commit: from the ack
        elif acked is not None and acked > start:
            start = acked  # the engine acknowledges only what every table has committed
        if start is None:
            return EngineProgress(False, "the engine has committed nothing to some table yet")
        for where, table, _ in self._binlog_rows(start, self.point, set(positions)):
            if table not in committed or BinlogPosition(*where, 0) > committed[table]:
                return EngineProgress(
                    False, f"{table} has a change at {where} that the engine has "
                    "not committed yet", str(start),
                )  # fmt: skip
        return EngineProgress(
            True, f"the binlog from {start} to the snapshot holds no change the "
            "engine has not committed", str(start),
        )  # fmt: skip

    def _acknowledged(self) -> Point | None:
        try:
            raw = json.loads((self.state_dir / f"mysql-{self.server_id}.offsets.json").read_text())[
                "acked"
            ]
            return BinlogPosition.from_parts(raw).point
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None


def _encoder(table: MySQLTable, codec: RowCodec, zero_dates: str) -> RowEncoder:
    """pymysql row (codec column order) -> canonical row, through the source's converters."""
    mappings = table.mappings(codec.names)
    converter = RowConverter.build(mappings, table.key_columns, zero_dates)
    return RowEncoder(
        converter.from_snapshot, [m.snapshot for m in mappings], codec.python_canons(),
        ValueConversionError,
    )


class _KeyReader:
    """A binlog row image (dict by column name) -> canonical key, or None."""

    def __init__(self, table: MySQLTable, codec: RowCodec) -> None:
        canons = codec.python_canons()
        maps = table.mappings(codec.names)
        self.parts = [(codec.names[i], maps[i].binlog, canons[i]) for i in codec.key_idx]

    def key(self, image: dict[str, Any]) -> tuple[Any, ...] | None:
        out = []
        for name, conv, canon in self.parts:
            v = image.get(name)
            if v is None:
                return None
            try:
                v = conv(v) if conv is not None else v
            except (ValueError, TypeError, ArithmeticError):
                return None
            out.append(canon(v) if canon is not None else v)
        return tuple(out)
