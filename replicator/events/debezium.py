"""Debezium JSON change records -> ``ChangeEvent`` (pure: no I/O, one line at a time).

Accepted line shapes (one JSON document per line):

* a plain value envelope ``{"before", "after", "source", "op", "ts_ms", "transaction"?}``;
* the same wrapped by Kafka Connect's JsonConverter: ``{"schema": ..., "payload": ...}``;
* a Kafka key/value pair ``{"key": ..., "value": ...}`` as dumped from a topic, key and value
  each possibly schema-wrapped or a JSON-encoded string (``kcat -J`` dumps, which call the
  value ``payload`` next to ``topic``, are accepted too);
* a tombstone: the line ``null``, a null value or a null payload -> ``None``.

Table name: ``source.schema`` + ``source.table`` (Postgres, SQL Server: ``public.orders``), else
``source.db`` + ``source.table`` (MySQL: ``shop.orders``), else the configured
``default_table``, else the envelope schema name (``<prefix>.<schema>.<table>.Envelope``).

Key columns: the Kafka key's field names when the line has a non-empty key, else
``primary_keys[table]`` (config ``source.primary_keys``), else ``BadInputError``. A delete
whose ``before`` is null but which has a Kafka key gets ``before`` = the key columns.
Ops other than c/r/u/d (``t`` truncate, ``m`` message) are ``BadInputError`` (dead letters).

Transactions: ``tx_id`` comes from the ``transaction`` block (``provide.transaction.metadata``),
else ``source.txId`` (Postgres), else ``source.gtid`` (MySQL with GTIDs), else
``source.file:source.pos`` (MySQL binlog; ``pos`` is the position of the binlog *event*, so a
transaction made of several row events is split at event boundaries -- enable GTIDs or
transaction metadata for exact boundaries). Snapshot reads (``op == "r"``) get ``tx_id=None``
unless a ``transaction`` block says otherwise: every snapshot row shares the snapshot's
txId/binlog position, and treating a whole snapshot as one transaction would buffer it all.
Events with ``tx_id=None`` are their own transaction, so they get ``last_in_tx=True``; for
the others the caller (who can look ahead) decides ``last_in_tx``.

Type mapping with a Debezium schema (``schemas.enable=true``)::

    Kafka Connect type / Debezium semantic name          engine type     Python value
    int8, int16, int32                                    int             int (range-checked)
    int64                                                 long            int (range-checked)
    float32 / float64                                     float / double  float
    boolean                                               boolean         bool
    string                                                string          str
    bytes (base64 in JSON), io.debezium.data.Bits         binary          bytes
    struct / array / map without a known semantic name    string          JSON text
    org.apache.kafka.connect.data.Decimal                 decimal(p,s)    Decimal
        p = connect.decimal.precision (default 38, capped at 38, raised to s if smaller);
        a negative scale s maps to decimal(min(p-s, 38), 0); a value with more than p
        digits is a BadInputError (dead letter), never rounded.
    io.debezium.data.VariableScaleDecimal                 decimal(38,10)  Decimal
        ({scale, value}): stored with exactly 10 fractional digits; a value that needs more
        than 10 fractional digits (non-zero beyond the 10th) or more than 28 integer digits
        is a BadInputError (dead letter) -- never silently rounded. A fixed Iceberg type is
        preferred over a string so that the column stays numeric for readers.
    io.debezium.time.Date, org.apache.kafka.connect.data.Date (epoch days)   date
    io.debezium.time.Timestamp (ms), MicroTimestamp (us), NanoTimestamp (ns, truncated to
        us: Iceberg timestamps are microseconds), org.apache.kafka.connect.data.Timestamp
        (ms)                                              timestamp       naive datetime
    io.debezium.time.ZonedTimestamp (ISO-8601 with offset) timestamptz   aware UTC datetime
    io.debezium.time.Time (ms), MicroTime (us), NanoTime (ns),
        org.apache.kafka.connect.data.Time (ms)           string          "HH:MM:SS[.ffffff]"
    io.debezium.time.ZonedTime                            string          "HH:MM:SS[.ffffff]Z"
        (UTC). Times are strings because Spark 3.5 cannot read Iceberg ``time`` columns;
        MySQL TIME durations outside 0..24h keep their sign and hour count ("-01:30:00").
    io.debezium.data.Json, Uuid, Enum, EnumSet, Xml       string          str
    any other semantic name                               by its Connect type

Schemaless input (``schemas.enable=false``) gives weaker types: the schema is inferred from
the JSON values (int -> long, float -> double, str -> string, bool -> boolean, object/array
-> string holding JSON text; a column that is null in every row so far -> string). A column's
type is fixed when it is first seen, so a later value must fit it (an int fits a double
column, anything fits a string column as its JSON text); otherwise the line is a
BadInputError. Debezium encodings are not decoded without a schema: decimals stay base64
strings and timestamps stay numbers. Supply the schema for faithful types.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Context, Decimal
from typing import Any, Final

import orjson

from replicator.errors import BadInputError
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema

__all__ = [
    "VARIABLE_SCALE_DECIMAL_TYPE",
    "DebeziumParser",
    "DecodedChange",
    "Filtered",
    "decode_connect_decimal",
    "encode_connect_decimal",
    "parse_line",
]

Converter = Callable[[Any], Any]

VARIABLE_SCALE_DECIMAL_SCALE: Final = 10
VARIABLE_SCALE_DECIMAL_TYPE: Final = f"decimal(38,{VARIABLE_SCALE_DECIMAL_SCALE})"
_MAX_PRECISION: Final = 38
_MAX_CACHED_PLANS: Final = 4096  # a runaway number of distinct schemas must not eat memory

_OPS: Final[dict[Any, Op]] = {op.value: op for op in Op}
_WHITESPACE: Final = frozenset(b" \t\r\n")
_CLOSE_BRACE: Final = ord("}")
# Room for 38 digits and any exponent: scaleb must never round.
_DEC_CTX: Final = Context(prec=1000, Emax=999_999, Emin=-999_999)
_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()


class _Bad(Exception):
    """A value does not match its declared type; the caller adds table/column/key."""


class Filtered:
    """Marker returned by ``DebeziumParser.decode`` for a table outside the ``tables`` filter."""

    __slots__ = ("table",)

    def __init__(self, table: str) -> None:
        self.table = table

    def __repr__(self) -> str:
        return f"Filtered({self.table!r})"


@dataclass(slots=True)
class DecodedChange:
    """A parsed, converted record that only lacks its position and ``last_in_tx``."""

    table: str
    op: Op
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    schema: TableSchema
    ts_ms: int | None
    tx_id: str | None


# --------------------------------------------------------------------------- decimals


def _unscaled_to_decimal(unscaled: int, scale: int) -> Decimal:
    return Decimal(unscaled).scaleb(-scale, _DEC_CTX)


def _plain(unscaled: int, scale: int) -> str:
    """A decimal for messages, never in exponent notation."""
    return f"{_unscaled_to_decimal(unscaled, scale):f}"


def _b64_to_int(text: Any) -> int:
    if type(text) is not str:
        raise _Bad(f"expected a base64 string, got {_show(text)}")
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _Bad(f"invalid base64 {_show(text)}: {exc}") from None
    if not raw:
        raise _Bad("empty base64 decimal")
    return int.from_bytes(raw, "big", signed=True)


def decode_connect_decimal(text: str, scale: int) -> Decimal:
    """Kafka Connect ``Decimal``: base64 of the big-endian two's-complement unscaled value."""
    try:
        return _unscaled_to_decimal(_b64_to_int(text), scale)
    except _Bad as exc:
        raise ValueError(str(exc)) from None


def encode_connect_decimal(value: Decimal, scale: int) -> str:
    """The inverse of ``decode_connect_decimal``, byte-for-byte as Java's
    ``BigInteger.toByteArray`` (minimal two's complement) does it."""
    scaled = value.scaleb(scale, _DEC_CTX)
    if not scaled.is_finite() or scaled != scaled.to_integral_value():
        raise ValueError(f"{value} has more than {scale} fractional digits")
    unscaled = int(scaled)
    length = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode("ascii")


def _decimal_converter(precision: int, scale: int) -> Converter:
    if scale < 0:
        # Iceberg has no negative scale: the values are integers, keep them exactly.
        limit = 10 ** min(precision - scale, _MAX_PRECISION)
        factor = 10**-scale

        def conv_neg(v: Any) -> Decimal:
            u = _b64_to_int(v) * factor
            if not -limit < u < limit:
                raise _Bad(f"decimal value {u} does not fit the column's precision")
            return Decimal(u)

        return conv_neg
    limit = 10**precision

    def conv(v: Any) -> Decimal:
        u = _b64_to_int(v)
        if not -limit < u < limit:
            raise _Bad(
                f"decimal value {_plain(u, scale)} does not fit decimal({precision},{scale})"
            )
        return _unscaled_to_decimal(u, scale)

    return conv


def _variable_scale_decimal(v: Any) -> Decimal:
    if type(v) is not dict:
        raise _Bad(f"expected a {{scale, value}} object, got {_show(v)}")
    scale = v.get("scale")
    if type(scale) is not int:
        raise _Bad(f"VariableScaleDecimal has no integer 'scale': {_show(v)}")
    u = _b64_to_int(v.get("value"))
    target = VARIABLE_SCALE_DECIMAL_SCALE
    if scale <= target:
        u10 = u * 10 ** (target - scale)
    else:
        u10, rest = divmod(u, 10 ** (scale - target))
        if rest:
            raise _Bad(
                f"decimal value {_plain(u, scale)} has more than {target} "
                f"fractional digits; variable-scale decimals map to {VARIABLE_SCALE_DECIMAL_TYPE}"
            )
    if not -(10**_MAX_PRECISION) < u10 < 10**_MAX_PRECISION:
        raise _Bad(f"decimal value {_plain(u, scale)} does not fit {VARIABLE_SCALE_DECIMAL_TYPE}")
    return _unscaled_to_decimal(u10, target)


# --------------------------------------------------------------------------- scalars


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _int_converter(lo: int, hi: int, label: str) -> Converter:
    def conv(v: Any) -> int:
        if type(v) is int and lo <= v <= hi:
            return v
        raise _Bad(f"expected {label}, got {_show(v)}")

    return conv


_int8 = _int_converter(-(2**7), 2**7 - 1, "an int8")
_int16 = _int_converter(-(2**15), 2**15 - 1, "an int16")
_int32 = _int_converter(-(2**31), 2**31 - 1, "an int32")
_int64 = _int_converter(-(2**63), 2**63 - 1, "an int64")

# Jackson (Kafka Connect's JSON writer) quotes non-finite floats.
_NON_FINITE: Final = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _float(v: Any) -> float:
    t = type(v)
    if t is float:
        return v
    if t is int:
        return float(v)
    if t is str and v in _NON_FINITE:
        return _NON_FINITE[v]
    raise _Bad(f"expected a number, got {_show(v)}")


def _bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise _Bad(f"expected a boolean, got {_show(v)}")


def _str(v: Any) -> str:
    if type(v) is str:
        return v
    raise _Bad(f"expected a string, got {_show(v)}")


def _bytes(v: Any) -> bytes:
    if type(v) is not str:
        raise _Bad(f"expected a base64 string, got {_show(v)}")
    try:
        return binascii.a2b_base64(v, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _Bad(f"invalid base64 {_show(v)}: {exc}") from None


def _json_text(v: Any) -> str:
    return orjson.dumps(v).decode()


# --------------------------------------------------------------------------- temporal


def _epoch_days(v: Any) -> date:
    if type(v) is not int:
        raise _Bad(f"expected epoch days (int), got {_show(v)}")
    return date.fromordinal(_EPOCH_ORDINAL + v)


def _ts_millis(v: Any) -> datetime:
    if type(v) is not int:
        raise _Bad(f"expected epoch milliseconds (int), got {_show(v)}")
    return _EPOCH + timedelta(milliseconds=v)


def _ts_micros(v: Any) -> datetime:
    if type(v) is not int:
        raise _Bad(f"expected epoch microseconds (int), got {_show(v)}")
    return _EPOCH + timedelta(microseconds=v)


def _ts_nanos(v: Any) -> datetime:
    if type(v) is not int:
        raise _Bad(f"expected epoch nanoseconds (int), got {_show(v)}")
    return _EPOCH + timedelta(microseconds=v // 1000)  # floor: Iceberg stores microseconds


def _zoned_timestamp(v: Any) -> datetime:
    if type(v) is not str:
        raise _Bad(f"expected an ISO-8601 timestamp string, got {_show(v)}")
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise _Bad(f"invalid ISO-8601 timestamp {_show(v)}") from None
    if dt.tzinfo is None:
        raise _Bad(f"ZonedTimestamp {_show(v)} has no UTC offset")
    return dt.astimezone(UTC)


def _format_time(us: int) -> str:
    sign = "-" if us < 0 else ""
    secs, frac = divmod(abs(us), 1_000_000)
    minutes, s = divmod(secs, 60)
    h, m = divmod(minutes, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    return f"{text}.{frac:06d}" if frac else text


def _time_converter(us_per_unit: int, per: str) -> Converter:
    def conv(v: Any) -> str:
        if type(v) is not int:
            raise _Bad(f"expected {per} since midnight (int), got {_show(v)}")
        return _format_time(v * us_per_unit)

    return conv


def _time_nanos(v: Any) -> str:
    if type(v) is not int:
        raise _Bad(f"expected nanoseconds since midnight (int), got {_show(v)}")
    us = abs(v) // 1000
    return _format_time(-us if v < 0 else us)


def _zoned_time(v: Any) -> str:
    if type(v) is not str:
        raise _Bad(f"expected an ISO-8601 time string, got {_show(v)}")
    try:
        t = time.fromisoformat(v)
    except ValueError:
        raise _Bad(f"invalid ISO-8601 time {_show(v)}") from None
    if t.tzinfo is None:
        raise _Bad(f"ZonedTime {_show(v)} has no UTC offset")
    utc = datetime.combine(date(2000, 1, 1), t).astimezone(UTC)
    return (
        _format_time(((utc.hour * 60 + utc.minute) * 60 + utc.second) * 1_000_000 + utc.microsecond)
        + "Z"
    )


_time_millis = _time_converter(1000, "milliseconds")
_time_micros = _time_converter(1, "microseconds")

# Connect type -> (engine type, converter)
_PLAIN: Final[dict[str, tuple[str, Converter]]] = {
    "int8": ("int", _int8),
    "int16": ("int", _int16),
    "int32": ("int", _int32),
    "int64": ("long", _int64),
    "float32": ("float", _float),
    "float64": ("double", _float),
    "boolean": ("boolean", _bool),
    "string": ("string", _str),
    "bytes": ("binary", _bytes),
    "struct": ("string", _json_text),
    "array": ("string", _json_text),
    "map": ("string", _json_text),
}

# Semantic name -> (Connect types it applies to, engine type, converter). A name on an
# unexpected Connect type falls back to the plain mapping rather than misreading values.
_SEMANTIC: Final[dict[str, tuple[frozenset[str], str, Converter]]] = {
    "io.debezium.data.VariableScaleDecimal": (
        frozenset({"struct"}),
        VARIABLE_SCALE_DECIMAL_TYPE,
        _variable_scale_decimal,
    ),
    "io.debezium.time.Date": (frozenset({"int32"}), "date", _epoch_days),
    "org.apache.kafka.connect.data.Date": (frozenset({"int32"}), "date", _epoch_days),
    "io.debezium.time.Timestamp": (frozenset({"int64"}), "timestamp", _ts_millis),
    "io.debezium.time.MicroTimestamp": (frozenset({"int64"}), "timestamp", _ts_micros),
    "io.debezium.time.NanoTimestamp": (frozenset({"int64"}), "timestamp", _ts_nanos),
    "org.apache.kafka.connect.data.Timestamp": (frozenset({"int64"}), "timestamp", _ts_millis),
    "io.debezium.time.ZonedTimestamp": (frozenset({"string"}), "timestamptz", _zoned_timestamp),
    "io.debezium.time.Time": (frozenset({"int32"}), "string", _time_millis),
    "org.apache.kafka.connect.data.Time": (frozenset({"int32"}), "string", _time_millis),
    "io.debezium.time.MicroTime": (frozenset({"int64"}), "string", _time_micros),
    "io.debezium.time.NanoTime": (frozenset({"int64"}), "string", _time_nanos),
    "io.debezium.time.ZonedTime": (frozenset({"string"}), "string", _zoned_time),
    "io.debezium.data.Json": (frozenset({"string"}), "string", _str),
    "io.debezium.data.Uuid": (frozenset({"string"}), "string", _str),
    "io.debezium.data.Enum": (frozenset({"string"}), "string", _str),
    "io.debezium.data.EnumSet": (frozenset({"string"}), "string", _str),
    "io.debezium.data.Xml": (frozenset({"string"}), "string", _str),
    "io.debezium.data.Bits": (frozenset({"bytes"}), "binary", _bytes),
}
_CONNECT_DECIMAL: Final = "org.apache.kafka.connect.data.Decimal"


def _int_param(params: Mapping[str, Any], name: str, default: int | None) -> int:
    raw = params.get(name, default)
    if raw is None:
        raise ValueError(f"missing parameter {name!r}")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"parameter {name!r} is not an integer: {raw!r}") from None


def _column_from_field(field: Any) -> tuple[ColumnSpec, Converter]:
    """One Connect schema field -> its column and value converter (ValueError if unmappable)."""
    if type(field) is not dict or type(field.get("field")) is not str:
        raise ValueError(f"schema field without a name: {_show(field)}")
    name: str = field["field"]
    ctype = field.get("type")
    semantic = field.get("name")
    if type(ctype) is not str:
        raise ValueError(f"column {name!r}: schema type {_show(ctype)} is not a string")
    if type(semantic) is not str:
        semantic = None
    params = field.get("parameters")
    if type(params) is not dict:
        params = {}
    nullable = bool(field.get("optional", False))
    source_type = params.get("__debezium.source.column.type") or semantic or ctype
    if semantic == _CONNECT_DECIMAL and ctype == "bytes":
        scale = _int_param(params, "scale", None)
        precision = _int_param(params, "connect.decimal.precision", _MAX_PRECISION)
        if scale < 0:
            type_ = f"decimal({min(precision - scale, _MAX_PRECISION)},0)"
            conv = _decimal_converter(precision, scale)
        else:
            if scale > _MAX_PRECISION:
                raise ValueError(f"column {name!r}: decimal scale {scale} exceeds 38")
            # Iceberg needs scale <= precision <= 38: Postgres allows numeric(3,5), so the
            # precision is raised to the scale; above 38 it is capped and a value that does
            # not fit is dead-lettered.
            p = min(max(precision, scale, 1), _MAX_PRECISION)
            type_ = f"decimal({p},{scale})"
            conv = _decimal_converter(p, scale)
    elif semantic in _SEMANTIC and ctype in _SEMANTIC[semantic][0]:
        _, type_, conv = _SEMANTIC[semantic]
    elif ctype in _PLAIN:
        type_, conv = _PLAIN[ctype]
    else:
        raise ValueError(f"column {name!r}: unsupported Kafka Connect type {ctype!r}")
    col = ColumnSpec(name=name, type=type_, nullable=nullable, source_type=str(source_type))
    return col, conv


# --------------------------------------------------------------------------- plans


class _Plan:
    """A table shape plus one converter per column; shared by every line of that shape."""

    __slots__ = ("convs", "key_columns", "names", "schema")

    def __init__(self, schema: TableSchema, convs: Sequence[tuple[str, Converter]]) -> None:
        self.schema = schema
        self.convs: tuple[tuple[str, Converter], ...] = tuple(convs)
        self.names = frozenset(n for n, _ in convs)
        self.key_columns = schema.key_columns

    def convert(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self.names.issuperset(row):
            extra = sorted(k for k in row if k not in self.names)
            raise _Bad(f"fields {extra} are not in the record's schema")
        get = row.get
        try:
            # A comprehension is markedly faster than a loop of stores; on failure the
            # slow loop below finds the column for the message.
            return {n: None if (v := get(n)) is None else c(v) for n, c in self.convs}
        except (_Bad, ValueError, OverflowError, TypeError):
            pass
        for name, conv in self.convs:
            v = get(name)
            if v is None:
                continue
            try:
                conv(v)
            except _Bad as exc:
                raise _Bad(f"column {name!r}: {exc}") from None
            except (ValueError, OverflowError, TypeError) as exc:
                # datetime range errors and the like
                raise _Bad(f"column {name!r}: value {_show(v)} is out of range: {exc}") from None
        raise AssertionError("unreachable: a converter failed only once")  # pragma: no cover


class _InferredTable:
    """Schemaless input: column types fixed at first sight, grown as new columns appear."""

    __slots__ = ("plan", "table", "types")

    def __init__(self, table: str) -> None:
        self.table = table
        self.types: dict[str, str] = {}
        self.plan: _Plan | None = None

    def plan_for(self, rows: Sequence[dict[str, Any]], key_columns: tuple[str, ...]) -> _Plan:
        plan = self.plan
        grew = False
        for row in rows:
            if plan is not None and plan.names.issuperset(row):
                continue
            for k, v in row.items():
                if k not in self.types:
                    self.types[k] = _infer_type(v)
                    grew = True
        if plan is None or grew or plan.key_columns != key_columns:
            # Key columns are required: Iceberg identifier fields cannot be optional.
            columns = tuple(
                ColumnSpec(name=n, type=t, nullable=n not in key_columns)
                for n, t in self.types.items()
            )
            schema = _make_schema(self.table, columns, key_columns)
            plan = _Plan(schema, [(n, _INFERRED_CONVERTERS[t]) for n, t in self.types.items()])
            self.plan = plan
        return plan


def _infer_type(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "boolean"
    if t is int:
        return "long"
    if t is float:
        return "double"
    return "string"  # str, object/array (as JSON text), and null-so-far


def _inferred_str(v: Any) -> str:
    return v if type(v) is str else orjson.dumps(v).decode()


def _inferred_long(v: Any) -> int:
    if type(v) is int and -(2**63) <= v < 2**63:
        return v
    raise _Bad(
        f"got {_show(v)} but the column was inferred as long from earlier rows "
        "(schemaless input; supply a Debezium schema for exact types)"
    )


def _inferred_double(v: Any) -> float:
    t = type(v)
    if t is float or t is int:
        return float(v)
    raise _Bad(
        f"got {_show(v)} but the column was inferred as double from earlier rows "
        "(schemaless input; supply a Debezium schema for exact types)"
    )


def _inferred_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise _Bad(
        f"got {_show(v)} but the column was inferred as boolean from earlier rows "
        "(schemaless input; supply a Debezium schema for exact types)"
    )


_INFERRED_CONVERTERS: Final[dict[str, Converter]] = {
    "string": _inferred_str,
    "long": _inferred_long,
    "double": _inferred_double,
    "boolean": _inferred_bool,
}


def _make_schema(
    table: str, columns: tuple[ColumnSpec, ...], key_columns: tuple[str, ...]
) -> TableSchema:
    names = {c.name for c in columns}
    missing = [k for k in key_columns if k not in names]
    if missing:
        raise _Bad(f"key columns {missing} are not columns of the record")
    return TableSchema(table=table, columns=columns, key_columns=key_columns)


def _row_struct(value_schema: Any) -> list[Any]:
    """The field list of the envelope's ``after`` (or ``before``) struct."""
    if type(value_schema) is not dict:
        raise _Bad(f"'schema' must be an object, got {_show(value_schema)}")
    fields = value_schema.get("fields")
    if type(fields) is list:
        fallback = None
        for f in fields:
            if type(f) is dict and f.get("type") == "struct":
                which = f.get("field")
                if which == "after" and type(f.get("fields")) is list:
                    return f["fields"]
                if which == "before" and type(f.get("fields")) is list:
                    fallback = f["fields"]
        if fallback is not None:
            return fallback
    raise _Bad("the value schema is not a Debezium envelope (no 'after'/'before' struct)")


def _unwrap(part: Any, what: str) -> tuple[Any, Any]:
    """(schema, payload) of a possibly schema-wrapped / string-encoded Kafka key or value."""
    if type(part) is str:
        try:
            part = orjson.loads(part)
        except orjson.JSONDecodeError as exc:
            raise _Bad(f"the Kafka {what} is a string but not JSON: {exc}") from None
    if type(part) is dict and "payload" in part and "schema" in part and len(part) == 2:
        return part["schema"], part["payload"]
    return None, part


_WRAP_HEAD: Final = b'{"schema":'
_PAYLOAD_SEP: Final = b',"payload":'
_MAX_KNOWN_WRAPPERS: Final = 64
_TAIL: Final = 48  # bytes compared before a full prefix compare: mostly the envelope name


class _KnownWrapper:
    """The exact bytes ``{"schema":<S>,"payload":`` of a schema already parsed.

    A line starting with these bytes has schema S: a JSON value is self-delimiting, so the
    parser of the whole line would read exactly S there. Only the payload then needs
    parsing, which for Debezium lines (schema ~80% of the bytes) is most of the cost.
    """

    __slots__ = ("fields", "fingerprint", "prefix", "schema", "tail")

    def __init__(self, prefix: bytes, schema: Any, fields: list[Any]) -> None:
        self.prefix = prefix
        self.tail = prefix[-_TAIL:]
        self.schema = schema
        self.fields = fields
        self.fingerprint = orjson.dumps(fields)


# --------------------------------------------------------------------------- parser


class DebeziumParser:
    """Turns Debezium JSON lines into ``DecodedChange``/``ChangeEvent`` objects.

    Holds only caches (schema plans keyed by table, schema fingerprint and key columns;
    inferred schemas for schemaless tables), so one instance per input stream is right.
    """

    def __init__(
        self,
        *,
        primary_keys: Mapping[str, Sequence[str]] | None = None,
        default_table: str | None = None,
        tables: Collection[str] | None = None,
    ) -> None:
        self.primary_keys: dict[str, tuple[str, ...]] = {
            t: tuple(cols) for t, cols in (primary_keys or {}).items()
        }
        self.default_table = default_table
        self.tables: frozenset[str] | None = None if tables is None else frozenset(tables)
        self._plans: dict[tuple[str, bytes, tuple[str, ...]], _Plan] = {}
        self._inferred: dict[str, _InferredTable] = {}
        self._wrappers: list[_KnownWrapper] = []  # most recently used first
        self._wrap_misses = 0  # registrations that failed (e.g. pretty-printed input)

    # -- public API ---------------------------------------------------------------------

    def parse(self, line: bytes | str, position: SourcePosition) -> ChangeEvent | None:
        """One line -> event; ``None`` for a tombstone or a table outside ``tables``.

        ``last_in_tx`` is True only for events without transaction info (their own
        transaction); a caller with look-ahead uses ``decode`` + ``to_event`` instead.
        """
        change = self.decode(line, position)
        if change is None or isinstance(change, Filtered):
            return None
        return self.to_event(change, position)

    def decode(
        self, line: bytes | str, position: SourcePosition | None = None
    ) -> DecodedChange | Filtered | None:
        """Parse and convert one line. ``None`` = tombstone; ``Filtered`` = table not wanted.

        Raises ``BadInputError`` naming the field, table and key when known.
        """
        table: str | None = None
        known: _KnownWrapper | None = None
        key_schema: Any = None
        key_payload: Any = None
        # Read by the error handler to name the key (computed only when something fails).
        key_columns: tuple[str, ...] = ()
        op: Op | None = None
        before: Any = None
        after: Any = None
        try:
            fast = self._wrappers and type(line) is bytes and self._fast_split(line)
            if fast:
                known, payload = fast
                value_schema = known.schema
            else:
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise BadInputError(
                        f"line is not valid JSON: {exc}", position=position
                    ) from None
                if obj is None:
                    return None
                if type(obj) is not dict:
                    raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
                if "op" in obj:
                    value_schema, payload = None, obj
                elif "key" in obj or "value" in obj:
                    key_schema, key_payload = _unwrap(obj.get("key"), "key")
                    raw_value = obj["value"] if "value" in obj else obj.get("payload")
                    value_schema, payload = _unwrap(raw_value, "value")
                elif "payload" in obj:
                    value_schema, payload = obj.get("schema"), obj["payload"]
                    if type(value_schema) is dict and type(line) is bytes:
                        known = self._register(line, value_schema)
                else:
                    value_schema, payload = None, obj  # reported below as a missing 'op'
            if payload is None:
                return None
            if type(payload) is not dict:
                raise _Bad(f"the change record must be an object, got {type(payload).__name__}")

            source = payload.get("source")
            if type(source) is not dict:
                source = {}
            table = self._table_name(source, value_schema)
            if self.tables is not None and table not in self.tables:
                return Filtered(table)

            before = payload.get("before")
            after = payload.get("after")
            if before is not None and type(before) is not dict:
                raise _Bad(f"'before' must be an object or null, got {type(before).__name__}")
            if after is not None and type(after) is not dict:
                raise _Bad(f"'after' must be an object or null, got {type(after).__name__}")

            # Key columns before the op checks, so that an op error can still name the key.
            key_error: _Bad | None = None
            try:
                key_columns = self._key_columns(table, key_schema, key_payload)
            except _Bad as exc:
                key_error = exc
            op_raw = payload.get("op")
            op = _OPS.get(op_raw) if type(op_raw) is str else None
            if op_raw is None:
                raise _Bad("missing 'op' field")
            if op is None:
                raise _Bad(f"unknown op {op_raw!r} (expected one of c, r, u, d)")
            if key_error is not None:
                raise key_error

            if op is Op.DELETE:
                if before is None and type(key_payload) is dict and key_payload:
                    before = key_payload  # the Kafka key is the deleted row's identity
                    key_only = True
                else:
                    key_only = False
                if before is None:
                    raise _Bad("op 'd' without a 'before' image (and no Kafka key)")
            elif after is None:
                raise _Bad(f"op {op.value!r} without an 'after' image")
            else:
                key_only = False

            if value_schema is not None:
                plan = self._schema_plan(table, value_schema, key_columns, known)
            else:
                rows = [r for r in (before, after) if r is not None]
                plan = self._inferred_plan(table, rows, key_columns)

            conv_before = None if before is None else plan.convert(before)
            if key_only and conv_before is not None:
                conv_before = {k: conv_before[k] for k in key_columns}
            conv_after = None if after is None else plan.convert(after)
            _check_key(op, conv_before, conv_after, key_columns)

            ts_ms = payload.get("ts_ms")
            if ts_ms is not None and type(ts_ms) is not int:
                raise _Bad(f"'ts_ms' must be an integer, got {_show(ts_ms)}")
            return DecodedChange(
                table=table,
                op=op,
                before=conv_before,
                after=conv_after,
                schema=plan.schema,
                ts_ms=ts_ms,
                tx_id=_tx_id(payload, source, op),
            )
        except _Bad as exc:
            key = _error_key(op, before, after, key_payload, key_columns)
            raise BadInputError(str(exc), table=table, key=key, position=position) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # Input shaped in a way no check above foresaw (e.g. a schema with a list where
            # a name belongs): one bad line must not stop the stream.
            key = _error_key(op, before, after, key_payload, key_columns)
            raise BadInputError(
                f"malformed record ({type(exc).__name__}: {exc})",
                table=table,
                key=key,
                position=position,
            ) from None

    @staticmethod
    def to_event(
        change: DecodedChange, position: SourcePosition, *, last_in_tx: bool | None = None
    ) -> ChangeEvent:
        """Build the event without re-validation: ``decode`` already checked the invariants
        ChangeEvent's validator would (op enum, images present, key columns present).
        ``last_in_tx=None`` means: True exactly when the event has no transaction."""
        if last_in_tx is None:
            last_in_tx = change.tx_id is None
        return ChangeEvent.model_construct(
            table=change.table,
            op=change.op,
            before=change.before,
            after=change.after,
            position=position,
            schema=change.schema,
            ts_ms=change.ts_ms,
            tx_id=change.tx_id,
            last_in_tx=last_in_tx,
        )

    # -- internals ----------------------------------------------------------------------

    def _table_name(self, source: dict[str, Any], value_schema: Any) -> str:
        t = source.get("table")
        if type(t) is str and t:
            ns = source.get("schema") or source.get("db")
            return f"{ns}.{t}" if type(ns) is str and ns else t
        if self.default_table:
            return self.default_table
        if type(value_schema) is dict:
            name = value_schema.get("name")
            if type(name) is str and name.endswith(".Envelope"):
                parts = name.split(".")[:-1]
                if len(parts) >= 2:
                    return ".".join(parts[-2:])
        raise _Bad("cannot tell the table: 'source' has no 'table' and no default table is set")

    def _key_columns(self, table: str, key_schema: Any, key_payload: Any) -> tuple[str, ...]:
        if key_payload is not None:
            if type(key_payload) is not dict:
                raise _Bad(f"the Kafka key must be an object, got {_show(key_payload)}")
            names: tuple[str, ...] = ()
            if type(key_schema) is dict and type(key_schema.get("fields")) is list:
                names = tuple(
                    f["field"]
                    for f in key_schema["fields"]
                    if type(f) is dict and type(f.get("field")) is str
                )
            if not names:
                names = tuple(key_payload)
            if names:
                return names
        pk = self.primary_keys.get(table)
        if pk:
            return pk
        raise _Bad(
            "no key columns: the line has no Kafka key and source.primary_keys has no entry "
            f"for {table!r}"
        )

    def _schema_plan(
        self,
        table: str,
        value_schema: Any,
        key_columns: tuple[str, ...],
        known: _KnownWrapper | None,
    ) -> _Plan:
        if known is not None:
            fields, fingerprint = known.fields, known.fingerprint
        else:
            fields = _row_struct(value_schema)
            fingerprint = orjson.dumps(fields)
        cache_key = (table, fingerprint, key_columns)
        plan = self._plans.get(cache_key)
        if plan is None:
            if len(self._plans) >= _MAX_CACHED_PLANS:
                self._plans.clear()
            plan = self._build_plan(table, fields, key_columns)
            self._plans[cache_key] = plan
        return plan

    def _fast_split(self, line: bytes) -> tuple[_KnownWrapper, Any] | None:
        """(known schema, parsed payload) when the line starts with a known wrapper prefix."""
        wrappers = self._wrappers
        for i, w in enumerate(wrappers):
            n = len(w.prefix)
            if line[n - _TAIL : n] != w.tail or not line.startswith(w.prefix):
                continue
            end = len(line)
            while end > n and line[end - 1] in _WHITESPACE:
                end -= 1
            if line[end - 1] != _CLOSE_BRACE:
                return None  # let the full parse report it
            try:
                payload = orjson.loads(memoryview(line)[n : end - 1])
            except orjson.JSONDecodeError:
                return None  # e.g. a further key after the payload: full parse decides
            if i:
                wrappers.insert(0, wrappers.pop(i))
            return w, payload
        return None

    def _register(self, line: bytes, value_schema: dict[str, Any]) -> _KnownWrapper | None:
        """Remember the exact prefix bytes of this schema-wrapped line, if we can tell them."""
        if self._wrap_misses > 100 and not self._wrappers:
            return None  # input is not compact JSON: stop trying
        prefix = _WRAP_HEAD + orjson.dumps(value_schema) + _PAYLOAD_SEP
        if not line.startswith(prefix):
            self._wrap_misses += 1
            return None
        try:
            fields = _row_struct(value_schema)
        except _Bad:
            return None
        known = _KnownWrapper(prefix, value_schema, fields)
        self._wrappers.insert(0, known)
        del self._wrappers[_MAX_KNOWN_WRAPPERS:]
        return known

    @staticmethod
    def _build_plan(table: str, fields: list[Any], key_columns: tuple[str, ...]) -> _Plan:
        columns: list[ColumnSpec] = []
        convs: list[tuple[str, Converter]] = []
        for f in fields:
            try:
                col, conv = _column_from_field(f)
            except ValueError as exc:
                raise _Bad(f"unmappable schema: {exc}") from None
            columns.append(col)
            convs.append((col.name, conv))
        return _Plan(_make_schema(table, tuple(columns), key_columns), convs)

    def _inferred_plan(
        self, table: str, rows: Sequence[dict[str, Any]], key_columns: tuple[str, ...]
    ) -> _Plan:
        state = self._inferred.get(table)
        if state is None:
            state = self._inferred[table] = _InferredTable(table)
        return state.plan_for(rows, key_columns)


def _error_key(
    op: Op | None, before: Any, after: Any, key_payload: Any, key_columns: tuple[str, ...]
) -> Any:
    """The raw (unconverted) key of a failing record, for messages; None when unknown."""
    image = before if op is Op.DELETE else (after if after is not None else before)
    if type(image) is not dict:
        image = key_payload
    if not key_columns or type(image) is not dict:
        return None
    vals = tuple(image.get(k) for k in key_columns)
    return vals[0] if len(vals) == 1 else vals


def _check_key(
    op: Op,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    key_columns: tuple[str, ...],
) -> None:
    # The pipeline finds rows by key: a key column that is null in the image it will use
    # would silently address the wrong row (or none).
    for which, image in (("before", before), ("after", after)):
        if image is None:
            continue
        for k in key_columns:
            if image.get(k) is None:
                raise _Bad(f"key column {k!r} is null or missing in the {which!r} image")
    if op is Op.DELETE and before is None:  # pragma: no cover - decode guarantees it
        raise _Bad("op 'd' without a 'before' image")


def _tx_id(payload: dict[str, Any], source: dict[str, Any], op: Op) -> str | None:
    tx = payload.get("transaction")
    if type(tx) is dict:
        tid = tx.get("id")
        if tid is not None:
            return str(tid)
    if op is Op.READ:
        return None  # snapshot rows: see the module docstring
    txid = source.get("txId")
    if txid is not None:
        return str(txid)
    gtid = source.get("gtid")
    if gtid:
        return str(gtid)
    f, p = source.get("file"), source.get("pos")
    if f is not None and p is not None:
        return f"{f}:{p}"
    return None


def parse_line(
    line: bytes | str,
    position: SourcePosition,
    *,
    primary_keys: Mapping[str, Sequence[str]] | None = None,
    default_table: str | None = None,
) -> ChangeEvent | None:
    """Convenience for one-off parsing (no cache reuse: use ``DebeziumParser`` for streams)."""
    parser = DebeziumParser(primary_keys=primary_keys, default_table=default_table)
    return parser.parse(line, position)
