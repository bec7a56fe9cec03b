"""Every mapped MySQL/MariaDB type, through the engine into Iceberg (snapshot and binlog),
read back by Iceberg Java (Spark) and DuckDB; zero dates become nulls, or dead letters in a
key column."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from replicator.pipeline.runner import Replicator
from tests.e2e.mysql_fixtures import MySQLDb, mariadb, mysql_db  # noqa: F401
from tests.e2e.mysql_support import (
    first_diff,
    iceberg_metadata,
    iceberg_schema,
    load,
    source_rows,
    source_tables,
    write_config,
)
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

COLUMNS = """
  id INT PRIMARY KEY,
  b TINYINT(1), b2 BOOLEAN, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(10,2), d0 DECIMAL(5,0), d38 DECIMAL(38,10), d65 DECIMAL(65,30),
  f FLOAT, db DOUBLE, bt1 BIT(1), bt BIT(10), bt64 BIT(64),
  c CHAR(5), vc VARCHAR(300), tx TEXT, mtx MEDIUMTEXT, lat VARCHAR(10) CHARACTER SET latin1,
  bin BINARY(4), vb VARBINARY(10), bl BLOB, lbl LONGBLOB,
  j JSON, e ENUM('x','y','z'), s SET('a','b','c'), y YEAR,
  dt DATE, tm TIME(3), tm0 TIME, tm6 TIME(6), dtm DATETIME(6), dtm0 DATETIME,
  ts TIMESTAMP(6) NULL, ts0 TIMESTAMP NULL, g POINT NULL
"""
NAMES = [ln.split()[0] for part in COLUMNS.strip().splitlines()
         for ln in part.split(", ") if ln.strip()]

# Extremes: BIGINT UNSIGNED far above 2^63, DECIMAL(65,30) (a string in Iceberg), 4-byte
# UTF-8, a TIMESTAMP written in session zone +02:00 (stored and replicated as UTC).
ROW_MAX = (
    "{id}, 1, 0, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, "
    "-9223372036854775808, 18446744073709551615, "
    "-12345678.91, 99999, 1234567890123456789012345678.0123456789, "
    "-123456789012345678901234567890.123456789012345678901234567891, "
    "1.2345678, 0.30000000000000004, b'1', b'1010101010', "
    "b'1111111111111111111111111111111111111111111111111111111111111111', "
    "'ab', 'héllo 😀 𝄞', REPEAT('ü', 3000), REPEAT('x😀', 40000), 'é', "
    "'ab', 0x00FF10, 0xDEADBEEF00, REPEAT(0xFE00, 50000), "
    "'{{\"b\": 1,  \"a\": [1, 2.50, \"x y\"], \"é\": \"😀\"}}', 'y', 'c,a', 2155, "
    "'2024-02-29', '-838:59:59.123', '12:00:00', '-00:00:01.000001', "
    "'2024-01-02 03:04:05.123456', '9999-12-31 23:59:59', "
    "'2024-06-01 12:00:00.654321', '2038-01-19 05:14:07', ST_GeomFromText('POINT(1 2)')"
)
# The other ends: just above 2^63, zero-ish values, the oldest date / datetime the Spark
# stage reads today (see test_ancient_dates_*).
ROW_MIN = (
    "{id}, 0, 1, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, "
    "9223372036854775807, 9223372036854775808, "
    "0.01, -99999, -0.0000000001, 0.000000000000000000000000000001, "
    "-3.4e38, -1.7976931348623157e308, b'0', b'0', b'0', "
    "'', '', '', '', '', '', '', '', '', '[]', 'x', '', 1901, "
    "'1582-10-15', '00:00:00', '838:59:59', '23:59:59.999999', "
    "'1900-01-01 00:00:00.000001', '1970-01-01 00:00:00', "
    "'1970-01-01 02:00:01', '2000-01-01 02:00:00', NULL"
)
# Zero dates (permissive sql_mode): no value in Iceberg, replicated as null.
ZERO = (
    "INSERT INTO all_types (id, dt, dtm, dtm0, ts0, y) VALUES "
    "({id}, '0000-00-00', '0000-00-00 00:00:00', '2020-00-15 10:00:00', '0000-00-00 00:00:00', 0)"
)
SESSION = ("SET SESSION time_zone = '+02:00'", "SET SESSION sql_mode = ''")

TYPES = {
    "id": "int", "b": "boolean", "b2": "boolean", "ti": "int", "tiu": "int", "si": "int",
    "siu": "int", "mi": "int", "miu": "int", "i": "int", "iu": "long", "bi": "long",
    "biu": "decimal(20, 0)", "d": "decimal(10, 2)", "d0": "decimal(5, 0)",
    "d38": "decimal(38, 10)", "d65": "string", "f": "float", "db": "double", "bt1": "long",
    "bt": "long", "bt64": "decimal(20, 0)", "c": "string", "vc": "string", "tx": "string",
    "mtx": "string", "lat": "string", "bin": "binary", "vb": "binary", "bl": "binary",
    "lbl": "binary", "j": "string", "e": "string", "s": "string", "y": "int", "dt": "date",
    "tm": "string", "tm0": "string", "tm6": "string", "dtm": "timestamp", "dtm0": "timestamp",
    "ts": "timestamptz", "ts0": "timestamptz", "g": "binary",
}


def f32(v: float) -> float:
    return float(struct.unpack("f", struct.pack("f", v))[0])


# What the engine must hold for ROW_MAX / ROW_MIN (independent of the source's converters).
WANT_MAX: dict[str, Any] = {
    "b": True, "b2": False, "tiu": 255, "iu": 4294967295, "bi": -(2**63),
    "biu": Decimal(2**64 - 1), "d": Decimal("-12345678.91"),
    "d38": Decimal("1234567890123456789012345678.0123456789"),
    "d65": "-123456789012345678901234567890.123456789012345678901234567891",
    "f": f32(1.2345678), "db": 0.30000000000000004, "bt1": 1, "bt": 0b1010101010,
    "bt64": Decimal(2**64 - 1), "c": "ab", "vc": "héllo 😀 𝄞", "mtx": "x😀" * 40000, "lat": "é",
    "bin": b"ab\x00\x00", "vb": b"\x00\xff\x10", "lbl": b"\xfe\x00" * 50000,
    "j": '{"b":1,"a":[1,2.50,"x y"],"é":"😀"}', "e": "y", "s": "a,c", "y": 2155,
    "dt": date(2024, 2, 29), "tm": "-838:59:59.123000", "tm6": "-00:00:01.000001",
    "dtm": datetime(2024, 1, 2, 3, 4, 5, 123456), "dtm0": datetime(9999, 12, 31, 23, 59, 59),
    "ts": datetime(2024, 6, 1, 10, 0, 0, 654321, tzinfo=UTC),  # written at +02:00
    "ts0": datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC),
    "g": b"\x00" * 4 + b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.0, 2.0),
}
WANT_MIN: dict[str, Any] = {
    "bi": 2**63 - 1, "biu": Decimal(2**63), "d38": Decimal("-0.0000000001"),
    "d65": "0.000000000000000000000000000001", "f": f32(-3.4e38),
    "db": -1.7976931348623157e308, "bt64": Decimal(0), "c": "", "bin": b"\x00" * 4, "vb": b"",
    "j": "[]", "s": "", "y": 1901, "dt": date(1582, 10, 15), "tm": "00:00:00", "tm0": "838:59:59",
    "dtm": datetime(1900, 1, 1, 0, 0, 0, 1), "dtm0": datetime(1970, 1, 1),
    "ts": datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), "g": None,
}


def _check(loc: str, expected: list[dict[str, Any]]) -> None:
    cols = list(expected[0])
    for name, judge in (("Spark", spark_rows), ("DuckDB", duckdb_rows)):
        got = [{c: r[c] for c in cols} for r in judge(loc, order_by=["id"])]
        assert got == expected, f"{name}: {first_diff(got, expected)}"


def test_every_mapped_type(tmp_path: Path, mysql_db: MySQLDb, spark: Any) -> None:  # noqa: F811
    mysql_db.sql(
        f"CREATE TABLE all_types ({COLUMNS})", *SESSION,
        f"INSERT INTO all_types VALUES ({ROW_MAX.format(id=1)})",
        f"INSERT INTO all_types VALUES ({ROW_MIN.format(id=2)})",
        "INSERT INTO all_types (id) VALUES (3)", ZERO.format(id=4),
    )
    cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id)
    snap = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert snap.events_seen == 4
    table = f"{mysql_db.name}.all_types"
    assert iceberg_schema(cfg_path, table) == TYPES
    # The same rows through the binlog: inserts, an update to the other extreme and back.
    mysql_db.sql(
        *SESSION,
        f"INSERT INTO all_types VALUES ({ROW_MAX.format(id=11)})",
        f"INSERT INTO all_types VALUES ({ROW_MIN.format(id=12)})",
        "INSERT INTO all_types (id) VALUES (13)", ZERO.format(id=14),
        f"INSERT INTO all_types VALUES ({ROW_MIN.format(id=15)})",
        f"REPLACE INTO all_types VALUES ({ROW_MAX.format(id=15)})",
        f"INSERT INTO all_types VALUES ({ROW_MAX.format(id=16)})",
        "UPDATE all_types SET biu = 9223372036854775809, j = '{\"k\": [true, null]}', "
        "s = 'b,a,c', e = 'z', ts = '2024-12-31 23:30:00' WHERE id = 16",
        "DELETE FROM all_types WHERE id = 2",
    )
    stream = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert stream.dead_letters == 0 and not stream.stopped
    info = next(t for t in source_tables(mysql_db.dsn) if t.name == "all_types")
    expected = source_rows(mysql_db.dsn, info)
    assert [r["id"] for r in expected] == [1, 3, 4, 11, 12, 13, 14, 15, 16]
    by_id = {r["id"]: r for r in expected}
    for rid in (1, 11, 15):
        assert {k: by_id[rid][k] for k in WANT_MAX} == WANT_MAX, rid
    assert {k: by_id[12][k] for k in WANT_MIN} == WANT_MIN
    assert all(v is None for k, v in by_id[13].items() if k != "id")
    for rid in (4, 14):  # zero dates: null; year 0000 stays 0
        assert {k: by_id[rid][k] for k in ("dt", "dtm", "dtm0", "ts0", "y")} == {
            "dt": None, "dtm": None, "dtm0": None, "ts0": None, "y": 0}
    assert (by_id[16]["biu"], by_id[16]["j"], by_id[16]["s"], by_id[16]["ts"]) == (
        Decimal(2**63 + 1), '{"k":[true,null]}', "a,b,c",
        datetime(2024, 12, 31, 21, 30, tzinfo=UTC))
    _check(iceberg_metadata(load(cfg_path), table), expected)


def test_string_keys_and_zero_date_keys(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    """String keys with 4-byte characters and case differences (binary collation) are updated
    and deleted by key; a zero date in a key column has no value: the row is dead-lettered
    with table, key and position, in the snapshot and in the stream."""
    mysql_db.sql(
        "CREATE TABLE tk (k VARCHAR(20) COLLATE utf8mb4_bin PRIMARY KEY, v INT)",
        "CREATE TABLE zk (d DATE PRIMARY KEY, v INT)",
        "INSERT INTO tk VALUES ('b', 1), ('B', 2), ('ä', 3), ('😀', 4), ('z😀z', 5)",
        "SET SESSION sql_mode = ''",
        "INSERT INTO zk VALUES ('0000-00-00', 1), ('2024-01-01', 2)",
    )
    cfg_path = write_config(tmp_path, mysql_db.dsn, server_id=mysql_db.server_id)
    first = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert first.dead_letters == 1
    mysql_db.sql(
        "UPDATE tk SET v = 20 WHERE k = 'B'", "UPDATE tk SET k = '😀😀' WHERE k = '😀'",
        "DELETE FROM tk WHERE k = 'b'", "INSERT INTO tk VALUES ('b ', 6)",
        "SET SESSION sql_mode = ''",
        "INSERT INTO zk VALUES ('2020-00-01', 3), ('2024-01-02', 4)",
        "UPDATE zk SET v = 22 WHERE d = '2024-01-01'",
    )
    second = Replicator(load(cfg_path), engine="spark", spark=spark).run(until_idle=True)
    assert second.dead_letters == 1
    cfg = load(cfg_path)
    dead: list[tuple[Any, ...]] = []
    for info in source_tables(mysql_db.dsn):
        expected = source_rows(mysql_db.dsn, info, dead=dead)  # without zero-date keys
        loc = iceberg_metadata(cfg, info.qualified)
        keys = list(info.pk_columns)
        for name, judge in (("Spark", spark_rows), ("DuckDB", duckdb_rows)):
            got = judge(loc, order_by=keys)
            assert got == expected, f"{name} on {info.qualified}: {first_diff(got, expected)}"
    assert len(dead) == 2  # '0000-00-00' and '2020-00-01' keys
    tk = spark_rows(iceberg_metadata(cfg, f"{mysql_db.name}.tk"), order_by=["k"])
    assert tk == [{"k": "B", "v": 20}, {"k": "b ", "v": 6}, {"k": "z😀z", "v": 5},
                  {"k": "ä", "v": 3}, {"k": "😀😀", "v": 4}]
    letters = [orjson.loads(ln) for ln in cfg.dead_letter_path.read_text().splitlines()]
    assert len(letters) == 2
    for d in letters:
        assert d["table"] == f"{mysql_db.name}.zk"
        assert d["position"].startswith("mysql:") and "'d'" in d["reason"]
        assert d["key"] is not None and "d" in d["key"]


ANCIENT = (
    "CREATE TABLE old (id INT PRIMARY KEY, d DATE, dtm DATETIME(6))",
    "INSERT INTO old VALUES (1, '1000-01-01', '1000-01-01 00:00:00.000001'), "
    "(2, '0001-01-01', '1899-12-31 23:59:59'), (3, '1582-10-04', '1582-10-04 12:00:00')",
)
ANCIENT_WANT: list[dict[str, Any]] = [
    {"id": 1, "d": date(1000, 1, 1), "dtm": datetime(1000, 1, 1, 0, 0, 0, 1)},
    {"id": 2, "d": date(1, 1, 1), "dtm": datetime(1899, 12, 31, 23, 59, 59)},
    {"id": 3, "d": date(1582, 10, 4), "dtm": datetime(1582, 10, 4, 12)},
]


def _ancient(tmp_path: Path, db: MySQLDb, engine: str, spark: Any) -> None:
    db.sql(*ANCIENT)
    cfg_path = write_config(tmp_path, db.dsn, server_id=db.server_id)
    Replicator(load(cfg_path), engine=engine, spark=spark).run(until_idle=True)  # snapshot
    db.sql("INSERT INTO old SELECT id + 10, d, dtm FROM old")
    Replicator(load(cfg_path), engine=engine, spark=spark).run(until_idle=True)  # stream
    info = next(t for t in source_tables(db.dsn) if t.name == "old")
    want = ANCIENT_WANT + [{**r, "id": r["id"] + 10} for r in ANCIENT_WANT]
    assert source_rows(db.dsn, info) == want
    _check(iceberg_metadata(load(cfg_path), info.qualified), want)


def test_ancient_dates_local_engine(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    """Dates before 1582-10-15 and timestamps before 1900 (proleptic Gregorian, as MySQL
    stores them) are written and read back exactly by both judges."""
    _ancient(tmp_path, mysql_db, "local", spark)


def test_ancient_dates_spark_engine(
    tmp_path: Path, mysql_db: MySQLDb, spark: Any  # noqa: F811
) -> None:
    _ancient(tmp_path, mysql_db, "spark", spark)
