"""Slot and binlog safety: what the source server retains for the engine, measured on a
private Postgres and MariaDB, warned past the limit, exposed as a metric, shown by status."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import psycopg
import pytest

from replicator.cli.main import main
from replicator.cli.source_status import committed_checkpoints, source_retained
from replicator.events.deadletter import DeadLetterSink
from replicator.iceberg.tables import open_catalog
from replicator.metrics import PrometheusObserver
from replicator.pipeline.assembly import build_source
from replicator.pipeline.retained import RetainedLogWatcher
from replicator.pipeline.runner import Replicator
from tests.e2e import mysql_support
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.pg_bulk import seed
from tests.e2e.pg_support import load, write_config
from tests.metrics.scrape import scrape

pytestmark = [pytest.mark.integration]


def _insert(dsn: str, first: int, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO big SELECT g, 1, md5(g::text), 1.0, now() FROM generate_series(%s, %s) g",
                     (first, first + n - 1))


def test_postgres_slot_retained_wal(tmp_path: Path, pg_db: str, caplog: pytest.LogCaptureFixture,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    seed(pg_db, 1000)
    cfg_path = write_config(tmp_path, pg_db)
    cfg = load(cfg_path)
    Replicator(cfg, engine="local").run(until_idle=True)
    caught_up = source_retained(cfg, committed_checkpoints(open_catalog(cfg.iceberg), "cdc"))
    assert caught_up is not None and caught_up.bytes is not None and caught_up.status == "reserved"

    _insert(pg_db, 10_000_000, 20_000)  # WAL the slot must keep: nothing confirmed it
    behind = source_retained(cfg, committed_checkpoints(open_catalog(cfg.iceberg), "cdc"))
    assert behind is not None and behind.bytes is not None
    assert behind.bytes > caught_up.bytes + 1_000_000

    # The watcher exposes it and warns past the limit.
    obs = PrometheusObserver()
    _, port = obs.serve("127.0.0.1:0")
    try:
        source = build_source(cfg, DeadLetterSink(None))  # measuring needs no start()
        watcher = RetainedLogWatcher(source, obs, lambda: None, every=60, warn_bytes=1_000_000)
        with caplog.at_level(logging.WARNING):
            got = watcher.check(now=0.0)
        assert got is not None and got.bytes is not None and got.bytes >= behind.bytes
        assert scrape(port)[("replicator_source_retained_bytes", ())] == got.bytes
        assert any("retains" in r.getMessage() and "Giving up on a source" in r.getMessage() for r in caplog.records)
    finally:
        obs.close()

    assert main(["status", "--config", str(cfg_path)]) == 0
    out = capsys.readouterr().out
    assert "WAL retained by the slot" in out and "reserved" in out and "slot replicator" in out

    Replicator(load(cfg_path), engine="local").run(until_idle=True)  # confirms the slot again
    after = source_retained(cfg, committed_checkpoints(open_catalog(cfg.iceberg), "cdc"))
    assert after is not None and after.bytes is not None and after.bytes < behind.bytes


def test_mysql_binlog_retained_and_purged(tmp_path: Path, mysql_db: MySQLDb,  # noqa: F811
                                          capsys: pytest.CaptureFixture[str]) -> None:
    mysql_db.sql("CREATE TABLE t (id int PRIMARY KEY, v varchar(200))",
                 "INSERT INTO t VALUES (1, 'a')")
    cfg_path = mysql_support.write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id)
    cfg = mysql_support.load(cfg_path)
    Replicator(cfg, engine="local").run(until_idle=True)
    mysql_db.sql("INSERT INTO t VALUES (2, 'b')")  # streamed: the committed position is a binlog one
    Replicator(cfg, engine="local").run(until_idle=True)
    cps = committed_checkpoints(open_catalog(cfg.iceberg), "cdc")
    first = source_retained(cfg, cps)
    assert first is not None and first.status == "binlog present" and first.bytes is not None

    mysql_db.sql(*[f"INSERT INTO t VALUES ({i}, REPEAT('x', 200))" for i in range(10, 400)])
    more = source_retained(cfg, cps)
    assert more is not None and more.bytes is not None and more.bytes > first.bytes + 390 * 200

    assert main(["status", "--config", str(cfg_path)]) == 0
    assert "binlog after the committed position" in capsys.readouterr().out

    # The server purges the committed file: the engine cannot resume from it. The server is
    # shared by the test session: a binlog reader left by an earlier (killed) engine keeps
    # its file in use, and MariaDB silently skips purging a file in use.
    (current,) = [r[0] for r in mysql_db.sql("FLUSH BINARY LOGS", "SHOW MASTER STATUS")][:1]
    dumps = [r[0] for r in mysql_db.sql("SHOW PROCESSLIST") if r[4] == "Binlog Dump"]
    for thread in dumps:
        with contextlib.suppress(Exception):
            mysql_db.sql(f"KILL {thread}")
    # MariaDB also keeps a file until its binlog checkpoint has moved on (InnoDB durable):
    # PURGE skips it silently until then.
    deadline = time.monotonic() + 30
    while True:
        mysql_db.sql(f"PURGE BINARY LOGS TO '{current}'")
        files = [r[0] for r in mysql_db.sql("SHOW BINARY LOGS")]
        if files[0] == current or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert files[0] == current, files
    gone = source_retained(cfg, cps)
    assert gone is not None and gone.status == "binlog purged" and gone.bytes is None
    assert main(["status", "--config", str(cfg_path)]) == 0
    assert "WARNING" in capsys.readouterr().out
