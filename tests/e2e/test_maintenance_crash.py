"""The crash matrix for maintenance: the engine replicates a private Postgres with eager
maintenance and dies (os._exit, like SIGKILL) at each maintenance crash point; restarted, it
ends equal to the source (``replicator diff`` exit 0, Spark and DuckDB), with no file listed
twice and its checkpoint intact."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.checkpoint import read_checkpoint
from replicator.cli.main import main
from replicator.iceberg.cuts import replicated_tables
from replicator.iceberg.tables import open_catalog
from replicator.maintenance.status import table_health
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.e2e.test_crash_matrix import crashed, engine
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import assert_no_duplicate_data_files

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TABLES = ("public.big", "public.side", "public.pairs")
EAGER = {"every_seconds": 0, "max_time_share": 1.0, "compact_min_input_files": 2, "convert_min_equality_delete_files": 1,
         "snapshots_keep": 2, "snapshots_max_age_seconds": 0, "orphan_min_age_seconds": 3600}
# One point in `make test` (each run costs a minute or more; tests/maintenance/test_scheduler.py
# crashes compaction and expiry in-process); all eight with LONG=1.
_EVERY_STEP = ("conversion-files-written",)
POINTS = [
    p if p in _EVERY_STEP else pytest.param(p, marks=pytest.mark.slow)
    for p in (
        "conversion-planned", "conversion-files-written", "conversion-committed",
        "compaction-files-written", "compaction-committed",
        "expiry-before-commit", "expiry-committed", "orphans-deleting",
    )
]


def with_maintenance(cfg: Path, settings: dict[str, Any]) -> None:
    raw = yaml.safe_load(cfg.read_text())
    raw["maintenance"] = settings
    cfg.write_text(yaml.safe_dump(raw))


@pytest.mark.parametrize("point", POINTS)
def test_crash_in_maintenance_then_restart_equals_source(
    tmp_path: Path, pg_db: str, spark: Any, point: str
) -> None:
    seed(pg_db, 2000)
    cfg = write_config(tmp_path, pg_db, max_events=500)
    with_maintenance(cfg, {"enabled": False})
    first = engine(cfg)
    assert first.returncode == 0, first.stderr[-3000:]
    catalog = open_catalog(load(cfg).iceberg)
    before = {".".join(t.name()): read_checkpoint(t) for t in replicated_tables(catalog, "cdc")}
    # A file of an attempt that died long ago, for orphan cleanup.
    orphan = tmp_path / "wh" / "cdc" / "big" / "data" / "0000000000000-deadbeef0000-data-00000.parquet"
    orphan.write_bytes(b"left by a crashed attempt")
    old = time.time() - 2 * 86400
    os.utime(orphan, (old, old))

    run_changes(pg_db, 2500, seed_rows=2000)  # updates/deletes of earlier rows: equality deletes
    with_maintenance(cfg, EAGER)
    crashed(engine(cfg, point), point)
    done = engine(cfg)
    assert done.returncode == 0, done.stderr[-3000:]

    assert main(["diff", "--config", str(cfg), "--wait", "30"]) == 0
    assert_tables_equal(cfg, pg_db, duckdb=True)
    for table in TABLES:
        assert_no_duplicate_data_files(iceberg_metadata(load(cfg), table))
    for t in replicated_tables(catalog, "cdc"):
        cp, was = read_checkpoint(t), before[".".join(t.name())]
        assert cp is not None and was is not None and cp.position >= was.position
        assert cp.writer_id and cp.snapshot_id is not None
    # Maintenance went on after the restart and still reads equal when it is all done.
    assert main(["maintain", "--config", str(cfg)]) == 0
    assert_tables_equal(cfg, pg_db, duckdb=True)
    for t in replicated_tables(catalog, "cdc"):
        assert table_health(t).equality_delete_files == 0
    assert not orphan.exists()
