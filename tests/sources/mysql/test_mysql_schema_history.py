"""DDL parsing and the schema history (hints the binlog lacks: tinyint(1), MariaDB JSON)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoints
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.schema_history import (
    SchemaHistory,
    TableHints,
    parse_ddl,
    split_top,
    strip_comments,
)


def test_strip_comments_and_split() -> None:
    assert (
        strip_comments("ALTER /* x */ TABLE `a` -- c\n ADD b INT # d\n")
        == "ALTER TABLE `a` ADD b INT"
    )
    assert (
        strip_comments("CREATE TABLE t (a INT) /*!50100 PARTITION BY HASH(a) */")
        == "CREATE TABLE t (a INT) PARTITION BY HASH(a)"
    )
    assert (
        strip_comments("ALTER TABLE t ADD c VARCHAR(5) DEFAULT '-- no /* comment'")
        == "ALTER TABLE t ADD c VARCHAR(5) DEFAULT '-- no /* comment'"
    )
    assert split_top("a INT, b DECIMAL(10,2), c ENUM('x,y', 'z'), PRIMARY KEY (a, b)") == [
        "a INT",
        "b DECIMAL(10,2)",
        "c ENUM('x,y', 'z')",
        "PRIMARY KEY (a, b)",
    ]


def test_parse_alter() -> None:
    [ch] = parse_ddl(
        "ALTER TABLE `shop`.`t` ADD COLUMN f BOOL NOT NULL DEFAULT 0 AFTER id, "
        "ADD j JSON, ADD INDEX ix (f), MODIFY COLUMN g tinyint( 1 ), CHANGE old_name "
        "new_name INT, DROP COLUMN gone, DROP INDEX ix2, DROP PRIMARY KEY, "
        "RENAME COLUMN a TO b, ADD (x INT, y BOOLEAN)",
        "other",
    )
    assert ch.kind == "alter" and ch.table == "shop.t" and ch.new_name is None
    assert ch.columns == {
        "f": (True, False),
        "j": (False, True),
        "g": (True, False),
        "new_name": (False, False),
        "x": (False, False),
        "y": (True, False),
    }
    assert ch.dropped == ["old_name", "gone", "a"]
    assert ch.renamed_columns == [("old_name", "new_name"), ("a", "b")]
    [ch] = parse_ddl("alter table t rename to t2", "shop")
    assert (ch.table, ch.new_name) == ("shop.t", "shop.t2")
    [ch] = parse_ddl("ALTER TABLE t RENAME INDEX a TO b", "shop")
    assert ch.new_name is None


def test_parse_other_statements() -> None:
    [ch] = parse_ddl(
        "CREATE TABLE IF NOT EXISTS s.t (id INT PRIMARY KEY, ok TINYINT(1), "
        "big TINYINT(4), doc JSON, KEY k (ok), CONSTRAINT c CHECK (id > 0))",
        None,
    )
    assert ch.kind == "create" and ch.table == "s.t"
    assert ch.columns == {
        "id": (False, False),
        "ok": (True, False),
        "big": (False, False),
        "doc": (False, True),
    }
    [ch] = parse_ddl("CREATE TABLE t2 LIKE t", "s")
    assert ch.like == "s.t"
    assert parse_ddl("CREATE TEMPORARY TABLE x (a INT)", "s") == []
    pairs = [
        (c.kind, c.table, c.new_name) for c in parse_ddl("RENAME TABLE a TO a_old, s2.b TO a", "s")
    ]
    assert pairs == [("rename", "s.a", "s.a_old"), ("rename", "s2.b", "s.a")]
    assert [
        (c.kind, c.table) for c in parse_ddl("DROP TABLE IF EXISTS a, `s2`.`b` CASCADE", "s")
    ] == [("drop", "s.a"), ("drop", "s2.b")]
    assert [(c.kind, c.table) for c in parse_ddl("TRUNCATE t", "s")] == [("truncate", "s.t")]
    for sql in ("BEGIN", "GRANT SELECT ON *.* TO x", "CREATE USER x", "INSERT INTO t VALUES (1)"):
        assert parse_ddl(sql, "s") == []


def test_history_follows_ddl_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    h = SchemaHistory(path)
    h.record("s.t", TableHints(frozenset({"flag"}), frozenset()), ("binlog.000001", 100, -1))
    v = h.version("s.t")
    for sql, at in (
        ("ALTER TABLE t ADD doc JSON, ADD ok BOOLEAN", 200),
        ("ALTER TABLE t MODIFY flag TINYINT(4)", 300),
        ("ALTER TABLE t RENAME COLUMN ok TO fine", 400),
    ):
        for ch in parse_ddl(sql, "s"):
            h.apply(ch, ("binlog.000001", at, 0))
    assert h.version("s.t") == v + 3
    assert h.get("s.t") == TableHints(frozenset({"fine"}), frozenset({"doc"}))
    assert h.get("s.t").is_bool("FINE") and h.get("s.t").is_json("Doc")
    # a restart at position 250 sees the hints valid there, not the newest ones
    again = SchemaHistory(path)
    assert again.load(("binlog.000001", 250, -(2**62) - 1)) == {"s.t"}
    assert again.get("s.t") == TableHints(frozenset({"flag", "ok"}), frozenset({"doc"}))


@pytest.mark.integration
@pytest.mark.parametrize("with_state", [True, False])
def test_restart_decodes_with_the_hints_of_its_position(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path, with_state: bool
) -> None:
    db.sql(
        "CREATE TABLE t (id INT PRIMARY KEY, flag TINYINT(1))",
        "CREATE TABLE u (id INT PRIMARY KEY)",
    )
    tables = [f"{db.name}.t", f"{db.name}.u"]
    state = tmp_path / "state" if with_state else None
    src = make_source(db, tables=tables, state_dir=state, server_id=4721)
    src.start(Checkpoints.at({}))
    assert drain(src) == []
    db.sql(
        "INSERT INTO u VALUES (1)",
        "INSERT INTO t VALUES (1, 1)",
        "ALTER TABLE t MODIFY flag TINYINT(4)",
        "INSERT INTO t VALUES (2, 5)",
    )
    evs = drain(src)
    assert [e.after["flag"] for e in evs[1:] if e.after] == [True, 5]
    src.close()
    # Restart from before the ALTER: information_schema already says tinyint(4).
    again = make_source(db, tables=tables, state_dir=state, server_id=4721)
    again.start(Checkpoints.at({t: evs[0].position for t in tables}))
    flags = [e.after["flag"] for e in drain(again) if e.after]
    # With a recorded history the replay decodes as the first read did; without one the hints
    # are re-read from information_schema now (the documented race): flag is an int already.
    assert flags == ([True, 5] if with_state else [1, 5])
