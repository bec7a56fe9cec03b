"""Pre-flight checks and the publication / slot the Postgres source needs.

Every failed check raises ``SourceSetupError`` whose ``hint`` is the exact statement to run
(as a superuser or the table owner), e.g. ``ALTER SYSTEM SET wal_level = logical;``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from replicator.errors import FencedError, SourceSetupError

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class TableInfo:
    oid: int
    schema: str
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    pk_columns: tuple[str, ...]  # empty without a primary key
    relkind: str = "r"  # 'r' table, 'p' partitioned (published via its root)
    identity_columns: tuple[str, ...] = ()  # of the REPLICA IDENTITY USING INDEX index

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The one key of snapshot and stream: the replica identity index when one is set
        (old images carry only its columns), else the primary key; empty: no usable key
        (``check_tables`` refuses the table)."""
        if self.replica_identity == "i" and self.identity_columns:
            return self.identity_columns
        return self.pk_columns

    @property
    def qualified(self) -> str:
        """The engine's table name: ``schema.table`` (unquoted)."""
        return f"{self.schema}.{self.name}"

    @property
    def sql(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


@dataclass(frozen=True, slots=True)
class SlotInfo:
    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active: bool
    active_pid: int | None
    confirmed_flush: int  # 0 when NULL
    wal_status: str | None


def _one(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


# -- server and role -----------------------------------------------------------------------------


def check_server(conn: psycopg.Connection[Any]) -> None:
    settings = dict(
        conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('wal_level', 'max_replication_slots', 'max_wal_senders')"
        ).fetchall()
    )
    if settings.get("wal_level") != "logical":
        raise SourceSetupError(
            f"wal_level is {settings.get('wal_level')!r}; logical decoding needs 'logical' "
            "(takes effect after a server restart)",
            hint="ALTER SYSTEM SET wal_level = logical;",
        )
    for name in ("max_replication_slots", "max_wal_senders"):
        if int(settings.get(name, "0")) < 1:
            raise SourceSetupError(
                f"{name} is {settings.get(name)}; the source needs at least 1 "
                "(takes effect after a server restart)",
                hint=f"ALTER SYSTEM SET {name} = 10;",
            )


def check_role(conn: psycopg.Connection[Any]) -> None:
    user, replication, superuser = conn.execute(
        "SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone() or ("?", False, False)
    if not (replication or superuser):
        raise SourceSetupError(
            f"role {user!r} lacks the REPLICATION attribute needed to read a replication slot",
            hint=f"ALTER ROLE {quote_ident(user)} WITH REPLICATION;",
        )


# -- tables --------------------------------------------------------------------------------------

_TABLES_SQL = """
SELECT c.oid, n.nspname, c.relname, c.relreplident, c.relkind,
       coalesce((SELECT array_agg(a.attname ORDER BY k.ord)
                 FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = c.oid AND i.indisprimary), '{}') AS pk,
       coalesce((SELECT array_agg(a.attname ORDER BY k.ord)
                 FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = c.oid AND i.indisreplident), '{}') AS ident
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
"""


def _table_rows(
    conn: psycopg.Connection[Any], where: str, params: Sequence[Any]
) -> list[TableInfo]:
    rows = conn.execute(_TABLES_SQL + where + " ORDER BY n.nspname, c.relname", params).fetchall()
    return [
        TableInfo(int(r[0]), r[1], r[2], str(r[3]), tuple(r[5]), str(r[4]), tuple(r[6]))
        for r in rows
    ]


def list_tables(
    conn: psycopg.Connection[Any], tables: Sequence[str] | None, keyless: Collection[str] = ()
) -> list[TableInfo]:
    """The configured tables (``schema.table`` or a name found on the search_path), or by
    default every table with a primary key outside the system schemas, and the ``keyless``
    ones (``source.keyless_tables``)."""
    if tables is None:
        return [
            t
            for t in _table_rows(
                conn,
                " AND n.nspname <> ALL(%s) AND n.nspname NOT LIKE 'pg\\_%%'",
                (list(SYSTEM_SCHEMAS),),
            )
            if t.key_columns or t.qualified in keyless
        ]
    oids = []
    for name in tables:
        try:
            oid = _one(conn, "SELECT to_regclass(%s)::oid", (name,))
        except psycopg.Error as exc:
            raise SourceSetupError(f"bad table name {name!r}: {exc}") from exc
        if oid is None:
            raise SourceSetupError(
                f"table {name!r} does not exist (or is not visible to this role)"
            )
        oids.append(int(oid))
    infos = {t.oid: t for t in _table_rows(conn, " AND c.oid = ANY(%s)", (oids,))}
    missing = [n for n, o in zip(tables, oids, strict=True) if o not in infos]
    if missing:
        raise SourceSetupError(f"{missing} are not ordinary or partitioned root tables")
    return [infos[o] for o in dict.fromkeys(oids)]


def check_keyless(tables: Sequence[TableInfo], keyless: Collection[str]) -> None:
    """``source.keyless_tables``: each must be replicated and have no key; one that is not
    REPLICA IDENTITY FULL is replicated for its inserts only (an update or delete of it
    stops the table: its old image does not name the row)."""
    known = {t.qualified: t for t in tables}
    missing = sorted(set(keyless) - set(known))
    if missing:
        raise SourceSetupError(
            f"source.keyless_tables names {missing}: no such table is replicated (not found, "
            "or not among source.tables)",
            hint="list each as schema.table, as the table is named on the server",
        )
    for name in keyless:
        t = known[name]
        if t.key_columns:
            raise SourceSetupError(
                f"table {name} is in source.keyless_tables but has a key ({', '.join(t.key_columns)})",
                table=name, hint="remove it from source.keyless_tables: it is replicated by its key",
            )  # fmt: skip
        if t.replica_identity != "f":
            log.warning(
                "%s has no primary key and REPLICA IDENTITY %s: only its inserts can be replicated "
                "(the server refuses its updates and deletes while it is published; with FULL they "
                "are replicated too: ALTER TABLE %s REPLICA IDENTITY FULL;)",
                name, _IDENTITY_NAMES.get(t.replica_identity, t.replica_identity), t.sql,
            )  # fmt: skip


def check_tables(
    conn: psycopg.Connection[Any], tables: Sequence[TableInfo], keyless: Collection[str] = ()
) -> None:
    """Each table needs a usable replica identity (a key; ``keyless`` ones need none) and
    SELECT (for the snapshot)."""
    if not tables:
        raise SourceSetupError(
            "no table to replicate: no table with a primary key outside the system schemas",
            hint="ALTER TABLE <schema>.<table> ADD PRIMARY KEY (<columns>); or list it in "
            "source.keyless_tables",
        )
    check_keyless(tables, keyless)
    user = _one(conn, "SELECT current_user")
    for t in tables:
        if t.qualified in keyless:
            if not _one(conn, "SELECT has_table_privilege(%s, 'SELECT')", (t.oid,)):
                raise SourceSetupError(f"role {user!r} cannot SELECT from {t.qualified} (needed for the snapshot)",
                                       table=t.qualified, hint=f"GRANT SELECT ON {t.sql} TO {quote_ident(user)};")  # fmt: skip
            continue
        if t.replica_identity == "n":
            raise SourceSetupError(
                f"table {t.qualified} has REPLICA IDENTITY NOTHING: updates and deletes "
                "would carry no key",
                table=t.qualified,
                hint=f"ALTER TABLE {t.sql} REPLICA IDENTITY DEFAULT;"
                if t.pk_columns
                else _key_hint(conn, t),
            )
        if not t.key_columns:
            # Without a key, duplicate rows cannot be told apart and every column (NULLs,
            # floats) would have to serve as one: refuse rather than corrupt.
            raise SourceSetupError(
                f"table {t.qualified} has no primary key (REPLICA IDENTITY "
                f"{_IDENTITY_NAMES.get(t.replica_identity, t.replica_identity)}): the engine "
                "needs a key to apply updates and deletes; add a primary key, or make a unique "
                "index on NOT NULL columns its replica identity, or list it in "
                "source.keyless_tables (a multiset of whole rows; README \"Tables without a "
                "primary key\")",
                table=t.qualified,
                hint=_key_hint(conn, t),
            )
        if not _one(conn, "SELECT has_table_privilege(%s, 'SELECT')", (t.oid,)):
            raise SourceSetupError(
                f"role {user!r} cannot SELECT from {t.qualified} (needed for the snapshot)",
                table=t.qualified,
                hint=f"GRANT SELECT ON {t.sql} TO {quote_ident(user)};",
            )


_IDENTITY_NAMES = {"d": "DEFAULT", "f": "FULL", "i": "USING INDEX", "n": "NOTHING"}


def _key_hint(conn: psycopg.Connection[Any], t: TableInfo) -> str:
    """The exact statement: a unique index that may serve as replica identity (unique,
    immediate, not partial, plain NOT NULL columns) if the table has one, else a primary key
    over the columns to choose."""
    row = conn.execute(
        "SELECT i.indexrelid::regclass::text FROM pg_index i "
        "WHERE i.indrelid = %s AND i.indisunique AND i.indimmediate AND i.indisvalid "
        "AND i.indpred IS NULL AND i.indexprs IS NULL AND NOT EXISTS ("
        "  SELECT 1 FROM unnest(i.indkey) k(attnum) JOIN pg_attribute a "
        "  ON a.attrelid = i.indrelid AND a.attnum = k.attnum WHERE NOT a.attnotnull) "
        "ORDER BY i.indnatts, i.indexrelid LIMIT 1",
        (t.oid,),
    ).fetchone()
    if row is not None:
        return f"ALTER TABLE {t.sql} REPLICA IDENTITY USING INDEX {row[0]};"
    return f"ALTER TABLE {t.sql} ADD PRIMARY KEY (<columns>);"


# -- publication ---------------------------------------------------------------------------------


def ensure_publication(
    conn: psycopg.Connection[Any], name: str, tables: Sequence[TableInfo]
) -> list[TableInfo]:
    """Create the publication, or add missing tables to it. Returns the tables that were not
    published before (they need a snapshot even when the slot already exists)."""
    pub = conn.execute(
        "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubviaroot FROM pg_publication "
        "WHERE pubname = %s",
        (name,),
    ).fetchone()
    table_list = ", ".join(t.sql for t in tables)
    if pub is None:
        stmt = (
            f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE {table_list} "
            "WITH (publish_via_partition_root = true);"
        )
        try:
            conn.execute(stmt)
        except (pgerrors.InsufficientPrivilege, pgerrors.ObjectNotInPrerequisiteState,
                pgerrors.ReadOnlySqlTransaction) as exc:  # read-only: a standby (standby.py)
            raise SourceSetupError(
                f"cannot create publication {name!r}: {exc.diag.message_primary}", hint=stmt
            ) from exc
        return list(tables)
    all_tables, ins, upd, dele, via_root = pub
    if not (ins and upd and dele):
        raise SourceSetupError(
            f"publication {name!r} does not publish every insert, update and delete",
            hint=f"ALTER PUBLICATION {quote_ident(name)} SET (publish = 'insert, update, delete, truncate');",
        )
    partitioned = [t.qualified for t in tables if t.relkind == "p"]
    if partitioned and not via_root:
        # Changes would arrive under each partition's name: one partitioned table must be
        # one Iceberg table, its rows moving between partitions as updates of the root.
        raise SourceSetupError(
            f"publication {name!r} publishes the partitions of {partitioned} as tables of "
            "their own; the engine reads a partitioned table through its root",
            table=partitioned[0],
            hint=f"ALTER PUBLICATION {quote_ident(name)} SET (publish_via_partition_root = true);",
        )
    published = {
        (r[0], r[1])
        for r in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,)
        ).fetchall()
    }
    missing = [t for t in tables if (t.schema, t.name) not in published]
    if missing and not all_tables:
        stmt = (
            f"ALTER PUBLICATION {quote_ident(name)} ADD TABLE {', '.join(t.sql for t in missing)};"
        )
        try:
            conn.execute(stmt)
        except (pgerrors.InsufficientPrivilege, pgerrors.ReadOnlySqlTransaction) as exc:
            raise SourceSetupError(
                f"publication {name!r} lacks {[t.qualified for t in missing]} and this role "
                f"cannot add them: {exc.diag.message_primary}",
                hint=stmt,
            ) from exc
    return missing


# -- slot ----------------------------------------------------------------------------------------


def slot_info(conn: psycopg.Connection[Any], slot: str) -> SlotInfo | None:
    row = conn.execute(
        "SELECT slot_name, plugin, slot_type, database, active, active_pid, "
        "(confirmed_flush_lsn - '0/0')::bigint, wal_status "
        "FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None:
        return None
    return SlotInfo(row[0], row[1], row[2], row[3], bool(row[4]), row[5], int(row[6] or 0), row[7])


def check_slot(info: SlotInfo, database: str) -> None:
    if info.slot_type != "logical" or info.plugin != "pgoutput":
        raise SourceSetupError(
            f"slot {info.name!r} exists but is a {info.slot_type} slot with plugin {info.plugin!r}",
            hint=f"SELECT pg_drop_replication_slot({quote_literal(info.name)});",
        )
    if info.database != database:
        raise SourceSetupError(
            f"slot {info.name!r} belongs to database {info.database!r}, not {database!r}",
            hint=f"choose another slot name, or SELECT pg_drop_replication_slot({quote_literal(info.name)});",
        )
    if info.wal_status == "lost":
        raise SourceSetupError(
            f"slot {info.name!r} lost required WAL (max_slot_wal_keep_size); changes are gone "
            "and the tables must be re-snapshotted",
            hint=f"SELECT pg_drop_replication_slot({quote_literal(info.name)});",
        )
    if info.active:
        raise FencedError(
            f"slot {info.name!r} is in use by another reader (pid {info.active_pid}); "
            "refusing to read the same changes twice",
            hint=f"SELECT pg_terminate_backend({info.active_pid});  -- only if that reader is dead",
        )


# -- fencing -------------------------------------------------------------------------------------

_LOCK_KEY_SQL = "SELECT hashtextextended('replicator.postgres.slot:' || %s, 0)"


FENCE_WAIT_SECONDS = 3.0


def current_xid(conn: psycopg.Connection[Any]) -> int:
    """A new 64-bit transaction id of ``conn``'s (primary) server."""
    return int(_one(conn, "SELECT pg_current_xact_id()::text::bigint"))


def acquire_fence(
    conn: psycopg.Connection[Any], slot: str,
    token: Callable[[psycopg.Connection[Any]], int] = current_xid,
) -> int:  # fmt: skip
    """Take the slot's session advisory lock (held until ``conn`` closes) and return a
    fencing token: by default this cluster's 64-bit transaction id at the time, which only
    grows, so a later owner always holds a larger token than every earlier one (a standby
    cannot take one: ``standby.Standby.fencing_token``)."""
    key = int(_one(conn, _LOCK_KEY_SQL, (slot,)))
    # A previous owner that just exited (or was killed) may hold the lock for a moment while
    # its backend winds down: retry briefly before calling it a second engine.
    deadline = time.monotonic() + FENCE_WAIT_SECONDS
    locked = bool(_one(conn, "SELECT pg_try_advisory_lock(%s)", (key,)))
    while not locked and time.monotonic() < deadline:
        time.sleep(0.1)
        locked = bool(_one(conn, "SELECT pg_try_advisory_lock(%s)", (key,)))
    if not locked:
        holder = _one(
            conn,
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            (key,),
        )
        raise FencedError(
            f"another replicator (backend pid {holder}) holds slot {slot!r}; two engines on "
            "one slot would duplicate or lose changes",
            hint=f"SELECT pg_terminate_backend({holder});  -- only if that engine is gone",
        )
    return token(conn)


def keepalive_seconds(conn: psycopg.Connection[Any]) -> float:
    """A quarter of the server's ``wal_sender_timeout`` (as this role sees it), within
    0.5-10 s: the server ends a replication session that has not replied for that long."""
    row = conn.execute(
        "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'"
    ).fetchone()
    timeout_ms = int(row[0]) if row is not None else 60_000
    if timeout_ms <= 0:  # disabled
        return 10.0
    return min(10.0, max(0.5, timeout_ms / 4000))
