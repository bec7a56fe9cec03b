"""DSN parsing, connections and the pre-flight checks of the MySQL/MariaDB source.

Every failed check raises ``SourceSetupError`` whose ``hint`` is the exact setting or
statement to change (``SET GLOBAL binlog_format = 'ROW';``, my.cnf ``log-bin``, ``GRANT
REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'u'@'h';``); the CLI prints message and hint,
never a stack trace.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pymysql
from pymysql.cursors import Cursor

from replicator.errors import (
    ConfigError,
    FencedError,
    SourceSetupError,
    TerminalError,
    TransientError,
)
from replicator.sources.mysql.types import quote_ident

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
ER_ACCESS_DENIED = 1045
ER_DBACCESS_DENIED = 1044
ER_BAD_DB = 1049
ER_SPECIFIC_ACCESS_DENIED = 1227
ER_TABLEACCESS_DENIED = 1142
ER_NO_SUCH_TABLE = 1146
ER_MASTER_FATAL_READING_BINLOG = 1236


@dataclass(frozen=True)
class ConnParams:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = ""
    database: str | None = None
    unix_socket: str | None = None
    ssl: str = "preferred"  # disabled | preferred | required (TLS over TCP)
    ssl_ca: str | None = None  # with "required": verify the server certificate and host name

    def pymysql_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"user": self.user, "password": self.password, "connect_timeout": 10}
        if self.unix_socket:
            kw["unix_socket"] = self.unix_socket
        else:
            kw["host"], kw["port"] = self.host, self.port
        # pymysql builds a TLS context per connection for "preferred" (about 30 ms, paid on
        # every binlog reconnect): a unix socket never needs one.
        if self.unix_socket or self.ssl == "disabled":
            kw["ssl_disabled"] = True
        elif self.ssl == "required":
            kw["ssl"] = {"ca": self.ssl_ca} if self.ssl_ca else {"verify_mode": False}
        return kw

    def replication_settings(self) -> dict[str, Any]:
        """Connection settings for ``BinLogStreamReader`` (it adds charset itself)."""
        return self.pymysql_kwargs()


def parse_dsn(dsn: str) -> ConnParams:
    """``mysql://user:pass@host:port/db`` (also ``mariadb://``). Query options:
    ``unix_socket=/path``, ``ssl=disabled|preferred|required`` (default preferred: TLS when
    the server offers it), ``ssl_ca=/path`` (with required: verify the server)."""
    u = urlsplit(dsn)
    if u.scheme not in ("mysql", "mariadb", "mysql+pymysql"):
        raise ConfigError(
            f"not a MySQL DSN (expected mysql://user:pass@host:port/db): {u.scheme}://..."
        )
    q = parse_qs(u.query)
    ssl = next(iter(q.get("ssl") or q.get("ssl_mode") or ["preferred"])).lower()
    if ssl not in ("disabled", "preferred", "required"):
        raise ConfigError(f"ssl must be disabled, preferred or required, not {ssl!r}")
    db = unquote(u.path.lstrip("/")) or None
    try:
        port = u.port or 3306
    except ValueError:
        raise ConfigError("the MySQL DSN has an invalid port") from None
    return ConnParams(
        host=u.hostname or "127.0.0.1",
        port=port,
        user=unquote(u.username or "root"),
        password=unquote(u.password or ""),
        database=db,
        unix_socket=next(iter(q.get("unix_socket") or q.get("socket") or []), None),
        ssl=ssl,
        ssl_ca=next(iter(q.get("ssl_ca") or []), None),
    )


def connect(
    params: ConnParams, *, database: str | None = None, **kw: Any
) -> pymysql.Connection[Cursor]:
    """An autocommit utf8mb4 session in UTC (TIMESTAMP values read as UTC)."""
    try:
        return pymysql.connect(
            **params.pymysql_kwargs(),
            database=database,
            charset="utf8mb4",
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
            **kw,
        )
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        where = params.unix_socket or f"{params.host}:{params.port}"
        if code == ER_ACCESS_DENIED:
            raise SourceSetupError(
                f"MySQL refused user {params.user!r} at {where}: {exc.args[1]}",
                hint=f"CREATE USER '{params.user}'@'%' IDENTIFIED BY '<password>';  "
                "-- or fix the DSN's password",
            ) from None
        if code in (ER_BAD_DB, ER_DBACCESS_DENIED):
            raise SourceSetupError(f"cannot use database {database!r}: {exc.args[1]}") from None
        raise TransientError(f"cannot connect to MySQL at {where}: {exc.args[-1]}") from None


def query(
    conn: pymysql.Connection[Cursor], sql: str, params: Sequence[Any] = ()
) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, params or None)
        return list(cur.fetchall())


def variables(conn: pymysql.Connection[Cursor], *names: str) -> dict[str, str]:
    rows = query(
        conn,
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ", ".join(["%s"] * len(names)) + ")",
        names,
    )
    return {str(r[0]).lower(): str(r[1]) for r in rows}


# -- server ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    version: str
    is_mariadb: bool
    server_id: int
    log_bin_basename: str
    row_metadata: str | None  # None: the server has no binlog_row_metadata


def source_identity(conn: pymysql.Connection[Cursor], is_mariadb: bool) -> str:
    """Which server the binlog positions belong to (``replicator.sources.common.identity``):
    ``mysql:<server_uuid>/<server_id>``, or on MariaDB (no ``server_uuid``)
    ``mariadb:<server_uid>/<server_id>/<gtid_domain_id>``."""
    if is_mariadb:
        v = variables(conn, "server_uid", "server_id", "gtid_domain_id")
        return (
            f"mariadb:{v.get('server_uid', '?')}/{v.get('server_id', '?')}"
            f"/{v.get('gtid_domain_id', '?')}"
        )
    v = variables(conn, "server_uuid", "server_id")
    return f"mysql:{v.get('server_uuid', '?')}/{v.get('server_id', '?')}"


def check_server(conn: pymysql.Connection[Cursor], *, source_server_id: int) -> ServerInfo:
    v = variables(
        conn,
        "version",
        "log_bin",
        "log_bin_basename",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "server_id",
    )
    version = v.get("version", "?")
    is_mariadb = "mariadb" in version.lower()
    if v.get("log_bin", "OFF").upper() not in ("ON", "1"):
        raise SourceSetupError(
            "the binary log is off: change data capture reads it (log_bin cannot be changed "
            "at runtime; restart the server after the change)",
            hint="in my.cnf [mysqld]: log-bin = binlog, server-id = 1, binlog-format = ROW, "
            "binlog-row-image = FULL, binlog-row-metadata = FULL; then restart",
        )
    checks = [
        ("binlog_format", "ROW", "binlog-format = ROW"),
        ("binlog_row_image", "FULL", "binlog-row-image = FULL"),
    ]
    if "binlog_row_metadata" in v:
        checks.append(("binlog_row_metadata", "FULL", "binlog-row-metadata = FULL"))
    for name, want, cnf in checks:
        have = v.get(name, "")
        if have.upper() != want:
            raise SourceSetupError(
                f"{name} is {have!r}; the source needs {want!r} (existing sessions keep the "
                "old value until they reconnect)",
                hint=f"SET GLOBAL {name} = '{want}';  -- and in my.cnf [mysqld]: {cnf}",
            )
    if "binlog_row_metadata" not in v:
        # mysql-replication 1.x decodes signedness, charsets and names from this metadata.
        raise SourceSetupError(
            f"server {version} has no binlog_row_metadata: the binlog carries no column names, "
            "signedness or charsets, which the source needs to decode rows",
            hint="upgrade to MariaDB >= 10.5 or MySQL >= 8.0.14 and set binlog_row_metadata = FULL",
        )
    server_id = int(v.get("server_id", "0"))
    if server_id == source_server_id:
        raise SourceSetupError(
            f"the source's server_id {source_server_id} equals the server's own server_id",
            hint="set source.server_id to a number no server or replica in the topology uses",
        )
    return ServerInfo(
        version, is_mariadb, server_id, v.get("log_bin_basename", ""), v.get("binlog_row_metadata")
    )


def current_user(conn: pymysql.Connection[Cursor]) -> str:
    user = str(query(conn, "SELECT CURRENT_USER()")[0][0])
    name, _, host = user.rpartition("@")
    return f"'{name}'@'{host}'"


def check_privileges(conn: pymysql.Connection[Cursor]) -> None:
    """REPLICATION SLAVE (read the binlog) and REPLICATION CLIENT / BINLOG MONITOR
    (SHOW BINARY LOGS, SHOW MASTER STATUS)."""
    who = current_user(conn)
    hint = f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO {who};"
    grants = " ".join(str(r[0]).upper() for r in query(conn, "SHOW GRANTS FOR CURRENT_USER()"))
    global_privs: set[str] = set()
    for line in grants.split("GRANT ")[1:]:
        privs, sep, rest = line.partition(" ON ")
        if sep and rest.startswith("*.*"):
            global_privs.update(p.strip() for p in privs.split(","))
    has_all = "ALL PRIVILEGES" in global_privs or "ALL" in global_privs
    if not has_all and "REPLICATION SLAVE" not in global_privs:
        raise SourceSetupError(
            f"user {who} lacks REPLICATION SLAVE (needed to read the binlog)", hint=hint
        )
    try:
        query(conn, "SHOW BINARY LOGS")
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == ER_SPECIFIC_ACCESS_DENIED:
            raise SourceSetupError(
                f"user {who} lacks REPLICATION CLIENT (BINLOG MONITOR on MariaDB): {exc.args[1]}",
                hint=hint,
            ) from None
        raise


# -- tables ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableInfo:
    schema: str
    name: str
    pk_columns: tuple[str, ...]  # in index order; empty without a primary key
    # Committed but no longer on the server as a table to replicate (dropped, renamed, or
    # its key lost while the engine was stopped); a table in source.keyless_tables is not.
    gone: bool = False

    @property
    def qualified(self) -> str:
        """The engine's table name: ``db.table``."""
        return f"{self.schema}.{self.name}"

    @property
    def sql(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


def _pk_columns(
    conn: pymysql.Connection[Cursor], schema: str | None
) -> dict[tuple[str, str], tuple[str, ...]]:
    sql = (
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE INDEX_NAME = 'PRIMARY'"
    )
    params: tuple[Any, ...] = ()
    if schema is not None:
        sql += " AND TABLE_SCHEMA = %s"
        params = (schema,)
    keys: dict[tuple[str, str], list[str]] = {}
    for s, t, c in query(conn, sql + " ORDER BY TABLE_SCHEMA, TABLE_NAME, SEQ_IN_INDEX", params):
        keys.setdefault((str(s), str(t)), []).append(str(c))
    return {k: tuple(v) for k, v in keys.items()}


def list_tables(
    conn: pymysql.Connection[Cursor],
    tables: Sequence[str] | None,
    default_db: str | None,
    *,
    committed: Collection[str] = (),
    keyless: Collection[str] = (),
) -> list[TableInfo]:
    """The configured tables (``db.table``, or ``table`` in the DSN's database), or by default
    every base table with a primary key in the DSN's database (all user databases without
    one); the ``keyless`` ones (``source.keyless_tables``) are replicated without a key.

    ``committed``: tables with committed changes. One of them that is selected (configured,
    or in the default scope) but no longer exists or lost its primary key was renamed,
    dropped or altered while the engine was stopped: it is listed with ``gone`` set
    (a "gone" table) instead of being left out silently or refused here, so the stream can
    follow it up to the statement that changed it and stop there, as it does live."""
    sql = (
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
        "WHERE TABLE_TYPE = 'BASE TABLE'"
    )
    if tables is None:
        return _default_tables(conn, sql, default_db, committed, keyless)
    return _configured_tables(conn, sql, tables, default_db, committed, keyless)


def _default_tables(
    conn: pymysql.Connection[Cursor],
    sql: str,
    default_db: str | None,
    committed: Collection[str],
    keyless: Collection[str],
) -> list[TableInfo]:
    """``list_tables`` without configured tables: every keyed base table in scope."""
    params: tuple[Any, ...] = ()
    if default_db:
        sql += " AND TABLE_SCHEMA = %s"
        params = (default_db,)
    else:
        sql += " AND TABLE_SCHEMA NOT IN (" + ", ".join(["%s"] * len(SYSTEM_SCHEMAS)) + ")"
        params = SYSTEM_SCHEMAS
    found = [(str(s), str(t)) for s, t in query(conn, sql + " ORDER BY 1, 2", params)]
    keys = _pk_columns(conn, default_db)
    infos = [TableInfo(s, t, keys.get((s, t), ())) for s, t in found]
    live = {i.qualified for i in infos if i.pk_columns or i.qualified in keyless}
    gone = [
        _gone(c)
        for c in sorted(committed)
        if c not in live
        and (
            c.partition(".")[0] == default_db
            if default_db
            else c.partition(".")[0] not in SYSTEM_SCHEMAS
        )
    ]
    for i in infos:
        if i.qualified not in live and i.qualified not in committed:
            log.warning(
                "not replicating %s: it has no primary key (%s, or list it in "
                "source.keyless_tables)", i.qualified, key_hint(conn, i),
            )  # fmt: skip
    if gone:
        return [i for i in infos if i.qualified in live] + gone
    where = default_db or "any user database"
    if not infos:  # information_schema shows only what the user may access
        raise SourceSetupError(
            f"no table visible to user {current_user(conn)} in {where}",
            hint=f"GRANT SELECT ON {quote_ident(default_db) if default_db else '*'}.* "
            f"TO {current_user(conn)};",
        )
    if not live:
        raise SourceSetupError(
            f"no table with a primary key in {where}",
            hint="ALTER TABLE <db>.<table> ADD PRIMARY KEY (<columns>); or list it in "
            "source.keyless_tables",
        )
    return [i for i in infos if i.qualified in live]


def _configured_tables(
    conn: pymysql.Connection[Cursor],
    sql: str,
    tables: Sequence[str],
    default_db: str | None,
    committed: Collection[str],
    keyless: Collection[str],
) -> list[TableInfo]:
    """``list_tables`` of the configured tables: each must exist with a primary key (or be
    in ``keyless``)."""
    wanted: list[tuple[str, str]] = []
    for name in tables:
        schema, dot, table = name.partition(".")
        if not dot:
            if not default_db:
                raise SourceSetupError(
                    f"table {name!r} has no database and the DSN names none",
                    hint=f"write it as <database>.{name}",
                )
            schema, table = default_db, name
        wanted.append((schema, table))
    existing = {(str(s), str(t)) for s, t in query(conn, sql)}
    keys = _pk_columns(conn, None)
    out = []
    for schema, table in dict.fromkeys(wanted):
        info = TableInfo(schema, table, keys.get((schema, table), ()))
        if info.qualified in committed and (
            (schema, table) not in existing or not (info.pk_columns or info.qualified in keyless)
        ):
            out.append(_gone(info.qualified))
            continue
        if (schema, table) not in existing:
            raise SourceSetupError(
                f"table {schema}.{table} does not exist or is not visible to user "
                f"{current_user(conn)}",
                table=f"{schema}.{table}",
                hint=f"GRANT SELECT ON {quote_ident(schema)}.* TO {current_user(conn)};  "
                "-- if it exists",
            )
        if not info.pk_columns and info.qualified not in keyless:
            raise SourceSetupError(
                f"table {info.qualified} has no primary key: updates and deletes could not "
                "be applied (the binlog names only primary key columns as the row's key); "
                "add one, or list it in source.keyless_tables (a multiset of whole rows; "
                'README "Tables without a primary key")',
                table=info.qualified,
                hint=key_hint(conn, info),
            )
        out.append(info)
    return out


def key_hint(conn: pymysql.Connection[Cursor], info: TableInfo) -> str:
    """The exact fix for a table without a primary key: promote its unique key over NOT
    NULL columns (no prefix) when it has one, else a primary key over columns to choose."""
    rows = query(
        conn,
        "SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE, s.SUB_PART "
        "FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c "
        "ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME "
        "AND c.COLUMN_NAME = s.COLUMN_NAME "
        "WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0 "
        "ORDER BY s.INDEX_NAME, s.SEQ_IN_INDEX",
        (info.schema, info.name),
    )
    keys: dict[str, list[str]] = {}
    bad: set[str] = set()
    for index, column, nullable, sub_part in rows:
        keys.setdefault(str(index), []).append(str(column))
        if str(nullable) != "NO" or sub_part is not None:
            bad.add(str(index))
    usable = sorted((len(c), i) for i, c in keys.items() if i not in bad)
    if usable:
        cols = ", ".join(quote_ident(c) for c in keys[usable[0][1]])
        return f"ALTER TABLE {info.sql} ADD PRIMARY KEY ({cols});"
    return f"ALTER TABLE {info.sql} ADD PRIMARY KEY (<columns>);"


def _gone(qualified: str) -> TableInfo:
    schema, _, name = qualified.partition(".")
    return TableInfo(schema, name, (), gone=True)


def check_select(conn: pymysql.Connection[Cursor], tables: Sequence[TableInfo]) -> None:
    """SELECT is needed for the snapshot."""
    for t in tables:
        try:
            query(conn, f"SELECT 1 FROM {t.sql} LIMIT 0")
        except (pymysql.err.OperationalError, pymysql.err.ProgrammingError) as exc:
            if exc.args and exc.args[0] in (ER_TABLEACCESS_DENIED, ER_DBACCESS_DENIED):
                raise SourceSetupError(
                    f"user {current_user(conn)} cannot SELECT from {t.qualified} (needed for "
                    "the snapshot)",
                    table=t.qualified,
                    hint=f"GRANT SELECT ON {quote_ident(t.schema)}.* TO {current_user(conn)};",
                ) from None
            raise


# -- binlog files ------------------------------------------------------------------------------


def binary_logs(conn: pymysql.Connection[Cursor]) -> dict[str, int]:
    """Binlog file name -> size, oldest first."""
    return {str(r[0]): int(r[1]) for r in query(conn, "SHOW BINARY LOGS")}


_STATUS_SQL: weakref.WeakKeyDictionary[pymysql.Connection[Cursor], str] = (
    weakref.WeakKeyDictionary()
)


def master_status(conn: pymysql.Connection[Cursor]) -> tuple[str, int]:
    """The current binlog file and offset (``SHOW MASTER STATUS``; MySQL 8.4 renamed it
    ``SHOW BINARY LOG STATUS``)."""
    sql = _STATUS_SQL.get(conn, "SHOW MASTER STATUS")
    try:
        rows = query(conn, sql)
    except pymysql.err.ProgrammingError:
        if sql != "SHOW MASTER STATUS":
            raise
        # A waiting poll asks every 10 ms: remember the name this server knows.
        sql = _STATUS_SQL[conn] = "SHOW BINARY LOG STATUS"
        rows = query(conn, sql)
    if not rows:
        raise SourceSetupError(
            "SHOW MASTER STATUS returned nothing: the binary log is off",
            hint="in my.cnf [mysqld]: log-bin = binlog; then restart",
        )
    return str(rows[0][0]), int(rows[0][1])


def check_resume_file(files: Mapping[str, int], file: str, offset: int, position: Any) -> None:
    """A terminal error when the binlog to resume from is gone: never skip silently."""
    if file in files and offset <= files[file]:
        return
    first = next(iter(files), "(none)")
    if file in files:  # shorter than the committed offset: RESET MASTER started the numbering over
        what = (
            f"binlog file {file} is shorter ({files[file]} bytes) than the committed offset "
            f"{offset}: the binary log was reset and the file holds other changes"
        )
    else:
        what = (
            f"binlog file {file} is no longer on the server (oldest is {first}): the changes "
            "between the committed position and that file were purged and cannot be read"
        )
    raise TerminalError(
        what,
        position=position,
        hint="re-snapshot: drop the Iceberg tables of this source (or point the engine at a "
        "new namespace) and restart; raise binlog_expire_logs_seconds so the binlog "
        "outlives engine downtime",
    )


def binlog_basename(file: str) -> str:
    return file.rpartition(".")[0]


def raise_replication_error(exc: pymysql.err.MySQLError, where: Any) -> None:
    """Map errors of the binlog dump connection to the engine's error kinds."""
    code = exc.args[0] if exc.args else 0
    msg = exc.args[1] if len(exc.args) > 1 else str(exc)
    if code == ER_MASTER_FATAL_READING_BINLOG:
        raise TerminalError(
            f"the server cannot send the binlog from {where}: {msg}",
            position=where,
            hint="if the file was purged: re-snapshot (drop this source's Iceberg tables and "
            "restart); if another reader uses the same server_id: change source.server_id",
        ) from None
    if code == ER_SPECIFIC_ACCESS_DENIED:
        raise SourceSetupError(
            f"the server refused to send the binlog: {msg}",
            hint="GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user>;",
        ) from None
    raise TransientError(f"binlog connection failed at {where}: {msg}", position=where) from None


# -- fencing -----------------------------------------------------------------------------------


def fence_name(server_id: int) -> str:
    return f"replicator.mysql.{server_id}"


def acquire_fence(conn: pymysql.Connection[Cursor], server_id: int) -> int:
    """Take a named lock for this reader's server_id (held while ``conn`` lives: a second
    engine with the same id is refused instead of cutting the first one's binlog dump off)
    and return a fencing token: the server's clock in microseconds, which grows with each
    new owner (unless the server clock is set back)."""
    name = fence_name(server_id)
    # A short wait: a previous owner's session may still be closing on the server.
    if query(conn, "SELECT GET_LOCK(%s, 1)", (name,))[0][0] != 1:
        holder = query(conn, "SELECT IS_USED_LOCK(%s)", (name,))[0][0]
        raise FencedError(
            f"another replicator (connection {holder}) reads the binlog with server_id "
            f"{server_id}; two engines would duplicate or lose changes",
            hint=f"KILL {holder};  -- only if that engine is gone; or give this one another "
            "source.server_id (and its own Iceberg tables)",
        )
    return int(query(conn, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)")[0][0])


def release_fence(conn: pymysql.Connection[Cursor], server_id: int) -> None:
    """Release at once (closing the session releases it too, but asynchronously)."""
    query(conn, "SELECT RELEASE_LOCK(%s)", (fence_name(server_id),))
