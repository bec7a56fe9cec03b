"""The SQL catalog can live in Postgres instead of SQLite (same tables as Iceberg Java's
JDBC catalog)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicator.config import load_config
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from sample_dbs.postgres.server import PG_BIN, PrivatePostgres
from tests.judges import spark_rows
from tests.pipeline.dbz import ChangeLog

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_catalog_in_postgres(tmp_path: Path, spark: Any) -> None:
    if not (PG_BIN / "initdb").exists():
        pytest.skip("PostgreSQL binaries missing")
    log = ChangeLog()
    log.insert(1, v="a")
    log.insert(2, v="b")
    log.update(1, v="c")
    log.delete(2)
    log.write(tmp_path / "in" / "0001.jsonl")
    with PrivatePostgres(tempfile.mkdtemp(prefix="rp-cat-"), dbname="catalog") as pg:
        cfg_file = tmp_path / "c.yaml"
        cfg_file.write_text(yaml.safe_dump({
            "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
            "iceberg": {"catalog_uri": f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/catalog",
                        "warehouse": "wh", "namespace": "cdc"},
            "batch": {"max_events": 2},
            "state_dir": "state",
        }))
        cfg = load_config(cfg_file)
        summary = Replicator(cfg, engine="spark", spark=spark).run(until_idle=True)
        assert summary.batches == 2
        table = open_catalog(cfg.iceberg).load_table("cdc.items")
        assert spark_rows(table.metadata_location, order_by=["id"]) == log.expected_rows()
