"""``source.failover_slot``: PostgreSQL 17+ creates the slot with FAILOVER (or turns an
existing slot into one); older servers refuse it with a clear message. Runs on every tested
version (``pg_versioned_server``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pg_testkit as kit
import psycopg
import pytest

from replicator.checkpoint import Checkpoints
from replicator.errors import SourceSetupError
from replicator.events.deadletter import DeadLetterSink
from replicator.sources.postgres import PostgresSource
from sample_dbs.postgres.server import PrivatePostgres

pytestmark = pytest.mark.integration

_counter = itertools.count()


@pytest.fixture
def db(pg_versioned_server: PrivatePostgres) -> Iterator[tuple[str, int]]:
    name = f"failover{next(_counter)}"
    dsn = pg_versioned_server.create_database(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)")
        version = conn.info.server_version
    yield dsn, version
    pg_versioned_server.drop_database(name)


def _source(dsn: str, tmp_path: Path, **kwargs: Any) -> PostgresSource:
    return PostgresSource(dsn, dead_letters=DeadLetterSink(tmp_path / "dead.jsonl"),
                          poll_wait_s=0.2, progress=False, **kwargs)


def _failover(dsn: str) -> Callable[[], Any]:
    def get() -> Any:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT failover FROM pg_replication_slots "
                               "WHERE slot_name = 'replicator'").fetchone()
            return None if row is None else row[0]
    return get


def test_failover_slot(db: tuple[str, int], tmp_path: Path) -> None:
    dsn, version = db
    src = _source(dsn, tmp_path, failover_slot=True)
    if version < 170000:
        with pytest.raises(SourceSetupError, match="needs PostgreSQL 17 or later"):
            src.start(Checkpoints.at({}))
        return
    try:
        src.start(Checkpoints.at({}))
        assert len(kit.drain(src)) == 1
    finally:
        src.close()
    assert _failover(dsn)() is True


def test_existing_slot_becomes_a_failover_slot(db: tuple[str, int], tmp_path: Path) -> None:
    dsn, version = db
    if version < 170000:
        pytest.skip("failover slots: PostgreSQL 17+")
    src = _source(dsn, tmp_path)
    try:
        src.start(Checkpoints.at({}))
    finally:
        src.close()
    assert _failover(dsn)() is False
    src = _source(dsn, tmp_path, failover_slot=True)
    try:
        src.start(Checkpoints.at({}))
    finally:
        src.close()
    assert _failover(dsn)() is True
