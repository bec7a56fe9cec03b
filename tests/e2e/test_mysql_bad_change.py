"""Issue 10 item 4 end to end (MariaDB), as for Postgres: an UPDATE whose new row cannot be
converted (a zero date under ``source.zero_dates: dead-letter``) must not leave a stale row.

Default ``errors.on_bad_change: stop``: the table stops at the batch before it (exit 1, the
message names table, key, position and reason). After the source row is fixed and the policy
switched to ``dead-letter``, the bad change is dead-lettered with its old row deleted, the
fix applies on top, the run exits 3 and ``replicator diff`` exits 0. The date column comes
BEFORE the key, so the key is recovered from a row image the converter gave up on midway.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.cli.main import EXIT_DEAD_LETTERS, EXIT_FAILED, main
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import assert_tables_equal, iceberg_metadata, load, write_config
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _rows(cfg_path: Path, table: str) -> list[tuple[Any, ...]]:
    loc = iceberg_metadata(load(cfg_path), table)
    rows = spark_rows(loc, ["id"])
    assert rows == duckdb_rows(loc, ["id"])
    return [(r["id"], r["d"]) for r in rows]


def _sql(db: MySQLDb, *statements: str) -> None:
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # lets a zero date be stored
            for s in statements:
                cur.execute(s)
        conn.commit()
    finally:
        conn.close()


def test_bad_update_stops_then_dead_letter_deletes_old_row(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    table = f"{mysql_db.name}.p"
    _sql(
        mysql_db,
        "CREATE TABLE p (d DATE, id DECIMAL(10,0) PRIMARY KEY)",
        "INSERT INTO p VALUES ('2020-01-01', 1), ('2020-01-02', 2)",
    )
    cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id, zero_dates="dead-letter")
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == 0
    _sql(
        mysql_db,
        "UPDATE p SET d = '0000-00-00' WHERE id = 1",
        "UPDATE p SET d = '2021-01-01' WHERE id = 2",
    )
    capsys.readouterr()
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert f"STOPPED {table}" in out and "key=[Decimal('1')]" in out and "position=mysql:" in out, out
    assert "zero or invalid date" in out, out
    # Nothing of the stopped batch is in the table: the state before the bad change.
    assert _rows(cfg_path, table) == [(1, dt.date(2020, 1, 1)), (2, dt.date(2020, 1, 2))]

    _sql(mysql_db, "UPDATE p SET d = '2022-02-02' WHERE id = 1")  # fixed at the source
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["errors"] = {"on_bad_change": "dead-letter"}
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == EXIT_DEAD_LETTERS
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("1 change(s) dead-lettered"), last
    assert _rows(cfg_path, table) == [(1, dt.date(2022, 2, 2)), (2, dt.date(2021, 1, 1))]
    assert_tables_equal(cfg_path, mysql_db.dsn)
    assert main(["diff", "--config", str(cfg_path), "--wait", "30"]) == 0, capsys.readouterr().out


def test_old_row_that_does_not_convert_is_replaced_by_its_key(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """Rows whose zero date reached the table as NULL under the default policy, updated and
    deleted after the policy changed: their OLD images do not convert, but a u/d needs only
    the old row's key, so both apply (nothing is dead-lettered, no row is left stale)."""
    table = f"{mysql_db.name}.p"
    _sql(
        mysql_db,
        "CREATE TABLE p (d DATE, id DECIMAL(10,0) PRIMARY KEY)",
        "INSERT INTO p VALUES ('0000-00-00', 1), ('0000-00-00', 2), ('2020-01-03', 3)",
    )
    cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id)
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == 0
    assert _rows(cfg_path, table) == [(1, None), (2, None), (3, dt.date(2020, 1, 3))]
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["source"]["zero_dates"] = "dead-letter"
    cfg_path.write_text(yaml.safe_dump(cfg))
    _sql(mysql_db, "DELETE FROM p WHERE id = 1", "UPDATE p SET d = '2022-02-02', id = 4 WHERE id = 2")
    capsys.readouterr()
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == 0, capsys.readouterr().out
    assert _rows(cfg_path, table) == [(3, dt.date(2020, 1, 3)), (4, dt.date(2022, 2, 2))]
    assert_tables_equal(cfg_path, mysql_db.dsn)
    assert main(["diff", "--config", str(cfg_path), "--wait", "30"]) == 0, capsys.readouterr().out
