"""Issue 10 item 11 end to end: a table added to a running slot is snapshotted fresh while
transactions commit with synchronous_commit=off (visible before their WAL is written); the
overlap bound must cover them, or their inserts double rows the snapshot already copied.
Judged by Spark, DuckDB and `replicator diff` against the source."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.pipeline.runner import Replicator
from sample_dbs.postgres.server import PrivatePostgres
from tests.e2e.pg_support import iceberg_metadata, load, source_rows, source_tables, write_config
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def test_added_table_snapshot_under_async_commits(
    tmp_path: Path,
    pg_db: str,
    pg_server: PrivatePostgres,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from replicator.cli.main import main

    admin = pg_server.dsn_for("postgres")
    sql(pg_db, "CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
        "INSERT INTO a SELECT g, g FROM generate_series(1, 50) g")  # fmt: skip
    first = write_config(tmp_path, pg_db, max_events=500, tables=["public.a"])
    Replicator(load(first), engine="spark", spark=spark).run(until_idle=True)  # slot + a
    # b joins the publication now (the engine's ALTER PUBLICATION would flush the WAL).
    sql(pg_db, "ALTER PUBLICATION replicator ADD TABLE b")
    # Small batches: one that starts above a too-low bound applies its inserts blindly.
    cfg_path = write_config(tmp_path, pg_db, max_events=40, tables=["public.a", "public.b"])
    stop = threading.Event()
    writer: threading.Thread | None = None
    try:
        sql(admin, "ALTER SYSTEM SET wal_writer_delay = '10s'", "SELECT pg_reload_conf()")
        conn = psycopg.connect(pg_db, autocommit=True)
        conn.execute("SET synchronous_commit = off")
        conn.execute("UPDATE a SET v = 0 WHERE id = 1")  # wakes the WAL writer from hibernation
        time.sleep(0.5)
        conn.execute("INSERT INTO b SELECT g, g FROM generate_series(1, 300) g")
        written, inserted = conn.execute(
            "SELECT pg_current_wal_lsn(), pg_current_wal_insert_lsn()"
        ).fetchone() or (None, None)
        assert written is not None and inserted is not None and written < inserted

        def write() -> None:  # async commits while b's snapshot is read
            for i in range(1000, 1300):
                if stop.is_set():
                    return
                conn.execute("INSERT INTO b VALUES (%s, 0)", (i,))
                conn.execute("UPDATE b SET v = v + 1 WHERE id = %s", (i % 300 + 1,))
                conn.execute("UPDATE a SET v = v + 1 WHERE id = %s", (i % 50 + 1,))
                time.sleep(0.003)

        writer = threading.Thread(target=write)
        rep = Replicator(load(cfg_path), engine="spark", spark=spark)
        writer.start()
        rep.run(until_idle=True)
        writer.join()
        conn.execute("SET synchronous_commit = on")
        conn.execute("UPDATE a SET v = -1 WHERE id = 2")  # flushes everything before it
        conn.close()
    finally:
        stop.set()
        if writer is not None:
            writer.join()
        sql(admin, "ALTER SYSTEM RESET wal_writer_delay", "SELECT pg_reload_conf()")
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped
    cfg = load(cfg_path)
    for table in source_tables(pg_db):
        expected = source_rows(pg_db, table)
        loc = iceberg_metadata(cfg, table.qualified)
        for judge in (spark_rows, duckdb_rows):
            assert judge(loc, order_by=["id"]) == expected, (judge.__name__, table.qualified)
    rc = main(["diff", "--config", str(cfg_path)])
    assert rc == 0, capsys.readouterr().out
