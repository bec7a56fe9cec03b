"""Primary keys (Arrow columns, possibly composite) -> 128-bit fingerprints, vectorised.

A key is identified by two 64-bit words ``(hi, lo)``. The index sorts on ``hi`` and keeps
``lo`` on disk beside it; a lookup matches both. Why 128 bits instead of a 64-bit hash whose
collisions are checked against the data file's key column (Moonlink's choice): at 100M live
keys two keys share 64 bits with probability ~3e-4, but share 128 bits with probability
~1.5e-23, far below the rate of undetected disk errors, and no lookup ever reads a data file.
For a single integer-like key column ``hi`` is a bijection of the value, so it is exact.

Values are normalised first so that the same key hashes the same however it arrives (the
write path's staged Arrow, a Parquet file read back): integers of any width, booleans, dates
and times -> int64; timestamps in s/ms -> us (ns stays ns: the table's column type is fixed);
decimals -> decimal128 with their scale; strings and binaries -> their bytes (blake2b, 16
bytes); fixed 16-byte binaries (uuid) -> their two words. Floats and nested types are no
Iceberg identifier types and are refused; so are nulls.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Fingerprints", "fingerprint", "key_type_names"]

Fingerprints = tuple[np.ndarray, np.ndarray]  # (hi, lo), uint64 each, one per key

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_SEED_HI = np.uint64(0x9E3779B97F4A7C15)
_SEED_LO = np.uint64(0xD6E8FEB86659FD93)
_LO_MUL = np.uint64(0xA0761D6478BD642F)  # odd: multiplying by it is a bijection
_LO_ROT = np.uint64(29)


def _fmix(x: np.ndarray) -> np.ndarray:
    """Murmur3's 64-bit finaliser: a bijection of uint64 with full avalanche."""
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    out: np.ndarray = x ^ (x >> _S33)
    return out


def _rotl(x: np.ndarray, r: np.uint64) -> np.ndarray:
    return (x << r) | (x >> (np.uint64(64) - r))


def fingerprint(columns: Sequence[pa.Array | pa.ChunkedArray]) -> Fingerprints:
    """(hi, lo) of every key; ``columns`` are the key's columns, in key order, equal length."""
    if not columns:
        raise ValueError("a key needs at least one column")
    n = len(columns[0])
    words: list[np.ndarray] = []
    for col in columns:
        if len(col) != n:
            raise ValueError(f"key columns differ in length: {len(col)} != {n}")
        words.extend(_words(_combined(col)))
    with np.errstate(over="ignore"):
        hi = np.full(n, _SEED_HI, dtype=np.uint64)
        lo = np.full(n, _SEED_LO, dtype=np.uint64)
        for w in words:
            hi = _fmix(hi ^ w)
            lo = _fmix(_rotl(lo, _LO_ROT) ^ (w * _LO_MUL))
    return hi, lo


def key_type_names(columns: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[str, ...]:
    """The normalised type of each key column: an index refuses keys of other types."""
    return tuple(str(_normalised(_combined(c)).type) for c in columns)


def _combined(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if isinstance(col.type, pa.ExtensionType):
        col = col.storage
    if col.null_count:
        raise ValueError(f"a key column holds {col.null_count} null(s): keys must not be null")
    return col


def _normalised(col: pa.Array) -> pa.Array:
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return col.cast(pa.int64())
    if pa.types.is_date(t):
        return col.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    if pa.types.is_time(t):
        return col.cast(pa.time64("us") if t.unit != "ns" else t).cast(pa.int64())
    if pa.types.is_timestamp(t):
        unit = "ns" if t.unit == "ns" else "us"
        return col.cast(pa.timestamp(unit, t.tz)).cast(pa.int64())
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise TypeError(f"decimal key of precision {t.precision} is not supported (max 38)")
        return col.cast(pa.decimal128(38, t.scale))
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return col
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):  # fmt: skip
        return col.cast(pa.large_binary())
    raise TypeError(f"a key column of type {t} cannot be indexed (no Iceberg identifier type)")


def _words(col: pa.Array) -> list[np.ndarray]:
    """The column as uint64 word arrays (1 for int-like, 2 for 16-byte values)."""
    col = _normalised(col)
    t = col.type
    if t == pa.int64():
        return [np.asarray(pc.fill_null(col, 0)).view(np.uint64)]
    if pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t):
        raw = np.frombuffer(col.buffers()[1], dtype=np.uint64)
        pairs = raw[col.offset * 2 : (col.offset + len(col)) * 2].reshape(-1, 2)
        return [pairs[:, 0].copy(), pairs[:, 1].copy()]
    return _digest_words(col)


def _digest_words(col: pa.Array) -> list[np.ndarray]:
    """blake2b-128 of each variable-length value (one pass in C per value)."""
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int64)[col.offset : col.offset + len(col) + 1]
    data_buf = col.buffers()[2]
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    starts = offsets[:-1].tolist()
    ends = offsets[1:].tolist()
    digests = b"".join([blake2b(data[s:e], digest_size=16).digest() for s, e in zip(starts, ends, strict=True)])
    pairs = np.frombuffer(digests, dtype=np.uint64).reshape(-1, 2)
    return [pairs[:, 0].copy(), pairs[:, 1].copy()]
