"""Schema changes on a live Postgres source, through the engine into Iceberg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.pipeline.runner import Replicator
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def run(cfg_path: Path, spark: Any) -> Any:
    return Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)


def iceberg_schema(cfg_path: Path, table: str = "public.t") -> dict[str, str]:
    from replicator.iceberg.tables import iceberg_table_name, open_catalog

    cfg = load(cfg_path)
    t = open_catalog(cfg.iceberg).load_table(iceberg_table_name(cfg.iceberg, table))
    return {f.name: str(f.field_type) for f in t.schema().fields}


def test_add_and_drop_column_mid_stream(tmp_path: Path, pg_db: str, spark: Any) -> None:
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY, a text, gone text)",
        "INSERT INTO t VALUES (1, 'one', 'x'), (2, 'two', 'y')")
    cfg_path = write_config(tmp_path, pg_db)
    run(cfg_path, spark)
    sql(pg_db, "ALTER TABLE t ADD COLUMN b int", "INSERT INTO t VALUES (3, 'three', 'z', 30)",
        "UPDATE t SET b = 10 WHERE id = 1", "ALTER TABLE t DROP COLUMN gone",
        "INSERT INTO t VALUES (4, 'four', 40)", "UPDATE t SET a = 'TWO' WHERE id = 2")
    run(cfg_path, spark)
    expected = [
        {"id": 1, "a": "one", "gone": "x", "b": 10},
        {"id": 2, "a": "TWO", "gone": None, "b": None},  # rewritten after the drop: null
        {"id": 3, "a": "three", "gone": "z", "b": 30},
        {"id": 4, "a": "four", "gone": None, "b": 40},
    ]
    loc = iceberg_metadata(load(cfg_path), "public.t")
    assert spark_rows(loc, order_by=["id"]) == expected
    assert duckdb_rows(loc, order_by=["id"]) == expected
    assert list(iceberg_schema(cfg_path)) == ["id", "a", "gone", "b"]  # dropped column kept


def test_change_made_while_engine_stopped_is_picked_up(tmp_path: Path, pg_db: str, spark: Any) -> None:
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY, a text)", "INSERT INTO t VALUES (1, 'one')")
    cfg_path = write_config(tmp_path, pg_db)
    run(cfg_path, spark)
    sql(pg_db, "ALTER TABLE t ADD COLUMN c numeric(8,2)", "INSERT INTO t VALUES (2, 'two', 2.50)")
    run(cfg_path, spark)
    loc = iceberg_metadata(load(cfg_path), "public.t")
    rows = spark_rows(loc, order_by=["id"])
    assert [r["c"] for r in rows] == [None, pytest.approx(2.5)]


def test_widening_uses_type_promotion(tmp_path: Path, pg_db: str, spark: Any) -> None:
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY, n int, r real, d numeric(6,2))",
        "INSERT INTO t VALUES (1, 1, 1.5, 1.25)")
    cfg_path = write_config(tmp_path, pg_db)
    run(cfg_path, spark)
    assert iceberg_schema(cfg_path) == {"id": "int", "n": "int", "r": "float", "d": "decimal(6, 2)"}
    sql(pg_db, "ALTER TABLE t ALTER COLUMN n TYPE bigint, ALTER COLUMN r TYPE double precision,"
               " ALTER COLUMN d TYPE numeric(12,2)",
        "INSERT INTO t VALUES (2, 9000000000, 2.25, 1234567890.12)")
    summary = run(cfg_path, spark)
    assert not summary.stopped
    assert iceberg_schema(cfg_path) == {"id": "int", "n": "long", "r": "double", "d": "decimal(12, 2)"}
    loc = iceberg_metadata(load(cfg_path), "public.t")
    rows = spark_rows(loc, order_by=["id"])
    assert [r["n"] for r in rows] == [1, 9000000000]
    assert str(rows[1]["d"]) == "1234567890.12"
    assert duckdb_rows(loc, order_by=["id"]) == rows


def test_incompatible_change_stops_only_that_table(tmp_path: Path, pg_db: str, spark: Any) -> None:
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY, n int)", "CREATE TABLE other (id int PRIMARY KEY)",
        "INSERT INTO t VALUES (1, 1)", "INSERT INTO other VALUES (1)")
    cfg_path = write_config(tmp_path, pg_db)
    run(cfg_path, spark)
    sql(pg_db, "ALTER TABLE t ALTER COLUMN n TYPE text", "INSERT INTO t VALUES (2, 'two')",
        "INSERT INTO other VALUES (2)")
    summary = run(cfg_path, spark)
    assert list(summary.stopped) == ["public.t"]
    assert "changed type from int to string" in summary.stopped["public.t"]
    cfg = load(cfg_path)
    assert spark_rows(iceberg_metadata(cfg, "public.t"), order_by=["id"]) == [{"id": 1, "n": 1}]
    assert spark_rows(iceberg_metadata(cfg, "public.other"), order_by=["id"]) == [{"id": 1}, {"id": 2}]
    # The held events are not acknowledged: a restart sees the stopped table's change again.
    again = run(cfg_path, spark)
    assert list(again.stopped) == ["public.t"]
    assert spark_rows(iceberg_metadata(cfg, "public.other"), order_by=["id"]) == [{"id": 1}, {"id": 2}]
