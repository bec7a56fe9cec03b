"""Type mapping: unit tests of the mapper/converters and every listed type end to end
(snapshot path and stream path must produce identical values and schemas)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pg_testkit as kit
import pytest

from replicator.checkpoint import Checkpoints
from replicator.events.model import Op
from replicator.sources.postgres.types import (
    PgTypeInfo,
    RowConverter,
    TypeMapper,
    ValueConversionError,
    decimal_converter,
    numeric_typmod,
    to_timestamptz,
)


def nm(p: int, s: int) -> int:
    return ((p << 16) | (s & 0x7FF)) + 4


@pytest.mark.parametrize(
    ("oid", "typmod", "engine", "source"),
    [
        (21, -1, "int", "smallint"),
        (23, -1, "int", "integer"),
        (20, -1, "long", "bigint"),
        (1700, nm(10, 2), "decimal(10,2)", "numeric(10,2)"),
        (1700, -1, "string", "numeric"),  # exact text: every value kept (issue 10 item 3)
        (1700, nm(50, 5), "string", "numeric(50,5)"),
        (1700, nm(3, -2), "decimal(5,0)", "numeric(3,-2)"),
        (1700, nm(2, 4), "decimal(4,4)", "numeric(2,4)"),
        (700, -1, "float", "real"),
        (701, -1, "double", "double precision"),
        (16, -1, "boolean", "boolean"),
        (25, -1, "string", "text"),
        (1043, 24, "string", "character varying(20)"),
        (1042, 9, "string", "character(5)"),
        (17, -1, "binary", "bytea"),
        (2950, -1, "string", "uuid"),
        (114, -1, "string", "json"),
        (3802, -1, "string", "jsonb"),
        (1186, -1, "string", "interval"),
        (1083, -1, "string", "time without time zone"),
        (1266, -1, "string", "time with time zone"),
        (1082, -1, "date", "date"),
        (1114, -1, "timestamp", "timestamp without time zone"),
        (1184, -1, "timestamptz", "timestamp with time zone"),
    ],
)
def test_builtin_mapping(oid: int, typmod: int, engine: str, source: str) -> None:
    col = TypeMapper().column("c", oid, typmod)
    assert (col.spec.type, col.spec.source_type) == (engine, source)


def test_catalog_types_enum_array_domain() -> None:
    infos = {
        16400: PgTypeInfo(16400, "public", "mood", "e", "E"),
        1007: PgTypeInfo(1007, "pg_catalog", "_int4", "b", "A"),
        16410: PgTypeInfo(16410, "public", "price", "d", "N", base_oid=1700, base_typmod=nm(8, 2)),
        16420: PgTypeInfo(16420, "public", "pos", "d", "N", base_oid=16410, base_typmod=-1),
    }
    calls: list[int] = []

    def lookup(oid: int) -> PgTypeInfo | None:
        calls.append(oid)
        return infos.get(oid)

    m = TypeMapper(lookup)
    assert m.column("c", 16400, -1).spec.type == "string"
    assert m.column("c", 1007, -1).spec.type == "string"
    price = m.column("c", 16410, -1)
    assert price.spec.type == "decimal(8,2)" and price.convert is not None
    assert price.convert("1.25") == Decimal("1.25")
    assert m.column("c", 16420, -1).spec.type == "decimal(8,2)"  # domain over a domain
    assert m.column("c", 99999, -1).spec.type == "string"  # unknown: its text
    m.column("c", 16400, -1)
    assert calls.count(16400) == 1  # looked up once


def test_numeric_typmod() -> None:
    assert numeric_typmod(-1) is None
    assert numeric_typmod(nm(38, 10)) == (38, 10)
    assert numeric_typmod(nm(5, -3)) == (5, -3)


def test_unconstrained_numeric_rules() -> None:
    conv = decimal_converter(38, 10)
    assert conv("1.5") == Decimal("1.5")
    assert conv("-0.0000000001") == Decimal("-1E-10")
    assert conv("1234567890123456789012345678.5") == Decimal("1234567890123456789012345678.5")
    for bad in ("0.00000000001", "12345678901234567890123456789", "NaN", "Infinity"):
        with pytest.raises(ValueError):
            conv(bad)
    assert TypeMapper(unconstrained_numeric="string").column("c", 1700, -1).spec.type == "string"
    # The default: exact text, nothing rounded or rejected (issue 10 item 3).
    free = TypeMapper().column("c", 1700, -1)
    assert (free.spec.type, free.convert) == ("string", None)


def test_timestamptz_normalised_to_utc() -> None:
    v = to_timestamptz("2024-02-29 23:30:00+05:30")
    assert v == datetime(2024, 2, 29, 18, 0, tzinfo=UTC) and v.tzinfo is UTC
    assert to_timestamptz("2024-01-01 00:00:00+00").tzinfo is UTC
    with pytest.raises(ValueError):
        to_timestamptz("0001-01-01 00:30:00+01")  # before year 1 in UTC


def test_row_converter_errors_name_the_column() -> None:
    m = TypeMapper()
    cols = [m.column("id", 23, -1), m.column("d", 1082, -1)]
    rc = RowConverter(["id", "d"], [c.convert for c in cols])
    assert rc.convert(("1", None)) == {"id": 1, "d": None}
    with pytest.raises(ValueConversionError) as err:
        rc.convert(("1", "infinity"))
    assert err.value.column == "d" and err.value.value == "infinity"
    with pytest.raises(ValueConversionError):
        rc.convert(("1",))


# -- end to end ------------------------------------------------------------------------------------

TABLE = """
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(8,2);
CREATE TABLE all_types (
    id int PRIMARY KEY, c_smallint smallint, c_int integer, c_bigint bigint,
    c_numeric numeric(10,3), c_numeric_free numeric, c_numeric_big numeric(50,5),
    c_real real, c_double double precision, c_bool boolean, c_text text, c_varchar varchar(10),
    c_char char(5), c_bytea bytea, c_uuid uuid, c_json json, c_jsonb jsonb, c_interval interval,
    c_time time, c_timetz timetz, c_enum mood, c_int_array int[], c_text_array text[],
    c_date date, c_ts timestamp, c_tstz timestamptz, c_domain posint, c_price price, c_inet inet
)"""

ROW_SQL = """INSERT INTO all_types VALUES (%s, 7, -2147483648, 9223372036854775807, 12.345, 1.5,
 1234567890123456789012345678901234567890.12345, 1.5, 0.1, true, 'héllo', 'abc', 'ab',
 '\\x00ff10', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '{"b": 1,  "a": [1,2]}',
 '{"b": 1,  "a": [1,2]}', '1 year 2 months 3 days 04:05:06.5', '04:05:06.789', '04:05:06+02',
 'happy', '{1,2,NULL}', ARRAY['a b', 'c'], '2024-02-29', '2024-02-29 12:34:56.789',
 '2024-02-29 12:34:56.789+05:30', 5, 12.3, '192.168.0.1/24')"""

EXPECTED: dict[str, tuple[str, Any]] = {
    "c_smallint": ("int", 7),
    "c_int": ("int", -2147483648),
    "c_bigint": ("long", 9223372036854775807),
    "c_numeric": ("decimal(10,3)", Decimal("12.345")),
    "c_numeric_free": ("string", "1.5"),
    "c_numeric_big": ("string", "1234567890123456789012345678901234567890.12345"),
    "c_real": ("float", 1.5),
    "c_double": ("double", 0.1),
    "c_bool": ("boolean", True),
    "c_text": ("string", "héllo"),
    "c_varchar": ("string", "abc"),
    "c_char": ("string", "ab   "),
    "c_bytea": ("binary", b"\x00\xff\x10"),
    "c_uuid": ("string", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "c_json": ("string", '{"b": 1,  "a": [1,2]}'),
    "c_jsonb": ("string", '{"a": [1, 2], "b": 1}'),
    "c_interval": ("string", "P1Y2M3DT4H5M6.5S"),
    "c_time": ("string", "04:05:06.789"),
    "c_timetz": ("string", "04:05:06+02"),
    "c_enum": ("string", "happy"),
    "c_int_array": ("string", "{1,2,NULL}"),
    "c_text_array": ("string", '{"a b",c}'),
    "c_date": ("date", date(2024, 2, 29)),
    "c_ts": ("timestamp", datetime(2024, 2, 29, 12, 34, 56, 789000)),
    "c_tstz": ("timestamptz", datetime(2024, 2, 29, 7, 4, 56, 789000, tzinfo=UTC)),
    "c_domain": ("int", 5),
    "c_price": ("decimal(8,2)", Decimal("12.30")),
    "c_inet": ("string", "192.168.0.1/24"),
}

BAD_ROWS = {  # id -> assignment that makes the row unrepresentable
    100: "c_date = 'infinity'",
    101: "c_ts = '10000-01-01 00:00:00'",
    104: "c_tstz = '-infinity'",
    105: "c_date = '0044-03-15 BC'",
}


def _check_row(after: dict[str, Any]) -> None:
    for col, (_, value) in EXPECTED.items():
        got = after[col]
        assert got == value and type(got) is type(value), (col, got, value)
        if isinstance(value, datetime):
            assert got.tzinfo is value.tzinfo, col


@pytest.mark.integration
def test_every_type_through_snapshot_and_stream(
    sql: Callable[..., Any], make_source: Callable[..., Any], tmp_path: Path
) -> None:
    sql(TABLE)
    sql(ROW_SQL, (1,))
    sql(ROW_SQL, (99,))
    sql("UPDATE all_types SET c_date = 'infinity' WHERE id = 99")  # bad row in the snapshot
    src = make_source()
    src.start(Checkpoints.at({}))
    snap = kit.drain(src)
    assert [e.after["id"] for e in snap] == [1] and snap[0].op is Op.READ
    sql(ROW_SQL, (2,))
    sql(
        "INSERT INTO all_types (id, c_real, c_double) VALUES (3, 'NaN', '-Infinity'),"
        " (4, 'Infinity', 'NaN')"
    )
    for i, assignment in BAD_ROWS.items():
        sql(ROW_SQL, (i,))
        sql(f"UPDATE all_types SET {assignment} WHERE id = %s", (i,))  # type: ignore[str-format]
    # Unconstrained numeric keeps every value exactly (these were dead letters before).
    free = {102: "'NaN'", 103: "0.00000000001", 106: "'-Infinity'", 107: "1e100"}
    for i, value in free.items():
        sql(ROW_SQL, (i,))
        sql(f"UPDATE all_types SET c_numeric_free = {value} WHERE id = %s", (i,))  # type: ignore[str-format]
    sql(ROW_SQL, (5,))
    events = kit.drain(src, lambda ev: any(e.after and e.after["id"] == 5 for e in ev))
    free_after = {
        e.after["id"]: e.after["c_numeric_free"]
        for e in events
        if e.op is Op.UPDATE and e.after and e.after["id"] in free
    }
    assert free_after == {102: "NaN", 103: "0.00000000001", 106: "-Infinity", 107: "1" + "0" * 100}

    snap_row, stream_row = snap[0], next(e for e in events if e.after and e.after["id"] == 2)
    for e in (snap_row, stream_row):
        _check_row(dict(e.after))
        assert {c.name: c.type for c in e.schema_.columns if c.name in EXPECTED} == {
            k: v[0] for k, v in EXPECTED.items()
        }
    assert snap_row.schema_ == stream_row.schema_  # one mapping for both paths
    assert stream_row.schema_.column("c_domain").source_type.startswith("public.posint")
    specials = {e.after["id"]: e.after for e in events if e.after and e.after["id"] in (3, 4)}
    assert math.isnan(specials[3]["c_real"]) and specials[3]["c_double"] == -math.inf
    assert specials[4]["c_real"] == math.inf and math.isnan(specials[4]["c_double"])

    # Each bad row: its insert is fine; its update is passed on as its key and the reason
    # (the pipeline applies errors.on_bad_change), never as data and never silently dropped.
    bad_updates = [e for e in events if e.op is Op.UPDATE and e.error is not None]
    assert sorted(int(e.before["id"]) for e in bad_updates) == sorted(BAD_ROWS)
    assert all(e.after is None and e.error.startswith("column 'c_") for e in bad_updates)
    letters = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert sorted(int(d["key"]["id"]) for d in letters) == [99]
    for d in letters:
        assert d["table"] == "public.all_types" and d["position"].startswith("postgres:")
        assert d["reason"].startswith("column 'c_")
    assert src.stats.dead_letters == 1


@pytest.mark.integration
def test_old_row_that_does_not_convert_is_replaced_by_its_key(
    sql: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    """REPLICA IDENTITY FULL sends the whole old row with a u/d. When a value of it has no
    engine value ('infinity' date: its insert was a dead letter), the change that fixes or
    removes the row still applies by the old row's key, instead of stopping the table."""
    sql("CREATE TABLE full_old (id int PRIMARY KEY, d date)")
    sql("ALTER TABLE full_old REPLICA IDENTITY FULL")
    src = make_source()
    src.start(Checkpoints.at({}))
    kit.drain(src)
    sql("INSERT INTO full_old VALUES (1, 'infinity'), (2, 'infinity')")
    sql("UPDATE full_old SET d = '2020-01-01' WHERE id = 1")
    sql("DELETE FROM full_old WHERE id = 2")
    sql("INSERT INTO full_old VALUES (3, '2020-01-03')")
    events = kit.drain(src, lambda ev: any(e.after and e.after["id"] == 3 for e in ev))
    got = [(e.op, e.before, e.after, e.error) for e in events]
    assert got == [
        (Op.UPDATE, {"id": 1}, {"id": 1, "d": date(2020, 1, 1)}, None),
        (Op.DELETE, {"id": 2}, None, None),
        (Op.CREATE, None, {"id": 3, "d": date(2020, 1, 3)}, None),
    ]
    assert src.stats.keyed_before_images == 2 and src.stats.dead_letters == 2
