"""Canonical row encoding, range digests and the row-by-row diff. Pure: no I/O.

Canonical values. Both sides are reduced, column by column, to one canonical Python
primitive chosen by the column's engine type (``replicator.events.types``):

===========  =============================================  ==================================
type         canonical value                                why
===========  =============================================  ==================================
boolean      bool
int, long    int                                            int -> long promotion compares equal
float        repr() of the value rounded to float32         the engine stores ``real`` as float32
double       repr() of the float                            exact; NaN == NaN ('nan'); -0.0 kept
decimal      str() of the normalised Decimal                scale-independent: 1.50 == 1.5
date         days since 1970-01-01                          Arrow's date32, no object per value
timestamp    microseconds since 1970-01-01 (naive)          Arrow's int64 view of timestamp[us]
timestamptz  microseconds since 1970-01-01 UTC              any offset on input compares equal
string       str
binary       bytes
===========  =============================================  ==================================

The source side produces these from the engine values the Postgres source's converters make
(``canon_python``); the Iceberg side from the Arrow columns Spark hands to Python workers
(``canon_arrow``, vectorised for the temporal types). A row's canonical form is the tuple of
its canonical values in plan order; its hash is the first 8 bytes of BLAKE2b over
``marshal.dumps(row, 2)`` (version 2 never emits back-references, so equal tuples give equal
bytes). This is an in-process comparison format, not a persistent one.

Range digests. The source is read in key order and cut into ranges of ``chunk_rows`` rows;
range ``i`` holds the keys in ``(bound[i-1], bound[i]]`` and one more open range follows the
last bound. A digest is (row count, sum of row hashes mod 2**64): order-independent, so the
Iceberg side needs no sort, and a sum (unlike xor) still sees a duplicated row. Iceberg rows
are assigned to ranges by binary search over the bounds with the same key order
(``sort_key``), which the source query is built to reproduce (see ``postgres_side``).
"""

from __future__ import annotations

import marshal
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal
from functools import cached_property
from hashlib import blake2b
from typing import Any, cast

import pyarrow as pa

from replicator.events.columns import keyed_hash
from replicator.events.types import parse_decimal

__all__ = [
    "HASH_MOD",
    "DiffCollector",
    "OrderError",
    "RangeDigest",
    "RowCodec",
    "RowRecord",
    "SourceRanges",
    "bucket_of",
    "canon_arrow",
    "canon_python",
    "differing_ranges",
    "display_value",
    "row_hash",
    "unconvertible",
]

HASH_MOD = 1 << 64
_F32 = struct.Struct("<f")
_EPOCH = datetime(1970, 1, 1)
_EPOCH_TZ = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_US = timedelta(microseconds=1)

Canon = Callable[[Any], Any]


# -- canonical values ------------------------------------------------------------------------


# Wide enough that normalising never rounds (decimal(38,s) has at most 38 digits); the default
# context's 28 digits would merge distinct values.
_EXACT = Context(prec=80)


def _canon_decimal(d: Decimal) -> str:
    if not d:
        return "0"  # 0.00, -0 and 0E+3 are one value
    return str(_EXACT.normalize(d))  # scale-independent: 1.50 -> 1.5, 100 -> 1E+2


def _canon_float32(v: float) -> str:
    return repr(_F32.unpack(_F32.pack(v))[0])


def _canon_date(d: date) -> int:
    return d.toordinal() - _EPOCH_ORDINAL


def _canon_timestamp(t: datetime) -> int:
    return (t - _EPOCH) // _US


def _canon_timestamptz(t: datetime) -> int:
    return (t - _EPOCH_TZ) // _US


_PY: dict[str, Canon | None] = {
    "boolean": None,
    "int": None,
    "long": None,
    "string": None,
    "binary": bytes,
    "float": _canon_float32,
    "double": repr,
    "date": _canon_date,
    "timestamp": _canon_timestamp,
    "timestamptz": _canon_timestamptz,
}


def canon_python(engine_type: str) -> Canon | None:
    """Engine value -> canonical value for one column type (None: the value itself)."""
    if engine_type in _PY:
        return _PY[engine_type]
    if parse_decimal(engine_type) is not None:
        return _canon_decimal
    raise ValueError(f"unknown engine type {engine_type!r}")


def canon_arrow(arr: pa.Array | pa.ChunkedArray, engine_type: str) -> list[Any]:
    """An Arrow column (as Spark hands it to Python) -> canonical values."""
    if engine_type == "date":
        return cast(list[Any], arr.cast(pa.int32()).to_pylist())  # date32 is days since the epoch
    if engine_type in ("timestamp", "timestamptz"):
        tz = arr.type.tz if pa.types.is_timestamp(arr.type) else None
        return cast(list[Any], arr.cast(pa.timestamp("us", tz=tz)).cast(pa.int64()).to_pylist())
    values: list[Any] = arr.to_pylist()
    fn = canon_python(engine_type)
    if fn is None:
        return values
    return [None if v is None else fn(v) for v in values]


_UNCONVERTIBLE = "\x00not representable"


def unconvertible(reason: str) -> tuple[str, str]:
    """The canonical value of a source value the engine cannot carry (it dead-letters such
    rows): a tuple, which no Iceberg column ever yields."""
    return (_UNCONVERTIBLE, reason)


class RowEncoder:
    """A source row -> its canonical row: the source's own row converter (the engine's type
    mapping), then the canonical form of each value. A value the engine would dead-letter is
    marked so the row can never compare equal (and counted)."""

    def __init__(
        self,
        convert_row: Callable[[Sequence[Any]], Any],
        column_converters: Sequence[Canon | None],
        canons: Sequence[Canon | None],
        row_error: type[Exception],
    ) -> None:
        self.convert_row = convert_row
        self.column_converters = list(column_converters)
        self.canons = list(canons)
        self.row_error = row_error
        self.unconvertible = 0

    def __call__(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        try:
            values = self.convert_row(raw).values()
        except self.row_error:
            return self._one_by_one(raw)
        return tuple(
            [v if f is None or v is None else f(v) for f, v in zip(self.canons, values, strict=True)]
        )

    def _one_by_one(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        self.unconvertible += 1
        out: list[Any] = []
        for v, conv, canon in zip(raw, self.column_converters, self.canons, strict=True):
            try:
                value = v if conv is None or v is None else conv(v)
                out.append(value if canon is None or value is None else canon(value))
            except (ValueError, TypeError, ArithmeticError) as exc:
                out.append(unconvertible(str(exc) or type(exc).__name__))
        return tuple(out)


def display_value(value: Any, engine_type: str, limit: int = 80) -> Any:
    """A canonical value for people and JSON (timestamps as ISO text, bytes as hex, long
    strings cut)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, tuple) and value[:1] == (_UNCONVERTIBLE,):
        return f"<not representable: {value[1]}>"
    if engine_type == "date" and isinstance(value, int):
        return date.fromordinal(value + _EPOCH_ORDINAL).isoformat()
    if engine_type == "timestamp" and isinstance(value, int):
        return (_EPOCH + value * _US).isoformat()
    if engine_type == "timestamptz" and isinstance(value, int):
        return (_EPOCH_TZ + value * _US).isoformat()
    dec = parse_decimal(engine_type)
    if dec is not None and isinstance(value, str):
        return format(_EXACT.quantize(Decimal(value), Decimal(1).scaleb(-dec[1])), "f")
    if isinstance(value, bytes):
        text = "\\x" + value.hex()
        return text if len(text) <= limit else text[:limit] + "..."
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"... ({len(value)} chars)"
    return value


def _sort_fn(engine_type: str) -> Canon | None:
    # Canonical values order like the source query for every type but these two.
    if parse_decimal(engine_type) is not None:
        return Decimal
    if engine_type in ("float", "double"):
        return lambda c: (1, 0.0) if c == "nan" else (0, float(c))  # NaN sorts last, as in PG
    return None


def row_hash(row: tuple[Any, ...]) -> int:
    return int.from_bytes(blake2b(marshal.dumps(row, 2), digest_size=8).digest(), "little")


# -- one table's row shape ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowRecord:
    sort_key: tuple[Any, ...]
    key: tuple[Any, ...]  # canonical key values
    row: tuple[Any, ...]  # canonical values of every compared column
    hash: int


def _then(first: Canon, second: Canon | None) -> Canon:
    if second is None:
        return first
    return lambda v: second(first(v))


@dataclass(frozen=True)
class RowCodec:
    """The compared columns of one table: names, engine types, key positions.

    Picklable (plain data): Spark ships it to its Python workers.
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    key_idx: tuple[int, ...]
    # Source side of columns the engine hashes (source.columns): their values are hashed
    # with the engine's key before the string canon, so they compare with Iceberg's.
    hashed: tuple[int, ...] = ()
    hash_key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for t in self.types:
            canon_python(t)  # fails early on an unknown type
        if not self.key_idx:
            raise ValueError("a diff needs key columns")

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.key_idx)

    def python_canons(self) -> list[Canon | None]:
        canons = [canon_python(t) for t in self.types]
        if self.hashed:
            digest = keyed_hash(self.hash_key or b"")
            for i in self.hashed:
                canons[i] = _then(digest, canons[i])
        return canons

    @cached_property
    def sort_key(self) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
        """Canonical key -> a key ordering like the source query (see ``_sort_fn``)."""
        return self.sort_key_fn()

    def sort_key_fn(self) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
        fns = [_sort_fn(self.types[i]) for i in self.key_idx]
        if all(f is None for f in fns):
            return lambda key: key
        return lambda key: tuple(v if f is None else f(v) for f, v in zip(fns, key, strict=True))

    def canon_values(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """Engine values (plan order) -> canonical row. Slow path; scans use their own loops."""
        return tuple(
            v if f is None or v is None else f(v)
            for f, v in zip(self.python_canons(), values, strict=True)
        )

    def record(self, row: tuple[Any, ...], h: int | None = None) -> RowRecord:
        key = tuple([row[i] for i in self.key_idx])
        return RowRecord(self.sort_key(key), key, row, row_hash(row) if h is None else h)

    def display_key(self, key: tuple[Any, ...]) -> dict[str, Any]:
        return {
            self.names[i]: display_value(v, self.types[i])
            for i, v in zip(self.key_idx, key, strict=True)
        }

    def display_columns(self, row: tuple[Any, ...], columns: Iterable[str]) -> dict[str, Any]:
        want = set(columns)
        return {
            n: display_value(v, t)
            for n, t, v in zip(self.names, self.types, row, strict=True)
            if n in want
        }


# -- range digests ---------------------------------------------------------------------------


@dataclass(slots=True)
class RangeDigest:
    count: int = 0
    hsum: int = 0  # sum of row hashes mod 2**64

    def add(self, h: int) -> None:
        self.count += 1
        self.hsum = (self.hsum + h) % HASH_MOD

    def merge(self, count: int, hsum: int) -> None:
        self.count += count
        self.hsum = (self.hsum + hsum) % HASH_MOD

    def same(self, other: RangeDigest) -> bool:
        return self.count == other.count and self.hsum == other.hsum


class OrderError(ValueError):
    """The source returned keys out of the comparison order (see ``postgres_side``)."""


@dataclass
class SourceRanges:
    """Cuts the key-ordered source stream into ranges of ``chunk_rows`` rows.

    Memory: one bound (sort key + raw key) and one digest per range, i.e. rows / chunk_rows.
    """

    chunk_rows: int
    bounds: list[tuple[Any, ...]] = field(default_factory=list)  # sort key of each range's last row
    raw_bounds: list[tuple[Any, ...]] = field(default_factory=list)  # that key as the source has it
    digests: list[RangeDigest] = field(default_factory=list)
    rows: int = 0
    _last: tuple[Any, ...] | None = None
    _last_raw: tuple[Any, ...] = ()
    _open: RangeDigest | None = None

    def add(self, sort_key: tuple[Any, ...], h: int, raw_key: tuple[Any, ...]) -> None:
        # Strictly increasing keys prove the source order is the comparison order; a
        # mismatch would silently put rows in the wrong range on the Iceberg side.
        if self._last is not None and not sort_key > self._last:
            raise OrderError(f"key {raw_key!r} arrived after a key that does not sort before it")
        self._last, self._last_raw = sort_key, raw_key
        if self._open is None:
            self._open = RangeDigest()
            self.digests.append(self._open)
        self._open.add(h)
        self.rows += 1
        if self._open.count >= self.chunk_rows:
            self._close()

    def _close(self) -> None:
        assert self._last is not None
        self.bounds.append(self._last)
        self.raw_bounds.append(self._last_raw)
        self._open = None

    def finish(self) -> None:
        if self._open is not None:  # a short last range ends at the last key
            self._close()

    @property
    def range_count(self) -> int:
        """Ranges to compare: one per bound, plus the open range after the last bound."""
        return len(self.bounds) + 1

    def range_limits(self, i: int) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        """(exclusive lower, inclusive upper) raw keys of range ``i`` (None: unbounded)."""
        lo = self.raw_bounds[i - 1] if i > 0 else None
        hi = self.raw_bounds[i] if i < len(self.raw_bounds) else None
        return lo, hi


def scan_ranges(
    batches: Iterable[Sequence[Sequence[Any]]], encode: RowEncoder, codec: RowCodec,
    chunk_rows: int, bar: Any = None,
) -> tuple[SourceRanges, int]:  # fmt: skip
    """A source side's scan: its rows in key order (batches of raw rows, codec column order)
    -> range digests, and the rows the engine cannot represent. ``bar``: a tqdm bar or None."""
    ranges = SourceRanges(chunk_rows)
    sort_key, key_idx = codec.sort_key, codec.key_idx
    for rows in batches:
        for raw in rows:
            row = encode(raw)
            key = tuple([row[i] for i in key_idx])
            ranges.add(sort_key(key), row_hash(row), tuple([raw[i] for i in key_idx]))
        if bar is not None:
            bar.update(len(rows))
    ranges.finish()
    return ranges, encode.unconvertible


def bucket_of(bounds: Sequence[tuple[Any, ...]], sort_key: tuple[Any, ...]) -> int:
    """The range holding ``sort_key``: the first whose bound is >= it."""
    return bisect_left(bounds, sort_key)


def differing_ranges(source: Sequence[RangeDigest], iceberg: dict[int, RangeDigest]) -> list[int]:
    """Range ids whose digests differ (the open range after the last bound included)."""
    empty = RangeDigest()
    out = []
    for i in range(len(source) + 1):
        s = source[i] if i < len(source) else empty
        if not s.same(iceberg.get(i, empty)):
            out.append(i)
    return out


# -- row diff --------------------------------------------------------------------------------


@dataclass
class DiffCollector:
    """Row-by-row comparison of differing ranges; keeps exact counts and the smallest
    ``max_keys`` keys of each kind."""

    codec: RowCodec
    max_keys: int = 5
    exclude: set[tuple[Any, ...]] = field(default_factory=set)  # keys not to compare
    excluded: int = 0  # differing rows skipped because their key is in ``exclude``
    missing: int = 0
    extra: int = 0
    changed: int = 0
    duplicates: int = 0  # Iceberg rows repeating a key (counted in ``extra`` too)
    changed_columns: dict[str, int] = field(default_factory=dict)
    _missing: list[RowRecord] = field(default_factory=list)
    _extra: list[RowRecord] = field(default_factory=list)
    _changed: list[tuple[RowRecord, RowRecord]] = field(default_factory=list)

    def compare(self, source: Iterable[RowRecord], iceberg: Iterable[RowRecord]) -> None:
        """One range: the source side is held in memory (at most one chunk of rows), the
        Iceberg side streams past it."""
        pending = {r.key: r for r in source}
        seen: set[tuple[Any, ...]] = set()
        exclude = self.exclude
        for r in iceberg:
            s = pending.pop(r.key, None)
            if r.key in exclude:  # changed after the source snapshot: not comparable
                if s is None or s.hash != r.hash:
                    self.excluded += 1
            elif s is None:
                self.extra += 1
                if r.key in seen:
                    self.duplicates += 1
                self._keep(self._extra, r)
            elif s.hash != r.hash:
                self.changed += 1
                for name in self.columns_differing(s, r):
                    self.changed_columns[name] = self.changed_columns.get(name, 0) + 1
                self._keep_pair(s, r)
            seen.add(r.key)
        for s in pending.values():
            if s.key in exclude:
                self.excluded += 1
                continue
            self.missing += 1
            self._keep(self._missing, s)

    def columns_differing(self, a: RowRecord, b: RowRecord) -> list[str]:
        # marshal, not ==: keeps -0.0 apart from 0.0 and True apart from 1, like the hash
        return [
            n
            for n, x, y in zip(self.codec.names, a.row, b.row, strict=True)
            if marshal.dumps(x, 2) != marshal.dumps(y, 2)
        ]

    def _keep(self, into: list[RowRecord], r: RowRecord) -> None:
        into.append(r)
        if len(into) > 4 * self.max_keys + 16:
            into.sort(key=lambda x: x.sort_key)
            del into[self.max_keys :]

    def _keep_pair(self, s: RowRecord, r: RowRecord) -> None:
        self._changed.append((s, r))
        if len(self._changed) > 4 * self.max_keys + 16:
            self._changed.sort(key=lambda p: p[0].sort_key)
            del self._changed[self.max_keys :]

    def missing_records(self) -> list[RowRecord]:
        return sorted(self._missing, key=lambda x: x.sort_key)[: self.max_keys]

    def extra_records(self) -> list[RowRecord]:
        return sorted(self._extra, key=lambda x: x.sort_key)[: self.max_keys]

    def changed_records(self) -> list[tuple[RowRecord, RowRecord]]:
        return sorted(self._changed, key=lambda p: p[0].sort_key)[: self.max_keys]
