"""Postgres end to end (issue 23 item 2): ONE source transaction far larger than
``batch.max_events`` is staged in chunks (``pipeline.spill``) and committed as ONE snapshot
per table, with the batcher never holding more than ``max_events`` events. The transaction
rotates every primary key (``id = -id`` then ``id = (-id % N) + 1``), deletes and re-inserts
the same keys, adds a column halfway, and updates rows it inserted chunks earlier. Judged by
Iceberg Java (Spark) and DuckDB against the source; and again after the engine dies while
the transaction's chunks are being staged."""

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
import yaml

from replicator.pipeline.crashpoints import ENV, EXIT_CODE
from replicator.pipeline.runner import Replicator
from replicator.sources.postgres.change_group import EVENT_MAX_ROWS
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import assert_no_duplicate_data_files

pytestmark = [pytest.mark.spark, pytest.mark.integration]

MAX_EVENTS = 2000
ROWS = 6000  # before the transaction
ADDED = 3000  # inserted by it


def _config(tmp_path: Path, dsn: str, max_events: int = MAX_EVENTS, change_blocks: int = 0) -> Path:
    path = write_config(tmp_path, dsn, max_events=max_events, change_blocks=change_blocks)
    cfg = yaml.safe_load(path.read_text())
    cfg["maintenance"] = {"enabled": False}  # count the transaction's snapshots alone
    path.write_text(yaml.safe_dump(cfg))
    return path


def _seed(dsn: str, rows: int = ROWS) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE u (id int PRIMARY KEY, n int)")
        conn.execute(f"INSERT INTO t SELECT g, 'row' || g FROM generate_series(1, {rows}) g")
        conn.execute("INSERT INTO u SELECT g, g FROM generate_series(1, 10) g")


def _big_transaction(dsn: str, rows: int = ROWS, added: int = ADDED) -> int:
    """About 30,000 changes in ONE transaction (at the default sizes); returns how many."""
    total = rows + added
    with psycopg.connect(dsn) as conn:
        n = 0
        n += conn.execute("UPDATE u SET n = n + 100 WHERE id <= 5").rowcount
        n += conn.execute(
            f"INSERT INTO t SELECT g, 'new' || g FROM generate_series({rows + 1}, {total}) g").rowcount
        n += conn.execute("UPDATE t SET v = v || '-x' WHERE id % 3 = 0").rowcount
        conn.execute("ALTER TABLE t ADD COLUMN extra int")  # chunks before it lack the column
        # Rotate every key: each new key is another row's old key of this transaction.
        n += conn.execute("UPDATE t SET id = -id").rowcount
        n += conn.execute(f"UPDATE t SET id = (-id % {total}) + 1").rowcount
        # Delete and re-insert the same keys, then touch rows inserted chunks earlier.
        n += conn.execute("DELETE FROM t WHERE id BETWEEN 100 AND 400").rowcount
        n += conn.execute(
            "INSERT INTO t SELECT g, 'again' || g, g FROM generate_series(100, 400) g").rowcount
        n += conn.execute("UPDATE t SET extra = 7, v = v || '-late' WHERE v LIKE 'new%'").rowcount
        n += conn.execute("DELETE FROM u WHERE id = 10").rowcount
        conn.commit()
        conn.execute("INSERT INTO u VALUES (11, 11)")  # a small transaction after it
        conn.commit()
    return n


def _snapshots(cfg_path: Path, table: str) -> int:
    from pyiceberg.table import StaticTable

    return len(StaticTable.from_metadata(iceberg_metadata(load(cfg_path), table)).metadata.snapshots)


@pytest.mark.parametrize("change_blocks", [0, 16])  # 16: its runs of inserts as block events
def test_a_transaction_larger_than_the_batch_is_one_snapshot(
    tmp_path: Path, pg_db: str, spark: Any, change_blocks: int
) -> None:
    _seed(pg_db)
    cfg_path = _config(tmp_path, pg_db, change_blocks=change_blocks)
    first = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert not first.stopped
    before = {t: _snapshots(cfg_path, t) for t in ("public.t", "public.u")}
    changes = _big_transaction(pg_db)
    assert changes > 25_000

    engine = Replicator(load(cfg_path), engine="spark", spark=spark)
    summary = engine.run(until_idle=True)
    assert not summary.stopped and summary.dead_letters == 0, summary
    assert engine.spiller.chunks >= changes // MAX_EVENTS - 2  # staged, not held
    # A block event (at most EVENT_MAX_ROWS rows) may go past the limit once.
    assert engine.batcher is not None and engine.batcher.peak <= MAX_EVENTS + (EVENT_MAX_ROWS if change_blocks else 0)
    # ONE snapshot per table for the transaction (and one more for u's later insert).
    assert _snapshots(cfg_path, "public.t") == before["public.t"] + 1
    assert _snapshots(cfg_path, "public.u") == before["public.u"] + 2
    assert not any((tmp_path / "state" / "staging" / "chunks").glob("*")), "chunks left behind"
    counts = assert_tables_equal(cfg_path, pg_db)
    assert counts == {"public.t": ROWS + ADDED, "public.u": 10}


def _engine(cfg: Path, crash_at: str | None = None, engine: str = "local") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if crash_at:
        env[ENV] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg), "--until-idle",
         "--engine", engine], env=env, capture_output=True, text=True, timeout=1200)  # fmt: skip


def test_killed_while_staging_chunks_then_restarted(tmp_path: Path, pg_db: str, spark: Any) -> None:
    _seed(pg_db)
    cfg_path = _config(tmp_path, pg_db)
    first = _engine(cfg_path)
    assert first.returncode == 0, first.stderr[-3000:]
    _big_transaction(pg_db)
    killed = _engine(cfg_path, "chunk-staged:4")
    assert killed.returncode == EXIT_CODE, killed.stderr[-3000:]
    assert "crash point chunk-staged reached" in killed.stderr
    assert any((tmp_path / "state" / "staging" / "chunks").glob("*.parquet"))  # left behind
    done = _engine(cfg_path)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = assert_tables_equal(cfg_path, pg_db)
    assert counts == {"public.t": ROWS + ADDED, "public.u": 10}
    for table in ("public.t", "public.u"):
        assert_no_duplicate_data_files(iceberg_metadata(load(cfg_path), table))


def _run_until(cfg: Path, done: Any, crash_at: str | None = None, seconds: float = 900) -> int:
    """``replicator run`` (no ``--until-idle``: it may exit while the server still decodes a
    huge transaction, issue 23 item 1) until it dies at ``crash_at`` or ``done()``; then a
    clean stop (SIGTERM). Returns the exit code."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if crash_at:
        env[ENV] = crash_at
    proc = subprocess.Popen([sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + seconds
    try:
        while proc.poll() is None and not done() and time.monotonic() < deadline:
            time.sleep(1.0)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_issue_scale_rotation_killed_while_staging(tmp_path: Path, pg_db: str, spark: Any) -> None:
    """Issue 23's case: 150,000 rows, ONE transaction rotating every key (about 394,000
    changes with the rest), ``max_events`` 20,000, killed while its chunks are staged, then
    run again (Spark engine): ONE snapshot, equal to the source."""
    rows, added = 150_000, 10_000
    _seed(pg_db, rows)
    cfg_path = _config(tmp_path, pg_db, max_events=20_000)
    assert _engine(cfg_path, engine="spark").returncode == 0
    before, before_u = _snapshots(cfg_path, "public.t"), _snapshots(cfg_path, "public.u")
    _big_transaction(pg_db, rows, added)
    assert _run_until(cfg_path, lambda: False, crash_at="chunk-staged:5") == EXIT_CODE
    assert _snapshots(cfg_path, "public.t") == before
    # Done once u also holds the small transaction after the big one (its own batch): a stop
    # between the two batches leaves it to the next run, which this test does not start.
    assert _run_until(cfg_path, lambda: _snapshots(cfg_path, "public.t") > before
                      and _snapshots(cfg_path, "public.u") >= before_u + 2) == 0  # fmt: skip
    assert _snapshots(cfg_path, "public.t") == before + 1
    assert assert_tables_equal(cfg_path, pg_db) == {"public.t": rows + added, "public.u": 10}
