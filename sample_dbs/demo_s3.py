"""`make demo-s3`: replicate a live Postgres into a REST catalog with tables on S3.

Starts a private PostgreSQL (wal_level=logical) and a private SeaweedFS ``weed mini`` (an S3
API and an Iceberg REST catalog on loopback; the catalog takes the S3 key pair as OAuth2
client credentials), loads the sample shop, and runs the engine against them: the initial
snapshot, a workload of inserts, updates, deletes and key changes, streaming, then
``status --rows`` (rows counted by Iceberg Java through Spark, reading S3 with Hadoop S3A)
and ``diff``.

The config in ./.demo-s3/replicator.yaml names its secrets as ``${DEMO_S3_KEY}`` /
``${DEMO_S3_SECRET}``: they come from the environment, never from the file. Both servers are
stopped and removed at the end (the object store's data with them); ./.demo-s3 keeps the
config and the engine's state.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from replicator.cli.main import main as cli
from sample_dbs.object_store import REGION, PrivateSeaweed
from sample_dbs.postgres.server import PrivatePostgres, load_schema
from sample_dbs.postgres.workload import Workload

DEMO = Path(".demo-s3")


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def rest_s3_config(dsn: str, s3: PrivateSeaweed) -> dict:
    """The engine's config for this server, secrets as environment references."""
    return {
        "source": {"type": "postgres", "dsn": dsn},
        "iceberg": {
            "catalog": {
                "type": "rest",
                "uri": s3.catalog_uri,
                "credential": "${DEMO_S3_KEY}:${DEMO_S3_SECRET}",  # OAuth2 client credentials
                "oauth2-server-uri": f"{s3.catalog_uri}/v1/oauth/tokens",
                "warehouse": s3.warehouse,
                "s3.endpoint": s3.s3_endpoint,
                "s3.access-key-id": "${DEMO_S3_KEY}",
                "s3.secret-access-key": "${DEMO_S3_SECRET}",
                "s3.path-style-access": True,
                "s3.region": REGION,
            },
            "namespace": "shop",
        },
        "batch": {"max_events": 5000, "max_seconds": 5},
        "state_dir": "state",
    }


def demo() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)  # the slot and the bucket live in new servers
    DEMO.mkdir()
    pg_dir = tempfile.mkdtemp(prefix="replicator-demo-s3-pg-")  # reachable by user postgres
    weed_dir = tempfile.mkdtemp(prefix="replicator-demo-s3-weed-")
    try:
        with PrivatePostgres(pg_dir, dbname="shop") as pg, PrivateSeaweed(weed_dir) as s3:
            _step(f"private PostgreSQL on 127.0.0.1:{pg.port}; private object store: S3 "
                  f"{s3.s3_endpoint}, Iceberg REST catalog {s3.catalog_uri} (weed mini)")
            os.environ["DEMO_S3_KEY"] = s3.access_key
            os.environ["DEMO_S3_SECRET"] = s3.secret_key
            load_schema(pg.dsn)
            wl = Workload(pg.dsn, seed=42)
            wl.seed_data(customers=400, products=80, orders=600)
            cfg_path = DEMO / "replicator.yaml"
            cfg_path.write_text(yaml.safe_dump(rest_s3_config(pg.tcp_dsn, s3), sort_keys=False))
            print(f"config {cfg_path} (DEMO_S3_KEY / DEMO_S3_SECRET come from the environment):\n"
                  f"{cfg_path.read_text()}")

            _step("replicator run --until-idle   (initial snapshot -> REST catalog, files on S3)")
            rc = cli(["run", "--config", str(cfg_path), "--until-idle"])
            if rc:
                return rc
            _step("workload: 800 transactions of inserts, updates, deletes and key changes")
            stats = wl.run(transactions=800)
            print(f"{stats.transactions} transactions: {stats.inserts} inserts, {stats.updates} updates, "
                  f"{stats.deletes} deletes, {stats.pk_updates} primary-key changes")

            _step("replicator run --until-idle   (streaming the changes)")
            rc = cli(["run", "--config", str(cfg_path), "--until-idle"])
            if rc:
                return rc
            _step("replicator status --rows   (Iceberg Java through Spark reads the tables on S3)")
            rc = cli(["status", "--config", str(cfg_path), "--rows"])
            if rc:
                return rc
            _step("replicator diff   (source tables vs Iceberg tables on S3)")
            rc = cli(["diff", "--config", str(cfg_path)])
            print(f"\nconfig and engine state kept in {DEMO.resolve()}; both servers are removed")
            return rc
    finally:
        shutil.rmtree(pg_dir, ignore_errors=True)
        shutil.rmtree(weed_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(demo())
