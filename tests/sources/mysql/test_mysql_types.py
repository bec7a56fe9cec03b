"""Type mapping: every MySQL type round-trips to the documented Python value, identically
from the binlog and from the snapshot, with the same TableSchema on both paths."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoints
from replicator.events.model import Op
from replicator.events.types import validate_column_type
from replicator.sources.mysql.compat import read_time2
from replicator.sources.mysql.types import (
    ColumnDef,
    compact_json,
    format_time,
    map_column,
)

# -- unit -------------------------------------------------------------------------------------


def test_format_time() -> None:
    assert format_time(timedelta(hours=12)) == "12:00:00"
    assert format_time(timedelta(hours=838, minutes=59, seconds=59)) == "838:59:59"
    assert (
        format_time(-timedelta(hours=838, minutes=59, seconds=59, microseconds=123000))
        == "-838:59:59.123000"
    )
    assert format_time(-timedelta(microseconds=10000)) == "-00:00:00.010000"
    assert format_time(timedelta(seconds=1, microseconds=5)) == "00:00:01.000005"


def test_compact_json_keeps_strings_order_and_numbers() -> None:
    assert (
        compact_json('{"b": 1,  "a": [1, 2.50, "x y"],\n "c": {"d" : "\\" , "}}')
        == '{"b":1,"a":[1,2.50,"x y"],"c":{"d":"\\" , "}}'
    )
    assert compact_json("[]") == "[]"


class _FakePacket:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out


class _Col:
    def __init__(self, fsp: int) -> None:
        self.fsp = fsp


def _time2_bytes(td: timedelta, fsp: int) -> bytes:
    """MySQL's on-disk TIME2 encoding (my_time_packed_to_binary), written independently."""
    us = (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds
    neg, us = us < 0, abs(us)
    secs, frac_us = divmod(us, 1_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    whole = (h << 12) | (m << 6) | s
    fb = (fsp + 1) // 2
    frac = {0: 0, 1: frac_us // 10000, 2: frac_us // 100, 3: frac_us}[fb]
    packed = (whole << (8 * fb)) | frac
    packed = -packed if neg else packed
    return (packed + (0x800000 << (8 * fb))).to_bytes(3 + fb, "big")


@pytest.mark.parametrize("fsp", [0, 1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("us", [0, 10000, 990000, 123000, 1, 999999])
@pytest.mark.parametrize("secs", [0, 1, 59, 3600 * 838 + 59 * 60 + 59, 86400 + 17])
@pytest.mark.parametrize("sign", [1, -1])
def test_time2_decoder(fsp: int, us: int, secs: int, sign: int) -> None:
    unit = {0: 1_000_000, 1: 100_000, 2: 10_000, 3: 1_000, 4: 100, 5: 10, 6: 1}[fsp]
    us = us - us % unit
    td = timedelta(seconds=secs, microseconds=us) * sign
    fake = type("E", (), {"packet": _FakePacket(_time2_bytes(td, fsp))})()
    assert read_time2(fake, _Col(fsp)) == td


def test_every_mapping_is_an_engine_type() -> None:
    defs = [
        ColumnDef("c", t)
        for t in (
            "tinyint",
            "smallint",
            "mediumint",
            "int",
            "bigint",
            "float",
            "double",
            "char",
            "varchar",
            "text",
            "binary",
            "varbinary",
            "blob",
            "enum",
            "set",
            "year",
            "date",
            "time",
            "datetime",
            "timestamp",
            "geometry",
        )
    ]
    defs += [
        ColumnDef("c", "decimal", precision=65, scale=30),
        ColumnDef("c", "bit", length=64),
        ColumnDef("c", "tinyint", is_bool=True),
        ColumnDef("c", "text", is_json=True),
    ]
    for d in defs:
        validate_column_type(map_column(d).spec.type)


# -- integration ------------------------------------------------------------------------------

COLUMNS = """
  id INT PRIMARY KEY,
  b TINYINT(1), b2 BOOLEAN, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d DECIMAL(10,2), d0 DECIMAL(5,0), d38 DECIMAL(38,10), d65 DECIMAL(65,30),
  f FLOAT, db DOUBLE, bt1 BIT(1), bt BIT(10), bt64 BIT(64),
  c CHAR(5), vc VARCHAR(300), tx TEXT, mtx MEDIUMTEXT, lat VARCHAR(10) CHARACTER SET latin1,
  bin BINARY(4), vb VARBINARY(10), bl BLOB,
  j JSON, e ENUM('x','y','z'), s SET('a','b','c'), y YEAR,
  dt DATE, tm TIME(3), tm0 TIME, tm6 TIME(6), dtm DATETIME(6), dtm0 DATETIME, dtm1 DATETIME(1),
  ts TIMESTAMP(3) NULL, ts0 TIMESTAMP NULL, g POINT NULL
"""

ROW1 = (
    "1, 1, 0, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, "
    "-9223372036854775808, 18446744073709551615, "
    "-12345678.91, 99999, 1234567890123456789012345678.0123456789, "
    "-123456789012345678901234567890.123456789012345678901234567891, "
    "1.2345678, 0.30000000000000004, b'1', b'1010101010', "
    "b'1111111111111111111111111111111111111111111111111111111111111111', "
    "'ab', 'héllo 😀 𝄞', REPEAT('ü', 3000), REPEAT('x😀', 40000), 'é', "
    "'ab', 0x00FF10, 0xDEADBEEF00, "
    "'{\"b\": 1,  \"a\": [1, 2.50, \"x y\"]}', 'y', 'c,a', 0, "
    "'2024-02-29', '-838:59:59.123', '12:00:00', '-00:00:01.000001', "
    "'2024-01-02 03:04:05.123456', '9999-12-31 23:59:59', '1000-01-01 00:00:00.5', "
    "'2024-01-02 03:04:05.120', '2038-01-19 03:14:07', ST_GeomFromText('POINT(1 2)')"
)

EXPECTED1: dict[str, Any] = {
    "id": 1,
    "b": True,
    "b2": False,
    "ti": -128,
    "tiu": 255,
    "si": -32768,
    "siu": 65535,
    "mi": -8388608,
    "miu": 16777215,
    "i": -2147483648,
    "iu": 4294967295,
    "bi": -9223372036854775808,
    "biu": Decimal(18446744073709551615),
    "d": Decimal("-12345678.91"),
    "d0": Decimal(99999),
    "d38": Decimal("1234567890123456789012345678.0123456789"),
    "d65": "-123456789012345678901234567890.123456789012345678901234567891",
    "f": struct.unpack("<f", struct.pack("<f", 1.2345678))[0],
    "db": 0.30000000000000004,
    "bt1": 1,
    "bt": 0b1010101010,
    "bt64": Decimal(2**64 - 1),
    "c": "ab",
    "vc": "héllo 😀 𝄞",
    "tx": "ü" * 3000,
    "mtx": "x😀" * 40000,
    "lat": "é",
    "bin": b"ab\x00\x00",
    "vb": b"\x00\xff\x10",
    "bl": b"\xde\xad\xbe\xef\x00",
    "j": '{"b":1,"a":[1,2.50,"x y"]}',
    "e": "y",
    "s": "a,c",
    "y": 0,
    "dt": date(2024, 2, 29),
    "tm": "-838:59:59.123000",
    "tm0": "12:00:00",
    "tm6": "-00:00:01.000001",
    "dtm": datetime(2024, 1, 2, 3, 4, 5, 123456),
    "dtm0": datetime(9999, 12, 31, 23, 59, 59),
    "dtm1": datetime(1000, 1, 1, 0, 0, 0, 500000),
    "ts": datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=UTC),
    "ts0": datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC),
    "g": b"\x00" * 4 + b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.0, 2.0),  # SRID + WKB
}

EMPTY = (
    "INSERT INTO alltypes (id, c, vc, tx, bin, vb, bl, j, e, s, bt, tm, d) "
    "VALUES ({}, '', '', '', '', '', '', '[]', 'x', '', b'0', '00:00:00', 0)"
)
EMPTY_WANT: dict[str, Any] = {
    "c": "",
    "vc": "",
    "tx": "",
    "bin": b"\x00" * 4,
    "vb": b"",
    "bl": b"",
    "j": "[]",
    "e": "x",
    "s": "",
    "bt": 0,
    "tm": "00:00:00",
    "d": Decimal("0.00"),
}

TYPES: dict[str, str] = {
    "id": "int",
    "b": "boolean",
    "b2": "boolean",
    "ti": "int",
    "tiu": "int",
    "si": "int",
    "siu": "int",
    "mi": "int",
    "miu": "int",
    "i": "int",
    "iu": "long",
    "bi": "long",
    "biu": "decimal(20,0)",
    "d": "decimal(10,2)",
    "d0": "decimal(5,0)",
    "d38": "decimal(38,10)",
    "d65": "string",
    "f": "float",
    "db": "double",
    "bt1": "long",
    "bt": "long",
    "bt64": "decimal(20,0)",
    "c": "string",
    "vc": "string",
    "tx": "string",
    "mtx": "string",
    "lat": "string",
    "bin": "binary",
    "vb": "binary",
    "bl": "binary",
    "j": "string",
    "e": "string",
    "s": "string",
    "y": "int",
    "dt": "date",
    "tm": "string",
    "tm0": "string",
    "tm6": "string",
    "dtm": "timestamp",
    "dtm0": "timestamp",
    "dtm1": "timestamp",
    "ts": "timestamptz",
    "ts0": "timestamptz",
    "g": "binary",
}


@pytest.mark.integration
@pytest.mark.parametrize("blocks", [0, 1])
def test_every_type_round_trips(db: TestDb, make_source: Callable[..., Any], blocks: int) -> None:
    """Row by row and as blocks (a block's old image is its key)."""
    db.sql(f"CREATE TABLE alltypes ({COLUMNS})")
    db.sql(
        f"INSERT INTO alltypes VALUES ({ROW1})",
        "INSERT INTO alltypes (id) VALUES (2)",
        EMPTY.format(3),
    )
    src = make_source(db, tables=[f"{db.name}.alltypes"], change_blocks=blocks)
    src.start(Checkpoints.at({}))
    snap = drain(src)
    assert [e.op for e in snap] == [Op.READ, Op.READ, Op.READ]
    db.sql(
        f"INSERT INTO alltypes VALUES ({ROW1.replace('1, ', '11, ', 1)})",
        "INSERT INTO alltypes (id) VALUES (12)",
        "UPDATE alltypes SET id = 13 WHERE id = 12",
        "DELETE FROM alltypes WHERE id = 11",
        EMPTY.format(14),
    )
    stream = drain(src)
    assert [e.op for e in stream] == [Op.CREATE, Op.CREATE, Op.UPDATE, Op.DELETE, Op.CREATE]
    for empty in (snap[2].after, stream[4].after):
        assert empty is not None
        assert {k: empty[k] for k in EMPTY_WANT} == EMPTY_WANT
        assert all(type(empty[k]) is type(v) for k, v in EMPTY_WANT.items())

    snap_schema, stream_schema = snap[0].schema_, stream[0].schema_
    assert snap_schema is not None and stream_schema is not None
    assert {c.name: c.type for c in stream_schema.columns} == TYPES
    assert snap_schema.columns == stream_schema.columns  # source_type included
    assert snap_schema.key_columns == stream_schema.key_columns == ("id",)

    assert stream[3].before is not None and stream[3].before["id"] == 11
    for got in (snap[0].after, stream[0].after, *([stream[3].before] if not blocks else [])):
        assert got is not None
        for name, want in EXPECTED1.items():
            if name == "id":
                continue
            assert got[name] == want, name
            assert type(got[name]) is type(want), name
    nulls = {k: None for k in EXPECTED1 if k != "id"}
    assert {k: v for k, v in (snap[1].after or {}).items() if k != "id"} == nulls
    old = {"id": 12, **nulls} if not blocks else {"id": 12}
    assert stream[2].before == old and stream[2].after == {"id": 13, **nulls}


@pytest.mark.integration
@pytest.mark.parametrize("policy", ["null", "dead-letter"])
def test_zero_dates(db: TestDb, make_source: Callable[..., Any], policy: str) -> None:
    db.sql(
        "CREATE TABLE z (id INT PRIMARY KEY, d DATE, dt DATETIME(3), ts TIMESTAMP NULL, y YEAR, "
        "s SET('a','b'))",
        "CREATE TABLE zk (d DATE PRIMARY KEY, v INT)",
    )
    zero = (
        "SET SESSION sql_mode = ''",
        "INSERT INTO z VALUES "
        "(1, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 0, '')",
        "INSERT INTO z VALUES (2, '2020-00-15', '2020-02-00 10:00:00', NULL, 2024, 'b')",
        "INSERT INTO zk VALUES ('0000-00-00', 1)",
    )
    db.sql(*zero)
    src = make_source(db, tables=[f"{db.name}.z", f"{db.name}.zk"], zero_dates=policy)
    src.start(Checkpoints.at({}))
    snap = drain(src)
    db.sql("DELETE FROM z", "DELETE FROM zk", *zero)
    stream = drain(src)
    lines = src.dead_letters.path.read_text().splitlines()
    if policy == "dead-letter":  # every new row with a zero date, in snapshot and stream
        assert snap == []
        # A delete needs only the old row's key: applied unless the key itself is bad (zk).
        assert [(e.op, e.before) for e in stream] == [(Op.DELETE, {"id": 1}), (Op.DELETE, {"id": 2})]
        assert src.stats.keyed_before_images == 2
        assert src.stats.dead_letters == len(lines) == 7
        assert all('"position":"mysql:' in ln and '"table":"' in ln for ln in lines)
        return
    want = {
        1: {"d": None, "dt": None, "ts": None, "y": 0, "s": ""},
        2: {"d": None, "dt": None, "ts": None, "y": 2024, "s": "b"},
    }
    for events in (snap, [e for e in stream if e.op is Op.CREATE]):
        got = {
            e.after["id"]: {k: v for k, v in e.after.items() if k != "id"}
            for e in events
            if e.after
        }
        assert got == want
    assert [e.op for e in stream] == [Op.DELETE, Op.DELETE, Op.CREATE, Op.CREATE]
    # A zero date in a key column has no usable value: the row is dead-lettered with table,
    # key and position (snapshot row, stream delete, stream insert).
    assert src.stats.dead_letters == len(lines) == 3
    assert all(f'"table":"{db.name}.zk"' in ln and '"key":{"d":' in ln for ln in lines)
    assert src.zero_dates_nulled == 3 * 5  # snapshot, delete images, inserts
