"""The identity of a whole row (tables without a primary key): a 128-bit fingerprint.

A table without a key is a multiset of rows: an update or delete names its row by the full
old image (Postgres REPLICA IDENTITY FULL, MySQL binlog_row_image=FULL), so two rows are
"the same" when every column is. The fingerprint must come out equal for equal rows however
they arrive (the staged events' Arrow, a Parquet file read back), and follow the source's
own equality where it differs from bit equality:

* nulls are values: a null is not equal to any value, but two nulls in one column are equal
  (the row's null mask is part of the identity);
* floats: every NaN is one value and ``-0.0`` equals ``0.0`` (as Postgres' ``=`` and its own
  REPLICA IDENTITY FULL apply); ``float32`` widens exactly to ``float64``;
* integers of any width, booleans, dates, times and timestamps -> int64 (timestamps in
  s/ms/us -> us, ns stays ns); decimals -> decimal128(38, scale); strings and binaries -> a
  blake2b digest of their bytes; any other type (lists, structs, maps) -> a digest of its
  canonical Python form.

Words are mixed into two independent 64-bit chains (``fingerprint``, as the primary-key
index's keys are); two different rows share all 128 bits with probability ~n^2 * 2^-129.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops_mapping.fingerprint import digest_words, mix_words

__all__ = ["RowFingerprints", "row_fingerprints", "row_identities"]

RowFingerprints = tuple[np.ndarray, np.ndarray]  # (hi, lo), uint64 each, one per row
_DIGEST_BYTES = 16


def row_fingerprints(columns: Sequence[pa.Array | pa.ChunkedArray]) -> RowFingerprints:
    """(hi, lo) of every row; ``columns`` are all the row's columns, in table order."""
    if not columns:
        raise ValueError("a row needs at least one column")
    n = len(columns[0])
    words: list[np.ndarray] = []
    for col in columns:
        if len(col) != n:
            raise ValueError(f"columns differ in length: {len(col)} != {n}")
        words.extend(_column_words(_combined(col)))
    return mix_words([np.asarray(w, np.uint64) for w in words], n)


def row_identities(columns: Sequence[pa.Array | pa.ChunkedArray]) -> list[int]:
    """One Python int per row (``hi << 64 | lo``): a hashable identity for in-memory maps."""
    hi, lo = row_fingerprints(columns)
    return [(h << 64) | low for h, low in zip(hi.tolist(), lo.tolist(), strict=True)]


def _combined(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if isinstance(col.type, pa.ExtensionType):
        col = col.storage
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col


def _column_words(col: pa.Array) -> list[np.ndarray]:
    """The null mask word, then the value's words (0 where null)."""
    nulls = np.asarray(col.is_null(), dtype=bool).astype(np.uint64)
    values = _value_words(col)
    if col.null_count:
        values = [np.where(nulls == 1, np.uint64(0), w) for w in values]
    return [nulls, *values]


def _value_words(col: pa.Array) -> list[np.ndarray]:
    t = col.type
    if pa.types.is_floating(t):
        f = np.asarray(pc.fill_null(col.cast(pa.float64()), 0.0), dtype=np.float64).copy()
        f[np.isnan(f)] = np.nan  # one NaN
        f[f == 0.0] = 0.0  # -0.0 == 0.0
        return [f.view(np.uint64)]
    as_int = _as_int64(col)
    if as_int is not None:
        return [np.asarray(pc.fill_null(as_int, 0)).view(np.uint64)]
    if pa.types.is_decimal(t) and t.precision <= 38:
        dec = pc.fill_null(col.cast(pa.decimal128(38, t.scale)), pa.scalar(0, pa.decimal128(38, t.scale)))
        raw = np.frombuffer(dec.buffers()[1], dtype=np.uint64)
        pairs = raw[dec.offset * 2 : (dec.offset + len(dec)) * 2].reshape(-1, 2)
        return [pairs[:, 0].copy(), pairs[:, 1].copy()]
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):  # fmt: skip
        return digest_words(pc.fill_null(col.cast(pa.large_binary()), b""))
    return _digests([repr(_canonical(v)).encode() for v in col.to_pylist()])


def _as_int64(col: pa.Array) -> pa.Array | None:
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return col.cast(pa.int64()) if t != pa.uint64() else col.view(pa.int64())
    if pa.types.is_date(t):
        return col.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    if pa.types.is_time(t):
        return col.cast(pa.time64("us") if t.unit != "ns" else t).cast(pa.int64())
    if pa.types.is_timestamp(t):
        return col.cast(pa.timestamp("ns" if t.unit == "ns" else "us", t.tz)).cast(pa.int64())
    return None


def _digests(values: list[bytes]) -> list[np.ndarray]:
    joined = b"".join([blake2b(v, digest_size=_DIGEST_BYTES).digest() for v in values])
    pairs = np.frombuffer(joined, dtype=np.uint64).reshape(-1, 2)
    return [pairs[:, 0].copy(), pairs[:, 1].copy()]


def _canonical(value: object) -> object:
    """Nested values in a form whose repr is equal for equal values (NaN, -0.0, dict order)."""
    if isinstance(value, float):
        return "nan" if value != value else value + 0.0
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return sorted((str(k), _canonical(v)) for k, v in value.items())
    return value
