"""Logical decoding on a physical standby (PostgreSQL 16+, README "Reading from a standby"):
the engine reads a hot standby (hot_standby_feedback = on) while every write goes to its
primary. First with ``source.primary`` (the engine creates the publication there and asks
for the running-transactions record a standby's slot creation waits for), then without it
(the publication exists: nothing is written to the primary, the fencing token comes from the
standby). Snapshot of existing rows, then inserts, updates and deletes; Spark, DuckDB and
``replicator diff`` against the source. Runs on every tested version of 16 or later."""

from __future__ import annotations

import logging
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
from replicator.sources.postgres import slot_wait
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


def _source(standby: PrivatePostgres, tmp_path: Path, **kwargs: Any) -> PostgresSource:
    return PostgresSource(standby.dsn, dead_letters=DeadLetterSink(tmp_path / "dead.jsonl"),
                          progress=False, **kwargs)  # fmt: skip


def _checks_refuse(primary: PrivatePostgres, standby: PrivatePostgres, tmp_path: Path) -> None:
    """What a standby cannot do is refused with the statement or setting to change."""
    # No publication and no source.primary: the statement to run on the primary.
    with pytest.raises(SourceSetupError) as refused:
        _source(standby, tmp_path).start(Checkpoints())
    assert "CREATE PUBLICATION" in str(refused.value.hint) and "on the primary" in str(refused.value.hint)
    with pytest.raises(SourceSetupError, match="source.failover_slot is for a slot on the primary"):
        _source(standby, tmp_path, failover_slot=True).start(Checkpoints())
    with pytest.raises(SourceSetupError, match="source.primary is itself in recovery"):
        _source(standby, tmp_path, primary_dsn=standby.dsn).start(Checkpoints())


def _slot_creation_says_what_it_waits_for(
    primary: PrivatePostgres, standby: PrivatePostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """Without source.primary a slot on the standby waits for the primary's running-
    transactions records; held up by a transaction open on the primary, the log says so."""
    monkeypatch.setattr(slot_wait, "SLOT_WAIT_LOG_SECONDS", 0.3)
    seen = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "on a standby: waiting for a running-transactions record" in record.getMessage():
                seen.set()

    handler = Seen()
    logger = logging.getLogger("replicator.sources.postgres.slot_wait")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    _write(primary, standby, "CREATE PUBLICATION probe FOR TABLE t")
    src = _source(standby, tmp_path, slot="probe", publication="probe", tables=["public.t"])
    errors: list[BaseException] = []

    def start() -> None:
        try:
            src.start(Checkpoints())
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    try:
        with psycopg.connect(primary.dsn) as held:  # an open transaction with an xid
            held.execute("INSERT INTO t VALUES (-1, 'held', 0)")
            starter = threading.Thread(target=start)
            starter.start()
            assert seen.wait(120), "no log line about the wait"
            held.rollback()
        with _standby_snapshots(primary):  # the next record ends the wait
            starter.join(120)
        assert not starter.is_alive() and not errors, errors
    finally:
        src.close()
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    with psycopg.connect(standby.dsn, autocommit=True) as conn:  # it would hold back the primary's vacuum
        conn.execute("SELECT pg_drop_replication_slot('probe')")
    with psycopg.connect(primary.dsn, autocommit=True) as conn:
        conn.execute("DROP PUBLICATION probe")


def _run(cfg_path: Path, spark: Any) -> None:
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert not summary.stopped and summary.dead_letters == 0, summary


def test_engine_reads_a_standby(
    tmp_path: Path, primary_and_standby: tuple[PrivatePostgres, PrivatePostgres], spark: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    primary, standby = primary_and_standby
    _write(primary, standby,
           "CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(10, 2));"
           " CREATE TABLE pair (a int, b text, v int, PRIMARY KEY (a, b));"
           " INSERT INTO t SELECT g, 'snap', g / 3.0 FROM generate_series(1, 500) g;"
           " INSERT INTO pair SELECT g % 7, 'k' || g, g FROM generate_series(1, 200) g")  # fmt: skip

    _checks_refuse(primary, standby, tmp_path)
    _slot_creation_says_what_it_waits_for(primary, standby, tmp_path, monkeypatch)

    cfg_path = write_config(tmp_path, standby.dsn, primary={"dsn": primary.dsn})
    _run(cfg_path, spark)  # publication made on the primary, slot on the standby, snapshot
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
