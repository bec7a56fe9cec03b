"""Postgres end to end with streaming of in-progress transactions (``source.streaming``,
pgoutput protocol 2): the replication session runs with ``logical_decoding_work_mem`` at its
minimum (64kB, through the DSN), so every transaction of more than a few hundred rows is sent
while it runs, interleaved with others. A streamed transaction committed while another one
commits in between, one rolled back, one with a nested savepoint rolled back; then the
engine killed (SIGKILL) while a transaction is being streamed to it, and run again. Judged by
Iceberg Java (Spark) against the source, and by ``replicator diff``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.cli.main import main
from replicator.pipeline.runner import Replicator
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import assert_no_duplicate_data_files

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SMALL_WORK_MEM = " options='-c logical_decoding_work_mem=64kB'"
ROWS = 2000  # per big statement: about 100 kB of changes, streamed in several blocks


def _seed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE u (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO t SELECT g, 'seed' || g FROM generate_series(1, 500) g")
        conn.execute("INSERT INTO u SELECT g, g FROM generate_series(1, 20) g")


def _streamed_workload(dsn: str) -> None:
    """A big transaction with a small one committing while it runs, a nested savepoint
    rolled back inside it; and a big transaction rolled back whole."""
    with psycopg.connect(dsn) as big, psycopg.connect(dsn) as gone, psycopg.connect(dsn, autocommit=True) as small:
        big.execute(f"INSERT INTO t SELECT g, 'big' || g FROM generate_series(1001, {1000 + ROWS}) g")
        big.execute("UPDATE u SET n = n + 100 WHERE id <= 5")
        small.execute("INSERT INTO u VALUES (21, 21)")  # commits between the big one's blocks
        small.execute("UPDATE t SET v = 'small' WHERE id = 7")
        gone.execute(f"INSERT INTO t SELECT g, 'gone' || g FROM generate_series(5001, {5000 + ROWS}) g")
        big.execute("SAVEPOINT sp")
        big.execute("UPDATE t SET v = v || '-rolled-back' WHERE id > 1000")
        big.execute("SAVEPOINT nested")
        big.execute("DELETE FROM t WHERE id <= 400")
        big.execute("ROLLBACK TO SAVEPOINT sp")  # both savepoints' changes are undone
        big.execute("UPDATE t SET v = v || '-kept' WHERE id % 10 = 0")
        big.execute("DELETE FROM t WHERE id BETWEEN 100 AND 199")
        gone.rollback()
        big.commit()


# 8: the replays' runs as block events; default off, so that run is in make test-long
@pytest.mark.parametrize("change_blocks", [0, pytest.param(8, marks=pytest.mark.slow)])
def test_streamed_transactions_equal_the_source(
    tmp_path: Path, pg_db: str, spark: Any, capsys: Any, change_blocks: int
) -> None:
    _seed(pg_db)
    cfg_path = write_config(tmp_path, pg_db + SMALL_WORK_MEM, max_events=1000, change_blocks=change_blocks)
    assert not Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True).stopped
    _streamed_workload(pg_db)
    engine = Replicator(load(cfg_path), engine="spark", spark=spark)
    summary = engine.run(until_idle=True)
    assert not summary.stopped and summary.dead_letters == 0, summary
    stats = getattr(engine.source, "streamed_stats", None)
    assert stats is not None, "streaming is on by default on PostgreSQL 14+"
    assert stats.committed == 1 and stats.subtransactions_aborted >= 1, stats
    with psycopg.connect(pg_db) as conn:
        # 18 skips a transaction already rolled back when the walsender reaches it.
        assert stats.aborted == (conn.info.server_version < 180000), stats
    assert not list((tmp_path / "state" / "streamed").rglob("*.xact")), "spool files left behind"
    counts = assert_tables_equal(cfg_path, pg_db, duckdb=False)
    assert counts == {"public.t": 500 + ROWS - 100, "public.u": 21}
    assert main(["diff", "--config", str(cfg_path), "--wait", "30"]) == 0, capsys.readouterr().out


def _spools(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "state" / "streamed").rglob("*.xact"))


ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this checkout


def test_killed_while_a_transaction_streams_then_resumed(
    tmp_path: Path, pg_db: str, spark: Any, capsys: Any
) -> None:
    _seed(pg_db)
    cfg_path = write_config(tmp_path, pg_db + SMALL_WORK_MEM, max_events=1000)
    assert not Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True).stopped
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg_path), "--engine", "local"],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with psycopg.connect(pg_db) as big, psycopg.connect(pg_db, autocommit=True) as small:
            big.execute(f"INSERT INTO t SELECT g, 'big' || g FROM generate_series(1001, {1000 + ROWS}) g")
            small.execute("INSERT INTO u VALUES (21, 21)")
            deadline = time.monotonic() + 120
            while not _spools(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _spools(tmp_path), "the engine never received a block of the open transaction"
            proc.send_signal(signal.SIGKILL)  # dies holding part of the transaction
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == -signal.SIGKILL
            assert "streaming of in-progress transactions: on" in err
            big.execute("UPDATE t SET v = v || '-after-kill' WHERE id % 2 = 0")
            big.commit()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _spools(tmp_path)  # what the dead run had received, discarded by the next one
    done = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert not done.stopped and done.dead_letters == 0, done
    assert not _spools(tmp_path)
    assert assert_tables_equal(cfg_path, pg_db, duckdb=False) == {"public.t": 500 + ROWS, "public.u": 21}
    assert_no_duplicate_data_files(iceberg_metadata(load(cfg_path), "public.t"))
    assert main(["diff", "--config", str(cfg_path), "--wait", "30"]) == 0, capsys.readouterr().out
