"""Schema changes (DDL in the binlog) on a live MariaDB source, through the engine into
Iceberg: added, dropped, renamed and widened columns, boolean / JSON columns added later,
incompatible changes (only that table stops), tables renamed, dropped, truncated or created,
and a resume across binlog rotation."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from replicator.cli.main import main as cli
from replicator.errors import SchemaChangeError
from replicator.pipeline.runner import Replicator, RunSummary
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import (
    assert_tables_equal,
    iceberg_metadata,
    iceberg_schema,
    load,
    write_config,
)
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def run(cfg_path: Path, spark: Any) -> RunSummary:
    return Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)


def rows(cfg_path: Path, table: str, key: str = "id") -> list[dict[str, Any]]:
    """The table through Iceberg Java, checked against DuckDB."""
    loc = iceberg_metadata(load(cfg_path), table)
    got = spark_rows(loc, order_by=[key])
    assert duckdb_rows(loc, order_by=[key]) == got
    return got


def config(tmp_path: Path, db: MySQLDb) -> Path:
    return write_config(tmp_path, db.dsn, server_id=db.server_id)


def test_add_and_drop_column_mid_stream(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), gone VARCHAR(10))",
                 "INSERT INTO t VALUES (1, 'one', 'x'), (2, 'two', 'y')")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql(
        "ALTER TABLE t ADD COLUMN b INT", "INSERT INTO t VALUES (3, 'three', 'z', 30)",
        "UPDATE t SET b = 10 WHERE id = 1", "ALTER TABLE t DROP COLUMN gone",
        "INSERT INTO t VALUES (4, 'four', 40)", "UPDATE t SET a = 'TWO' WHERE id = 2",
        # An added column placed first: the binlog's column order changes, names still match.
        "ALTER TABLE t ADD COLUMN f DATE FIRST", "INSERT INTO t VALUES ('2024-05-06', 5, 'five', 50)",
    )
    summary = run(cfg_path, spark)
    assert not summary.stopped
    t = f"{mysql_db.name}.t"
    assert rows(cfg_path, t) == [
        {"id": 1, "a": "one", "gone": "x", "b": 10, "f": None},
        {"id": 2, "a": "TWO", "gone": None, "b": None, "f": None},  # rewritten after the drop
        {"id": 3, "a": "three", "gone": "z", "b": 30, "f": None},
        {"id": 4, "a": "four", "gone": None, "b": 40, "f": None},
        {"id": 5, "a": "five", "gone": None, "b": 50, "f": datetime(2024, 5, 6).date()},
    ]
    assert list(iceberg_schema(cfg_path, t)) == ["id", "a", "gone", "b", "f"]  # dropped: kept
    assert_tables_equal(cfg_path, mysql_db.dsn)


def test_boolean_and_json_columns_added_later(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    """tinyint(1) and MariaDB JSON look like tinyint / longtext in the binlog: the source learns
    them from the DDL it reads, so columns added mid-stream map like snapshot ones."""
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, n TINYINT)", "INSERT INTO t VALUES (1, 5)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql(
        "ALTER TABLE t ADD COLUMN ok BOOLEAN, ADD COLUMN doc JSON",
        "INSERT INTO t VALUES (2, 7, 1, '{\"a\":  [1, 2]}')",
        "UPDATE t SET ok = 0, doc = '[true,  null]' WHERE id = 1",
    )
    assert not run(cfg_path, spark).stopped
    t = f"{mysql_db.name}.t"
    assert iceberg_schema(cfg_path, t) == {"id": "int", "n": "int", "ok": "boolean",
                                           "doc": "string"}
    assert rows(cfg_path, t) == [{"id": 1, "n": 5, "ok": False, "doc": "[true,null]"},
                                 {"id": 2, "n": 7, "ok": True, "doc": '{"a":[1,2]}'}]
    assert_tables_equal(cfg_path, mysql_db.dsn)


def test_renamed_column_continues_as_a_new_column(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, old_name VARCHAR(10))",
                 "INSERT INTO t VALUES (1, 'a')")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql("ALTER TABLE t CHANGE COLUMN old_name new_name VARCHAR(20)",
                 "INSERT INTO t VALUES (2, 'b')", "ALTER TABLE t RENAME COLUMN new_name TO nn",
                 "INSERT INTO t VALUES (3, 'c')")
    assert not run(cfg_path, spark).stopped
    assert rows(cfg_path, f"{mysql_db.name}.t") == [
        {"id": 1, "old_name": "a", "new_name": None, "nn": None},
        {"id": 2, "old_name": None, "new_name": "b", "nn": None},
        {"id": 3, "old_name": None, "new_name": None, "nn": "c"},
    ]


def test_change_made_while_engine_stopped_is_picked_up(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))",
                 "INSERT INTO t VALUES (1, 'one')")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql("ALTER TABLE t ADD COLUMN c DECIMAL(8,2)", "INSERT INTO t VALUES (2, 'two', 2.50)")
    run(cfg_path, spark)
    assert [r["c"] for r in rows(cfg_path, f"{mysql_db.name}.t")] == [None, Decimal("2.50")]


def test_widening_uses_type_promotion(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, n INT, r FLOAT, d DECIMAL(6,2), s SMALLINT)",
                 "INSERT INTO t VALUES (1, 1, 1.5, 1.25, 7)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    t = f"{mysql_db.name}.t"
    assert iceberg_schema(cfg_path, t) == {"id": "int", "n": "int", "r": "float",
                                           "d": "decimal(6, 2)", "s": "int"}
    mysql_db.sql(
        "ALTER TABLE t MODIFY n BIGINT, MODIFY r DOUBLE, MODIFY d DECIMAL(12,2), MODIFY s INT",
        "INSERT INTO t VALUES (2, 9000000000, 2.25, 1234567890.12, 2000000000)",
        "UPDATE t SET n = -9000000000 WHERE id = 1",
    )
    summary = run(cfg_path, spark)
    assert not summary.stopped
    assert iceberg_schema(cfg_path, t) == {"id": "int", "n": "long", "r": "double",
                                           "d": "decimal(12, 2)", "s": "int"}
    got = rows(cfg_path, t)
    assert [r["n"] for r in got] == [-9000000000, 9000000000]
    assert [str(r["d"]) for r in got] == ["1.25", "1234567890.12"]
    assert got[1]["s"] == 2000000000
    assert_tables_equal(cfg_path, mysql_db.dsn)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("ALTER TABLE t MODIFY n VARCHAR(10)", "changed type from int to string"),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, n)", "primary key changed"),
    ],
    ids=["type", "primary-key"],
)
def test_incompatible_change_stops_only_that_table(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, ddl: str, message: str  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, n INT)",
                 "CREATE TABLE other (id INT PRIMARY KEY)",
                 "INSERT INTO t VALUES (1, 1)", "INSERT INTO other VALUES (1)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql(ddl, "INSERT INTO t VALUES (2, '2')", "INSERT INTO other VALUES (2)")
    t, other = f"{mysql_db.name}.t", f"{mysql_db.name}.other"
    summary = run(cfg_path, spark)
    assert list(summary.stopped) == [t]
    assert message in summary.stopped[t]
    assert rows(cfg_path, t) == [{"id": 1, "n": 1}]  # committed data intact
    assert rows(cfg_path, other) == [{"id": 1}, {"id": 2}]
    # The held events are not acknowledged: a restart sees the stopped table's change again.
    mysql_db.sql("INSERT INTO other VALUES (3)")
    again = run(cfg_path, spark)
    assert list(again.stopped) == [t]
    assert rows(cfg_path, other) == [{"id": 1}, {"id": 2}, {"id": 3}]


@pytest.mark.parametrize(
    ("ddl", "words", "listed"),
    [
        (["RENAME TABLE t TO t_new"], "table {t} was renamed to {db}.t_new", False),
        (["ALTER TABLE t RENAME TO t_new"], "table {t} was renamed to {db}.t_new", False),
        (["RENAME TABLE t TO t_new"], "table {t} was renamed to {db}.t_new", True),
        (["DROP TABLE t"], "table {t} was dropped", False),
        (["ALTER TABLE t DROP PRIMARY KEY", "INSERT INTO t VALUES (3, 3)"],
         "{t} no longer has a primary key", False),
    ],
    ids=["rename", "alter-rename", "rename-listed", "drop", "drop-primary-key"],
)
def test_renamed_or_dropped_table_stops_with_a_clear_message(
    tmp_path: Path, mysql_db: MySQLDb, capsys: pytest.CaptureFixture[str],  # noqa: F811
    ddl: list[str], words: str, listed: bool,
) -> None:
    """The engine is stopped when the table changes: the restart follows the committed table
    through the binlog to the statement and stops there (exit code 1, the message names the
    table), whether the table is listed in source.tables or selected by default. Regression:
    with the default selection the renamed / dropped / key-less table silently left the
    selection, and the run succeeded with its Iceberg table stale."""
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, a INT)", "INSERT INTO t VALUES (1, 1)")
    t = f"{mysql_db.name}.t"
    extra: dict[str, Any] = {"tables": [t]} if listed else {}
    cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id, **extra)
    argv = ["run", "--config", str(cfg_path), "--until-idle", "--engine", "local"]
    assert cli(argv) == 0
    mysql_db.sql("INSERT INTO t VALUES (2, 2)", *ddl)
    capsys.readouterr()
    for _ in range(2):  # every restart stops at the same statement
        assert cli(argv) == 1
        err = capsys.readouterr().err
        assert words.format(t=t, db=mysql_db.name) in err, err
        assert f"table={t}" in err and "position=" in err and "hint:" in err, err
    loc = iceberg_metadata(load(cfg_path), f"{mysql_db.name}.t")
    assert spark_rows(loc, order_by=["id"])[:1] == [{"id": 1, "a": 1}]  # committed data intact


def test_changes_before_a_stopping_statement_are_committed(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, a INT)", "INSERT INTO t VALUES (1, 1)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql("INSERT INTO t VALUES (2, 2)", "RENAME TABLE t TO t_new")
    with pytest.raises(SchemaChangeError, match="renamed"):
        run(cfg_path, spark)
    assert rows(cfg_path, f"{mysql_db.name}.t") == [{"id": 1, "a": 1}, {"id": 2, "a": 2}]


def test_truncate_is_replicated(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql("TRUNCATE TABLE t", "INSERT INTO t VALUES (3)")
    summary = run(cfg_path, spark)
    assert summary.dead_letters == 0 and not summary.stopped
    assert [r["id"] for r in rows(cfg_path, f"{mysql_db.name}.t")] == [3]


def test_table_created_later_is_snapshotted_at_the_next_start(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE a (id INT PRIMARY KEY, v INT)", "INSERT INTO a VALUES (1, 1)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    mysql_db.sql(
        "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(10), ok TINYINT(1))",
        "INSERT INTO b VALUES (1, 'x', 1), (2, 'y', 0)", "UPDATE b SET v = 'z' WHERE id = 1",
        "DELETE FROM b WHERE id = 2", "INSERT INTO a VALUES (2, 2)",
    )
    run(cfg_path, spark)  # the stream repeats b's changes under the snapshot: upserts
    mysql_db.sql("INSERT INTO b VALUES (3, 'w', 0)", "UPDATE a SET v = 20 WHERE id = 2")
    run(cfg_path, spark)
    assert assert_tables_equal(cfg_path, mysql_db.dsn) == {f"{mysql_db.name}.a": 2,
                                                            f"{mysql_db.name}.b": 2}
    assert rows(cfg_path, f"{mysql_db.name}.b") == [{"id": 1, "v": "z", "ok": True},
                                                    {"id": 3, "v": "w", "ok": False}]


def test_resume_after_binlog_rotation(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1)")
    cfg_path = config(tmp_path, mysql_db)
    run(cfg_path, spark)
    files = [r[0] for r in mysql_db.sql("SHOW BINARY LOGS")]
    # Rotations between runs, with changes before, between and after them.
    mysql_db.sql("INSERT INTO t VALUES (2, 2)", "FLUSH BINARY LOGS",
                 "UPDATE t SET v = 10 WHERE id = 1", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS",
                 "INSERT INTO t VALUES (3, 3)")
    assert run(cfg_path, spark).events_seen == 3
    mysql_db.sql("FLUSH BINARY LOGS", "DELETE FROM t WHERE id = 2",
                 "UPDATE t SET id = 4 WHERE id = 3")
    summary = run(cfg_path, spark)
    assert summary.events_seen == 2
    assert summary.last_position is not None
    assert summary.last_position.parts[0] not in files  # read from a file written later
    mysql_db.sql("FLUSH BINARY LOGS")
    assert run(cfg_path, spark).events_seen == 0  # nothing new, nothing repeated
    assert rows(cfg_path, f"{mysql_db.name}.t") == [{"id": 1, "v": 10}, {"id": 4, "v": 3}]
    assert_tables_equal(cfg_path, mysql_db.dsn)
