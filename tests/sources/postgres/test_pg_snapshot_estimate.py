"""A snapshot's progress total is what is left to read: a resumed table counts only the rows
after its resume key (the planner's estimate), and an estimate that fails costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.snapshot import SnapshotReader, text_loaders


def test_a_resumed_snapshot_estimates_the_rows_left(pg_dsn: str, sql: Callable[..., Any]) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY, v text)")
    sql("CREATE TABLE u (id int PRIMARY KEY)")
    sql("INSERT INTO t SELECT g, 'x' FROM generate_series(1, 10000) g")
    sql("INSERT INTO u SELECT g FROM generate_series(1, 500) g")
    sql("ANALYZE t")
    sql("ANALYZE u")
    oids = dict(sql("SELECT relname, oid FROM pg_class WHERE relname IN ('t', 'u')"))
    tables = [TableInfo(oids[n], "public", n, "d", ("id",)) for n in ("t", "u")]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        text_loaders(conn)  # as the source's snapshot connection
        assert 9_500 <= SnapshotReader(conn, tables, {}, 1000).estimated_rows() <= 11_000
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        resumed = SnapshotReader(conn, tables, {}, 1000, last_key=("8000",))
        assert 2_000 <= resumed.estimated_rows() <= 3_000  # ~2,000 of t and 500 of u
        # A key the server cannot compare: no estimate for that table, and the snapshot's
        # transaction goes on.
        bad = SnapshotReader(conn, tables, {}, 1000, last_key=("not a number",))
        assert bad.estimated_rows() == 500
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("SELECT count(*) FROM t").fetchone() == ("10000",)
