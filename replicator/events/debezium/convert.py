"""Converters from the JSON values of Kafka Connect types to engine values (pure).

Each converter takes one non-null JSON value and returns the engine's Python value, or raises
``Bad`` (the caller adds table, column and key to the message).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

import orjson

Converter = Callable[[Any], Any]

_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()


class Bad(Exception):
    """A value does not match its declared type; the caller adds table/column/key."""


def show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------- scalars


def _int_converter(lo: int, hi: int, label: str) -> Converter:
    def conv(v: Any) -> int:
        if type(v) is int and lo <= v <= hi:
            return v
        raise Bad(f"expected {label}, got {show(v)}")

    return conv


int8 = _int_converter(-(2**7), 2**7 - 1, "an int8")
int16 = _int_converter(-(2**15), 2**15 - 1, "an int16")
int32 = _int_converter(-(2**31), 2**31 - 1, "an int32")
int64 = _int_converter(-(2**63), 2**63 - 1, "an int64")

# Jackson (Kafka Connect's JSON writer) quotes non-finite floats.
NON_FINITE: Final = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def to_float(v: Any) -> float:
    t = type(v)
    if t is float:
        return v  # type: ignore[no-any-return]  # hot path: no cast() call
    if t is int:
        return float(v)
    if t is str and v in NON_FINITE:
        return NON_FINITE[v]
    raise Bad(f"expected a number, got {show(v)}")


def to_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise Bad(f"expected a boolean, got {show(v)}")


def to_str(v: Any) -> str:
    if type(v) is str:
        return v
    raise Bad(f"expected a string, got {show(v)}")


def to_bytes(v: Any) -> bytes:
    if type(v) is not str:
        raise Bad(f"expected a base64 string, got {show(v)}")
    try:
        return binascii.a2b_base64(v, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise Bad(f"invalid base64 {show(v)}: {exc}") from None


def json_text(v: Any) -> str:
    return orjson.dumps(v).decode()


# --------------------------------------------------------------------------- temporal


def epoch_days(v: Any) -> date:
    if type(v) is not int:
        raise Bad(f"expected epoch days (int), got {show(v)}")
    return date.fromordinal(_EPOCH_ORDINAL + v)


def ts_millis(v: Any) -> datetime:
    if type(v) is not int:
        raise Bad(f"expected epoch milliseconds (int), got {show(v)}")
    return _EPOCH + timedelta(milliseconds=v)


def ts_micros(v: Any) -> datetime:
    if type(v) is not int:
        raise Bad(f"expected epoch microseconds (int), got {show(v)}")
    return _EPOCH + timedelta(microseconds=v)


def ts_nanos(v: Any) -> datetime:
    if type(v) is not int:
        raise Bad(f"expected epoch nanoseconds (int), got {show(v)}")
    return _EPOCH + timedelta(microseconds=v // 1000)  # floor: Iceberg stores microseconds


def zoned_timestamp(v: Any) -> datetime:
    if type(v) is not str:
        raise Bad(f"expected an ISO-8601 timestamp string, got {show(v)}")
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise Bad(f"invalid ISO-8601 timestamp {show(v)}") from None
    if dt.tzinfo is None:
        raise Bad(f"ZonedTimestamp {show(v)} has no UTC offset")
    return dt.astimezone(UTC)


def format_time(us: int) -> str:
    sign = "-" if us < 0 else ""
    secs, frac = divmod(abs(us), 1_000_000)
    minutes, s = divmod(secs, 60)
    h, m = divmod(minutes, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    return f"{text}.{frac:06d}" if frac else text


def _time_converter(us_per_unit: int, per: str) -> Converter:
    def conv(v: Any) -> str:
        if type(v) is not int:
            raise Bad(f"expected {per} since midnight (int), got {show(v)}")
        return format_time(v * us_per_unit)

    return conv


def time_nanos(v: Any) -> str:
    if type(v) is not int:
        raise Bad(f"expected nanoseconds since midnight (int), got {show(v)}")
    us = abs(v) // 1000
    return format_time(-us if v < 0 else us)


def zoned_time(v: Any) -> str:
    if type(v) is not str:
        raise Bad(f"expected an ISO-8601 time string, got {show(v)}")
    try:
        t = time.fromisoformat(v)
    except ValueError:
        raise Bad(f"invalid ISO-8601 time {show(v)}") from None
    if t.tzinfo is None:
        raise Bad(f"ZonedTime {show(v)} has no UTC offset")
    utc = datetime.combine(date(2000, 1, 1), t).astimezone(UTC)
    return (
        format_time(((utc.hour * 60 + utc.minute) * 60 + utc.second) * 1_000_000 + utc.microsecond)
        + "Z"
    )


def iso_date(v: Any) -> date:
    """``io.debezium.time.IsoDate`` (``time.precision.mode=isostring``): ``2024-02-29Z``."""
    if type(v) is not str:
        raise Bad(f"expected an ISO-8601 date string, got {show(v)}")
    try:
        return date.fromisoformat(v[:-1] if v.endswith("Z") else v)
    except ValueError:
        raise Bad(f"invalid ISO-8601 date {show(v)}") from None


def iso_time(v: Any) -> str:
    """``io.debezium.time.IsoTime``: ``23:59:59.999999Z`` -> ``23:59:59.999999``, as the
    other time modes give a time without zone."""
    if type(v) is not str:
        raise Bad(f"expected an ISO-8601 time string, got {show(v)}")
    try:
        t = time.fromisoformat(v)
    except ValueError:
        raise Bad(f"invalid ISO-8601 time {show(v)}") from None
    if t.tzinfo is not None and t.utcoffset():
        t = (datetime.combine(date(2000, 1, 1), t).astimezone(UTC)).timetz()
    return format_time(((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond)


def iso_timestamp(v: Any) -> datetime:
    """``io.debezium.time.IsoTimestamp``: ``2024-01-01T12:34:56.789Z`` -> naive datetime (a
    timestamp without time zone; Debezium marks it UTC)."""
    if type(v) is not str:
        raise Bad(f"expected an ISO-8601 timestamp string, got {show(v)}")
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise Bad(f"invalid ISO-8601 timestamp {show(v)}") from None
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    return dt


time_millis = _time_converter(1000, "milliseconds")
time_micros = _time_converter(1, "microseconds")
