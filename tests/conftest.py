"""Shared fixtures. Keep this light: subfolders add their own conftest files."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.pg_majors import pg_test_majors

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

    from sample_dbs.object_store import PrivateSeaweed
    from sample_dbs.postgres.server import PrivatePostgres

# Tests import `spark.*` and `tests.*` from the repo root; make that work without an
# editable install or a `pythonpath` setting.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


# Test runs are short: a C1-only JIT halves Spark's cold start (set it empty to disable).
os.environ.setdefault("REPLICATOR_SPARK_JAVA_OPTS", "-XX:TieredStopAtLevel=1")


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    """Secrets registered by one test (a DSN's password, e.g. "repl") are masked in every
    later log line of the process: forget them after each test, so no test's log text
    depends on which tests ran before it."""
    yield
    from replicator import secrets

    secrets.forget_all()


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    """The process-wide local Spark session with Iceberg (started once, ~5 s)."""
    from spark.session import get_spark

    return get_spark()


@pytest.fixture(scope="session")
def seaweed() -> Iterator[PrivateSeaweed]:
    """One private SeaweedFS `weed mini` (S3 API + Iceberg REST catalog, OAuth2 client
    credentials = a random key pair) for the whole session, on free loopback ports. The
    judges are told how to read its bucket."""
    import shutil
    import tempfile

    from sample_dbs.object_store import PrivateSeaweed, weed_binary
    from tests.judges import use_object_store

    try:
        weed_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    base = tempfile.mkdtemp(prefix="rp-weed-")
    try:
        with PrivateSeaweed(base) as server:
            use_object_store(server.bucket, server.s3_properties())
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PrivatePostgres]:
    """One private Postgres (wal_level=logical, free port, temp dir) for the whole session;
    never the system server. Tests take fresh databases from it."""
    import shutil
    import tempfile

    from sample_dbs.postgres.server import PG_BIN, PrivatePostgres

    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}")
    base = tempfile.mkdtemp(prefix="rp-pgtest-")  # under /tmp: reachable by user postgres
    try:
        with PrivatePostgres(base, dbname="postgres") as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session", params=pg_test_majors(), ids=lambda major: f"pg{major}")
def pg_versioned_server(request: pytest.FixtureRequest) -> Iterator[PrivatePostgres]:
    """A private Postgres of each major version of ``pg_test_majors()`` (binaries from
    sample_dbs/postgres/versions.py, fetched on first use); the session's ``pg_server`` when it
    already is that version. Tests using it run once per version (ids ``pg15``, ``pg18``, ...)."""
    import shutil
    import tempfile

    from sample_dbs.postgres import versions
    from sample_dbs.postgres.server import PG_BIN, PrivatePostgres

    major: int = request.param
    bin_dir = versions.bin_dir(major)
    if bin_dir.resolve() == PG_BIN.resolve():
        yield request.getfixturevalue("pg_server")
        return
    base = tempfile.mkdtemp(prefix=f"rp-pg{major}test-")
    try:
        with PrivatePostgres(base, dbname="postgres", bin_dir=bin_dir) as pg:
            yield pg
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Fixtures that start Spark or a private server (Postgres, MariaDB, SeaweedFS). A test using
# one, directly or through another fixture, gets the marker, so that
# `-m "not spark and not integration"` (`make test-fast`) selects the tests needing neither.
SPARK_FIXTURES = frozenset({"spark"})
SERVER_FIXTURES = frozenset({
    "pg_server", "pg_versioned_server", "seaweed", "mariadb", "mysql_base", "verify_mariadb"
})


@pytest.hookimpl(tryfirst=True)  # before pytest's own `-m` selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers from fixtures (above). ``@pytest.mark.slow`` tests run with ``LONG=1``
    (``make test-long``) or when selected explicitly (``-m slow``); ``make test`` skips them,
    as the marker says."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & SPARK_FIXTURES and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if used & SERVER_FIXTURES and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)
    if os.environ.get("LONG") or "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with LONG=1 (make test-long) or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
