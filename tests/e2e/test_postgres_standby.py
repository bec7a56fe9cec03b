"""Logical decoding on a physical standby (PostgreSQL 16+, README "Reading from a standby"):
the engine reads a hot standby (hot_standby_feedback = on) while every write goes to its
primary. First with ``source.primary`` (the engine creates the publication there and asks
for the running-transactions record a standby's slot creation waits for), then without it
(the publication exists: nothing is written to the primary, the fencing token comes from the
standby). Snapshot of existing rows, then inserts, updates and deletes; Spark, DuckDB and
``replicator diff`` against the source. Runs on every tested version of 16 or later."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.checkpoint import Checkpoints
from replicator.cli.main import main
from replicator.errors import SourceSetupError
from replicator.events.deadletter import DeadLetterSink
from replicator.pipeline.runner import Replicator
from replicator.sources.postgres.source import PostgresSource
from replicator.sources.postgres.standby import wait_replayed
from sample_dbs.postgres.server import PrivatePostgres
from tests.e2e import pg_support
from tests.e2e.pg_support import load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture
def primary_and_standby(pg_versioned_server: PrivatePostgres) -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    with psycopg.connect(pg_versioned_server.dsn) as conn:
        if conn.info.server_version < 160000:
            pytest.skip("logical decoding on a standby: PostgreSQL 16+")
    with pg_support.primary_and_standby(pg_versioned_server.bin_dir, {"hot_standby_feedback": "on"}) as pair:
        yield pair


def _write(primary: PrivatePostgres, standby: PrivatePostgres, sql: str) -> None:
    """``sql`` on the primary, then until the standby has replayed it (a run --until-idle
    ends at the standby's replay position as it was at the run's start)."""
    with psycopg.connect(primary.dsn, autocommit=True) as conn:
        conn.execute(sql)
        lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert lsn is not None
    with psycopg.connect(standby.dsn, autocommit=True) as conn:
        wait_replayed(conn, str(lsn[0]))


@contextmanager
def _standby_snapshots(primary: PrivatePostgres) -> Iterator[None]:
    """``diff`` creates a temporary slot on the standby, which waits for a running-
    transactions record from the (idle) primary: log one every 0.2 s meanwhile."""
    stop = threading.Event()

    def nudge() -> None:
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            while not stop.wait(0.2):
                conn.execute("SELECT pg_log_standby_snapshot()")

    thread = threading.Thread(target=nudge, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _run(cfg_path: Path, spark: Any) -> None:
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert not summary.stopped and summary.dead_letters == 0, summary


def test_engine_reads_a_standby(
    tmp_path: Path, primary_and_standby: tuple[PrivatePostgres, PrivatePostgres], spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    primary, standby = primary_and_standby
    _write(primary, standby,
           "CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(10, 2));"
           " CREATE TABLE pair (a int, b text, v int, PRIMARY KEY (a, b));"
           " INSERT INTO t SELECT g, 'snap', g / 3.0 FROM generate_series(1, 500) g;"
           " INSERT INTO pair SELECT g % 7, 'k' || g, g FROM generate_series(1, 200) g")  # fmt: skip

    # Without source.primary and without a publication: the statement to run on the primary.
    src = PostgresSource(standby.dsn, dead_letters=DeadLetterSink(tmp_path / "dead.jsonl"), progress=False)
    with pytest.raises(SourceSetupError) as refused:
        src.start(Checkpoints())
    assert "CREATE PUBLICATION" in str(refused.value.hint) and "on the primary" in str(refused.value.hint)

    cfg_path = write_config(tmp_path, standby.dsn, primary={"dsn": primary.dsn})
    _run(cfg_path, spark)  # publication made on the primary, slot on the standby, snapshot
    assert assert_tables_equal(cfg_path, primary.dsn, duckdb=False) == {"public.pair": 200, "public.t": 500}
    _write(primary, standby,
           "INSERT INTO t SELECT g, 'streamed', g FROM generate_series(501, 600) g;"
           " UPDATE t SET v = 'updated', n = n + 1 WHERE id % 10 = 0;"
           " DELETE FROM t WHERE id BETWEEN 20 AND 40;"
           " UPDATE pair SET v = -v WHERE a = 3; DELETE FROM pair WHERE a = 5;"
           # A table new to the publication: copied before streaming resumes, in a snapshot
           # of the standby bounded by its received WAL position.
           " CREATE TABLE extra (id int PRIMARY KEY, v text);"
           " INSERT INTO extra SELECT g, 'x' FROM generate_series(1, 50) g")  # fmt: skip
    _run(cfg_path, spark)
    counts = assert_tables_equal(cfg_path, primary.dsn)
    assert counts == {"public.extra": 50, "public.pair": 200 - 28, "public.t": 600 - 21}

    # Without source.primary: the publication exists, the token comes from the standby.
    cfg_path = write_config(tmp_path, standby.dsn)
    _write(primary, standby, "UPDATE t SET v = 'late' WHERE id > 550; DELETE FROM pair WHERE a = 1;"
                             " INSERT INTO pair VALUES (9, 'new', 9); UPDATE extra SET v = 'y' WHERE id < 5")  # fmt: skip
    _run(cfg_path, spark)
    assert assert_tables_equal(cfg_path, primary.dsn)["public.t"] == 600 - 21
    with _standby_snapshots(primary):
        rc = main(["diff", "--config", str(cfg_path), "--wait", "30"])
    out = capsys.readouterr().out
    assert rc == 0, out
