"""Issue 26 build item 2 / issue 25 build item 2: ``iceberg.format_version: 3``. A Postgres
table replicated over several batches (inserts, updates and deletes of rows of earlier batches
and of the same batch), then a maintenance run (equality deletes converted into deletion
vectors merged with the files' own, compaction applying and dropping vectors, expiry, orphan
cleanup). Spark (Iceberg 1.10), DuckDB and ``replicator diff`` read it equal to the source
throughout; pyiceberg 0.12 wherever the table has no equality-delete files (it reads deletion
vectors but no equality deletes, in any format version). Every row delete of the table's
history is a deletion vector: no snapshot ever lists a position-delete Parquet file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from replicator.config import MaintenanceConfig
from replicator.iceberg.dv_commit import live_deletion_vectors
from replicator.iceberg.tables import open_catalog
from replicator.maintenance.common import normalize_path
from replicator.maintenance.orphans import find_orphans, remove_orphans
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from replicator.pipeline.runner import Replicator
from replicator.verify.diff import run_diff
from tests.e2e.pg_support import load, source_rows, source_tables, write_config
from tests.judges import duckdb_rows, normalize, spark_files, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

EAGER = {"every_seconds": 0, "max_time_share": 1.0, "compact_min_input_files": 2,
         "convert_min_equality_delete_files": 1, "snapshots_keep": 2, "snapshots_max_age_seconds": 0,
         "orphan_min_age_seconds": 3600}  # fmt: skip


def sql(dsn: str, *statements: str) -> None:
    """The statements as ONE source transaction (one batch: in-batch changes by position)."""
    with psycopg.connect(dsn) as conn:
        for s in statements:
            conn.execute(s)


def round_of_changes(r: int) -> list[str]:
    """New rows changed in their own batch (deletion vectors) and rows of earlier batches
    updated and deleted (equality deletes)."""
    lo, hi = 1000 * r, 1000 * r + 39
    return [
        f"INSERT INTO items SELECT g, 'new' || g, g FROM generate_series({lo}, {hi}) g",
        f"UPDATE items SET v = 'again' || id, n = n + 1 WHERE id BETWEEN {lo} AND {lo + 14}",
        f"DELETE FROM items WHERE id BETWEEN {hi - 4} AND {hi}",
        f"UPDATE items SET v = 'round{r}', n = -n WHERE id < 300 AND id % 7 = {r}",
        f"DELETE FROM items WHERE id < 300 AND id % 11 = {r}",
    ]


def pyiceberg_rows(table: Any) -> list[dict[str, Any]]:
    rows = [{k: normalize(v) for k, v in r.items()} for r in table.scan().to_arrow().to_pylist()]
    return sorted(rows, key=lambda r: r["id"])


def no_position_delete_parquet(location: str) -> list[dict[str, Any]]:
    """The row-delete files of every snapshot; asserts they are all deletion vectors."""
    deletes = [f for f in spark_files(location, all_snapshots=True) if f["content"] == 1]
    assert all(f["file_format"] == "PUFFIN" for f in deletes), [f["file_path"] for f in deletes]
    return deletes


def judge(location: str, expected: list[dict[str, Any]]) -> None:
    assert spark_rows(location, order_by=["id"]) == expected, "spark"
    assert duckdb_rows(location, order_by=["id"]) == expected, "duckdb"


@pytest.mark.parametrize(
    "partition_by",
    [None, pytest.param(["bucket(4, id)"], marks=pytest.mark.slow, id="partitioned")],
)
def test_format_v3_table_replicates_with_deletion_vectors(
    tmp_path: Path, pg_db: str, spark: Any, partition_by: list[str] | None
) -> None:
    sql(
        pg_db,
        "CREATE TABLE items (id bigint PRIMARY KEY, v text, n int)",
        "INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(1, 300) g",
    )
    cfg_path = write_config(tmp_path / "run", pg_db, max_events=500, tables=["public.items"])
    raw = yaml.safe_load(cfg_path.read_text())
    raw["iceberg"]["format_version"] = 3
    raw["iceberg"]["cut_every_seconds"] = 0  # no tags: expiry may take every old snapshot
    if partition_by:  # vectors under the data files' partitions, equality deletes unpartitioned
        raw["iceberg"]["partition_by"] = {"public.items": partition_by}
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load(cfg_path)
    Replicator(cfg, engine="spark", spark=spark).run(until_idle=True)
    catalog = open_catalog(cfg.iceberg)
    [source] = source_tables(pg_db)

    # In-batch changes only: deletion vectors, no equality deletes; pyiceberg judges too.
    sql(pg_db, "INSERT INTO items SELECT g, 'x', 0 FROM generate_series(500, 520) g",
        "UPDATE items SET n = 1 WHERE id BETWEEN 500 AND 509", "DELETE FROM items WHERE id > 515")  # fmt: skip
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    t = catalog.load_table("cdc.items")
    assert t.format_version == 3
    assert t.spec().is_unpartitioned() == (partition_by is None)
    expected = source_rows(pg_db, source)
    judge(t.metadata_location, expected)
    assert pyiceberg_rows(t) == expected
    assert live_deletion_vectors(t), "in-batch updates and deletes are deletion vectors"

    for r in (1, 2, 3):
        sql(pg_db, *round_of_changes(r))
        summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
        assert summary.dead_letters == 0 and not summary.stopped, summary.stopped
        t = catalog.load_table("cdc.items")
        expected = source_rows(pg_db, source)
        judge(t.metadata_location, expected)
    assert table_health(t).equality_delete_files > 0  # earlier batches' rows: equality deletes
    before = no_position_delete_parquet(t.metadata_location)
    assert len({f["referenced_data_file"] for f in before}) >= 4

    reports = [report for t, report in Maintainer(MaintenanceConfig.model_validate(EAGER),
                                                  spark=lambda: spark).run_all(t)]  # fmt: skip
    kinds = {rep.kind for rep in reports if rep.changed}
    assert {"conversion", "compaction", "expiry"} <= kinds, reports
    t = catalog.load_table("cdc.items")
    assert t.format_version == 3
    assert table_health(t).equality_delete_files == 0
    judge(t.metadata_location, expected)
    assert pyiceberg_rows(t) == expected
    no_position_delete_parquet(t.metadata_location)
    row_ids = [r["_row_id"] for r in spark.read.format("iceberg").load(t.metadata_location).select("_row_id").collect()]
    assert None not in row_ids and len(set(row_ids)) == len(expected)  # v3 row lineage

    # Orphan cleanup (as if an hour had passed) keeps every file the metadata references,
    # Puffin files among them: the table still reads the same.
    puffins = {f["file_path"] for f in spark_files(t.metadata_location, all_snapshots=True) if f["content"] == 1}
    orphans = {p for p, _size in find_orphans(t, min_age_seconds=3600, now=time.time() + 7200)}
    assert not {normalize_path(p) for p in puffins} & orphans
    remove_orphans(t, min_age_seconds=3600, now=time.time() + 7200)
    judge(t.metadata_location, expected)

    # A TRUNCATE and new rows changed in the same transaction: one snapshot removes every file
    # (vectors too) and adds the new ones with their vector.
    sql(pg_db, "TRUNCATE items", "INSERT INTO items SELECT g, 't', g FROM generate_series(1, 30) g",
        "UPDATE items SET v = 'u' WHERE id <= 10", "DELETE FROM items WHERE id > 25")  # fmt: skip
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    t = catalog.load_table("cdc.items")
    expected = source_rows(pg_db, source)
    judge(t.metadata_location, expected)
    assert pyiceberg_rows(t) == expected
    health = table_health(t)  # one data file (partitioned: one per partition) and its vector
    assert live_deletion_vectors(t) and health.data_files == (1 if partition_by is None else health.partitions)

    report = run_diff(load(cfg_path), spark=spark, wait_seconds=5)
    assert report.exit_code == 0, [tr for tr in report.tables if not tr.matches]
