"""PostgreSQL 17+ failover slots (README "High availability"): the engine replicates from a
primary with ``source.failover_slot: true``; a physical standby (pg_basebackup, slot sync)
is promoted after the primary dies; the engine, pointed at it, resumes from the synced slot
and ends equal to the source (Spark, DuckDB, ``replicator diff``). Runs on every tested
version of 17 or later (``pg_versioned_server`` gives the version's binaries)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.cli.main import main
from replicator.pipeline.runner import Replicator
from replicator.sources.postgres.standby import wait_replayed
from sample_dbs.postgres.server import PrivatePostgres
from tests.e2e import pg_support
from tests.e2e.pg_support import load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture
def primary_and_standby(pg_versioned_server: PrivatePostgres) -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    with psycopg.connect(pg_versioned_server.dsn) as conn:
        if conn.info.server_version < 170000:
            pytest.skip("failover slots: PostgreSQL 17+")
    settings = {"hot_standby_feedback": "on", "sync_replication_slots": "on"}
    with pg_support.primary_and_standby(pg_versioned_server.bin_dir, settings) as (primary, standby):
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            # The engine is never sent a change the standby has not received.
            conn.execute("ALTER SYSTEM SET synchronized_standby_slots = 'standby1'")
            conn.execute("SELECT pg_reload_conf()")
        yield primary, standby


def _run(cfg_path: Path, spark: Any) -> None:
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert not summary.stopped and summary.dead_letters == 0, summary


def _sync_slots(primary: PrivatePostgres, standby: PrivatePostgres, cfg_path: Path, spark: Any) -> None:
    """Until the standby's slot sync worker (``sync_replication_slots = on``) holds the
    engine's slot, sync-ready, at the primary's confirmed position. The standby's first copy
    of a slot becomes sync-ready only once the slot on the primary has moved past the point
    where the standby first saw it (its catalog xmin): meanwhile the engine goes on consuming
    small changes, as it would under any workload."""
    deadline = time.monotonic() + 90
    with psycopg.connect(standby.dsn, autocommit=True) as s:
        while True:
            with psycopg.connect(primary.dsn, autocommit=True) as p:
                want = p.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                 "WHERE slot_name = 'replicator'").fetchone()
            assert want is not None and want[0] is not None
            got = s.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn, synced, failover, "
                            "temporary FROM pg_replication_slots WHERE slot_name = 'replicator'",
                            (want[0],)).fetchone()
            if got == (True, True, True, False):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not sync the slot: {got}\n{standby.log_tail()}")
            with psycopg.connect(primary.dsn, autocommit=True) as p:
                p.execute("INSERT INTO tick DEFAULT VALUES")
                p.execute("SELECT pg_log_standby_snapshot()")  # lets the catalog xmin move
            _run(cfg_path, spark)
            time.sleep(0.5)


def test_engine_resumes_on_a_promoted_standby(
    tmp_path: Path, primary_and_standby: tuple[PrivatePostgres, PrivatePostgres], spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    primary, standby = primary_and_standby
    with psycopg.connect(primary.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE tick (id serial PRIMARY KEY);"
                     " CREATE TABLE t (id int PRIMARY KEY, v text);"
                     " INSERT INTO t SELECT g, 'snap' FROM generate_series(1, 500) g")
    cfg_path = write_config(tmp_path, primary.dsn, failover_slot=True)
    _run(cfg_path, spark)
    with psycopg.connect(primary.dsn, autocommit=True) as conn:
        conn.execute("UPDATE t SET v = 'streamed' WHERE id <= 100; DELETE FROM t WHERE id > 450")
    _run(cfg_path, spark)
    _sync_slots(primary, standby, cfg_path, spark)
    # Changes the engine has not read yet, then the primary dies and the standby takes over.
    with psycopg.connect(primary.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t SELECT g, 'after sync' FROM generate_series(1000, 1050) g;"
                     " UPDATE t SET v = 'late' WHERE id BETWEEN 200 AND 210")
        lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    assert lsn is not None
    with psycopg.connect(standby.dsn, autocommit=True) as s:
        wait_replayed(s, str(lsn[0]))
    primary.stop()
    standby.promote()
    cfg_path = write_config(tmp_path, standby.dsn, failover_slot=True)
    _run(cfg_path, spark)
    with psycopg.connect(standby.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM t WHERE id < 10")
    _run(cfg_path, spark)
    assert assert_tables_equal(cfg_path, standby.dsn)["public.t"] == 450 + 51 - 9
    rc = main(["diff", "--config", str(cfg_path), "--wait", "30"])
    out = capsys.readouterr().out
    assert rc == 0, out
