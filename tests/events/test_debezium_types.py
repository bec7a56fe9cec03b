"""The Kafka Connect / Debezium type table against what Debezium 3.6's Postgres and MySQL
connectors really emit (values and schema fields copied from the real engine's JSON converter
output, captured with ``sample_dbs.debezium.capture``), for every ``decimal.handling.mode``,
``time.precision.mode`` and ``binary.handling.mode``."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import orjson
import pytest

from replicator.errors import BadInputError
from replicator.events.debezium import DebeziumParser, Filtered
from replicator.events.model import Op
from tests.events.dbz_lines import field, line, pos

# (mode it appears in, schema field, JSON value, engine type, engine value)
CASES: list[tuple[str, dict[str, Any], Any, str, Any]] = [
    # -- floats: the JSON converter names them double/float (issue 10 item 1)
    ("all", field("d", "double"), 2.25, "double", 2.25),
    ("all", field("r", "float"), 1.5, "float", 1.5),
    ("all", field("d", "double"), "-Infinity", "double", -math.inf),
    ("all", field("r", "float"), "Infinity", "float", math.inf),
    ("decimal=double", field("nu", "double"), 1e-21, "double", 1e-21),
    ("decimal=double", field("nu", "double"), "NaN", "double", math.nan),
    # -- integers
    ("all", field("si", "int16"), -32768, "int", -32768),
    ("all", field("bi", "int64"), -(2**63), "long", -(2**63)),
    ("mysql", field("yr", "int32", "io.debezium.time.Year"), 2024, "int", 2024),
    # -- decimals, precise
    ("decimal=precise", field("n", "bytes", "org.apache.kafka.connect.data.Decimal", scale="3",
                                **{"connect.decimal.precision": "12"}),
     "HL6ZGoU=", "decimal(12,3)", Decimal("123456789.125")),
    ("decimal=precise", field("mny", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
     "BNI=", "decimal(38,2)", Decimal("12.34")),  # Postgres money: no precision parameter
    # numeric(50,5) / MySQL decimal(50,10): wider than Iceberg's 38 -> exact text
    ("decimal=precise", field("big_n", "bytes", "org.apache.kafka.connect.data.Decimal",
                                scale="5", **{"connect.decimal.precision": "50"}),
     "ANg/8Fdd5Z+puzcLpeWtmCiuOYEV", "string",
     "12345678901234567890123456789012345678901234.56789"),
    ("mysql decimal=precise", field("dbig", "bytes", "org.apache.kafka.connect.data.Decimal",
                                      scale="10", **{"connect.decimal.precision": "50"}),
     "CHJ/Y2mq+DyhUCZ0evjH8ZaMBNUV", "string",
     "1234567890123456789012345678901234567890.0123456789"),
    ("mysql bigint.unsigned=precise", field("bu", "bytes", "org.apache.kafka.connect.data.Decimal",
                                            scale="0", **{"connect.decimal.precision": "20"}),
     "AP//////////", "decimal(20,0)", Decimal("18446744073709551615")),
    # -- decimals as strings: a plain string column, Debezium's text kept
    ("decimal=string", field("n", "string"), "123456789.125", "string", "123456789.125"),
    ("decimal=string", field("nu", "string"), "NAN", "string", "NAN"),
    # -- time.precision.mode=adaptive / adaptive_time_microseconds
    ("adaptive", field("dt", "int32", "io.debezium.time.Date"), 19782, "date", date(2024, 2, 29)),
    ("adaptive", field("tm", "int64", "io.debezium.time.MicroTime"), 86399999999, "string",
     "23:59:59.999999"),
    ("adaptive", field("tm3", "int32", "io.debezium.time.Time"), 36000123, "string",
     "10:00:00.123000"),
    ("mysql adaptive", field("tm", "int64", "io.debezium.time.MicroTime"), -5400500000,
     "string", "-01:30:00.500000"),
    ("adaptive", field("ts", "int64", "io.debezium.time.MicroTimestamp"), 1704112496789000,
     "timestamp", datetime(2024, 1, 1, 12, 34, 56, 789000)),
    ("adaptive", field("ts0", "int64", "io.debezium.time.Timestamp"), 1704067201000,
     "timestamp", datetime(2024, 1, 1, 0, 0, 1)),
    ("all", field("tstz", "string", "io.debezium.time.ZonedTimestamp"),
     "2024-06-01T10:00:00.000000Z", "timestamptz", datetime(2024, 6, 1, 10, tzinfo=UTC)),
    ("all", field("tmz", "string", "io.debezium.time.ZonedTime"), "06:30:00Z", "string",
     "06:30:00Z"),
    # -- time.precision.mode=connect
    ("connect", field("dt", "int32", "org.apache.kafka.connect.data.Date"), 19782, "date",
     date(2024, 2, 29)),
    ("connect", field("tm", "int32", "org.apache.kafka.connect.data.Time"), 86399999,
     "string", "23:59:59.999000"),
    ("connect", field("ts", "int64", "org.apache.kafka.connect.data.Timestamp"), 1704112496789,
     "timestamp", datetime(2024, 1, 1, 12, 34, 56, 789000)),
    # -- time.precision.mode=isostring
    ("isostring", field("dt", "string", "io.debezium.time.IsoDate"), "2024-02-29Z", "date",
     date(2024, 2, 29)),
    ("isostring", field("tm", "string", "io.debezium.time.IsoTime"), "23:59:59.999999Z",
     "string", "23:59:59.999999"),
    ("isostring", field("tm3", "string", "io.debezium.time.IsoTime"), "10:00:00.123Z",
     "string", "10:00:00.123000"),
    ("isostring", field("ts", "string", "io.debezium.time.IsoTimestamp"),
     "2024-01-01T12:34:56.789Z", "timestamp", datetime(2024, 1, 1, 12, 34, 56, 789000)),
    ("isostring", field("ts0", "string", "io.debezium.time.IsoTimestamp"),
     "2024-01-01T00:00:01Z", "timestamp", datetime(2024, 1, 1, 0, 0, 1)),
    # -- intervals
    ("interval=numeric", field("iv", "int64", "io.debezium.time.MicroDuration"),
     37091106500000, "long", 37091106500000),
    ("interval=string", field("iv", "string", "io.debezium.time.Interval"), "P1Y2M3DT4H5M6.5S",
     "string", "P1Y2M3DT4H5M6.5S"),
    # -- binary.handling.mode
    ("binary=bytes", field("by", "bytes"), "3q2+7w==", "binary", b"\xde\xad\xbe\xef"),
    ("binary=base64", field("by", "string"), "3q2+7w==", "string", "3q2+7w=="),
    ("binary=base64-url-safe", field("by", "string"), "3q2-7w==", "string", "3q2-7w=="),
    ("binary=hex", field("by", "string"), "deadbeef", "string", "deadbeef"),
    ("all", field("bits", "bytes", "io.debezium.data.Bits", length="10"), "qgI=", "binary",
     b"\xaa\x02"),
    # -- text-like semantic types and structures
    ("all", field("u", "string", "io.debezium.data.Uuid"),
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "string", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("all", field("jb", "string", "io.debezium.data.Json"), '{"a": 2, "b": 1}', "string",
     '{"a": 2, "b": 1}'),
    ("all", field("e", "string", "io.debezium.data.Enum", allowed="sad,ok,happy"), "happy",
     "string", "happy"),
    ("mysql", field("st", "string", "io.debezium.data.EnumSet", allowed="x,y,z"), "x,z",
     "string", "x,z"),
    ("all", field("xm", "string", "io.debezium.data.Xml"), "<a>x</a>", "string", "<a>x</a>"),
    ("all", {"type": "array", "items": {"type": "int32", "optional": True}, "optional": True,
             "field": "arr"}, [1, None, 3], "string", "[1,null,3]"),
    ("all", field("pt", "struct", "io.debezium.data.geometry.Point"),
     {"x": 1.0, "y": 2.0, "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA", "srid": None}, "string",
     '{"x":1.0,"y":2.0,"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA","srid":null}'),
]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b) and type(a) is type(b)


@pytest.mark.parametrize(("mode", "fld", "raw", "engine_type", "expected"), CASES,
                         ids=[f"{c[0]}:{c[1]['field']}:{c[1].get('name') or c[1]['type']}"
                              for c in CASES])
def test_real_debezium_field(mode: str, fld: dict[str, Any], raw: Any, engine_type: str,
                             expected: Any) -> None:
    parser = DebeziumParser()
    ev = parser.parse(line([fld], {"id": 1, fld["field"]: raw}), pos())
    assert ev is not None and ev.schema_ is not None and ev.after is not None
    assert ev.schema_.column(fld["field"]).type == engine_type
    got = ev.after[fld["field"]]
    assert _same(got, expected), (got, expected)


def test_mysql_schema_change_events_are_skipped_not_dead_lettered() -> None:
    """The MySQL connector writes DDL records (no 'op') to its topic.prefix topic."""
    ddl = {"key": {"databaseName": "shop"}, "value": {
        "source": {"version": "3.6.3.Final", "connector": "mysql", "name": "m", "db": "shop",
                   "table": "all_types", "file": "binlog.000001", "pos": 3095, "row": 0},
        "ts_ms": 1795428107479, "databaseName": "shop", "schemaName": None,
        "ddl": "DROP TABLE IF EXISTS `shop`.`all_types`",
        "tableChanges": [{"type": "DROP", "id": '"shop"."all_types"', "table": None}]}}
    got = DebeziumParser().decode(orjson.dumps(ddl), pos())
    assert isinstance(got, Filtered) and got.reason == "schema change event"
    tx = {"status": "END", "id": "571", "event_count": 2, "data_collections": [], "ts_ms": 1}
    got = DebeziumParser().decode(orjson.dumps(tx), pos())
    assert isinstance(got, Filtered) and got.reason == "transaction marker"


def test_schemaless_non_finite_floats() -> None:
    """schemas.enable=false: Debezium writes NaN and +-Infinity of a float column as the
    strings "NaN", "Infinity", "-Infinity" (issue 10 item 2)."""
    parser = DebeziumParser()
    got = []
    for n, (d, r, s) in enumerate(
        [(2.25, 1.5, "NaN"), ("-Infinity", "NaN", "x"), ("NaN", "Infinity", "Infinity"), (1, 2, "-Infinity")],
        start=1,
    ):
        ev = parser.parse(line([], {"id": n, "d": d, "r": r, "s": s}, schemas=False), pos(n))
        assert ev is not None and ev.after is not None and ev.schema_ is not None
        got.append((ev.after["d"], ev.after["r"], ev.after["s"]))
        types = {c.name: c.type for c in ev.schema_.columns}
        assert types == {"id": "long", "d": "double", "r": "double", "s": "string"}
    assert got[1][0] == -math.inf and math.isnan(got[1][1]) and got[1][2] == "x"
    assert math.isnan(got[2][0]) and got[2][1] == math.inf and got[2][2] == "Infinity"
    assert got[3] == (1.0, 2.0, "-Infinity")  # a string column keeps the text


@pytest.mark.parametrize(
    ("fld", "raw"),
    [
        (field("ltxt", "string"), "__debezium_unavailable_value"),
        (field("lby", "bytes"), "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
        ({"type": "array", "items": {"type": "string", "optional": True}, "optional": True,
          "field": "larr"}, ["__debezium_unavailable_value"]),
    ],
)
def test_unavailable_placeholder_is_never_a_value(fld: dict[str, Any], raw: Any) -> None:
    """Issue 10 item 7: the placeholder of an unchanged TOASTed column was parsed as data."""
    ev = DebeziumParser().parse(line([fld], {"id": 1, fld["field"]: raw}, op="u"), pos())
    assert ev is not None and ev.after is not None
    value = ev.after[fld["field"]]
    assert not isinstance(value, str | bytes), value  # the UNAVAILABLE sentinel, not data


def _truncate(schemas: bool) -> bytes:
    """A ``t`` record as the Debezium 3.6 Postgres connector writes it (null Kafka key)."""
    obj = orjson.loads(line([field("v", "string")], None, op="t", schemas=schemas))
    obj["key"] = None
    return orjson.dumps(obj)


@pytest.mark.parametrize("schemas", [True, False])
def test_truncate_becomes_an_event(schemas: bool) -> None:
    """Issue 10 item 14 (parser part): ``t`` records were dead letters ("unknown op 't'");
    they are TRUNCATE events without images, carrying the table's last schema."""
    parser = DebeziumParser()
    first = parser.parse(line([field("v", "string")], {"id": 1, "v": "a"}, schemas=schemas), pos(1))
    ev = parser.parse(_truncate(schemas), pos(2))
    assert first is not None and ev is not None
    assert (ev.op, ev.before, ev.after, ev.table) == (Op.TRUNCATE, None, None, "public.t")
    assert ev.schema_ is first.schema_ and ev.tx_id == "771"


def test_truncate_as_first_record_needs_a_known_key() -> None:
    ev = DebeziumParser(primary_keys={"public.t": ["id"]}).parse(_truncate(True), pos())
    assert ev is not None and ev.op is Op.TRUNCATE and ev.schema_ is not None
    assert ev.schema_.key_columns == ("id",) and ev.schema_.column_names == ("id", "v")
    with pytest.raises(BadInputError, match="TRUNCATE of a table whose columns and key"):
        DebeziumParser().parse(_truncate(True), pos())
