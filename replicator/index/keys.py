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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops_mapping.fingerprint import digest_words, mix_words

__all__ = ["Fingerprints", "fingerprint", "key_type_names"]

Fingerprints = tuple[np.ndarray, np.ndarray]  # (hi, lo), uint64 each, one per key


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
    return mix_words(words, n)


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
    return digest_words(col)
