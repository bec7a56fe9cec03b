"""MySQL/MariaDB column types -> engine column types, and value converters for both paths.

A column is described once as a ``ColumnDef`` (from the binlog's table-map metadata, or from
``information_schema`` for the snapshot) and mapped by ``map_column``; the mapping carries one
converter for values decoded by mysql-replication (binlog) and one for values read by
pymysql (snapshot), which must produce identical Python values for the same stored value.

=================================  ==============  ==============================================
MySQL / MariaDB type               engine type     Python value (both paths)
=================================  ==============  ==============================================
tinyint(1), bool, boolean          boolean         bool; any non-zero value is True (MySQL's
                                                   truth rule; -128..127 fits, 2 becomes True)
tinyint, smallint, mediumint       int             int (signed or unsigned: all fit 32 bits)
int                                int             int
int unsigned                       long            int
bigint                             long            int
bigint unsigned                    decimal(20,0)   Decimal (values up to 2^64-1)
decimal(p,s), p <= 38              decimal(p,s)    Decimal
decimal(p,s), p > 38 (max 65)      string          the exact decimal text, no exponent
                                                   (``format(d, 'f')``, e.g. ``'0.000010'``)
float                              float           float, the exact float32 value (the snapshot
                                                   reads ``CAST(col AS DOUBLE)``: the text form
                                                   of a FLOAT has only 6 digits)
double                             double          float
bit(n), n <= 63                    long            int (the bits as an unsigned number)
bit(64)                            decimal(20,0)   Decimal
char, varchar, *text (any charset) string          str (utf8mb4 incl. 4-byte characters)
binary(n)                          binary          bytes, right-padded with 0x00 to n bytes (the
                                                   binlog strips the padding, SELECT keeps it)
varbinary, *blob, geometry         binary          bytes (geometry: the internal SRID+WKB form)
json                               string          compact JSON text: whitespace outside strings
                                                   removed, key order and number text kept
enum                               string          the label ('' for the invalid-value index 0)
set                                string          members in definition order, comma-separated
year                               int             int (0 for year 0000)
date                               date            datetime.date
time(fsp)                          string          ``[-]HH:MM:SS`` or ``[-]HH:MM:SS.ffffff`` when
                                                   the fraction is not zero; hours may exceed 24
                                                   (range -838:59:59..838:59:59). Spark 3.5
                                                   cannot read Iceberg ``time``.
datetime(fsp)                      timestamp       naive datetime (wall clock as stored)
timestamp(fsp)                     timestamptz     aware datetime in UTC
MariaDB uuid, inet4, inet6         (refused)       ``SourceSetupError`` at start: raw bytes in the
                                                   binlog, text from SELECT; hint: MODIFY to text
=================================  ==============  ==============================================

Key columns are ``nullable=False``; every other column is nullable (NOT NULL is not copied:
it may change, and a required Iceberg column cannot take a null later).

Zero and invalid dates (``'0000-00-00'``, ``'2020-00-15'``, zero datetimes and timestamps,
stored under a permissive ``sql_mode``) have no Python value. Policy (``zero_dates``):
``"null"`` (default, as Debezium does): the value becomes NULL and
``MySQLSource.zero_dates_nulled`` counts it; in a primary-key column, and always with
``"dead-letter"``, the row is dead-lettered (``BadInputError`` naming table, key, position).

MariaDB stores JSON as LONGTEXT with a ``json_valid()`` check: nothing in the binlog marks
it, so which text columns are JSON comes from the schema history (``schema_history.py``).
Likewise ``tinyint(1)`` is not visible in the binlog (no display width): the history says
which tinyint columns are booleans. Anything else is read from the table-map metadata
(``binlog_row_metadata=FULL``).

Corrections to mysql-replication 1.0.17 (all tested in ``tests/sources/mysql``):
negative TIME values with a fraction are mis-decoded (``compat.read_time2`` replaces the decoder);
YEAR 0000 arrives as 1900; a zero TIMESTAMP arrives as 1970-01-01 00:00:00; zero dates and
an empty SET arrive as None (told apart from NULL by the row's ``none_sources``); SET values
arrive as an unordered Python set; BIT as a string of '0'/'1'; binary(n) without padding;
an empty binary value as ``''`` (str).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from replicator.events.model import ColumnSpec
from replicator.events.types import MAX_DECIMAL_PRECISION

Converter = Callable[[Any], Any]

ZERO_DATE_POLICIES = ("null", "dead-letter")
_EPOCH = datetime(1970, 1, 1)  # mysql-replication's decoding of a zero TIMESTAMP


class ValueConversionError(ValueError):
    """A value that cannot become a value of its engine type."""

    def __init__(self, column: str, value: Any, reason: str) -> None:
        self.column = column
        self.value = value
        self.reason = reason
        shown = repr(value)
        super().__init__(f"column {column!r}: {reason} (value {shown[:80]})")


class ZeroDate(ValueError):  # noqa: N818 - a signal, not an error shown to users
    """Raised by a converter for a zero or otherwise invalid date; see the zero-date policy."""


# -- column descriptions ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColumnDef:
    """One column, normalised from either the binlog or information_schema."""

    name: str
    data_type: str  # MySQL base type, lower case: "int", "varchar", "datetime", ...
    unsigned: bool = False
    length: int | None = None  # bit(n): n; binary(n): n bytes
    precision: int | None = None  # decimal
    scale: int | None = None  # decimal
    fsp: int = 0  # time / datetime / timestamp
    is_bool: bool = False  # tinyint(1)
    is_json: bool = False
    values: tuple[str, ...] = ()  # enum / set members

    @property
    def source_type(self) -> str:
        t = self.data_type
        if t == "decimal":
            t = f"decimal({self.precision},{self.scale})"
        elif self.is_bool:
            t = "tinyint(1)"
        elif t in ("bit", "binary") and self.length is not None:
            t = f"{t}({self.length})"
        elif t in ("time", "datetime", "timestamp") and self.fsp:
            t = f"{t}({self.fsp})"
        elif self.is_json:
            t = "json"
        return t + (" unsigned" if self.unsigned else "")


INT_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
BLOB_TYPES = ("varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry")

# mysql-replication FIELD_TYPE codes -> base type names.
_FIELD_TYPES: dict[int, str] = {
    1: "tinyint",
    2: "smallint",
    3: "int",
    4: "float",
    5: "double",
    7: "timestamp",
    8: "bigint",
    9: "mediumint",
    10: "date",
    11: "time",
    12: "datetime",
    13: "year",
    14: "date",
    16: "bit",
    17: "timestamp",
    18: "datetime",
    19: "time",
    245: "json",
    246: "decimal",
    247: "enum",
    248: "set",
    255: "geometry",
}


def def_from_binlog(col: Any, *, is_bool: bool = False, is_json: bool = False) -> ColumnDef:
    """A ColumnDef from a mysql-replication ``Column`` of a table-map event (FULL metadata)."""
    code = col.type
    binary = col.character_set_name == "binary"
    if code in (15, 253):  # VARCHAR / VAR_STRING
        t = "varbinary" if binary else "varchar"
    elif code == 254:  # STRING: char / binary (enum and set were re-typed by the library)
        t = "binary" if binary else "char"
    elif 249 <= code <= 252:  # the BLOB family: text or blob by charset
        t = "blob" if binary else "text"
    else:
        t = _FIELD_TYPES.get(code, f"type{code}")
    return ColumnDef(
        name=col.name,
        data_type=t,
        unsigned=bool(col.unsigned) and t in (*INT_TYPES, "decimal", "float", "double"),
        length=col.bits if t == "bit" else (col.max_length if t == "binary" else None),
        precision=getattr(col, "precision", None),
        scale=getattr(col, "decimals", None),
        fsp=int(getattr(col, "fsp", 0) or 0),
        is_bool=is_bool and t == "tinyint",
        is_json=t == "json" or (is_json and t == "text"),
        values=tuple(
            col.enum_values[1:]
            if t == "enum" and col.enum_values
            else (col.set_values or ())
            if t == "set"
            else ()
        ),
    )


_ENUM_VALUES = re.compile(r"'((?:[^']|'')*)'")


def def_from_information_schema(row: Mapping[str, Any], *, is_json: bool = False) -> ColumnDef:
    """A ColumnDef from an ``information_schema.COLUMNS`` row (keys as in that view)."""
    data_type = str(row["DATA_TYPE"]).lower()
    column_type = str(row["COLUMN_TYPE"]).lower()
    charset = row.get("CHARACTER_SET_NAME")
    t = data_type
    if t in ("char", "varchar") and charset == "binary":  # MySQL 8 reports binary as char
        t = "binary" if t == "char" else "varbinary"
    if t in ("tinytext", "text", "mediumtext", "longtext") and charset == "binary":
        t = "blob"
    if t in ("tinyblob", "mediumblob", "longblob"):
        t = "blob"
    if t in ("tinytext", "mediumtext", "longtext"):
        t = "text"
    if t in (
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
    ):
        t = "geometry"
    length = None
    if t == "bit":
        length = int(row.get("NUMERIC_PRECISION") or 1)
    elif t == "binary":
        length = int(row.get("CHARACTER_OCTET_LENGTH") or 0)
    values: tuple[str, ...] = ()
    if t in ("enum", "set"):
        raw = str(row["COLUMN_TYPE"])
        inner = raw[raw.index("(") + 1 : raw.rindex(")")]
        values = tuple(v.replace("''", "'") for v in _ENUM_VALUES.findall(inner))
    return ColumnDef(
        name=str(row["COLUMN_NAME"]),
        data_type=t,
        unsigned="unsigned" in column_type,
        length=length,
        precision=int(row["NUMERIC_PRECISION"]) if t == "decimal" else None,
        scale=int(row["NUMERIC_SCALE"]) if t == "decimal" else None,
        fsp=int(row.get("DATETIME_PRECISION") or 0)
        if t in ("time", "datetime", "timestamp")
        else 0,
        is_bool=t == "tinyint" and re.match(r"tinyint\(1\)", column_type) is not None,
        is_json=t == "json" or (is_json and t == "text"),
        values=values,
    )


# -- converters -------------------------------------------------------------------------------

_JSON_WS = re.compile(r'("(?:[^"\\]|\\.)*")|[ \t\n\r]+', re.DOTALL)


def compact_json(text: str) -> str:
    """JSON text without insignificant whitespace; strings, key order, numbers untouched."""
    return _JSON_WS.sub(lambda m: m.group(1) or "", text)


def _json_value_text(v: Any) -> str:
    """mysql-replication's decoded MySQL binary JSON -> compact JSON text (MySQL only)."""
    import json

    def fix(o: Any) -> Any:
        if isinstance(o, bytes):
            return o.decode("utf-8", "replace")
        if isinstance(o, dict):
            return {fix(k): fix(x) for k, x in o.items()}
        if isinstance(o, list):
            return [fix(x) for x in o]
        return o

    return json.dumps(fix(v), separators=(",", ":"), ensure_ascii=False, default=str)


def format_time(td: timedelta) -> str:
    """``[-]HH:MM:SS[.ffffff]`` (fraction only when not zero)."""
    us = (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds
    sign = "-" if us < 0 else ""
    secs, frac = divmod(abs(us), 1_000_000)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    return f"{sign}{h:02d}:{m:02d}:{s:02d}" + (f".{frac:06d}" if frac else "")


def _to_bool(v: Any) -> bool:
    return bool(v != 0)


def _decimal_text(v: Decimal) -> str:
    return format(v, "f")


def _bits_to_int(v: str) -> int:
    return int(v, 2) if v else 0


def _bytes_to_int(v: bytes) -> int:
    return int.from_bytes(v, "big")


def _year_binlog(v: int) -> int:
    return 0 if v == 1900 else v  # YEAR 0000 is stored as 0; the library adds 1900


def _time_value(v: Any) -> str:
    if isinstance(v, timedelta):
        return format_time(v)
    raise ValueError(f"not a TIME value: {v!r}")


def _date_snapshot(v: Any) -> date:
    if type(v) is date:
        return v
    raise ZeroDate(str(v))  # pymysql returns the text of a date it cannot parse


def _datetime_snapshot(v: Any) -> datetime:
    if type(v) is datetime:
        return v
    raise ZeroDate(str(v))


def _timestamp_snapshot(v: Any) -> datetime:
    if type(v) is datetime:
        return v.replace(tzinfo=UTC)  # the snapshot session runs with time_zone '+00:00'
    raise ZeroDate(str(v))


def _timestamp_binlog(v: datetime) -> datetime:
    if v == _EPOCH:
        raise ZeroDate("0000-00-00 00:00:00")  # 0 seconds is never a valid TIMESTAMP
    return v.replace(tzinfo=UTC)


def _str_value(v: Any) -> str:
    return v if type(v) is str else bytes(v).decode("utf-8")


def _bytes_value(v: Any) -> bytes:
    # mysql-replication "decodes" binary columns with an unknown codec and keeps the bytes,
    # except that Python decodes b"" to "" without looking the codec up.
    return v if type(v) is bytes else v.encode("utf-8")


@dataclass(frozen=True, slots=True)
class ColumnMapping:
    spec: ColumnSpec
    binlog: Converter | None  # None: the decoded value is already right
    snapshot: Converter | None
    select: str  # SQL expression the snapshot selects for this column


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def map_column(d: ColumnDef, *, key: bool = False) -> ColumnMapping:
    """The engine type and converters for one column (see the module table)."""
    t = d.data_type
    sel = quote_ident(d.name)
    binlog: Converter | None = None
    snap: Converter | None = None
    if t == "tinyint" and d.is_bool:
        engine, binlog, snap = "boolean", _to_bool, _to_bool
    elif t in ("tinyint", "smallint", "mediumint") or (t == "int" and not d.unsigned):
        engine = "int"
    elif t == "int" or (t == "bigint" and not d.unsigned):
        engine = "long"
    elif t == "bigint":
        engine, binlog, snap = "decimal(20,0)", Decimal, Decimal
    elif t == "decimal":
        p, s = d.precision or 10, d.scale or 0
        if p <= MAX_DECIMAL_PRECISION:
            engine = f"decimal({p},{s})"
        else:
            engine, binlog, snap = "string", _decimal_text, _decimal_text
    elif t == "float":
        engine = "float"
        sel = f"CAST({sel} AS DOUBLE)"  # exact float32 value; the text form has 6 digits
    elif t == "double":
        engine = "double"
    elif t == "bit":
        if (d.length or 1) < 64:
            engine, binlog, snap = "long", _bits_to_int, _bytes_to_int
        else:
            engine = "decimal(20,0)"
            binlog, snap = (
                (lambda v: Decimal(_bits_to_int(v))),
                (lambda v: Decimal(_bytes_to_int(v))),
            )
    elif d.is_json:
        engine = "string"
        binlog = (
            compact_json
            if t != "json"
            else (lambda v: compact_json(v) if isinstance(v, str) else _json_value_text(v))
        )
        snap = lambda v: compact_json(_str_value(v))  # noqa: E731
    elif t in TEXT_TYPES or t == "enum":
        engine = "string"
        binlog = _str_value if t != "enum" else None  # bytes only for an unknown charset
    elif t == "set":
        engine = "string"
        order = d.values

        def set_text(v: Any) -> str:
            return ",".join(m for m in order if m in v)

        def set_snapshot(v: Any) -> str:
            return v if type(v) is str else set_text(v)  # pymysql may decode a SET as a set

        binlog, snap = set_text, set_snapshot
    elif t == "binary":
        engine = "binary"
        n = d.length or 0
        binlog = lambda v: _bytes_value(v).ljust(n, b"\x00")  # noqa: E731
    elif t in BLOB_TYPES or t == "blob":
        engine, binlog = "binary", _bytes_value
    elif t == "year":
        engine, binlog = "int", _year_binlog
    elif t == "date":
        engine, snap = "date", _date_snapshot
    elif t == "time":
        engine, binlog, snap = "string", _time_value, _time_value
    elif t == "datetime":
        engine, snap = "timestamp", _datetime_snapshot
    elif t == "timestamp":
        engine, binlog, snap = "timestamptz", _timestamp_binlog, _timestamp_snapshot
    else:
        raise ValueConversionError(d.name, t, f"unsupported MySQL type {t!r}")
    spec = ColumnSpec(name=d.name, type=engine, nullable=not key, source_type=d.source_type)
    return ColumnMapping(spec, binlog, snap, sel)


_REPLACEMENTS = {"uuid": "CHAR(36)", "inet6": "VARCHAR(39)", "inet4": "VARCHAR(15)"}


def check_types(defs: Mapping[str, Sequence[ColumnDef]], tables: Mapping[str, Any]) -> None:
    """Refuse columns whose binlog and SELECT forms differ in ways the source cannot align
    (MariaDB UUID/INET4/INET6 arrive as raw bytes in the binlog and as text from SELECT)."""
    from replicator.errors import SourceSetupError

    for table, cols in defs.items():
        for d in cols:
            try:
                map_column(d)
            except ValueConversionError:
                sql = getattr(tables.get(table), "sql", table)
                raise SourceSetupError(
                    f"column {d.name} of {table} has type {d.data_type}, which the MySQL source "
                    "does not support",
                    table=table,
                    hint=f"ALTER TABLE {sql} MODIFY {quote_ident(d.name)} "
                    f"{_REPLACEMENTS.get(d.data_type, 'VARCHAR(255)')};  -- or leave {table} "
                    "out of source.tables",
                ) from None


# -- rows -------------------------------------------------------------------------------------

# mysql-replication's reasons for a None that is not SQL NULL.
_EMPTY_SET = "empty set"
_OUT_OF_RANGE = ("out of date range", "out of datetime range", "out of datetime2 range")


@dataclass
class RowConverter:
    """Converts whole rows (dicts keyed by column name) of one table version, in place."""

    names: tuple[str, ...]
    binlog: tuple[tuple[str, Converter], ...]
    snapshot: tuple[tuple[int, Converter], ...]
    key_columns: frozenset[str]
    zero_dates: str = "null"
    zero_count: int = field(default=0)

    @classmethod
    def build(
        cls, mappings: Sequence[ColumnMapping], key_columns: Sequence[str], zero_dates: str = "null"
    ) -> RowConverter:
        return cls(
            names=tuple(m.spec.name for m in mappings),
            binlog=tuple((m.spec.name, m.binlog) for m in mappings if m.binlog is not None),
            snapshot=tuple(
                (i, m.snapshot) for i, m in enumerate(mappings) if m.snapshot is not None
            ),
            key_columns=frozenset(key_columns),
            zero_dates=zero_dates,
        )

    def _zero(self, name: str, raw: Any) -> None:
        if self.zero_dates == "null" and name not in self.key_columns:
            self.zero_count += 1
            return
        raise ValueConversionError(name, raw, "zero or invalid date has no value in Iceberg")

    def from_binlog(
        self, values: dict[str, Any], none_sources: Mapping[str, str]
    ) -> dict[str, Any]:
        """A decoded binlog row image -> engine values (mutates and returns ``values``)."""
        return self._convert(values, none_sources, self.binlog)

    def key_from_binlog(
        self, raw_key: Mapping[str, Any], none_sources: Mapping[str, str]
    ) -> dict[str, Any] | None:
        """Engine values of a row image's key columns (``raw_key``: their decoded binlog
        values, copied before ``from_binlog`` converted the image in place), for a u/d whose
        other columns do not convert. None when a key value itself does not convert."""
        key = dict(raw_key)
        converters = tuple((n, c) for n, c in self.binlog if n in key)
        try:
            return self._convert(
                key, {n: w for n, w in none_sources.items() if n in key}, converters
            )
        except ValueConversionError:
            return None

    def _convert(
        self,
        values: dict[str, Any],
        none_sources: Mapping[str, str],
        converters: tuple[tuple[str, Converter], ...],
    ) -> dict[str, Any]:
        for name, conv in converters:
            v = values[name]
            if v is not None:
                try:
                    values[name] = conv(v)
                except ZeroDate:
                    self._zero(name, v)
                    values[name] = None
                except (ValueError, TypeError, UnicodeDecodeError) as exc:
                    raise ValueConversionError(name, v, str(exc)) from None
        if none_sources:
            for name, why in none_sources.items():
                if why == _EMPTY_SET:
                    values[name] = ""
                elif why in _OUT_OF_RANGE:
                    self._zero(name, "0000-00-00")
        return values

    def from_snapshot(self, row: Sequence[Any]) -> dict[str, Any]:
        """A pymysql row tuple (columns as in ``names``) -> engine values."""
        out = dict(zip(self.names, row, strict=True))
        for i, conv in self.snapshot:
            v = row[i]
            if v is not None:
                name = self.names[i]
                try:
                    out[name] = conv(v)
                except ZeroDate:
                    self._zero(name, v)
                    out[name] = None
                except (ValueError, TypeError, UnicodeDecodeError) as exc:
                    raise ValueConversionError(name, v, str(exc)) from None
        return out
