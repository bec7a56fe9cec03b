"""Issue 23 item 1 on MariaDB: ``run --until-idle`` ends once the binlog position the server
reported at the run's start (``SHOW MASTER STATUS``) is read and committed, also while a
writer keeps committing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replicator.cli.main import main
from replicator.pipeline.runner import Replicator
from replicator.sources.mysql import setup
from replicator.sources.mysql.retained import binlog_head
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import assert_tables_equal, iceberg_metadata, load, write_config
from tests.e2e.steady_writer import SteadyWriter, run_guarded
from tests.judges import spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _insert(conn: Any, first: int, last: int) -> None:
    conn.begin()
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"w{i}") for i in range(first, last + 1)])
    conn.commit()


def test_until_idle_reaches_the_binlog_position_at_start_under_a_steady_writer(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    mysql_db.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(20))")
    cfg = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id, max_events=500)
    Replicator(load(cfg), engine="local").run(until_idle=True)  # empty snapshot
    params = setup.parse_dsn(mysql_db.dsn)
    with SteadyWriter(mysql_db.connect, _insert) as writer:
        writer.wait_for(50)
        before = writer.committed
        start = binlog_head(params)
        rep = Replicator(load(cfg), engine="local")
        summary = run_guarded(lambda: rep.run(until_idle=True))
        writer.wait_for(writer.transactions + 20)  # the writer was still going at the end
    assert summary.batches >= 1
    reached = rep.source.reached_position()
    assert reached is not None and reached >= start, (reached, start)
    got = {r["id"] for r in spark_rows(iceberg_metadata(load(cfg), f"{mysql_db.name}.t"))}
    missing = set(range(1, before + 1)) - got
    assert not missing, f"{len(missing)} row(s) committed before the run are missing, e.g. {min(missing)}"
    Replicator(load(cfg), engine="local").run(until_idle=True)  # the rest, once quiet
    assert_tables_equal(cfg, mysql_db.dsn, duckdb=False)
    assert main(["status", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "source: head binlog." in out and "the last committed transaction starts at binlog." in out, out
