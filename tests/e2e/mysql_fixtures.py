"""A private MariaDB (row binlog, FULL metadata) for the MySQL end-to-end tests; a fresh
database and a unique ``server_id`` per test.

pytest only loads ``conftest.py``, so test modules import these fixtures::

    from tests.e2e.mysql_fixtures import mariadb, mysql_db  # noqa: F401

Each importing module gets its own copy of a session fixture, so the server itself is a
process-wide singleton with a reference count: one server per test session, stopped when the
last module's session fixture is torn down.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sample_dbs.mysql.server import PrivateMariaDB, install_template

_db_names = itertools.count()
_server_ids = itertools.count(7000)  # unique per test: one binlog reader per server_id
_lock = threading.Lock()
_shared: dict[str, Any] = {"server": None, "base": None, "users": 0}


def _installed() -> bool:
    return shutil.which("mariadbd") is not None or Path("/usr/sbin/mariadbd").exists()


def _acquire() -> PrivateMariaDB:
    with _lock:
        if _shared["server"] is None:
            base = Path(tempfile.mkdtemp(prefix="rp-e2e-mdb-", dir="/tmp"))
            try:
                template = install_template(base / "template")
                server = PrivateMariaDB(base / "main", template=template).start()
            except BaseException:
                shutil.rmtree(base, ignore_errors=True)
                raise
            _shared.update(server=server, base=base)
        _shared["users"] += 1
        server = _shared["server"]
        assert isinstance(server, PrivateMariaDB)
        return server


def _release() -> None:
    with _lock:
        _shared["users"] -= 1
        if _shared["users"] > 0:
            return
        server, base = _shared["server"], _shared["base"]
        _shared.update(server=None, base=None)
    if server is not None:
        server.stop()
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def mariadb() -> Iterator[PrivateMariaDB]:
    """The session's private MariaDB (never the system server on port 3306)."""
    if not _installed():
        pytest.skip("mariadbd is not installed (apt-get install -y mariadb-server)")
    server = _acquire()
    try:
        yield server
    finally:
        _release()


@dataclass
class MySQLDb:
    """One fresh database on the private server: the replication user's DSN, SQL as root,
    and a ``server_id`` no other test uses."""

    server: PrivateMariaDB
    name: str
    server_id: int

    @property
    def dsn(self) -> str:
        return self.server.dsn_for(dbname=self.name)

    def sql(self, *statements: str) -> list[tuple[Any, ...]]:
        """Statements as root in this database (autocommit); the last one's rows."""
        return self.server.execute(*statements, db=self.name)

    def tx(self, *statements: str) -> None:
        """Statements in one transaction."""
        self.sql("BEGIN", *statements, "COMMIT")

    def connect(self) -> Any:
        """A root pymysql connection to this database (autocommit; ``conn.begin()`` for a
        transaction)."""
        return self.server.connect(db=self.name)


@pytest.fixture
def mysql_db(mariadb: PrivateMariaDB) -> Iterator[MySQLDb]:
    name = f"e2em{next(_db_names)}"
    mariadb.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield MySQLDb(mariadb, name, next(_server_ids))
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")
