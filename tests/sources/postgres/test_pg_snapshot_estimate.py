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


def test_a_partitioned_table_estimates_its_partitions_rows(pg_dsn: str, sql: Callable[..., Any]) -> None:
    sql("CREATE TABLE p (id int PRIMARY KEY) PARTITION BY RANGE (id);"
        " CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (5000);"
        " CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (5000) TO (20000) PARTITION BY HASH (id);"
        " CREATE TABLE p2a PARTITION OF p2 FOR VALUES WITH (MODULUS 2, REMAINDER 0);"
        " CREATE TABLE p2b PARTITION OF p2 FOR VALUES WITH (MODULUS 2, REMAINDER 1)")
    sql("INSERT INTO p SELECT g FROM generate_series(1, 8000) g")
    sql("ANALYZE p")
    (oid,) = sql("SELECT 'p'::regclass::oid")[0]
    tables = [TableInfo(oid, "public", "p", "d", ("id",), relkind="p")]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        text_loaders(conn)
        assert 7_500 <= SnapshotReader(conn, tables, {}, 1000).estimated_rows() <= 8_500
