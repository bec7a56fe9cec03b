"""Canonical encoding, range digests and the row diff (pure; no database, no Spark)."""

from __future__ import annotations

import math
import struct
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.events.types import arrow_type
from replicator.verify.digest import (
    DiffCollector,
    OrderError,
    RangeDigest,
    RowCodec,
    SourceRanges,
    bucket_of,
    canon_arrow,
    canon_python,
    differing_ranges,
    display_value,
    row_hash,
    unconvertible,
)
from tests.verify.memdiff import diff_in_memory


def canon(engine_type: str, value: Any) -> Any:
    fn = canon_python(engine_type)
    return value if fn is None or value is None else fn(value)


def canon_via_arrow(engine_type: str, value: Any) -> Any:
    return canon_arrow(pa.array([value], arrow_type(engine_type)), engine_type)[0]


# -- canonical values: golden cases -------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [("1.50", "1.5"), ("0.00", "0"), ("-0.00", "0"), ("100", "1E+2"), ("-2.500", "-2.5")],
)
def test_decimal_equal_across_scales(a: str, b: str) -> None:
    assert canon("decimal(10,2)", Decimal(a)) == canon("decimal(38,10)", Decimal(b))


def test_decimal_keeps_all_38_digits() -> None:
    big = Decimal("1234567890123456789012345678901234567.8")
    assert canon("decimal(38,1)", big) != canon("decimal(38,1)", big + Decimal("0.1"))
    assert canon("decimal(10,2)", Decimal("1.50")) == "1.5"


def test_real_compares_at_float32_precision() -> None:
    # Postgres sends real 0.1 as "0.1"; Python parses a double; Iceberg holds a float32.
    assert canon("float", float("0.1")) == canon_via_arrow("float", 0.1)
    assert canon("float", 0.1) == repr(struct.unpack("f", struct.pack("f", 0.1))[0])


def test_nan_equals_nan_and_signed_zeros_differ() -> None:
    for t in ("float", "double"):
        assert canon(t, float("nan")) == canon(t, -float("nan")) == canon_via_arrow(t, math.nan)
        assert canon(t, -0.0) != canon(t, 0.0)
        assert canon(t, float("inf")) == canon_via_arrow(t, math.inf)


def test_timestamptz_is_utc_microseconds() -> None:
    utc = datetime(2024, 3, 1, 12, 0, 0, 5, tzinfo=UTC)
    offset = utc.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert canon("timestamptz", utc) == canon("timestamptz", offset) == 1709294400000005
    assert canon_via_arrow("timestamptz", offset) == 1709294400000005


def test_naive_timestamp_and_date() -> None:
    assert canon("timestamp", datetime(1970, 1, 2)) == 86_400_000_000
    assert canon("timestamp", datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1
    assert canon("date", date(1970, 1, 11)) == 10 == canon_via_arrow("date", date(1970, 1, 11))
    assert canon("date", date(1, 1, 1)) == canon_via_arrow("date", date(1, 1, 1))


@pytest.mark.parametrize(
    ("engine_type", "value"),
    [
        ("boolean", True),
        ("int", -7),
        ("long", 2**62),
        ("string", "héllo ✓"),
        ("binary", b"\x00\xff"),
        ("decimal(38,10)", Decimal("-12.3400000000")),
        ("timestamp", datetime(2262, 4, 11, 23, 47, 16, 854775)),
        ("timestamptz", datetime(1900, 1, 1, tzinfo=UTC)),
        ("double", 1e300),
        ("string", None),
    ],
)
def test_python_and_arrow_paths_agree(engine_type: str, value: Any) -> None:
    assert canon(engine_type, value) == canon_via_arrow(engine_type, value)


def test_row_hash_is_type_sensitive() -> None:
    assert row_hash((1, "a")) == row_hash((1, "a"))
    assert row_hash((1, "a")) != row_hash((True, "a"))
    assert row_hash(("1",)) != row_hash((1,))
    assert row_hash((None,)) != row_hash(("",))


def test_display_values() -> None:
    assert display_value(86_400_000_000, "timestamptz") == "1970-01-02T00:00:00+00:00"
    assert display_value(10, "date") == "1970-01-11"
    assert display_value("1.5", "decimal(10,2)") == "1.50"
    assert display_value("1E+2", "decimal(38,0)") == "100"
    assert display_value(b"\x01", "binary") == "\\x01"
    assert display_value(unconvertible("infinity"), "date") == "<not representable: infinity>"
    assert display_value("x" * 100, "string").endswith("(100 chars)")


def test_sort_keys_follow_value_order() -> None:
    dec = RowCodec(("k",), ("decimal(10,2)",), (0,))
    sk = dec.sort_key_fn()
    assert sk((canon("decimal(10,2)", Decimal("9")),)) < sk(
        (canon("decimal(10,2)", Decimal("10")),)
    )
    fl = RowCodec(("k",), ("double",), (0,)).sort_key_fn()
    keys = sorted([2.0, -1.0, math.nan, math.inf], key=lambda v: fl((canon("double", v),)))
    assert keys[:3] == [-1.0, 2.0, math.inf] and math.isnan(keys[3])  # NaN last, as in Postgres


# -- ranges ----------------------------------------------------------------------------------


def test_source_ranges_cut_every_chunk_rows() -> None:
    r = SourceRanges(3)
    for k in range(1, 8):
        r.add((k,), k, (str(k),))
    r.finish()
    assert r.bounds == [(3,), (6,), (7,)]
    assert [d.count for d in r.digests] == [3, 3, 1]
    assert r.range_count == 4
    assert r.range_limits(0) == (None, ("3",))
    assert r.range_limits(1) == (("3",), ("6",))
    assert r.range_limits(3) == (("7",), None)
    assert [bucket_of(r.bounds, (k,)) for k in (0, 3, 4, 7, 8)] == [0, 0, 1, 2, 3]


def test_source_ranges_refuse_keys_out_of_order() -> None:
    r = SourceRanges(10)
    r.add((1, "b"), 0, ())
    with pytest.raises(OrderError):
        r.add((1, "a"), 0, ())
    with pytest.raises(OrderError):
        r.add((1, "b"), 0, ())  # equal keys: not a key order either


def test_differing_ranges_include_the_open_last_range() -> None:
    src = [RangeDigest(2, 5), RangeDigest(1, 7)]
    assert differing_ranges(src, {0: RangeDigest(2, 5), 1: RangeDigest(1, 7)}) == []
    assert differing_ranges(src, {0: RangeDigest(2, 5), 1: RangeDigest(1, 8)}) == [1]
    assert differing_ranges(
        src, {0: RangeDigest(2, 5), 1: RangeDigest(1, 7), 2: RangeDigest(1, 1)}
    ) == [2]
    assert differing_ranges([], {}) == []


# -- row diff: golden ---------------------------------------------------------------------------

CODEC = RowCodec(("id", "v", "n"), ("long", "string", "double"), (0,))


def test_collector_names_missing_extra_changed_and_duplicates() -> None:
    rec = lambda *row: CODEC.record(CODEC.canon_values(row))  # noqa: E731
    c = DiffCollector(CODEC, max_keys=5)
    c.compare(
        [rec(1, "a", 1.0), rec(2, "b", 2.0), rec(3, "c", math.nan)],
        [rec(2, "b", 2.0), rec(3, "c", 3.0), rec(4, "d", 4.0), rec(4, "d", 4.0)],
    )
    assert (c.missing, c.extra, c.changed, c.duplicates) == (1, 2, 1, 1)
    assert [CODEC.display_key(r.key) for r in c.missing_records()] == [{"id": 1}]
    assert [CODEC.display_key(r.key) for r in c.extra_records()] == [{"id": 4}, {"id": 4}]
    ((s, i),) = c.changed_records()
    assert c.columns_differing(s, i) == ["n"] and c.changed_columns == {"n": 1}
    assert CODEC.display_columns(s.row, ["n"]) == {"n": "nan"}


def test_collector_keeps_only_the_smallest_keys() -> None:
    c = DiffCollector(CODEC, max_keys=3)
    rows = [CODEC.record(CODEC.canon_values((k, "x", 0.0))) for k in range(200, 0, -1)]
    c.compare(rows, [])
    assert c.missing == 200
    assert [r.key for r in c.missing_records()] == [(1,), (2,), (3,)]


def test_in_memory_pipeline_equal_tables() -> None:
    rows = [(k, f"v{k}", k / 3) for k in range(50)]
    collector, bad, n = diff_in_memory(CODEC, rows, list(reversed(rows)), chunk_rows=7)
    assert bad == [] and n == 50 and collector.missing == collector.extra == 0


def test_in_memory_pipeline_extra_rows_beyond_the_last_key_and_in_empty_source() -> None:
    rows = [(k, "v", 0.0) for k in range(10)]
    collector, bad, _ = diff_in_memory(CODEC, rows, rows + [(99, "late", 0.0)], chunk_rows=4)
    assert bad == [3] and collector.extra == 1  # the open range after the last source key
    collector, bad, _ = diff_in_memory(CODEC, [], rows, chunk_rows=4)
    assert bad == [0] and collector.extra == 10


# -- row diff: property -------------------------------------------------------------------------

VALUE_TYPES = ("string", "double", "float", "decimal(10,2)", "timestamptz", "boolean", "date")
WIDE = RowCodec(
    ("k1", "k2", "s", "d", "f", "dec", "ts", "b", "dt"), ("string", "long", *VALUE_TYPES), (0, 1)
)

_TZ = st.sampled_from(
    [UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5, minutes=30))]
)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=6),
    "double": st.floats(allow_nan=True, allow_infinity=True),
    "float": st.floats(width=32, allow_nan=True),
    "decimal(10,2)": st.decimals(min_value=-(10**7), max_value=10**7, places=2),
    "timestamptz": st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=_TZ
    ),
    "boolean": st.booleans(),
    "date": st.dates(),
}


def _other(engine_type: str, v: Any) -> Any:
    """A value of the same column that surely compares different."""
    if v is None:
        return {"string": "", "double": 0.5, "float": 0.5, "decimal(10,2)": Decimal("1.25"),
                "timestamptz": datetime(2000, 1, 1, tzinfo=UTC), "boolean": False,
                "date": date(2000, 1, 1)}[engine_type]  # fmt: skip
    if engine_type == "string":
        return v + "!"
    if engine_type in ("double", "float"):
        return 1.5 if v != 1.5 else 2.5
    if engine_type == "decimal(10,2)":
        return v + 1
    if engine_type == "timestamptz":
        return v + timedelta(microseconds=1)
    if engine_type == "boolean":
        return not v
    return v + timedelta(days=1) if v < date(9999, 1, 1) else v - timedelta(days=1)


@st.composite
def table_and_mutations(
    draw: st.DrawFn,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, set[Any]]]:
    keys = draw(
        st.lists(
            st.tuples(st.text(max_size=3), st.integers(-(2**40), 2**40)), unique=True, max_size=40
        )
    )
    source = [k + tuple(draw(st.none() | VALUES[t]) for t in VALUE_TYPES) for k in keys]
    deleted = set(draw(st.sets(st.sampled_from(keys), max_size=8))) if keys else set()
    alive = [k for k in keys if k not in deleted]
    changed = set(draw(st.sets(st.sampled_from(alive), max_size=8))) if alive else set()
    new_keys = draw(
        st.lists(st.tuples(st.text(max_size=3), st.integers(-5, 5)), unique=True, max_size=6)
    )
    added = [k for k in new_keys if k not in set(keys)]
    iceberg = []
    for row in source:
        k = row[:2]
        if k in deleted:
            continue
        if k in changed:
            col = draw(st.integers(2, len(WIDE.names) - 1))
            row = row[:col] + (_other(WIDE.types[col], row[col]),) + row[col + 1 :]
        iceberg.append(row)
    iceberg += [k + tuple(draw(st.none() | VALUES[t]) for t in VALUE_TYPES) for k in added]
    return source, iceberg, {"missing": deleted, "changed": changed, "extra": set(added)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=table_and_mutations(), chunk_rows=st.integers(1, 9))
def test_diff_reports_exactly_the_mutated_keys(
    data: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], dict[str, set[Any]]], chunk_rows: int
) -> None:
    source, iceberg, expected = data
    c, bad, n = diff_in_memory(WIDE, source, iceberg, chunk_rows=chunk_rows)
    assert n == len(iceberg)
    assert {r.key for r in c.missing_records()} == expected["missing"]
    assert {r.key for r in c.extra_records()} == expected["extra"]
    assert {s.key for s, _ in c.changed_records()} == expected["changed"]
    assert (c.missing, c.extra, c.changed) == tuple(
        len(expected[k]) for k in ("missing", "extra", "changed")
    )
    if not any(expected.values()):
        assert bad == []
