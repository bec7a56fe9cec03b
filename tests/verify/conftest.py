"""Fixtures for the diff tests: one private Postgres (wal_level=logical) per session, never
the system server, a fresh database per use, and the sample shop replicated by the engine."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from sample_dbs.postgres.server import PrivatePostgres, load_schema

_counter = itertools.count()


@pytest.fixture(scope="session")
def new_database(pg_server: PrivatePostgres) -> Iterator[Callable[[], str]]:
    """Creates fresh databases (dropped at the end of the session); returns their DSNs."""
    made: list[str] = []

    def make() -> str:
        name = f"verify{next(_counter)}"
        made.append(name)
        return pg_server.create_database(name)

    yield make
    for name in made:
        pg_server.drop_database(name)


def write_config(root: Path, dsn: str, **source: Any) -> Path:
    # Slots are cluster-wide: one per database, so test databases never share one.
    slot = "replicator_" + conninfo_to_dict(dsn)["dbname"]
    cfg = {
        "source": {"type": "postgres", "dsn": dsn, "slot": slot, **source},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 2000, "max_seconds": 2},
        "state_dir": "state",
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@dataclass
class Replicated:
    dsn: str
    config: Path


def replicate(config: Path, spark: Any) -> None:
    from replicator.config import load_config
    from replicator.pipeline.runner import Replicator

    Replicator(load_config(config), engine="spark", spark=spark).run(until_idle=True)


@pytest.fixture(scope="module")
def shop(
    new_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory, spark: Any
) -> Replicated:
    """``sample_dbs/postgres/schema.sql``, seeded, replicated (initial snapshot), changed by a
    seeded workload, replicated again (stream): a database and Iceberg tables that match."""
    from sample_dbs.postgres.workload import Workload

    dsn = new_database()
    load_schema(dsn)
    wl = Workload(dsn, seed=11)
    wl.seed_data(customers=40, products=20, orders=50)
    config = write_config(tmp_path_factory.mktemp("shop"), dsn)
    replicate(config, spark)
    wl.run(transactions=80)
    replicate(config, spark)
    return Replicated(dsn, config)


# -- MySQL / MariaDB ------------------------------------------------------------------------------

_mysql_ids = itertools.count(7001)


@pytest.fixture(scope="session")
def verify_mariadb() -> Iterator[Any]:
    from sample_dbs.mysql.server import PrivateMariaDB, install_template

    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.skip("mariadbd is not installed (apt-get install -y mariadb-server)")
    base = Path(tempfile.mkdtemp(prefix="rp-verify-mdb-"))
    try:
        with PrivateMariaDB(base / "main", template=install_template(base / "template")) as db:
            yield db
    finally:
        shutil.rmtree(base, ignore_errors=True)


def write_mysql_config(root: Path, dsn: str) -> Path:
    cfg = {
        # One binlog reader id per engine: two readers with one id cut each other off.
        "source": {"type": "mysql", "dsn": dsn, "server_id": next(_mysql_ids)},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 2000, "max_seconds": 2},
        "state_dir": "state",
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@dataclass
class MySQLReplicated:
    server: Any  # PrivateMariaDB
    database: str
    config: Path

    def connect(self) -> Any:
        return self.server.connect(db=self.database)


@pytest.fixture(scope="module")
def mysql_shop(
    verify_mariadb: Any, tmp_path_factory: pytest.TempPathFactory, spark: Any
) -> MySQLReplicated:
    """``sample_dbs/mysql/schema.sql`` with a seeded workload, replicated (snapshot), changed
    again, replicated again (binlog stream)."""
    from sample_dbs.mysql.server import load_schema
    from sample_dbs.mysql.workload import ShopWorkload

    name = f"vshop{next(_counter)}"
    verify_mariadb.execute(f"CREATE DATABASE `{name}`")
    load_schema(verify_mariadb, dbname=name)
    shop = MySQLReplicated(verify_mariadb, name, Path())
    wl = ShopWorkload(seed=5)
    conn = shop.connect()
    try:
        wl.run(conn, 120)
        shop.config = write_mysql_config(
            tmp_path_factory.mktemp("mysql-shop"), verify_mariadb.dsn_for(dbname=name)
        )
        replicate(shop.config, spark)
        wl.run(conn, 60)
        replicate(shop.config, spark)
    finally:
        conn.close()
    return shop
