"""One named test per crash point of the commit protocol (replicator/pipeline/crashpoints.py):
the engine dies there (os._exit, like SIGKILL), restarts, and ends equal to the source with
no data file listed twice. Each runs in both ``iceberg.delete_mode``s (position mode: no
equality delete in any snapshot, the primary-key index recovers); position mode of the
points other than ``index-behind`` only under LONG."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.pipeline.crashpoints import ENV, EXIT_CODE
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.e2e.test_postgres_position_mode import equality_deletes_in_history
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import assert_no_duplicate_data_files
from tests.pg_majors import pg_matrix_majors

pytestmark = [
    pytest.mark.spark, pytest.mark.integration,
    # make test: the newest Postgres only (about 70 s less); make test-long: every version
    pytest.mark.parametrize("pg_versioned_server", pg_matrix_majors(), indirect=True,
                            ids=lambda major: f"pg{major}"),
]


def engine(cfg: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if crash_at:
        env[ENV] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg), "--until-idle",
         "--engine", "local"], env=env, capture_output=True, text=True, timeout=600)


def crashed(proc: subprocess.CompletedProcess[str], point: str) -> None:
    assert proc.returncode == EXIT_CODE, proc.stderr[-3000:]
    assert f"crash point {point} reached" in proc.stderr


TABLES = ("public.big", "public.side", "public.pairs")
# Position mode of the shared crash points: under LONG only (``index-behind`` is its own).
BOTH_LONG = ["equality", pytest.param("position", marks=pytest.mark.slow)]


def finish_and_check(cfg: Path, dsn: str) -> None:
    done = engine(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_tables_equal(cfg, dsn, duckdb=False)
    for table in TABLES:
        assert_no_duplicate_data_files(iceberg_metadata(load(cfg), table))
    config = load(cfg)
    if config.iceberg.delete_mode == "position":
        catalog = open_catalog(config.iceberg)
        for table in TABLES:
            t = catalog.load_table(iceberg_table_name(config.iceberg, table))
            assert equality_deletes_in_history(t) == [], table


def config_in_mode(tmp_path: Path, dsn: str, mode: str, max_events: int) -> Path:
    cfg = write_config(tmp_path, dsn, max_events=max_events)
    raw = yaml.safe_load(cfg.read_text())
    raw["iceberg"]["delete_mode"] = mode
    cfg.write_text(yaml.safe_dump(raw))
    return cfg


@pytest.fixture
def replicated(tmp_path: Path, pg_versioned_db: str, mode: str) -> tuple[Path, str]:
    """A source with an initial snapshot already replicated."""
    seed(pg_versioned_db, 3000)
    cfg = config_in_mode(tmp_path, pg_versioned_db, mode, 700)
    first = engine(cfg)
    assert first.returncode == 0, first.stderr[-3000:]
    return cfg, pg_versioned_db


@pytest.mark.parametrize("mode", BOTH_LONG)
def test_crash_after_files_written_before_catalog_commit(replicated: tuple[Path, str], spark: Any) -> None:
    cfg, dsn = replicated
    run_changes(dsn, 3000, seed_rows=3000)
    crashed(engine(cfg, "files-written:2"), "files-written")
    finish_and_check(cfg, dsn)


@pytest.mark.parametrize("mode", BOTH_LONG)
def test_crash_after_catalog_commit_before_source_ack(replicated: tuple[Path, str], spark: Any) -> None:
    cfg, dsn = replicated
    run_changes(dsn, 3000, seed_rows=3000)
    crashed(engine(cfg, "committed:2"), "committed")
    finish_and_check(cfg, dsn)


@pytest.mark.parametrize("mode", ["position"])
def test_crash_after_catalog_commit_before_index_update(replicated: tuple[Path, str], spark: Any) -> None:
    cfg, dsn = replicated
    run_changes(dsn, 3000, seed_rows=3000)
    crashed(engine(cfg, "index-behind:2"), "index-behind")
    finish_and_check(cfg, dsn)


@pytest.mark.parametrize("mode", BOTH_LONG)
def test_crash_during_initial_snapshot(tmp_path: Path, pg_versioned_db: str, spark: Any, mode: str) -> None:
    seed(pg_versioned_db, 5000)
    cfg = config_in_mode(tmp_path, pg_versioned_db, mode, 700)
    crashed(engine(cfg, "snapshot-batch:2"), "snapshot-batch")
    run_changes(pg_versioned_db, 2000, seed_rows=5000)  # the source moves on while the engine is down
    finish_and_check(cfg, pg_versioned_db)


@pytest.mark.parametrize("mode", BOTH_LONG)
def test_crash_during_schema_change(replicated: tuple[Path, str], spark: Any) -> None:
    cfg, dsn = replicated
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE big ADD COLUMN extra text")
        conn.execute("UPDATE big SET extra = 'e' || id WHERE id % 10 = 0")
    run_changes(dsn, 1000, seed_rows=3000)
    crashed(engine(cfg, "schema-evolved"), "schema-evolved")
    finish_and_check(cfg, dsn)


# batch.stage_every_events is off by default: make test keeps its own crash point, the
# others run in make test-long.
@pytest.mark.parametrize(("mode", "point"), [
    pytest.param("equality", "files-written", marks=pytest.mark.slow),
    pytest.param("equality", "committed", marks=pytest.mark.slow), ("equality", "chunk-staged"),
    pytest.param("position", "committed", marks=pytest.mark.slow),
    pytest.param("position", "index-behind", marks=pytest.mark.slow),
])  # fmt: skip
def test_crash_in_batches_staged_as_they_fill(replicated: tuple[Path, str], spark: Any, point: str) -> None:
    """Batches of 700 changes staged to chunks every 100 (``batch.stage_every_events``,
    issue 27): each batch's chunks hold many transactions and commit as one snapshot per
    table, all of them or none, across a crash at each point."""
    cfg, dsn = replicated
    raw = yaml.safe_load(cfg.read_text())
    raw["batch"]["stage_every_events"] = 100
    cfg.write_text(yaml.safe_dump(raw))
    run_changes(dsn, 3000, seed_rows=3000)
    crashed(engine(cfg, f"{point}:2"), point)
    finish_and_check(cfg, dsn)
