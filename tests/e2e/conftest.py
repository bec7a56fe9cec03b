"""A fresh database per end-to-end test, on the session's private Postgres (tests/conftest.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from sample_dbs.postgres.server import PrivatePostgres

_counter = itertools.count()


@pytest.fixture
def pg_db(pg_server: PrivatePostgres) -> Iterator[str]:
    name = f"e2e{next(_counter)}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


@pytest.fixture
def pg_versioned_db(pg_versioned_server: PrivatePostgres) -> Iterator[str]:
    """A fresh database on each tested Postgres version (tests/conftest.py `pg_test_majors`)."""
    name = f"e2e{next(_counter)}"
    yield pg_versioned_server.create_database(name)
    pg_versioned_server.drop_database(name)
