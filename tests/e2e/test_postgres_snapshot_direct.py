"""Issue 27 item 3: a table's part of a batch that holds only plain snapshot reads is written
in the driver, whatever its size (``stage_tasks.appends_only``): no staged Parquet file and
no Spark job. The same snapshot through the Spark stage (``spark.driver_max_rows: 0``) must
give the same table, both equal to the source (Spark and DuckDB judge), neither with an
equality delete; the changes streamed after it (not plain appends) still go to Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.pipeline.runner import Replicator
from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.e2e.test_postgres_position_mode import equality_deletes_in_history
from tests.e2e.test_postgres_replication import assert_tables_equal
from tests.judges import assert_no_duplicate_data_files, spark_rows
from tests.pipeline.test_driver_stage import _count_stages

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROWS = 6000
TABLES = ("public.big", "public.side", "public.pairs")


def _config(root: Path, dsn: str, slot: str, driver_max_rows: int) -> Path:
    path = write_config(root, dsn, max_events=2500, slot=slot)
    raw = yaml.safe_load(path.read_text())
    raw["spark"] = {"driver_max_rows": driver_max_rows}
    path.write_text(yaml.safe_dump(raw))
    return path


def _equality_deletes(cfg: Path) -> dict[str, list[str]]:
    config = load(cfg)
    catalog = open_catalog(config.iceberg)
    return {
        t: equality_deletes_in_history(catalog.load_table(iceberg_table_name(config.iceberg, t))) for t in TABLES
    }


def test_plain_snapshot_reads_are_written_in_the_driver_like_the_spark_stage(
    tmp_path: Path, pg_db: str, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(pg_db, ROWS)
    # Batches of 2,500 rows, far above driver_max_rows 10: before, every one was a Spark job.
    direct = _config(tmp_path / "direct", pg_db, "direct", driver_max_rows=10)
    staged = _config(tmp_path / "staged", pg_db, "staged", driver_max_rows=0)

    calls = _count_stages(monkeypatch)
    first = Replicator(load(direct), engine="spark", spark=spark).run(until_idle=True)
    assert first.batches >= 2
    assert calls == {"spark": 0, "driver": sum(t.snapshots for t in first.tables.values())}

    calls.update(spark=0, driver=0)
    via_spark = Replicator(load(staged), engine="spark", spark=spark).run(until_idle=True)
    assert calls["driver"] == 0 and calls["spark"] == via_spark.batches

    assert_tables_equal(direct, pg_db)
    assert_tables_equal(staged, pg_db)
    for table in TABLES:
        ours, theirs = iceberg_metadata(load(direct), table), iceberg_metadata(load(staged), table)
        assert_no_duplicate_data_files(ours)
        assert spark_rows(ours) == spark_rows(theirs), table
    assert _equality_deletes(direct) == {t: [] for t in TABLES}
    assert _equality_deletes(staged) == {t: [] for t in TABLES}

    # Streamed changes (updates, deletes, key moves) are no plain appends: on Spark again.
    run_changes(pg_db, 3000, seed_rows=ROWS)
    calls.update(spark=0, driver=0)
    streamed = Replicator(load(direct), engine="spark", spark=spark).run(until_idle=True)
    assert streamed.batches >= 1 and calls["spark"] >= 1
    assert_tables_equal(direct, pg_db)
    assert_no_duplicate_data_files(iceberg_metadata(load(direct), "public.big"))
