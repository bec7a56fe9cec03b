"""Pre-flight checks: each failure is a SourceSetupError whose hint is the exact fix."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoints
from replicator.errors import ConfigError, SourceSetupError, TransientError
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.setup import master_status, parse_dsn
from sample_dbs.mysql.server import PrivateMariaDB


class _Server84:
    """A connection to a server that knows only ``SHOW BINARY LOG STATUS`` (MySQL 8.4)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def cursor(self) -> Any:
        conn = self

        class _Cursor:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def execute(self, sql: str, params: Any = None) -> None:
                conn.sent.append(sql)
                if sql == "SHOW MASTER STATUS":
                    raise pymysql.err.ProgrammingError(1064, "syntax error")

            def fetchall(self) -> list[tuple[Any, ...]]:
                return [("binlog.000003", 157)]

        return _Cursor()


def test_master_status_remembers_the_statement_the_server_knows() -> None:
    """A waiting poll asks for the binlog's end every 10 ms: on MySQL 8.4 the renamed
    statement is found once per connection, not tried after a failure each time."""
    conn = _Server84()
    assert master_status(conn) == ("binlog.000003", 157)  # type: ignore[arg-type]
    assert master_status(conn) == ("binlog.000003", 157)  # type: ignore[arg-type]
    assert conn.sent == ["SHOW MASTER STATUS", "SHOW BINARY LOG STATUS", "SHOW BINARY LOG STATUS"]


def test_parse_dsn() -> None:
    p = parse_dsn("mysql://us%40er:p%3Ass@db.example:3307/shop")
    assert (p.user, p.password, p.host, p.port, p.database, p.unix_socket) == (
        "us@er",
        "p:ss",
        "db.example",
        3307,
        "shop",
        None,
    )
    p = parse_dsn("mysql://repl:x@localhost/shop?unix_socket=/tmp/m.sock")
    assert p.unix_socket == "/tmp/m.sock" and "host" not in p.pymysql_kwargs()
    assert parse_dsn("mysql://root@h").database is None and parse_dsn("mysql://root@h").port == 3306
    with pytest.raises(ConfigError):
        parse_dsn("postgresql://u@h/db")
    assert parse_dsn("mysql://u@h/db?ssl=disabled").pymysql_kwargs()["ssl_disabled"] is True
    assert "ssl" not in parse_dsn("mysql://u@h/db").pymysql_kwargs()  # preferred: pymysql's default
    assert parse_dsn("mysql://u@h/db?ssl=required&ssl_ca=/ca.pem").pymysql_kwargs()["ssl"] == {
        "ca": "/ca.pem"
    }
    with pytest.raises(ConfigError):
        parse_dsn("mysql://u@h/db?ssl=maybe")


def _setup_error(src: MySQLSource) -> SourceSetupError:
    with pytest.raises(SourceSetupError) as err:
        src.start(Checkpoints.at({}))
    text = str(err.value)
    assert "hint:" in text and "Traceback" not in text
    return err.value


@pytest.mark.integration
def test_binlog_off(
    extra_server: Callable[..., PrivateMariaDB], make_source: Callable[..., Any]
) -> None:
    server = extra_server(binlog=False)
    err = _setup_error(make_source(TestDb(server, "shop")))
    assert "binary log is off" in err.message and "log-bin" in (err.hint or "")


@pytest.fixture
def global_var(mariadb: PrivateMariaDB) -> Iterator[Callable[[str, str], None]]:
    saved: dict[str, Any] = {}

    def set_(name: str, value: str) -> None:
        saved.setdefault(name, mariadb.execute(f"SELECT @@GLOBAL.{name}")[0][0])
        mariadb.execute(f"SET GLOBAL {name} = '{value}'")

    yield set_
    for name, value in saved.items():
        mariadb.execute(f"SET GLOBAL {name} = '{value}'")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "bad", "good"),
    [
        ("binlog_format", "STATEMENT", "ROW"),
        ("binlog_row_image", "MINIMAL", "FULL"),
        ("binlog_row_metadata", "MINIMAL", "FULL"),
    ],
)
def test_binlog_settings(
    db: TestDb,
    make_source: Callable[..., Any],
    global_var: Callable[[str, str], None],
    name: str,
    bad: str,
    good: str,
) -> None:
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    global_var(name, bad)
    err = _setup_error(make_source(db))
    assert name in err.message and (err.hint or "").startswith(f"SET GLOBAL {name} = '{good}';")


@pytest.mark.integration
def test_privileges(db: TestDb, make_source: Callable[..., Any]) -> None:
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    db.sql(
        "CREATE USER 'weak1'@'%' IDENTIFIED BY 'pw'",
        f"GRANT SELECT ON `{db.name}`.* TO 'weak1'@'%'",
        "CREATE USER 'weak2'@'%' IDENTIFIED BY 'pw'",
        "GRANT REPLICATION SLAVE ON *.* TO 'weak2'@'%'",
        "CREATE USER 'weak3'@'%' IDENTIFIED BY 'pw'",
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'weak3'@'%'",
        "CREATE USER 'weak4'@'%' IDENTIFIED BY 'pw'",
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'weak4'@'%'",
        f"GRANT INSERT ON `{db.name}`.* TO 'weak4'@'%'",
    )
    try:
        base = f"mysql://{{}}:pw@127.0.0.1:{db.server.port}/{db.name}?ssl=disabled"
        grant = "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'weak{}'@'%';"
        for user in (1, 2):
            src = MySQLSource(base.format(f"weak{user}"), dead_letters=make_source(db).dead_letters)
            err = _setup_error(src)
            assert err.hint == grant.format(user), err
            src.close()
        for user in (3, 4):  # sees no table / sees the table but may not read it
            src = MySQLSource(base.format(f"weak{user}"), dead_letters=make_source(db).dead_letters)
            err = _setup_error(src)
            assert err.hint == f"GRANT SELECT ON `{db.name}`.* TO 'weak{user}'@'%';", err
            assert err.table == (f"{db.name}.t" if user == 4 else None)
            src.close()
        src = MySQLSource(
            base.format("weak1").replace(":pw@", ":wrong@"),
            dead_letters=make_source(db).dead_letters,
        )
        assert "refused user" in _setup_error(src).message
    finally:
        db.sql(*(f"DROP USER 'weak{i}'@'%'" for i in range(1, 5)))


@pytest.mark.integration
def test_tables_server_id_and_connection(db: TestDb, make_source: Callable[..., Any]) -> None:
    db.sql("CREATE TABLE nopk (v INT)")
    err = _setup_error(make_source(db))  # default selection: no table with a primary key
    assert "no table with a primary key" in err.message
    err = _setup_error(make_source(db, tables=["nopk"]))
    assert err.hint == f"ALTER TABLE `{db.name}`.`nopk` ADD PRIMARY KEY (<columns>);"
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    assert "does not exist" in _setup_error(make_source(db, tables=["missing"])).message
    err = _setup_error(make_source(db, server_id=1))  # the private server's own id
    assert "server_id" in err.message
    db.sql("CREATE TABLE odd (id INT PRIMARY KEY, g UUID)")  # bytes in the binlog, text in SELECT
    err = _setup_error(make_source(db, tables=["odd"]))
    assert err.hint is not None and err.hint.startswith(
        f"ALTER TABLE `{db.name}`.`odd` MODIFY `g` CHAR(36);"
    )
    db.sql("DROP TABLE odd")
    src = make_source(db)  # default: tables with a primary key in the DSN's database
    src.start(Checkpoints.at({}))
    assert src._tables.keys() == {f"{db.name}.t"}
    dead = MySQLSource(f"mysql://repl:repl@127.0.0.1:1/{db.name}", dead_letters=src.dead_letters)
    with pytest.raises(TransientError):
        dead.start(Checkpoints.at({}))


@pytest.mark.integration
def test_unix_socket_dsn(db: TestDb, make_source: Callable[..., Any]) -> None:
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
    dsn = db.server.socket_dsn.replace(f"/{db.server.dbname}?", f"/{db.name}?")
    src = MySQLSource(
        dsn, dead_letters=make_source(db).dead_letters, server_id=4343, progress=False
    )
    try:
        src.start(Checkpoints.at({}))
        db.sql("INSERT INTO t VALUES (2)")
        assert [e.after["id"] for e in drain(src) if e.after] == [1, 2]
    finally:
        src.close()


@pytest.mark.integration
def test_one_engine_per_server_id(db: TestDb, make_source: Callable[..., Any]) -> None:
    """A second reader with the same server_id is fenced off (MariaDB would otherwise cut the
    first one's binlog dump); a later owner gets a larger fencing token."""
    from replicator.errors import FencedError

    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    first = make_source(db, server_id=4801)
    first.start(Checkpoints.at({}))
    second = make_source(db, server_id=4801)
    with pytest.raises(FencedError) as err:
        second.start(Checkpoints.at({}))
    assert (err.value.hint or "").startswith("KILL ")
    first.close()
    third = make_source(db, server_id=4801)
    third.start(Checkpoints.at({}))
    assert first.fencing_token is not None and third.fencing_token is not None
    assert third.fencing_token > first.fencing_token


@pytest.mark.integration
def test_table_without_primary_key_hint_is_the_exact_fix(
    db: TestDb, make_source: Callable[..., Any]
) -> None:
    """Issue 10 item 10 (MySQL): a table without a primary key is refused; when a unique key
    over NOT NULL columns exists the hint promotes exactly those columns (a nullable or
    prefix unique key cannot serve), and after running it the table replicates."""
    db.sql(
        "CREATE TABLE k (a INT NOT NULL, b VARCHAR(20) NOT NULL, c INT NULL, t TEXT NOT NULL,"
        " UNIQUE KEY by_c (c), UNIQUE KEY by_t (t(10)), UNIQUE KEY by_ab (a, b))",
        "INSERT INTO k VALUES (1, 'x', NULL, 'p'), (1, 'y', NULL, 'q')",
    )
    err = _setup_error(make_source(db, tables=["k"]))
    assert "no primary key" in err.message and err.table == f"{db.name}.k"
    assert err.hint == f"ALTER TABLE `{db.name}`.`k` ADD PRIMARY KEY (`a`, `b`);"
    db.sql(err.hint)
    src = make_source(db, tables=["k"])
    src.start(Checkpoints.at({}))
    snap = drain(src)
    assert [e.schema_.key_columns for e in snap] == [("a", "b")] * 2
    db.sql("UPDATE k SET b = 'z' WHERE b = 'y'", "DELETE FROM k WHERE b = 'x'")
    upd, dele = drain(src)
    assert upd.before is not None and dele.before is not None
    assert (upd.before["b"], upd.after["b"], dele.before["b"]) == ("y", "z", "x")
