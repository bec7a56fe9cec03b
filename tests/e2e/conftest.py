"""A private Postgres (wal_level=logical) for the end-to-end tests; a fresh database each."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator

import psycopg
import pytest

from sample_dbs.postgres.server import PG_BIN, PrivatePostgres

_counter = itertools.count()


@pytest.fixture(scope="session")
def e2e_pg() -> Iterator[PrivatePostgres]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    base = tempfile.mkdtemp(prefix="rp-e2e-pg-")
    try:
        with PrivatePostgres(base, dbname="postgres") as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_db(e2e_pg: PrivatePostgres) -> Iterator[str]:
    name = f"e2e{next(_counter)}"
    with psycopg.connect(e2e_pg.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield e2e_pg.dsn_for(name)
    with psycopg.connect(e2e_pg.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE database = %s AND active_pid IS NOT NULL", (name,))
        for _ in range(50):
            try:
                admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                              "WHERE database = %s", (name,))
                break
            except psycopg.errors.ObjectInUse:
                import time

                time.sleep(0.1)
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
