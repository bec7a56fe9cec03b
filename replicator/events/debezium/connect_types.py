"""The Kafka Connect / Debezium semantic type table: one schema field -> column + converter.

Type mapping with a Debezium schema (``schemas.enable=true``)::

    Kafka Connect type / Debezium semantic name          engine type     Python value
    int8, int16, int32                                    int             int (range-checked)
    int64                                                 long            int (range-checked)
    float32 / float64 (the JSON converter writes them     float / double  float
        ``float`` / ``double``; NaN and +-Infinity arrive as the strings "NaN",
        "Infinity", "-Infinity")
    boolean                                               boolean         bool
    string                                                string          str
    bytes (base64 in JSON), io.debezium.data.Bits         binary          bytes
    struct / array / map without a known semantic name    string          JSON text
    org.apache.kafka.connect.data.Decimal                 decimal(p,s)    Decimal
        p = connect.decimal.precision (default 38, raised to s if smaller); a negative
        scale s maps to decimal(p-s, 0); a value with more than p digits is a
        BadInputError (dead letter), never rounded.
    ... the same with p > 38 (numeric(50,5), MySQL decimal(65,30))  string   exact plain
        text with the column's scale ("-12.50"), as the Postgres and MySQL sources map it
    io.debezium.data.VariableScaleDecimal                 string          exact plain text
        ({scale, value}; unconstrained Postgres numeric): "0.1234567891234", the text
        Postgres prints. No decimal(p,s) holds every such value (see
        ``replicator.events.types.UNCONSTRAINED_DECIMAL_TYPE``).
    io.debezium.time.Date, org.apache.kafka.connect.data.Date (epoch days)   date
    io.debezium.time.Timestamp (ms), MicroTimestamp (us), NanoTimestamp (ns, truncated to
        us: Iceberg timestamps are microseconds), org.apache.kafka.connect.data.Timestamp
        (ms)                                              timestamp       naive datetime
    io.debezium.time.IsoTimestamp (isostring mode)        timestamp       naive datetime
    io.debezium.time.IsoDate (isostring mode)             date            date
    io.debezium.time.ZonedTimestamp (ISO-8601 with offset) timestamptz   aware UTC datetime
    io.debezium.time.Time (ms), MicroTime (us), NanoTime (ns),
        org.apache.kafka.connect.data.Time (ms),
        io.debezium.time.IsoTime (isostring mode)         string          "HH:MM:SS[.ffffff]"
    io.debezium.time.ZonedTime                            string          "HH:MM:SS[.ffffff]Z"
        (UTC). Times are strings because Spark 3.5 cannot read Iceberg ``time`` columns;
        MySQL TIME durations outside 0..24h keep their sign and hour count ("-01:30:00").
    io.debezium.data.Json, Uuid, Enum, EnumSet, Xml       string          str
    any other semantic name                               by its Connect type
        (io.debezium.time.Year -> int, MicroDuration -> long microseconds, Interval ->
        string, geometry structs -> JSON text)

``binary.handling.mode=base64|base64-url-safe|hex`` and ``decimal.handling.mode=string``
declare plain ``string`` fields: those columns are strings holding Debezium's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from replicator.events.debezium import convert as cv
from replicator.events.debezium.convert import Converter, show
from replicator.events.debezium.decimals import (
    MAX_PRECISION,
    VARIABLE_SCALE_DECIMAL_TYPE,
    decimal_converter,
    decimal_text_converter,
    variable_scale_decimal,
)
from replicator.events.model import ColumnSpec

# Connect type -> (engine type, converter)
PLAIN: Final[dict[str, tuple[str, Converter]]] = {
    "int8": ("int", cv.int8),
    "int16": ("int", cv.int16),
    "int32": ("int", cv.int32),
    "int64": ("long", cv.int64),
    "float32": ("float", cv.to_float),
    "float64": ("double", cv.to_float),
    # Kafka Connect's JsonConverter names them so in the schemas it writes.
    "float": ("float", cv.to_float),
    "double": ("double", cv.to_float),
    "boolean": ("boolean", cv.to_bool),
    "string": ("string", cv.to_str),
    "bytes": ("binary", cv.to_bytes),
    "struct": ("string", cv.json_text),
    "array": ("string", cv.json_text),
    "map": ("string", cv.json_text),
}

# Semantic name -> (Connect types it applies to, engine type, converter). A name on an
# unexpected Connect type falls back to the plain mapping rather than misreading values.
SEMANTIC: Final[dict[str, tuple[frozenset[str], str, Converter]]] = {
    "io.debezium.data.VariableScaleDecimal": (
        frozenset({"struct"}),
        VARIABLE_SCALE_DECIMAL_TYPE,
        variable_scale_decimal,
    ),
    "io.debezium.time.Date": (frozenset({"int32"}), "date", cv.epoch_days),
    "org.apache.kafka.connect.data.Date": (frozenset({"int32"}), "date", cv.epoch_days),
    "io.debezium.time.Timestamp": (frozenset({"int64"}), "timestamp", cv.ts_millis),
    "io.debezium.time.MicroTimestamp": (frozenset({"int64"}), "timestamp", cv.ts_micros),
    "io.debezium.time.NanoTimestamp": (frozenset({"int64"}), "timestamp", cv.ts_nanos),
    "org.apache.kafka.connect.data.Timestamp": (frozenset({"int64"}), "timestamp", cv.ts_millis),
    "io.debezium.time.ZonedTimestamp": (frozenset({"string"}), "timestamptz", cv.zoned_timestamp),
    "io.debezium.time.Time": (frozenset({"int32"}), "string", cv.time_millis),
    "org.apache.kafka.connect.data.Time": (frozenset({"int32"}), "string", cv.time_millis),
    "io.debezium.time.MicroTime": (frozenset({"int64"}), "string", cv.time_micros),
    "io.debezium.time.NanoTime": (frozenset({"int64"}), "string", cv.time_nanos),
    "io.debezium.time.ZonedTime": (frozenset({"string"}), "string", cv.zoned_time),
    "io.debezium.time.IsoDate": (frozenset({"string"}), "date", cv.iso_date),
    "io.debezium.time.IsoTime": (frozenset({"string"}), "string", cv.iso_time),
    "io.debezium.time.IsoTimestamp": (frozenset({"string"}), "timestamp", cv.iso_timestamp),
    "io.debezium.data.Json": (frozenset({"string"}), "string", cv.to_str),
    "io.debezium.data.Uuid": (frozenset({"string"}), "string", cv.to_str),
    "io.debezium.data.Enum": (frozenset({"string"}), "string", cv.to_str),
    "io.debezium.data.EnumSet": (frozenset({"string"}), "string", cv.to_str),
    "io.debezium.data.Xml": (frozenset({"string"}), "string", cv.to_str),
    "io.debezium.data.Bits": (frozenset({"bytes"}), "binary", cv.to_bytes),
}
CONNECT_DECIMAL: Final = "org.apache.kafka.connect.data.Decimal"


def _int_param(params: Mapping[str, Any], name: str, default: int | None) -> int:
    raw = params.get(name, default)
    if raw is None:
        raise ValueError(f"missing parameter {name!r}")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"parameter {name!r} is not an integer: {raw!r}") from None


def column_from_field(field: Any) -> tuple[ColumnSpec, Converter]:
    """One Connect schema field -> its column and value converter (ValueError if unmappable)."""
    if type(field) is not dict or type(field.get("field")) is not str:
        raise ValueError(f"schema field without a name: {show(field)}")
    name: str = field["field"]
    ctype = field.get("type")
    semantic = field.get("name")
    if type(ctype) is not str:
        raise ValueError(f"column {name!r}: schema type {show(ctype)} is not a string")
    if type(semantic) is not str:
        semantic = None
    params = field.get("parameters")
    if type(params) is not dict:
        params = {}
    nullable = bool(field.get("optional", False))
    source_type = params.get("__debezium.source.column.type") or semantic or ctype
    if semantic == CONNECT_DECIMAL and ctype == "bytes":
        scale = _int_param(params, "scale", None)
        precision = _int_param(params, "connect.decimal.precision", MAX_PRECISION)
        # Iceberg needs 0 <= scale <= precision <= 38. A negative scale holds integers:
        # decimal(p-s, 0); Postgres allows numeric(3,5): the precision is raised to the scale.
        p, s = (precision - scale, 0) if scale < 0 else (max(precision, scale, 1), scale)
        if p > MAX_PRECISION:
            # Wider than any Iceberg decimal: the exact plain text (as the Postgres and MySQL
            # sources map numeric(p > 38)), never a capped type that would reject values.
            type_, conv = "string", decimal_text_converter(scale)
        else:
            conv = decimal_converter(precision, scale) if scale < 0 else decimal_converter(p, s)
            type_ = f"decimal({p},{s})"
    elif semantic in SEMANTIC and ctype in SEMANTIC[semantic][0]:
        _, type_, conv = SEMANTIC[semantic]
    elif ctype in PLAIN:
        type_, conv = PLAIN[ctype]
    else:
        raise ValueError(f"column {name!r}: unsupported Kafka Connect type {ctype!r}")
    col = ColumnSpec(name=name, type=type_, nullable=nullable, source_type=str(source_type))
    return col, conv
