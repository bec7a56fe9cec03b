"""Issue 24, done-when: a target table pre-created with Spark DDL, partitioned by
``days(created)`` and ``bucket(8, id)`` (identifier field ``id``), takes a Postgres snapshot
of 5,000 rows and 300 changes that move rows across partitions (``created`` shifted by days,
deletes, re-inserts on another day, key changes into other buckets; REPLICA IDENTITY
DEFAULT, so a change carries only the old key). Spark, DuckDB and (after maintenance
converted the equality deletes) pyiceberg read it equal to the source, and every data file
carries the right partition values for its spec.

Spark DDL runs in a Hadoop catalog; the table's metadata file is then registered in the
engine's SQL catalog (the engine and Spark share no catalog here: no SQLite JDBC driver)."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from replicator.config import MaintenanceConfig
from replicator.iceberg.tables import open_catalog
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from replicator.pipeline.runner import Replicator
from spark.session import configure_iceberg_catalog
from tests.e2e.pg_support import load, source_rows, source_tables, write_config
from tests.judges import assert_no_duplicate_data_files, duckdb_rows, normalize, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

EAGER = {"every_seconds": 0, "max_time_share": 1.0, "compact_min_input_files": 2,
         "convert_min_equality_delete_files": 1, "snapshots_keep": 2, "snapshots_max_age_seconds": 0,
         "orphan_min_age_seconds": 3600}  # fmt: skip

CHANGES = [
    # 100 rows of earlier batches move to another day (equality deletes must reach them)
    "UPDATE orders SET created = created + (id % 5 + 1) * interval '1 day', note = 'moved' WHERE id % 50 = 0",
    # 100 deletes
    "DELETE FROM orders WHERE id % 50 = 7",
    # 50 of them come back, on days the table had no rows on
    "INSERT INTO orders SELECT g, timestamptz '2025-12-01 00:00:00+00' + g * interval '1 minute', 1.5, 're'"
    " FROM generate_series(7, 5000, 100) g",
    # 50 key changes: the row moves to another bucket
    "UPDATE orders SET id = id + 100000 WHERE id % 100 = 3",
]
# Rows moved twice in one transaction: the second move position-deletes the first one's
# row, which this batch wrote in another partition.
TWICE = [
    "UPDATE orders SET created = created - interval '3 days' WHERE id % 100 = 11",
    "UPDATE orders SET created = created - interval '4 days', amount = 0 WHERE id % 100 = 11",
]


def sql(dsn: str, *statements: str, one_tx: bool = False) -> None:
    with psycopg.connect(dsn, autocommit=not one_tx) as conn:
        for s in statements:
            conn.execute(s)


def spark_ddl(spark: Any, warehouse: Path) -> str:
    """Create the table as a data engineer would, with Spark DDL; its metadata file."""
    name = f"ddl{uuid.uuid4().hex[:8]}"
    configure_iceberg_catalog(spark, name, {"type": "hadoop", "warehouse": warehouse.as_uri()})
    spark.sql(
        f"CREATE TABLE {name}.cdc.orders (id bigint NOT NULL, created timestamp NOT NULL, "
        "amount decimal(10,2), note string) USING iceberg "
        "PARTITIONED BY (days(created), bucket(8, id)) TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"ALTER TABLE {name}.cdc.orders SET IDENTIFIER FIELDS id")
    return sorted((warehouse / "cdc" / "orders" / "metadata").glob("v*.metadata.json"))[-1].as_uri()


def check_partition_values(spark: Any, location: str) -> None:
    """Each row's file carries the day of its ``created`` and the bucket of its id."""
    from pyspark.sql import functions as F

    bucket = BucketTransform(8).transform(LongType())
    rows = (
        spark.read.format("iceberg").load(location)
        .select("id", F.unix_micros("created").alias("micros"), "_partition")
        .collect()
    )  # fmt: skip
    assert rows
    for r in rows:
        part = r["_partition"].asDict()
        assert (part["created_day"] - dt.date(1970, 1, 1)).days == r["micros"] // 86_400_000_000, r
        assert part["id_bucket"] == bucket(r["id"]), r
    files = spark.read.format("iceberg").load(location + "#files").collect()
    for f in files:
        part = f["partition"].asDict()
        if f["content"] in (0, 1):  # data and position deletes: the data file's partition
            assert part["created_day"] is not None and part["id_bucket"] is not None, f
        else:  # equality deletes: the unpartitioned spec (no partition values)
            assert part["created_day"] is None and part["id_bucket"] is None, f


@pytest.mark.slow  # make test-long: make test stays under 25 minutes (a quiet fresh-clone run took 34:46)
def test_spark_ddl_partitioned_table_takes_partition_moves(tmp_path: Path, pg_db: str, spark: Any) -> None:
    sql(
        pg_db,
        "CREATE TABLE orders (id bigint PRIMARY KEY, created timestamptz NOT NULL, amount numeric(10,2), note text)",
        "INSERT INTO orders SELECT g, timestamptz '2026-01-01 00:00:00+00' + (g % 20) * interval '1 day'"
        " + g * interval '1 second', g / 7.0, 'n' || g FROM generate_series(1, 5000) g",
    )
    cfg_path = write_config(tmp_path / "run", pg_db, max_events=2000, tables=["public.orders"])
    # Every batch through a Spark job (the partition plan and the files' partition tuples
    # travel to and from the tasks), none in the driver.
    cfg_path.write_text(yaml.safe_dump({**yaml.safe_load(cfg_path.read_text()), "spark": {"driver_max_rows": 0}}))
    cfg = load(cfg_path)
    catalog = open_catalog(cfg.iceberg)
    catalog.create_namespace_if_not_exists("cdc")
    catalog.register_table("cdc.orders", spark_ddl(spark, tmp_path / "spark-wh"))
    spec_before = catalog.load_table("cdc.orders").spec()

    Replicator(cfg, engine="spark", spark=spark).run(until_idle=True)
    sql(pg_db, *CHANGES)
    sql(pg_db, *TWICE, one_tx=True)
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped

    [table] = source_tables(pg_db)
    expected = source_rows(pg_db, table)
    t = catalog.load_table("cdc.orders")
    assert t.spec() == spec_before  # the table keeps its own spec
    assert any(s.is_unpartitioned() for s in t.metadata.specs().values())
    assert table_health(t).equality_delete_files > 0  # the moves did need global deletes
    for judge in (spark_rows, duckdb_rows):
        assert judge(t.metadata_location, order_by=["id"]) == expected, judge.__name__
    check_partition_values(spark, t.metadata_location)

    m = Maintainer(MaintenanceConfig.model_validate(EAGER), spark=lambda: spark)
    list(m.run_all(t))
    t = catalog.load_table("cdc.orders")
    assert table_health(t).equality_delete_files == 0
    assert spark_rows(t.metadata_location, order_by=["id"]) == expected
    got = sorted((normalize_row(r) for r in t.scan().to_arrow().to_pylist()), key=lambda r: r["id"])
    assert got == expected
    assert_no_duplicate_data_files(t.metadata_location)
    check_partition_values(spark, t.metadata_location)
    scans_one_day(t)


def scans_one_day(t: Any) -> None:
    """A read of one day plans only that day's files (pruned by partition)."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    day = dt.date(2026, 1, 5)
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    row_filter = And(GreaterThanOrEqual("created", start.isoformat()),
                     LessThan("created", (start + dt.timedelta(days=1)).isoformat()))  # fmt: skip
    planned = {task.file.file_path for task in t.scan(row_filter=row_filter).plan_files()}
    that_day = {
        f.file_path for f in _data_files(t)
        if f.partition[0] == (day - dt.date(1970, 1, 1)).days
    }  # fmt: skip
    assert planned and planned == that_day


def _data_files(t: Any) -> list[Any]:
    from replicator.iceberg.manifests import manifest_entries, read_manifests

    return [
        e.data_file
        for m in read_manifests(t.current_snapshot(), t.io)
        for e in manifest_entries(m, t.io, live_only=True)
        if e.data_file.content == 0
    ]


def normalize_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: normalize(v) for k, v in row.items()}


def spark_alter(spark: Any, warehouse: Path, current: str, statement: str) -> str:
    """Run Spark DDL on the table as the engine's catalog has it now: its current metadata
    becomes the Hadoop catalog's newest version, Spark commits the next one. The engine's
    catalog row is then pointed at it (what a shared catalog would do); the new location."""
    meta = warehouse / "cdc" / "orders" / "metadata"
    version = max(int(p.name[1:].split(".")[0]) for p in meta.glob("v*.metadata.json")) + 1
    (meta / f"v{version}.metadata.json").write_bytes(Path(current.removeprefix("file://")).read_bytes())
    (meta / "version-hint.text").write_text(str(version))
    name = f"alter{uuid.uuid4().hex[:8]}"
    configure_iceberg_catalog(spark, name, {"type": "hadoop", "warehouse": warehouse.as_uri(), "cache-enabled": "false"})
    spark.sql(statement.format(table=f"{name}.cdc.orders"))
    return (meta / f"v{version + 1}.metadata.json").as_uri()


def test_spec_evolved_by_spark_on_a_live_table(tmp_path: Path, pg_db: str, spark: Any) -> None:
    import sqlite3

    sql(
        pg_db,
        "CREATE TABLE orders (id bigint PRIMARY KEY, created timestamptz NOT NULL, amount numeric(10,2), note text)",
        "INSERT INTO orders SELECT g, timestamptz '2026-01-01 00:00:00+00' + (g % 5) * interval '1 day',"
        " g, 'n' || (g % 3) FROM generate_series(1, 600) g",
    )
    cfg_path = write_config(tmp_path / "run", pg_db, max_events=2000, tables=["public.orders"])
    cfg = load(cfg_path)
    catalog = open_catalog(cfg.iceberg)
    catalog.create_namespace_if_not_exists("cdc")
    warehouse = tmp_path / "spark-wh"
    catalog.register_table("cdc.orders", spark_ddl(spark, warehouse))
    Replicator(cfg, engine="spark", spark=spark).run(until_idle=True)
    sql(pg_db, "UPDATE orders SET created = created + interval '2 days' WHERE id % 10 = 0")
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)

    old = catalog.load_table("cdc.orders")
    new_location = spark_alter(spark, warehouse, old.metadata_location,
                               "ALTER TABLE {table} ADD PARTITION FIELD truncate(1, note)")  # fmt: skip
    db = str(cfg.iceberg.catalog_uri).removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
            "WHERE table_namespace = 'cdc' AND table_name = 'orders'",
            (new_location, old.metadata_location),
        )
    evolved = catalog.load_table("cdc.orders")
    assert evolved.metadata.default_spec_id != old.metadata.default_spec_id

    # Moves across specs: rows in old-spec files updated, deleted, re-keyed; new rows.
    sql(
        pg_db,
        "UPDATE orders SET created = created - interval '1 day', note = 'x' WHERE id % 7 = 0",
        "DELETE FROM orders WHERE id % 11 = 0",
        "UPDATE orders SET id = id + 10000 WHERE id % 13 = 0",
        "INSERT INTO orders SELECT g, timestamptz '2026-02-01 00:00:00+00', 1, 'new' FROM generate_series(700, 760) g",
    )
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped
    [table] = source_tables(pg_db)
    expected = source_rows(pg_db, table)
    t = catalog.load_table("cdc.orders")
    specs = {f["spec_id"] for f in spark.read.format("iceberg").load(t.metadata_location + "#files").collect()}
    assert {old.metadata.default_spec_id, evolved.metadata.default_spec_id} <= specs
    for judge in (spark_rows, duckdb_rows):
        assert judge(t.metadata_location, order_by=["id"]) == expected, judge.__name__
    list(Maintainer(MaintenanceConfig.model_validate(EAGER), spark=lambda: spark).run_all(t))
    t = catalog.load_table("cdc.orders")
    assert table_health(t).equality_delete_files == 0
    assert spark_rows(t.metadata_location, order_by=["id"]) == expected
    got = sorted((normalize_row(r) for r in t.scan().to_arrow().to_pylist()), key=lambda r: r["id"])
    assert got == expected

    # TRUNCATE empties every partition of every spec; rows after it land in the new spec.
    sql(pg_db, "TRUNCATE orders",
        "INSERT INTO orders SELECT g, timestamptz '2026-03-01 00:00:00+00', g, 'after' FROM generate_series(1, 30) g",
        "UPDATE orders SET created = created + interval '1 day' WHERE id % 3 = 0")  # fmt: skip
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped
    t = catalog.load_table("cdc.orders")
    expected = source_rows(pg_db, table)
    assert len(expected) == 30
    for judge in (spark_rows, duckdb_rows):
        assert judge(t.metadata_location, order_by=["id"]) == expected, judge.__name__
