"""copy_out: the bytes psycopg's Copy gives, and psycopg's errors when COPY fails."""

from __future__ import annotations

import psycopg
import pytest

from replicator.sources.postgres.copy_out import copy_out

ROWS = "SELECT g, repeat('x', g % 50), 'a,\"b\nc' FROM generate_series(1, 20000) g"


def test_copy_out_gives_what_psycopg_copy_gives(pg_dsn: str) -> None:
    query = f"COPY ({ROWS}) TO STDOUT (FORMAT csv)"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        want = bytearray()
        with conn.cursor() as cur, cur.copy(query) as copy:
            for data in copy:
                want += data
        assert copy_out(conn, query) == bytes(want)
        assert copy_out(conn, "COPY (SELECT 1 WHERE false) TO STDOUT (FORMAT csv)") == b""
        assert conn.execute("SELECT 41 + 1").fetchone() == (42,)  # the connection goes on


def test_copy_out_raises_psycopgs_errors(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            copy_out(conn, "COPY (SELECT * FROM no_such_table) TO STDOUT")
        # Fails after rows were sent: the error, not a short result.
        with pytest.raises(psycopg.errors.DivisionByZero):
            copy_out(conn, "COPY (SELECT 1 / (20000 - g) FROM generate_series(1, 30000) g) TO STDOUT")
        with pytest.raises(psycopg.ProgrammingError):
            copy_out(conn, "SELECT 1")  # not a COPY TO STDOUT
        assert conn.execute("SELECT 1").fetchone() == (1,)
