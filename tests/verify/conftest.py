"""Fixtures for the diff tests: one private Postgres (wal_level=logical) per session, never
the system server, a fresh database per use, and the sample shop replicated by the engine."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from sample_dbs.postgres.server import PG_BIN, PrivatePostgres, load_schema

_counter = itertools.count()


@pytest.fixture(scope="session")
def verify_pg() -> Iterator[PrivatePostgres]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    base = tempfile.mkdtemp(prefix="rp-verify-pg-")  # under /tmp: reachable by user postgres
    try:
        with PrivatePostgres(base, dbname="postgres") as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _drop(pg: PrivatePostgres, name: str) -> None:
    with psycopg.connect(pg.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE database = %s AND active_pid IS NOT NULL",
            (name,),
        )
        for _ in range(50):  # a terminated walsender releases its slot asynchronously
            try:
                admin.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE database = %s",
                    (name,),
                )
                break
            except psycopg.errors.ObjectInUse:
                time.sleep(0.1)
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def new_database(verify_pg: PrivatePostgres) -> Iterator[Callable[[], str]]:
    """Creates fresh databases (dropped at the end of the session); returns their DSNs."""
    made: list[str] = []

    def make() -> str:
        name = f"verify{next(_counter)}"
        with psycopg.connect(verify_pg.dsn_for("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return verify_pg.dsn_for(name)

    yield make
    for name in made:
        _drop(verify_pg, name)


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
