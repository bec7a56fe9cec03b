"""A REST catalog (OAuth2 client credentials, bearer token) and S3 storage on the private
`weed mini` server: the Spark stage's workers write there, Iceberg Java and DuckDB read it,
and no secret is ever printed, logged or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from replicator.config import IcebergConfig, load_config
from replicator.errors import ConfigError
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from sample_dbs.object_store import PrivateSeaweed
from tests.judges import assert_no_duplicate_data_files, duckdb_rows, spark_rows
from tests.object_store.support import bucket_objects, rest_iceberg
from tests.pipeline.dbz import ChangeLog

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _dbz_config(tmp_path: Path, iceberg: dict[str, Any], max_events: int = 1000) -> Path:
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": iceberg,
        "batch": {"max_events": max_events, "max_seconds": 3600},
        "state_dir": "state",
    }
    path = tmp_path / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_rest_catalog_with_client_credentials_and_bearer_token(seaweed: PrivateSeaweed) -> None:
    by_credential = open_catalog(IcebergConfig.model_validate(rest_iceberg(seaweed, "auth_a")))
    assert ("auth_a",) in by_credential.list_namespaces()
    token = seaweed.oauth_token()
    by_token = open_catalog(IcebergConfig.model_validate(
        rest_iceberg(seaweed, "auth_b", credential=None, token=token)))
    assert ("auth_b",) in by_token.list_namespaces()

    wrong = f"{seaweed.access_key}:not-the-secret"
    with pytest.raises(ConfigError) as err:
        open_catalog(IcebergConfig.model_validate(rest_iceberg(seaweed, "auth_c", credential=wrong)))
    assert "credential" in str(err.value)
    assert "not-the-secret" not in str(err.value) and seaweed.secret_key not in str(err.value)


@pytest.mark.spark
def test_spark_stage_writes_row_deltas_to_s3(tmp_path: Path, seaweed: PrivateSeaweed, spark: Any) -> None:
    log = ChangeLog()
    for i in range(1, 40):
        log.insert(i, v=f"v{i}", n=i)
    log.update(3, v="three")
    log.delete(4)
    log.insert(4, v="again", n=-4)
    log.insert(100, v="new", n=100)
    log.update(100, v="newer")  # written and changed in one batch: a position delete
    log.write(tmp_path / "in" / "0001.jsonl")
    cfg_path = _dbz_config(tmp_path, rest_iceberg(seaweed, "stage_s3"), max_events=20)
    summary = Replicator(load_config(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    totals = summary.tables["app.items"]
    assert summary.batches >= 2 and totals.equality_deletes > 0 and totals.position_deletes > 0

    table = open_catalog(load_config(cfg_path).iceberg).load_table("stage_s3.items")
    loc = table.metadata_location
    assert loc.startswith(f"s3://{seaweed.bucket}/"), loc
    expected = log.expected_rows()
    assert spark_rows(loc, order_by=["id"]) == expected, "Iceberg Java (Spark) disagrees"
    assert duckdb_rows(loc, order_by=["id"]) == expected, "DuckDB disagrees"
    assert_no_duplicate_data_files(loc)
    files = bucket_objects(seaweed, "stage_s3/items/data")
    assert any(k.endswith(".parquet") for k in files), "the stage's files are on S3"


def test_secrets_never_printed_logged_or_written(tmp_path: Path, seaweed: PrivateSeaweed) -> None:
    """The engine runs (debug logging) with its secrets in environment variables; neither
    its output, its state directory nor anything in the bucket holds a secret."""
    log = ChangeLog()
    for i in range(1, 30):
        log.insert(i, v=f"v{i}", n=i)
    log.update(5, v="five")
    log.delete(6)
    log.write(tmp_path / "in" / "0001.jsonl")
    iceberg = rest_iceberg(
        seaweed, "secrets_ns",
        credential="${RP_TEST_CLIENT_ID}:${RP_TEST_CLIENT_SECRET}",
        **{"s3.secret-access-key": "${RP_TEST_S3_SECRET}"},
    )
    cfg_path = _dbz_config(tmp_path, iceberg, max_events=10)
    assert seaweed.secret_key not in cfg_path.read_text()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RP_TEST_CLIENT_ID": seaweed.access_key,
           "RP_TEST_CLIENT_SECRET": seaweed.secret_key, "RP_TEST_S3_SECRET": seaweed.secret_key}
    cli = [sys.executable, "-m", "replicator.cli.main", "-v"]
    outputs = []
    for args in (["run", "--config", str(cfg_path), "--engine", "local", "--until-idle"],
                 ["status", "--config", str(cfg_path)]):
        proc = subprocess.run(cli + args, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs.append(proc.stdout + proc.stderr)
    assert "secrets_ns.items" in outputs[1] and "catalog" in outputs[0]

    # A missing variable is an error naming the key, not the value.
    env_missing = {k: v for k, v in env.items() if k != "RP_TEST_S3_SECRET"}
    proc = subprocess.run(cli + ["status", "--config", str(cfg_path)], env=env_missing,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "iceberg.catalog.s3.secret-access-key" in proc.stderr and "RP_TEST_S3_SECRET" in proc.stderr
    outputs.append(proc.stdout + proc.stderr)

    written = {str(p): p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file()}
    objects = bucket_objects(seaweed, "secrets_ns")
    assert any(k.endswith(".metadata.json") for k in objects) and any(k.endswith(".avro") for k in objects)
    secret = seaweed.secret_key
    for text in outputs:
        assert secret not in text
    for name, data in {**written, **objects}.items():
        assert secret.encode() not in data, f"the secret is in {name}"
    for name, data in objects.items():
        if name.endswith(".metadata.json"):
            assert seaweed.access_key.encode() not in data, f"the access key is in {name}"


@pytest.mark.spark
def test_spark_reads_a_new_bucket_after_iceberg_was_used(
    tmp_path: Path, seaweed: PrivateSeaweed, spark: Any
) -> None:
    """Regression: Iceberg's path loads keep the Hadoop configuration of their first use, so a
    bucket configured later was unknown to them ("No FileSystem for scheme s3"). Also: a SQL
    catalog (SQLite) with its warehouse on S3."""
    from pyarrow import fs as pafs
    from pyiceberg.catalog.sql import SqlCatalog

    from replicator.storage.fileio import file_io_properties
    from spark.s3a import configure_spark

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    local = SqlCatalog("local", uri=f"sqlite:///{tmp_path}/local.db", warehouse=tmp_path.as_uri())
    local.create_namespace("ns")
    t = local.create_table("ns.t", schema=schema)
    t.append(pa.table({"id": pa.array([1], pa.int64())}, schema=schema))
    assert spark.read.format("iceberg").load(t.metadata_location).count() == 1  # Iceberg in use

    bucket = "late" + seaweed.access_key[-6:]
    pafs.S3FileSystem(access_key=seaweed.access_key, secret_key=seaweed.secret_key,
                      region="us-east-1", endpoint_override=seaweed.s3_endpoint,
                      allow_bucket_creation=True).create_dir(bucket)
    cfg = IcebergConfig.model_validate({"catalog": {
        "type": "sql", "uri": f"sqlite:///{tmp_path}/s3.db", "warehouse": f"s3://{bucket}/wh",
        **seaweed.s3_properties()}})
    on_s3 = open_catalog(cfg).create_table("cdc.t", schema=schema)
    on_s3.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}, schema=schema))
    on_s3 = on_s3.refresh()
    assert on_s3.metadata_location.startswith(f"s3://{bucket}/wh/")
    configure_spark(spark, on_s3.metadata_location, file_io_properties(on_s3.io.properties))
    assert spark.read.format("iceberg").load(on_s3.metadata_location).count() == 3
