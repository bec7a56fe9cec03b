"""The MySQL/MariaDB source tells its ``source_observer`` the time and bytes of each poll's
binlog reads (mysql-replication's fetch and parse)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoints
from replicator.sources.mysql import MySQLSource
from replicator.sources.observe import SourceObserver

pytestmark = pytest.mark.integration


class Reads(SourceObserver):
    def __init__(self) -> None:
        self.reads: list[tuple[float, int]] = []

    def read(self, seconds: float, nbytes: int) -> None:
        assert seconds >= 0
        self.reads.append((seconds, nbytes))


def test_binlog_reads_are_reported(db: TestDb, make_source: Callable[..., MySQLSource]) -> None:
    db.sql("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
    src = make_source(db, tables=[f"{db.name}.a"])
    src.start(Checkpoints.at({}))
    assert drain(src) == []
    rec = Reads()
    src.source_observer = rec
    db.sql("INSERT INTO a VALUES (1, 'one'), (2, 'two')")
    assert len(drain(src)) == 2
    assert rec.reads and sum(b for _, b in rec.reads) > 0
