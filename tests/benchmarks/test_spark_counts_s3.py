"""The benchmarks' row-count check (``scenario_context.spark_counts``) on tables in object
storage: Iceberg Java gets the catalog's S3 settings, so a count is not missing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from benchmarks.scenario_context import spark_counts
from replicator.config import IcebergConfig
from replicator.iceberg.tables import iceberg_table_name, open_catalog
from sample_dbs.object_store import PrivateSeaweed

pytestmark = pytest.mark.integration


def test_counts_a_table_in_a_bucket_spark_was_never_told_about(
    tmp_path: Path, seaweed: PrivateSeaweed, spark: Any
) -> None:
    # Regression: without the table's S3 settings every count of a run on object storage was
    # missing ("No FileSystem for scheme s3" or no credentials) and the run warned that rows differ.
    from pyarrow import fs as pafs

    bucket = "counts" + seaweed.access_key[-6:]  # a bucket no other test configured Spark for
    pafs.S3FileSystem(access_key=seaweed.access_key, secret_key=seaweed.secret_key,
                      region="us-east-1", endpoint_override=seaweed.s3_endpoint,
                      allow_bucket_creation=True).create_dir(bucket)  # fmt: skip
    cfg = IcebergConfig.model_validate({"catalog": {
        "type": "sql", "uri": f"sqlite:///{tmp_path}/s3.db", "warehouse": f"s3://{bucket}/wh",
        **seaweed.s3_properties()}})  # fmt: skip
    catalog = open_catalog(cfg)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    table = catalog.create_table(iceberg_table_name(cfg, "public.t"), schema=schema)
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}, schema=schema))
    sess = SimpleNamespace(rep=SimpleNamespace(catalog=catalog), cfg=SimpleNamespace(iceberg=cfg))
    got = spark_counts(SimpleNamespace(spark=spark), sess, ["public.t"])  # type: ignore[arg-type]
    assert got["public.t"].get("rows") == 3, got
