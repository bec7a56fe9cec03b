"""The fast read of a snapshot chunk (``sources/mysql/rawchunk.py``): wire packets parsed
column-wise give pymysql's rows and, as a block, the row path's values; a value Arrow
refuses sends the chunk the row path's way. Each test runs with the compiled framing and
split (``replicator.native.text_rows``) and with the pure-Python one."""

from __future__ import annotations

import pymysql
import pytest
from mysql_testkit import TestDb

from replicator import native
from replicator.sources.mysql import setup
from replicator.sources.mysql.rawchunk import TEXT_ROWS, RawChunk
from replicator.sources.mysql.setup import TableInfo
from replicator.sources.mysql.snapshot import SnapshotReader, describe_tables, snap_table

FAST_COLUMNS = """
  id INT PRIMARY KEY, b TINYINT(1), ti TINYINT, siu SMALLINT UNSIGNED, iu INT UNSIGNED, bi BIGINT,
  biu BIGINT UNSIGNED, d DECIMAL(10,2), d0 DECIMAL(5,0), d38 DECIMAL(38,10), f FLOAT, db DOUBLE,
  c CHAR(5), vc VARCHAR(300), tx TEXT, mtx MEDIUMTEXT, lat VARCHAR(10) CHARACTER SET latin1,
  bin BINARY(4), vb VARBINARY(10), bl BLOB, e ENUM('x','y','z'), y YEAR, dt DATE,
  dtm DATETIME(6), dtm0 DATETIME, dtm1 DATETIME(1), ts TIMESTAMP(3) NULL, ts0 TIMESTAMP NULL
"""
FAST_ROWS = (
    "(1, 2, -128, 65535, 4294967295, -9223372036854775808, 18446744073709551615, -12345678.91, "
    "99999, 1234567890123456789012345678.0123456789, 1.2345678, 0.30000000000000004, 'ab', "
    "'héllo 😀 𝄞', REPEAT('ü', 3000), REPEAT('x😀', 40000), 'é', 'ab', 0x00FF10, 0xDEADBEEF00, "
    "'y', 0, '2024-02-29', '2024-01-02 03:04:05.123456', '9999-12-31 23:59:59', "
    "'1000-01-01 00:00:00.5', '2024-01-02 03:04:05.120', '2038-01-19 03:14:07')",
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(3, 0, 0, 0, 0, 0, 0, 0, 0, 0, -3.4e38, 1e-300, '', '', '', '', '', '', '', '', 'x', 2155, "
    "'0001-01-01', '1000-01-01 00:00:00', '2000-02-29 12:00:00', '2000-01-01 00:00:00.1', "
    "'1970-01-01 00:00:01', '2000-01-01 00:00:00')",
)


@pytest.fixture(params=["compiled", "python"])
def framing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setitem(native._loaded, TEXT_ROWS, None)
    elif native.load(TEXT_ROWS) is None:
        pytest.skip("replicator.native is not built")
    return str(request.param)


@pytest.mark.integration
def test_wire_packets_parsed_column_wise_equal_pymysql(db: TestDb, framing: str) -> None:
    """The fast read (``rawchunk.py``): its block and its decoded rows are pymysql's."""
    db.sql(f"CREATE TABLE fast ({FAST_COLUMNS})", f"INSERT INTO fast VALUES {', '.join(FAST_ROWS)}")
    conn = db.connect()
    try:
        info = TableInfo(db.name, "fast", ("id",))
        t = snap_table(info, describe_tables(conn, [info])[info.qualified], "null")
        sql = SnapshotReader(conn, [t], 10)._sql(t)[0] + " ORDER BY id"
        raw = RawChunk(conn, sql, [])
        rows = setup.query(conn, sql)
        assert raw.rows() == rows and len(raw) == 3
        block = raw.block(t.rows.names, [m.spec.type for m in t.mappings], t.rows.snapshot)
        assert block is not None
        for i, row in enumerate(rows):
            want, got = t.rows.from_snapshot(row), dict(block.row(i))
            assert got == want
            assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}
        # a zero date: Arrow refuses it, the chunk goes the row path's way (its zero-date rule)
        db.sql("SET SESSION sql_mode = ''", "INSERT INTO fast (id, dt) VALUES (4, '0000-00-00')")
        raw = RawChunk(conn, sql, [])
        assert len(raw) == 4 and raw.row(3)[22] == "0000-00-00"  # pymysql's text of a zero date
        assert raw.block(t.rows.names, [m.spec.type for m in t.mappings], t.rows.snapshot) is None
        assert raw.rows() == setup.query(conn, sql)
    finally:
        conn.close()


@pytest.mark.integration
def test_row_packets_framed_here_equal_pymysql_over_sequence_wrap_and_big_rows(
    db: TestDb, framing: str
) -> None:
    """``_read_rows`` frames the row packets itself: over 256 rows (the sequence number
    wraps), a row past 16 MiB (continued by a second packet) and NULLs, the packets are
    pymysql's; the connection stays usable; an error packet mid-result raises pymysql's."""
    db.sql("CREATE TABLE f (id INT PRIMARY KEY, v LONGBLOB)")
    db.sql("SET GLOBAL max_allowed_packet = 67108864")  # for new sessions (the default: 16 MiB)
    conn = db.connect()
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO f VALUES (%s, %s)",
                        [(i, None if i % 7 == 0 else bytes([i % 256]) * (i % 50)) for i in range(600)])  # fmt: skip
        cur.execute("INSERT INTO f VALUES (1000, REPEAT('z', 17000000))")
    conn.commit()
    try:
        raw = RawChunk(conn, "SELECT id, v FROM f ORDER BY id", [])
        assert (raw.native is not None) == (framing == "compiled")
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM f ORDER BY id")
            want = list(cur.fetchall())
        assert raw.rows() == want
        assert len(raw) == 601 and len(raw.payload(600)) > 0xFFFFFF
        with pytest.raises(pymysql.err.MySQLError, match="more than 1 row"):  # after rows were sent
            RawChunk(conn, "SELECT id, IF(id = 500, (SELECT 1 UNION SELECT 2), 1) FROM f "
                     "WHERE id < 600 ORDER BY id", [])  # fmt: skip
    finally:
        conn.close()
