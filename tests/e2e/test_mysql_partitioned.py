"""Issue 24 on MariaDB: a table the engine creates through ``iceberg.partition_by``
(``day(created)``, ``bucket(8, id)``) takes a snapshot and changes that move rows across
partitions; Spark and DuckDB read it equal to the source, every data file carries its
partition values, and ``replicator diff`` agrees; pyiceberg too once maintenance has
converted the equality deletes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.cli.main import main
from replicator.config import MaintenanceConfig
from replicator.iceberg.tables import open_catalog
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from replicator.pipeline.runner import Replicator
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import (
    assert_tables_equal,
    load,
    source_rows,
    source_tables,
    write_config,
)
from tests.e2e.test_postgres_partitioned import EAGER
from tests.judges import assert_partition_values, normalize

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.mark.slow  # make test-long: make test stays under 25 minutes (a quiet fresh-clone run took 34:46)
def test_partition_by_on_mariadb(tmp_path: Path, mysql_db: MySQLDb, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    mysql_db.tx(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, created DATETIME NOT NULL, amount DECIMAL(10,2), note VARCHAR(40))",
        "INSERT INTO orders SELECT seq, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL (seq % 12) DAY + INTERVAL seq SECOND,"
        " seq / 7, CONCAT('n', seq) FROM seq_1_to_2000",
    )
    cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id, max_events=1000)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["iceberg"]["partition_by"] = {f"{mysql_db.name}.orders": ["day(created)", "bucket(8, id)"]}
    cfg_path.write_text(yaml.safe_dump(cfg))
    Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    mysql_db.tx("UPDATE orders SET created = created + INTERVAL 3 DAY, note = 'moved' WHERE id % 20 = 0")
    mysql_db.tx("DELETE FROM orders WHERE id % 20 = 7")
    mysql_db.tx("INSERT INTO orders SELECT seq, TIMESTAMP '2025-11-01 00:00:00', 1, 're' FROM seq_7_to_2000_step_40")
    mysql_db.tx("UPDATE orders SET id = id + 100000 WHERE id % 50 = 3")
    mysql_db.tx(  # moved twice in one transaction: the second move hits a row this batch wrote
        "UPDATE orders SET created = created - INTERVAL 1 DAY WHERE id % 50 = 11",
        "UPDATE orders SET created = created - INTERVAL 2 DAY, amount = 0 WHERE id % 50 = 11",
    )
    summary = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert summary.dead_letters == 0 and not summary.stopped

    assert_tables_equal(cfg_path, mysql_db.dsn)
    t = open_catalog(load(cfg_path).iceberg).load_table("cdc.orders")
    assert [f.name for f in t.spec().fields] == ["created_day", "id_bucket_8"]
    assert any(s.is_unpartitioned() for s in t.metadata.specs().values())
    files = spark.read.format("iceberg").load(t.metadata_location + "#files").collect()
    data = [f for f in files if f["content"] == 0]
    assert len(data) > 8
    assert all(f["partition"]["created_day"] is not None and f["partition"]["id_bucket_8"] is not None for f in data)
    assert_partition_values(t)
    rc = main(["diff", "--config", str(cfg_path), "--wait", "30"])
    assert rc == 0, capsys.readouterr().out

    # pyiceberg (which refuses equality deletes) once maintenance has converted them.
    list(Maintainer(MaintenanceConfig.model_validate(EAGER), spark=lambda: spark).run_all(t))
    t = open_catalog(load(cfg_path).iceberg).load_table("cdc.orders")
    assert table_health(t).equality_delete_files == 0
    [table] = source_tables(mysql_db.dsn)
    expected = source_rows(mysql_db.dsn, table)
    got = sorted(({k: normalize(v) for k, v in r.items()} for r in t.scan().to_arrow().to_pylist()),
                 key=lambda r: r["id"])  # fmt: skip
    assert got == expected
    assert_partition_values(t)
