"""`make demo-mysql`: replicate a live MariaDB into a local Iceberg warehouse.

Starts a private MariaDB (row-based binary log, its own port and socket; never the system
server) in ./.demo-mysql/server, loads the sample shop schema (``sample_dbs/mysql``), fills
it, and replicates it twice with ``replicator run --until-idle``: first the initial snapshot,
then a workload of inserts, updates, deletes, primary-key changes and multi-statement
transactions read from the binlog. Prints what each Iceberg table holds (rows counted by
Apache Iceberg Java through Spark) next to the source's row counts, then stops the server.

Everything lives in ./.demo-mysql (config, SQLite catalog, warehouse, state) and is started
over on each run: the server is new every time, so positions from an earlier run's binlog
mean nothing to it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from replicator.cli.main import main as cli
from sample_dbs.mysql.server import PrivateMariaDB, load_schema
from sample_dbs.mysql.workload import ShopWorkload

DEMO = Path(".demo-mysql")
TABLES = ("customers", "products", "orders", "order_items")
MAX_SOCKET_PATH = 100  # unix socket paths are limited to 107 bytes


def _server_dir() -> tuple[Path, Path | None]:
    """Where the server lives: ./.demo-mysql/server, or a /tmp folder when the socket path
    would be too long there. Returns (folder, temporary parent to remove)."""
    here = (DEMO / "server").resolve()
    if len(str(here / "mysqld.sock")) <= MAX_SOCKET_PATH:
        return here, None
    tmp = Path(tempfile.mkdtemp(prefix="demo-mysql-", dir="/tmp"))
    return tmp / "server", tmp


def _counts(db: PrivateMariaDB) -> dict[str, int]:
    return {t: int(db.execute(f"SELECT COUNT(*) FROM `{t}`", db=db.dbname)[0][0]) for t in TABLES}


def demo() -> int:
    shutil.rmtree(DEMO, ignore_errors=True)  # a fresh server: start the replica over too
    DEMO.mkdir()
    server_dir, tmp = _server_dir()
    try:
        print(f"== private MariaDB in {server_dir} (row-based binlog)")
        with PrivateMariaDB(server_dir, dbname="shop") as db:
            return _run(db)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(db: PrivateMariaDB) -> int:
    load_schema(db)
    wl = ShopWorkload(seed=7)
    conn = db.connect(db="shop")
    try:
        wl.populate(conn, customers=300, products=60, orders=400)
        cfg = {
            "source": {"type": "mysql", "dsn": db.dsn, "server_id": 4242},
            "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "warehouse",
                        "namespace": "shop"},
            "batch": {"max_events": 2000, "max_seconds": 5},
            "state_dir": "state",
        }
        cfg_path = DEMO / "replicator.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        print(f"== sample shop loaded: {_counts(db)}")
        print(f"== config: {cfg_path}\n{cfg_path.read_text()}")
        print("== replicator run --until-idle   (initial snapshot)")
        rc = cli(["run", "--config", str(cfg_path), "--until-idle"])
        if rc != 0:
            return rc
        counts = wl.run(conn, transactions=600)
        print(f"\n== workload: {dict(counts)} (read from the binlog)")
        print("== replicator run --until-idle   (binlog stream)")
        rc = cli(["run", "--config", str(cfg_path), "--until-idle"])
        if rc != 0:
            return rc
    finally:
        conn.close()
    print("\n== replicator status --rows  (rows counted by Apache Iceberg Java through Spark)")
    rc = cli(["status", "--config", str(cfg_path), "--rows"])
    print("\n== rows in the source: " + ", ".join(f"{t}: {n:,}" for t, n in _counts(db).items()))
    print("== stopping the private MariaDB")
    return rc


if __name__ == "__main__":
    sys.exit(demo())
