"""Fixtures for the Postgres source tests: one private server per session (never the system
server on 5432), a fresh database per test, and a source factory that cleans up."""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # sample_dbs/ is not an installed package
    sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from replicator.events.deadletter import DeadLetterSink  # noqa: E402
from replicator.sources.postgres import PostgresSource  # noqa: E402
from sample_dbs.postgres.server import PG_BIN, PrivatePostgres  # noqa: E402

_counter = itertools.count()


def _require_postgres() -> None:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PrivatePostgres]:
    _require_postgres()
    base = tempfile.mkdtemp(prefix="rp-pgtest-")  # under /tmp: reachable by user postgres
    try:
        with PrivatePostgres(base, dbname="postgres") as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _drop_database(admin: psycopg.Connection[Any], name: str) -> None:
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
            import time

            time.sleep(0.1)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_dsn(pg_server: PrivatePostgres) -> Iterator[str]:
    """A fresh, empty database for one test (slots and publications do not leak)."""
    name = f"t{next(_counter)}"
    with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield pg_server.dsn_for(name)
    with psycopg.connect(pg_server.dsn_for("postgres"), autocommit=True) as admin:
        _drop_database(admin, name)


@pytest.fixture
def sql(pg_dsn: str) -> Callable[..., list[tuple[Any, ...]]]:
    """Run statements in their own autocommit transactions; returns rows of the last one."""

    def run(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    return run


@pytest.fixture
def make_source(pg_dsn: str, tmp_path: Path) -> Iterator[Callable[..., PostgresSource]]:
    sources: list[PostgresSource] = []

    def make(**kwargs: Any) -> PostgresSource:
        kwargs.setdefault("dead_letters", DeadLetterSink(tmp_path / "dead.jsonl"))
        kwargs.setdefault("poll_wait_s", 0.2)
        kwargs.setdefault("progress", False)
        src = PostgresSource(kwargs.pop("dsn", pg_dsn), **kwargs)
        sources.append(src)
        return src

    yield make
    for s in sources:
        s.close()
