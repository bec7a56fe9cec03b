"""Fixtures for the Postgres source tests: one private server per session (never the system
server on 5432), a fresh database per test, and a source factory that cleans up."""

from __future__ import annotations

import itertools
import sys
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
from sample_dbs.postgres.server import PrivatePostgres  # noqa: E402

_counter = itertools.count()


@pytest.fixture
def pg_dsn(pg_server: PrivatePostgres) -> Iterator[str]:
    """A fresh, empty database for one test (slots and publications do not leak)."""
    name = f"t{next(_counter)}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


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
