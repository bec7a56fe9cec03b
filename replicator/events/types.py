"""The engine's column types: a small set of Iceberg primitives every judge can read.

Spark 3.5 (Iceberg Java's reader here) cannot read Iceberg ``time``, ``uuid`` or ``fixed``
columns, so sources map those to ``string`` (documented per source). The Python value
carried in events for each type:

=============  ===============================  ==========================
type           Python value                     Arrow type
=============  ===============================  ==========================
boolean        bool                             bool
int            int (32-bit)                     int32
long           int (64-bit)                     int64
float          float                            float32
double         float                            float64
decimal(p,s)   decimal.Decimal                  decimal128(p, s)
date           datetime.date                    date32
timestamp      datetime.datetime (naive)        timestamp[us]
timestamptz    datetime.datetime (aware, UTC)   timestamp[us, tz=UTC]
string         str                              string
binary         bytes                            binary
=============  ===============================  ==========================
"""

from __future__ import annotations

import re

import pyarrow as pa

PRIMITIVES = frozenset(
    {"boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string", "binary"}
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
MAX_DECIMAL_PRECISION = 38

# Unconstrained Postgres ``numeric`` (and Debezium's VariableScaleDecimal) holds up to 131072
# digits before the point and 16383 after it, plus NaN and +-Infinity (PG 14+). No Iceberg
# decimal holds that, and any fixed decimal(p,s) either rounds or rejects values a user can
# store: such a column is the exact decimal text (as Postgres prints it, scale kept: "1.50",
# "NaN", "-Infinity"), so no value is ever lost. See docs/types.md.
UNCONSTRAINED_DECIMAL_TYPE = "string"


def parse_decimal(type_: str) -> tuple[int, int] | None:
    m = _DECIMAL.match(type_)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2))


def validate_column_type(type_: str) -> str:
    if type_ in PRIMITIVES:
        return type_
    dec = parse_decimal(type_)
    if dec is not None:
        p, s = dec
        if not (1 <= p <= MAX_DECIMAL_PRECISION and 0 <= s <= p):
            raise ValueError(f"decimal({p},{s}) is outside Iceberg's range (precision 1..38, 0 <= scale <= precision)")
        return type_
    raise ValueError(f"unknown column type {type_!r}; expected one of {sorted(PRIMITIVES)} or decimal(p,s)")


def arrow_type(type_: str) -> pa.DataType:
    """The Arrow type used for a column of this engine type (staging and data files)."""
    simple: dict[str, pa.DataType] = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
        "string": pa.large_string(),
        "binary": pa.large_binary(),
    }
    if type_ in simple:
        return simple[type_]
    dec = parse_decimal(type_)
    if dec is None:
        raise ValueError(f"unknown column type {type_!r}")
    return pa.decimal128(*dec)


# Iceberg's allowed type promotions (format spec v2): int -> long, float -> double,
# decimal(P,S) -> decimal(P',S) with P' > P.
def can_promote(old: str, new: str) -> bool:
    if old == new:
        return True
    if (old, new) in {("int", "long"), ("float", "double")}:
        return True
    a, b = parse_decimal(old), parse_decimal(new)
    return a is not None and b is not None and a[1] == b[1] and b[0] >= a[0]


def widest(a: str, b: str) -> str | None:
    """The type both fit in by promotion, or None when neither promotes to the other."""
    if can_promote(a, b):
        return b
    if can_promote(b, a):
        return a
    return None
