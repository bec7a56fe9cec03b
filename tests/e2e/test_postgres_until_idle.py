"""Issue 23 item 1: ``run --until-idle`` ends once everything the source had committed when
the run started is committed to Iceberg: not at the first quiet moment (a walsender that
decodes a large transaction sends nothing for seconds), and also under steady write load
(a busy database never has a quiet moment)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.cli.main import main
from replicator.metrics.observer import Observer
from replicator.pipeline.runner import Replicator
from replicator.sources.postgres.pgoutput import str_to_lsn
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.e2e.steady_writer import SteadyWriter, run_guarded
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

# Changes of an unpublished table in the large transaction: the walsender reads, spills
# (logical_decoding_work_mem 64kB) and replays them all before it sends the published
# changes at its end, and sends nothing meanwhile (measured here: several seconds).
NOISE_ROWS = 400_000


def make_role(dsn: str, name: str, *settings: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {name}")
        conn.execute(f"CREATE ROLE {name} LOGIN SUPERUSER REPLICATION")
        for s in settings:
            conn.execute(f"ALTER ROLE {name} SET {s}")
    return dsn.replace("user=postgres", f"user={name}")


def wal_lsn(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str_to_lsn(row[0])


def slot_confirmed(dsn: str, slot: str = "replicator") -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    assert row is not None
    return str_to_lsn(row[0])


class Recorder(Observer):
    """What the run loop tells metrics and /healthz about catching up."""

    enabled = True

    def __init__(self) -> None:
        self.behind: list[int | None] = []
        self.loops: list[tuple[bool, bool]] = []

    def source_behind(self, head: str | None, behind_bytes: int | None) -> None:
        self.behind.append(behind_bytes)

    def loop(self, *, pending: bool, caught_up: bool) -> None:
        self.loops.append((pending, caught_up))


def test_until_idle_waits_while_the_server_decodes_a_large_transaction(
    tmp_path: Path, pg_db: str, spark: Any, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dsn = make_role(pg_db, "spiller", "logical_decoding_work_mem = '64kB'")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE noise (id int, pad text)")  # not replicated
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g")
    cfg = write_config(tmp_path, dsn, max_events=2000, tables=["public.t"])
    Replicator(load(cfg), engine="local").run(until_idle=True)  # snapshot
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("UPDATE t SET v = 'before' WHERE id <= 10")
        conn.execute("INSERT INTO noise SELECT g, md5(g::text) FROM generate_series(1, %s) g", (NOISE_ROWS,))
        conn.execute("UPDATE t SET v = 'big tx' WHERE id % 7 = 0")
        conn.execute("DELETE FROM t WHERE id % 11 = 0")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (5001, 'after the big one')")
    start = wal_lsn(dsn)
    assert main(["status", "--config", str(cfg)]) == 0
    assert "of WAL (changes or not)" in capsys.readouterr().out  # the slot holds the big transaction
    caplog.set_level(logging.INFO, logger="replicator.pipeline")
    watch = Recorder()
    summary = Replicator(load(cfg), engine="local", observer=watch).run(until_idle=True)
    assert summary.events_seen > 0
    # Metrics and /healthz: caught up (0 bytes behind) at the end. Whether a quiet poll fell
    # inside the server's silent decode, and was reported behind, depends on the machine's
    # speed (tests/metrics/test_caught_up_metrics.py pins that rule without timing).
    assert watch.behind and watch.behind[-1] == 0, watch.behind
    assert watch.loops[-1] == (False, True), watch.loops[-3:]
    # Before the fix: "source is idle" at the first silent half second, nothing applied.
    assert slot_confirmed(dsn) >= start, "the slot still holds changes from before the run start"
    assert_tables_equal(cfg, dsn, duckdb=False)
    assert any("caught up with the source's position at run start" in r.message for r in caplog.records)


def _pg_insert(conn: Any, first: int, last: int) -> None:
    with conn.transaction():
        conn.execute("INSERT INTO t SELECT g, 'w' || g FROM generate_series(%s::int, %s::int) g", (first, last))


def test_until_idle_ends_under_steady_write_load(tmp_path: Path, pg_db: str, spark: Any) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    cfg = write_config(tmp_path, pg_db, max_events=500)
    Replicator(load(cfg), engine="local").run(until_idle=True)  # creates the slot
    with SteadyWriter(lambda: psycopg.connect(pg_db), _pg_insert) as writer:
        writer.wait_for(50)
        before = writer.committed  # committed before the run starts: must all be applied
        summary = run_guarded(lambda: Replicator(load(cfg), engine="local").run(until_idle=True))
        writer.wait_for(writer.transactions + 20)  # the writer was still going at the end
    assert summary.batches >= 1
    got = {r["id"] for r in spark_rows(iceberg_metadata(load(cfg), "public.t"))}
    missing = set(range(1, before + 1)) - got
    assert not missing, f"{len(missing)} row(s) committed before the run are missing, e.g. {min(missing)}"
    Replicator(load(cfg), engine="local").run(until_idle=True)  # the rest, once quiet
    assert_tables_equal(cfg, pg_db, duckdb=False)
