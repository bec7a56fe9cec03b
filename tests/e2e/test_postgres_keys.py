"""Issue 10 items 10 and 13 end to end (real Postgres, Spark, Iceberg; judged by Spark, DuckDB
and `replicator diff` against the source): a table whose REPLICA IDENTITY is a unique index
while it also has a primary key keeps one key for snapshot and stream; the default state_dir
sits next to the config file wherever the engine is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from replicator.pipeline.runner import Replicator
from tests.e2e.pg_support import iceberg_metadata, load, source_rows, source_tables
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def test_identity_index_table_and_default_state_dir(
    tmp_path: Path,
    pg_db: str,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from replicator.cli.main import main

    sql(
        pg_db,
        "CREATE TABLE t (id int PRIMARY KEY, code text NOT NULL, v int)",
        "CREATE UNIQUE INDEX t_code ON t (code)",
        "ALTER TABLE t REPLICA IDENTITY USING INDEX t_code",
        # code order differs from id order: keyed on the wrong one, the rows get mixed up
        "INSERT INTO t SELECT g, 'c' || (1000 - g), g FROM generate_series(1, 300) g",
        "CREATE TABLE f (id int PRIMARY KEY, x float8, y text)",
        "ALTER TABLE f REPLICA IDENTITY FULL",
        "INSERT INTO f SELECT g, g / 3.0, NULL FROM generate_series(1, 50) g",
    )
    conf = tmp_path / "conf"
    conf.mkdir()
    cfg_path = conf / "replicator.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "source": {"type": "postgres", "dsn": pg_db, "tables": ["public.t", "public.f"]},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 200, "max_seconds": 2},
    }))  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert (conf / ".replicator" / "postgres-replicator.snapshot.json").exists()
    assert not (elsewhere / ".replicator").exists()
    sql(
        pg_db,
        "UPDATE t SET v = v + 1000 WHERE id % 3 = 0",
        "UPDATE t SET code = 'x' || id WHERE id % 5 = 0",  # the identity key changes
        "UPDATE t SET id = id + 10000 WHERE id % 7 = 0",  # the primary key changes
        "DELETE FROM t WHERE id % 11 = 0",
        "INSERT INTO t VALUES (5000, 'new', 1)",
        "UPDATE f SET y = 'set' WHERE id % 2 = 0",
        "DELETE FROM f WHERE id % 9 = 0",
    )
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped, summary.stopped
    monkeypatch.undo()  # back to the usual working directory for the judges
    cfg = load(cfg_path)
    for table in source_tables(pg_db):
        expected = source_rows(pg_db, table)
        loc = iceberg_metadata(cfg, table.qualified)
        for judge in (spark_rows, duckdb_rows):
            assert judge(loc, order_by=["id"]) == expected, (judge.__name__, table.qualified)
    # Every table's checkpoint names the source it came from (item 13).
    from replicator.checkpoint import read_checkpoint
    from replicator.iceberg.tables import iceberg_table_name, open_catalog

    with psycopg.connect(pg_db) as conn:
        db_oid = conn.execute(
            "SELECT oid, datname FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    assert db_oid is not None
    for name in ("public.t", "public.f"):
        table = open_catalog(cfg.iceberg).load_table(iceberg_table_name(cfg.iceberg, name))
        cp = read_checkpoint(table)
        assert cp is not None and cp.source_id is not None
        assert cp.source_id.startswith("postgres:")
        assert cp.source_id.endswith(f"/{db_oid[0]}:{db_oid[1]}/replicator")
    rc = main(["diff", "--config", str(cfg_path)])
    assert rc == 0, capsys.readouterr().out
