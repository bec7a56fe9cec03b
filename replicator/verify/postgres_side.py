"""The Postgres side of a diff: one consistent snapshot, key-ordered range digests, range
fetches, and the engine's progress.

Snapshot. A temporary logical replication slot is created with an exported snapshot
(``CREATE_REPLICATION_SLOT ... TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')``) and imported
into a REPEATABLE READ READ ONLY transaction that stays open for the whole diff (digests and
range fetches see the same data). Such a snapshot holds exactly the transactions that
committed before the slot's consistent point: the same cut the engine's change positions use,
so "Iceberg as of that LSN" is well defined. When no slot can be created (no free slot, no
REPLICATION attribute) the diff falls back to a plain REPEATABLE READ snapshot and
``pg_current_wal_lsn()``, and says the comparison is approximate.

Values are read as text in the session settings the engine's source pins
(``session_conninfo``) and converted by the source's own ``TypeMapper``/``RowConverter``, so a
timestamptz or a numeric arrives exactly as the engine would have written it.

Order. The digest pass reads each table in ONE server-side cursor ordered by key, so the
server streams (index scan, or a sort that spills to disk) and the client holds
``chunk_rows`` rows at a time. The ORDER BY is built so the server's order is the diff's
comparison order (``digest.RowCodec.sort_key_fn``), which the Iceberg side uses to put rows
into ranges: text keys sort with ``COLLATE "C"`` (byte order of UTF-8 = code point order,
unless the column already sorts that way), keys the engine carries as strings but Postgres
orders otherwise (enums, uuids, wide numerics, ...) sort by their text
(``format('%s', col)``). Every key is checked to arrive strictly increasing in that order.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from tqdm import tqdm

from replicator.config import redact_dsn
from replicator.errors import ReplicatorError
from replicator.events.model import SourcePosition
from replicator.sources.postgres import pgoutput, setup
from replicator.sources.postgres.position import POSTGRES, PgPosition
from replicator.sources.postgres.replication import ReplicationConnection, session_conninfo
from replicator.sources.postgres.snapshot import SnapshotState, table_columns, text_loaders
from replicator.sources.postgres.types import (
    TEXT,
    UNCONSTRAINED_NUMERIC,
    VARCHAR,
    RowConverter,
    TypeMapper,
    ValueConversionError,
    catalog_lookup,
)
from replicator.verify.digest import (
    RowCodec,
    RowEncoder,
    RowRecord,
    SourceRanges,
    scan_ranges,
)
from replicator.verify.model import DiffError, lsn_str
from replicator.verify.sides import EngineProgress

log = logging.getLogger(__name__)

_C_COLLATION = 950  # pg_collation oid of "C"
_DEFAULT_COLLATION = 100


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


@dataclass
class SourceTable:
    info: setup.TableInfo
    columns: list[tuple[str, int, int]]  # (name, type oid, typmod), as the engine reads them
    engine_types: dict[str, str]  # column -> engine type (the source's TypeMapper)
    key_columns: tuple[str, ...]
    key_exprs: dict[str, str]  # key column -> ORDER BY expression
    key_params: dict[str, str]  # key column -> placeholder (with cast) compared to it
    mapper: TypeMapper

    @property
    def name(self) -> str:
        return self.info.qualified

    @property
    def short_name(self) -> str:
        return self.info.name

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c[0] for c in self.columns)

    def from_sql(self) -> str:
        # ONLY: inheritance children are tables of their own (as in the engine's snapshot);
        # a partitioned root is read with its partitions.
        return ("" if self.info.relkind == "p" else "ONLY ") + self.info.sql


class PostgresSide:
    """One diff's connections to the source: ``snap`` (the open snapshot), ``aux``
    (autocommit: catalog, slot state, statistics) and the walsender session that owns the
    temporary slot (``SourceSide`` in ``sides``)."""

    kind = "postgres"

    def __init__(self, dsn: str, *, slot: str, publication: str, state_dir: Path) -> None:
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.state_dir = state_dir
        self.lsn = 0
        self.exact = False
        self.snapshot_note = ""
        self._snap: psycopg.Connection[Any] | None = None
        self._aux: psycopg.Connection[Any] | None = None
        self._repl: ReplicationConnection | None = None  # owns the temporary slot
        self._slot_name = ""
        self._cursors = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(session_conninfo(self.dsn), autocommit=True, connect_timeout=15)
        except psycopg.Error as exc:
            raise DiffError(
                f"cannot connect to the source PostgreSQL ({redact_dsn(self.dsn)}): "
                f"{str(exc).strip()}"
            ) from None

    def open(self) -> None:
        self._aux = self._connect()
        snap = self._snap = self._connect()
        text_loaders(snap)
        try:
            repl = ReplicationConnection(self.dsn)
        except ReplicatorError as exc:
            self._approximate(f"no replication connection: {exc.message}")
            return
        name = f"replicator_diff_{os.getpid()}_{secrets.token_hex(4)}"
        try:
            rows = repl.command(
                f"CREATE_REPLICATION_SLOT {setup.quote_ident(name)} TEMPORARY LOGICAL pgoutput "
                f"{repl.export_snapshot}"
            )
            _, consistent, snapshot_name, _ = rows[0]
            assert consistent is not None and snapshot_name is not None
            # Import while the exporting session is open and idle. The session (and with it
            # the temporary slot) stays open: ``changed_keys`` decodes from the slot.
            snap.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snap.execute(f"SET TRANSACTION SNAPSHOT {setup.quote_literal(snapshot_name)}")
            self.lsn = parse_lsn(consistent)
            self.exact = True
            self._repl, self._slot_name = repl, name
        except ReplicatorError as exc:
            repl.close()
            self._approximate(f"could not create a temporary replication slot: {exc.message}")
        log.info(
            "source snapshot at %s (%s)",
            lsn_str(self.lsn),
            "exported" if self.exact else "approximate",
        )

    def _approximate(self, why: str) -> None:
        assert self._snap is not None
        log.warning("%s; using an approximate snapshot", why)
        self.snapshot_note = why
        self._snap.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # The first statement takes the snapshot; the LSN is read after it.
        row = self._snap.execute(  # a standby: what it has replayed
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
            "ELSE pg_current_wal_lsn() END - '0/0')::bigint"
        ).fetchone()
        assert row is not None
        self.lsn = int(row[0])
        self.exact = False

    def point_label(self) -> str:
        return f"LSN {lsn_str(self.lsn)}"

    def snapshot_how(self) -> str:
        if self.exact:
            return (
                "a snapshot exported by a temporary logical replication slot: exactly the "
                "transactions committed before that position"
            )
        return (
            "a REPEATABLE READ snapshot and pg_current_wal_lsn(), because "
            f"{self.snapshot_note or 'no temporary slot could be created'}: approximate, a "
            "transaction committing at that instant may show as a difference; rerun to confirm"
        )

    def past(self, position: SourcePosition) -> bool:
        return PgPosition.of(position).lsn >= self.lsn

    def close(self) -> None:
        if self._repl is not None:
            self._repl.close()  # drops the temporary slot
            self._repl = None
        for c in (self._snap, self._aux):
            if c is not None and not c.closed:
                c.close()
        self._snap = self._aux = None

    @property
    def snap(self) -> psycopg.Connection[Any]:
        assert self._snap is not None, "open() first"
        return self._snap

    @property
    def aux(self) -> psycopg.Connection[Any]:
        assert self._aux is not None, "open() first"
        return self._aux

    # -- tables ------------------------------------------------------------------------------
    def tables(self, configured: Sequence[str] | None) -> list[SourceTable]:
        """The tables the engine replicates from this source (its config's list, or every
        table with a primary key), with their type mapping."""
        conn = self.aux  # catalog queries: typed values (``snap`` loads everything as text)
        try:
            infos = setup.list_tables(conn, configured)
        except ReplicatorError as exc:
            raise DiffError(exc.message) from None
        row = conn.execute(
            "SELECT datcollate FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        db_is_c = row is not None and row[0] in ("C", "POSIX")
        mapper = TypeMapper(catalog_lookup(conn), unconstrained_numeric=UNCONSTRAINED_NUMERIC)
        out = []
        for info in infos:
            cols = table_columns(conn, info)
            names = [c[0] for c in cols]
            # Like the engine: the replica identity index when set, else the primary key.
            key = info.key_columns or tuple(names)
            engine = {n: mapper.column(n, oid, mod).spec.type for n, oid, mod in cols}
            attrs = {
                r[0]: (str(r[1]), int(r[2]))
                for r in conn.execute(
                    "SELECT attname, format_type(atttypid, atttypmod), attcollation "
                    "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
                    (info.oid,),
                ).fetchall()
            }
            exprs, params = {}, {}
            for n, oid, _mod in cols:
                if n in key:
                    fmt, coll = attrs[n]
                    exprs[n], params[n] = _key_order(
                        n, engine[n], _base_oid(mapper, oid), fmt, coll, db_is_c
                    )
            out.append(SourceTable(info, cols, engine, key, exprs, params, mapper))
        return out

    def has_rows(self, table: SourceTable) -> bool:
        # Not EXISTS(): ``snap`` loads every value as text, and "f" is truthy.
        return self.snap.execute(f"SELECT 1 FROM {table.from_sql()} LIMIT 1").fetchone() is not None

    def estimated_rows(self, table: SourceTable) -> int:
        row = self.aux.execute(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s", (table.info.oid,)
        ).fetchone()
        return int(row[0]) if row else 0

    # -- reading -----------------------------------------------------------------------------
    def _select(
        self, table: SourceTable, codec: RowCodec, lo: Sequence[Any] | None,
        hi: Sequence[Any] | None,
    ) -> tuple[str, list[Any]]:  # fmt: skip
        keys = codec.key_names
        lhs = ", ".join(table.key_exprs[k] for k in keys)
        where: list[str] = []
        params: list[Any] = []
        for bound, op in ((lo, ">"), (hi, "<=")):
            if bound is not None:
                rhs = ", ".join(table.key_params[k] for k in keys)
                where.append(f"({lhs}) {op} ({rhs})")
                params += list(bound)
        sql = (
            f"SELECT {', '.join(setup.quote_ident(n) for n in codec.names)} FROM {table.from_sql()}"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY {lhs}"
        )
        return sql, params

    def _rows(
        self, sql: str, params: list[Any], batch: int
    ) -> Iterator[list[tuple[str | None, ...]]]:
        self._cursors += 1
        with self.snap.cursor(name=f"replicator_diff_{self._cursors}") as cur:
            cur.itersize = batch
            cur.execute(sql, params)  # params always given: '%%' in format() stays '%'
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    return
                yield rows

    def scan(
        self, table: SourceTable, codec: RowCodec, chunk_rows: int, bar: tqdm[Any] | None = None
    ) -> tuple[SourceRanges, int]:
        """Range digests of the whole table in key order. Returns (ranges, rows the engine
        cannot represent)."""
        sql, params = self._select(table, codec, None, None)
        batches = self._rows(sql, params, chunk_rows)
        return scan_ranges(batches, _encoder(table, codec), codec, chunk_rows, bar)

    def fetch_range(
        self, table: SourceTable, codec: RowCodec, lo: Sequence[Any] | None,
        hi: Sequence[Any] | None, batch: int,
    ) -> list[RowRecord]:  # fmt: skip
        """The rows of one range (at most one chunk), as comparable records."""
        sql, params = self._select(table, codec, lo, hi)
        encode = _encoder(table, codec)
        return [
            codec.record(encode(raw)) for rows in self._rows(sql, params, batch) for raw in rows
        ]

    # -- changes after the snapshot ----------------------------------------------------------
    def changed_keys(
        self, limits: Sequence[tuple[SourceTable, RowCodec, SourcePosition]]
    ) -> dict[str, set[tuple[Any, ...]] | None]:
        """Canonical keys of the rows of each table changed by transactions that committed
        after the snapshot and at or before that table's limit LSN (the position of the
        Iceberg snapshot it is compared with). None: the table was truncated in that window.

        Decoded from the diff's own temporary slot, which starts exactly at the snapshot, with
        the engine's publication (so exactly the changes the engine sees). A peek from the
        slot's owning session, bounded by ``upto_lsn``: nothing is consumed.
        """
        wanted = {t.name: (t, codec, PgPosition.of(p).lsn) for t, codec, p in limits if self.past(p)}
        if not wanted:
            return {}
        if self._repl is None:
            raise DiffError("no temporary slot to read changes after the snapshot from")
        upto = max(limit for _, _, limit in wanted.values()) + 1  # includes commits AT limit
        rows = self._repl.command(
            "SELECT data FROM pg_logical_slot_peek_binary_changes("
            f"{setup.quote_literal(self._slot_name)}, {setup.quote_literal(lsn_str(upto))}, NULL, "
            f"'proto_version', '1', 'publication_names', "
            f"{setup.quote_literal(setup.quote_ident(self.publication))})"
        )
        out: dict[str, set[tuple[Any, ...]] | None] = {name: set() for name in wanted}
        rels: dict[int, tuple[str, list[int], list[Any], int]] = {}
        commit_lsn = 0
        for (data,) in rows:
            assert data is not None
            msg = pgoutput.decode(bytes.fromhex(data[2:]))  # bytea_output=hex: "\\x..."
            if isinstance(msg, pgoutput.Begin):
                commit_lsn = msg.final_lsn
            elif isinstance(msg, pgoutput.Relation):
                name = f"{msg.namespace or 'pg_catalog'}.{msg.name}"
                if name in wanted:
                    t, codec, limit = wanted[name]
                    rels[msg.relid] = (name, *_key_reader(t, codec, msg), limit)
            elif isinstance(msg, pgoutput.Truncate):
                for relid in msg.relids:
                    if relid in rels and commit_lsn <= rels[relid][3]:
                        out[rels[relid][0]] = None
            elif isinstance(msg, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
                rel = rels.get(msg.relid)
                if rel is None or commit_lsn > rel[3]:
                    continue
                keys = out[rel[0]]
                if keys is None:
                    continue
                for tup in (getattr(msg, "old", None), getattr(msg, "new", None)):
                    key = _read_key(tup, rel[1], rel[2]) if tup is not None else None
                    if key is not None:
                        keys.add(key)
        return out

    # -- the engine's progress ---------------------------------------------------------------
    def engine_progress(self, positions: dict[str, SourcePosition | None]) -> EngineProgress:
        """Has the engine applied every change committed before ``self.lsn``?

        Not while a table's committed position is a snapshot row of the slot's current point
        (``(confirmed - 1, seq)``) and the engine's snapshot state does not say that snapshot
        finished: such a table may be half-read, whatever the positions say. Otherwise yes
        when (a) every compared table's committed position is at or past it, or (b) the
        engine's slot has confirmed it (the engine confirms only what is committed to every
        table), or (c) the engine is stopped and its slot holds no change for the
        publication before it.
        """
        lsn = self.lsn
        pg = {
            t: PgPosition.of(p) for t, p in positions.items() if p is not None and p.source == POSTGRES
        }
        row = self.aux.execute(
            "SELECT active, (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
            "WHERE slot_name = %s AND database = current_database()",
            (self.slot,),
        ).fetchone()
        active, confirmed = (bool(row[0]), int(row[1] or 0)) if row is not None else (False, 0)
        if row is not None:
            in_snapshot = sorted(t for t, p in pg.items() if p.lsn == confirmed - 1)
            if in_snapshot and not self._snapshot_complete(confirmed):
                return EngineProgress(
                    False, f"the engine's initial snapshot of {', '.join(in_snapshot)} may be "
                    "unfinished (let the engine run until idle)", lsn_str(confirmed),
                )  # fmt: skip
        every_table = positions and len(pg) == len(positions)
        if every_table and all(p.lsn >= lsn for p in pg.values()):
            return EngineProgress(True, "every table's committed position is at or past it")
        if row is None:
            return EngineProgress(
                False, f"the engine's replication slot {self.slot!r} does not exist in this "
                "database (has the engine run with this config?)",
            )  # fmt: skip
        if confirmed >= lsn:
            return EngineProgress(
                True, f"its slot {self.slot!r} has confirmed {lsn_str(confirmed)}",
                lsn_str(confirmed),
            )  # fmt: skip
        if active:
            return EngineProgress(
                False, f"the engine is running; its slot {self.slot!r} has confirmed "
                f"{lsn_str(confirmed)}, not yet {lsn_str(lsn)}", lsn_str(confirmed),
            )  # fmt: skip
        try:
            pending = self.aux.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, 1, "
                "'proto_version', '1', 'publication_names', %s)",
                (self.slot, lsn_str(lsn), self.publication),
            ).fetchone()
        except psycopg.errors.ObjectInUse:
            return EngineProgress(False, "the engine just started reading its slot")
        except psycopg.Error as exc:
            return EngineProgress(False, f"cannot inspect slot {self.slot!r}: {exc}")
        if pending and pending[0]:
            return EngineProgress(
                False, f"the engine is stopped and its slot {self.slot!r} still holds changes "
                f"before {lsn_str(lsn)} (start the engine)", lsn_str(confirmed),
            )  # fmt: skip
        return EngineProgress(
            True, f"the engine is stopped and its slot {self.slot!r} (confirmed "
            f"{lsn_str(confirmed)}) holds no change before it", lsn_str(confirmed),
        )  # fmt: skip

    def _snapshot_complete(self, confirmed: int) -> bool:
        state = SnapshotState.load(self.state_dir / f"postgres-{self.slot}.snapshot.json")
        return state is not None and state.snapshot_lsn == confirmed - 1 and state.complete

    def difference_hint(self, table: SourceTable) -> str:
        if table.info.relkind != "p":
            return ""
        return (
            "a partitioned table: pgoutput sends no row for ATTACH PARTITION of a table with "
            "rows, DETACH PARTITION, or TRUNCATE or DROP of one partition, so those rows are "
            "missing from (or left in) Iceberg; see README 'Partitioned source tables' to snapshot the "
            "table again"
        )

    def change_counter(self, tables: Sequence[SourceTable]) -> int | None:
        """Row changes ever counted for these tables (pg_stat_user_tables; may lag ~1s)."""
        try:
            row = self.aux.execute(
                "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint "
                "FROM pg_stat_all_tables WHERE relid = ANY(%s)",
                ([t.info.oid for t in tables],),
            ).fetchone()
        except psycopg.Error:
            return None
        return int(row[0]) if row else None


def _encoder(table: SourceTable, codec: RowCodec) -> RowEncoder:
    """Text row (codec column order) -> canonical row, through the engine's converters."""
    by_name = {c[0]: c for c in table.columns}
    maps = [
        table.mapper.column(n, by_name[n][1], by_name[n][2], key=n in table.key_columns)
        for n in codec.names
    ]
    converter = RowConverter(codec.names, [m.convert for m in maps])
    return RowEncoder(
        converter.convert, converter.converters, codec.python_canons(), ValueConversionError
    )


def _base_oid(mapper: TypeMapper, oid: int) -> int:
    info = mapper.info(oid)
    while info is not None and info.typtype == "d" and info.base_oid:
        oid = info.base_oid
        info = mapper.info(oid)
    return oid


def _key_order(
    name: str, engine_type: str, base_oid: int, fmt_type: str, collation: int, db_is_c: bool
) -> tuple[str, str]:
    """(ORDER BY expression, placeholder) making Postgres order a key column the way the diff
    compares it (see the module docstring)."""
    col = setup.quote_ident(name)
    cast = f"CAST(%s AS {fmt_type})"
    if engine_type != "string":
        return col, cast  # numbers, dates, timestamps, bytea, booleans: the same order
    if base_oid in (TEXT, VARCHAR):
        if collation == _C_COLLATION or (collation == _DEFAULT_COLLATION and db_is_c):
            return col, cast  # already byte order: an index on it serves the scan
        return f'{col} COLLATE "C"', cast
    return f"format('%%s', {col}) COLLATE \"C\"", "CAST(%s AS text)"


def _key_reader(
    table: SourceTable, codec: RowCodec, rel: pgoutput.Relation
) -> tuple[list[int], list[Any]]:
    """Positions of the key columns in a Relation message, and text -> canonical functions."""
    by_name = {c.name: i for i, c in enumerate(rel.columns)}
    idx, fns = [], []
    canons = codec.python_canons()
    for k in codec.key_idx:
        name = codec.names[k]
        col = rel.columns[by_name[name]] if name in by_name else None
        if col is None:
            return [], []
        conv = table.mapper.column(name, col.type_oid, col.typmod, key=True).convert
        idx.append(by_name[name])
        fns.append((conv, canons[k]))
    return idx, fns


def _read_key(tup: Sequence[Any], idx: list[int], fns: list[Any]) -> tuple[Any, ...] | None:
    if not idx:
        return None
    out = []
    for i, (conv, canon) in zip(idx, fns, strict=True):
        v = tup[i]
        if not isinstance(v, str):  # NULL or an unchanged TOAST value: no usable key
            return None
        try:
            value = conv(v) if conv is not None else v
        except (ValueError, ArithmeticError):
            return None
        out.append(canon(value) if canon is not None else value)
    return tuple(out)
