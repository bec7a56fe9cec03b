"""`make demo`: point the engine at a private Postgres and replicate it into Iceberg.

Starts a private PostgreSQL (wal_level=logical) in a temporary folder, loads the sample shop
schema and data, lets the engine take its initial snapshot, runs a workload of inserts,
updates, deletes, key changes and multi-statement transactions, replicates that too, and
prints what it wrote. The Iceberg side (SQLite catalog, warehouse, state) stays in ./.demo
for you to look at; the server is stopped and removed at the end.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from replicator.cli.main import main as cli
from sample_dbs.postgres.server import PrivatePostgres, load_schema
from sample_dbs.postgres.workload import Workload

DEMO = Path(".demo")


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def demo() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)  # the slot lives in the server, which is new
    DEMO.mkdir()
    server_dir = tempfile.mkdtemp(prefix="replicator-demo-pg-")  # reachable by user postgres
    try:
        with PrivatePostgres(server_dir, dbname="shop") as pg:
            _step(f"private PostgreSQL on 127.0.0.1:{pg.port} (wal_level=logical), database shop")
            load_schema(pg.dsn)
            wl = Workload(pg.dsn, seed=42)
            wl.seed_data(customers=400, products=80, orders=600)
            cfg = {
                "source": {"type": "postgres", "dsn": pg.tcp_dsn},
                "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "warehouse",
                            "namespace": "shop"},
                "batch": {"max_events": 5000, "max_seconds": 5},
                "state_dir": "state",
            }
            cfg_path = DEMO / "replicator.yaml"
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            print(f"config {cfg_path}:\n{cfg_path.read_text()}")

            _step("replicator run --until-idle   (initial snapshot, consistent with the slot)")
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
            _step("replicator status --rows   (rows counted by Apache Iceberg Java through Spark)")
            rc = cli(["status", "--config", str(cfg_path), "--rows"])
            if rc:
                return rc
            if _has_diff():
                _step("replicator diff   (source tables vs Iceberg tables)")
                rc = cli(["diff", "--config", str(cfg_path)])
            print(f"\nIceberg catalog and warehouse kept in {DEMO.resolve()}")
            return rc
    finally:
        shutil.rmtree(server_dir, ignore_errors=True)


def _has_diff() -> bool:
    try:
        import replicator.verify  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(demo())
