"""``source.reader_process`` end to end: Postgres (snapshot, then changes streamed while a
writer runs; and SIGKILLs of the engine mid-stream, resumed) and MariaDB, read in a child
process, end equal to the source as an independent reader (DuckDB / Spark) sees the tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from replicator.pipeline.reader_process import ProcessSource
from replicator.pipeline.runner import Replicator
from tests.e2e import mysql_bulk, mysql_support
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_postgres_snapshot_and_streamed_changes_in_a_reader_process(
    tmp_path: Path, pg_db: str, spark: Any
) -> None:
    seed(pg_db, 5_000)
    cfg_path = write_config(tmp_path, pg_db, max_events=2_000, reader_process=True)
    rep = Replicator(load(cfg_path), engine="spark", spark=spark)
    assert isinstance(rep.source, ProcessSource)
    snap = rep.run(until_idle=True)
    assert snap.events_seen >= 5_000
    worker = threading.Thread(target=run_changes, args=(pg_db, 8_000), kwargs={"seed_rows": 5_000})
    worker.start()
    try:
        Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    finally:
        worker.join()
    rest = Replicator(load(cfg_path), engine="spark", spark=spark)
    rest.run(until_idle=True)
    assert rest.source._proc is not None and not rest.source._proc.is_alive()  # type: ignore[attr-defined]
    assert_tables_equal(cfg_path, pg_db, duckdb=True)


def _cli(cfg: Path, *, until_idle: bool) -> list[str]:
    return [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg), "--engine", "local",
            *(["--until-idle"] if until_idle else [])]  # fmt: skip


@pytest.mark.slow  # ~1 min: three engines SIGKILLed mid-stream, then a clean run
def test_postgres_sigkill_mid_stream_then_resume_is_equal(
    tmp_path: Path, pg_db: str, spark: Any
) -> None:
    seed(pg_db, 2_000)
    cfg_path = write_config(tmp_path, pg_db, max_events=2_000, reader_process=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = subprocess.run(_cli(cfg_path, until_idle=True), env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-3000:]
    stop = threading.Event()
    worker = threading.Thread(target=run_changes, args=(pg_db, 30_000),
                              kwargs={"seed_rows": 2_000, "stop": stop, "pause": 0.2})  # fmt: skip
    worker.start()
    try:
        for delay in (4.0, 6.0, 5.0):
            proc = subprocess.Popen(_cli(cfg_path, until_idle=False), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env=env)  # fmt: skip
            time.sleep(delay)
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            proc.send_signal(signal.SIGKILL)  # the engine; its reader child sees the pipe close
            proc.communicate()
    finally:
        stop.set()
        worker.join()
    done = subprocess.run(_cli(cfg_path, until_idle=True), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_tables_equal(cfg_path, pg_db, duckdb=True)


def test_mariadb_in_a_reader_process(tmp_path: Path, mysql_db: MySQLDb, spark: Any) -> None:  # noqa: F811
    conn = mysql_db.connect()
    mysql_bulk.seed(conn, 2_000)
    cfg = mysql_support.write_config(
        tmp_path, mysql_db.dsn, server_id=mysql_db.server_id, max_events=2_000, reader_process=True
    )
    Replicator(mysql_support.load(cfg), engine="spark", spark=spark).run(until_idle=True)
    mysql_bulk.run_changes(conn, 5_000, seed_rows=2_000)
    rep = Replicator(mysql_support.load(cfg), engine="spark", spark=spark)
    assert isinstance(rep.source, ProcessSource)
    rep.run(until_idle=True)
    mysql_support.assert_tables_equal(cfg, mysql_db.dsn, duckdb=True)
