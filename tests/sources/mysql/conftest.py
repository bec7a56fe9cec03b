"""Fixtures for the MySQL source tests: one private MariaDB per session (never the system
server on 3306), started from a template installed once; a fresh database per test; a
source factory that closes what it opened; extra throw-away servers on demand."""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # sample_dbs/ is not an installed package
    sys.path.insert(0, str(ROOT))
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from mysql_testkit import TestDb  # noqa: E402

from replicator.events.deadletter import DeadLetterSink  # noqa: E402
from replicator.sources.mysql import MySQLSource  # noqa: E402
from sample_dbs.mysql.server import PrivateMariaDB, install_template  # noqa: E402

_counter = itertools.count()
_server_ids = itertools.count(5000)


@pytest.fixture(scope="session")
def mysql_base() -> Iterator[Path]:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.skip("mariadbd is not installed (apt-get install -y mariadb-server)")
    base = Path(tempfile.mkdtemp(prefix="rp-mdbtest-", dir="/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def mysql_template(mysql_base: Path) -> Path:
    return install_template(mysql_base / "template")


@pytest.fixture(scope="session")
def mariadb(mysql_base: Path, mysql_template: Path) -> Iterator[PrivateMariaDB]:
    with PrivateMariaDB(mysql_base / "main", template=mysql_template) as db:
        yield db


@pytest.fixture
def extra_server(mysql_base: Path, mysql_template: Path) -> Iterator[Callable[..., PrivateMariaDB]]:
    """Start further private servers (e.g. without a binlog); stopped after the test."""
    started: list[PrivateMariaDB] = []

    def start(**kw: Any) -> PrivateMariaDB:
        db = PrivateMariaDB(mysql_base / f"extra{next(_counter)}", template=mysql_template, **kw)
        started.append(db.start())
        return db

    yield start
    for db in started:
        db.stop()


@pytest.fixture
def db(mariadb: PrivateMariaDB) -> Iterator[TestDb]:
    """A fresh database on the session server for one test."""
    name = f"t{next(_counter)}"
    mariadb.execute(f"CREATE DATABASE `{name}`")
    yield TestDb(mariadb, name)
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def make_source(tmp_path: Path) -> Iterator[Callable[..., MySQLSource]]:
    """``make_source(db, tables=[...], **kw)``: a MySQLSource with its own server_id (two
    readers with one server_id would cut each other off), closed after the test."""
    made: list[MySQLSource] = []

    def make(db: TestDb, **kw: Any) -> MySQLSource:
        kw.setdefault("dead_letters", DeadLetterSink(tmp_path / f"dead{len(made)}.jsonl"))
        kw.setdefault("server_id", next(_server_ids))
        kw.setdefault("progress", False)
        kw.setdefault("poll_wait_s", 0.05)  # an empty poll waits this long (drain ends on one)
        src = MySQLSource(db.dsn, **kw)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()
