"""Sets of row positions in the 64-bit Roaring "portable" serialization (Iceberg deletion vectors).

The Iceberg spec stores a deletion vector's positions as a 64-bit Roaring bitmap in the portable
format shared by CRoaring and RoaringBitmap (Java): an 8-byte little-endian count of buckets, then
per bucket (ascending) a 4-byte little-endian key (the high 32 bits of the positions) followed by a
32-bit Roaring bitmap of the low 32 bits in the portable format. Iceberg Java limits keys to
``2**31 - 1`` (positions below ``2**63``).

A 32-bit portable bitmap: a cookie, one descriptor (16-bit key, cardinality - 1) per container,
container offsets, then containers: arrays of sorted 16-bit values (cardinality <= 4096), 8 KiB
bitsets, or runs (start, length - 1). We write arrays and bitsets (no runs: readers must accept
every container kind, writers need not use runs); we read all three, since Iceberg Java writes
run containers after ``runOptimize``.

Positions are a sorted, duplicate-free ``numpy`` array of ``uint64``: the one representation
the Puffin writer, the merge and the readers share.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_POSITION", "Positions", "deserialize", "positions", "serialize", "union"]

Positions = npt.NDArray[np.uint64]

# Iceberg Java's RoaringPositionBitmap accepts keys up to Integer.MAX_VALUE.
MAX_POSITION = 2**63 - 1  # keys up to 2**31 - 1, times 2**32 values each

_COOKIE_NO_RUNS = 12346  # SERIAL_COOKIE_NO_RUNCONTAINER: cookie, then the container count
_COOKIE_RUNS = 12347  # SERIAL_COOKIE: the low 16 bits; the high 16 bits are count - 1
_NO_OFFSET_THRESHOLD = 4  # with runs, offsets are written only from this many containers on
_ARRAY_MAX = 4096  # the largest cardinality stored as an array container
_BITSET_BYTES = 8192


def positions(values: Iterable[int] | npt.NDArray[np.integer]) -> Positions:
    """Sorted unique positions as ``uint64``; ``ValueError`` on a negative or too large one
    (Iceberg Java's bitmap holds positions below ``2**63``)."""
    try:
        array = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=np.int64)
    except OverflowError as exc:
        raise ValueError(f"a row position exceeds {MAX_POSITION}") from exc
    if array.size and (array.min() < 0):
        raise ValueError(f"row position {int(array.min())} is negative")
    result: Positions = np.unique(array.astype(np.uint64))
    return result


def union(a: Positions, b: Positions) -> Positions:
    result: Positions = np.union1d(a, b).astype(np.uint64)
    return result


def serialize(values: Positions) -> bytes:
    """The 64-bit portable serialization of ``values`` (sorted, unique)."""
    highs = (values >> np.uint64(32)).astype(np.uint32)
    keys, starts = np.unique(highs, return_index=True)
    bounds = [*starts.tolist(), values.size]
    out = [struct.pack("<Q", len(keys))]
    for i, key in enumerate(keys.tolist()):
        low = (values[bounds[i] : bounds[i + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        out.append(struct.pack("<I", key))
        out.append(_serialize32(low))
    return b"".join(out)


def _serialize32(low: npt.NDArray[np.uint32]) -> bytes:
    keys16 = (low >> np.uint32(16)).astype(np.uint16)
    keys, starts = np.unique(keys16, return_index=True)
    bounds = [*starts.tolist(), low.size]
    n = len(keys)
    descriptors, containers = [], []
    for i, key in enumerate(keys.tolist()):
        values16 = (low[bounds[i] : bounds[i + 1]] & np.uint32(0xFFFF)).astype("<u2")
        descriptors.append(struct.pack("<HH", key, values16.size - 1))
        if values16.size <= _ARRAY_MAX:
            containers.append(values16.tobytes())
        else:
            bits = np.zeros(65536, dtype=bool)
            bits[values16] = True
            containers.append(np.packbits(bits, bitorder="little").tobytes())
    offset = 8 + 4 * n + 4 * n  # cookie + count, descriptors, offsets
    offsets = []
    for container in containers:
        offsets.append(struct.pack("<I", offset))
        offset += len(container)
    header = struct.pack("<II", _COOKIE_NO_RUNS, n)
    return b"".join([header, *descriptors, *offsets, *containers])


def deserialize(data: bytes | memoryview) -> Positions:
    """Positions from a 64-bit portable serialization; ``ValueError`` when it is malformed."""
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError("roaring64: truncated bucket count")
    (count,) = struct.unpack_from("<Q", view, 0)
    pos = 8
    parts: list[Positions] = []
    last_key = -1
    for _ in range(count):
        if pos + 4 > len(view):
            raise ValueError("roaring64: truncated bucket key")
        (key,) = struct.unpack_from("<I", view, pos)
        if key <= last_key:
            raise ValueError(f"roaring64: bucket keys not ascending ({key} after {last_key})")
        last_key = key
        low, pos = _deserialize32(view, pos + 4)
        parts.append((np.uint64(key) << np.uint64(32)) | low.astype(np.uint64))
    if pos != len(view):
        raise ValueError(f"roaring64: {len(view) - pos} bytes after the last bucket")
    if not parts:
        return np.empty(0, dtype=np.uint64)
    return np.concatenate(parts)


def _deserialize32(view: memoryview, start: int) -> tuple[npt.NDArray[np.uint32], int]:
    """One 32-bit portable bitmap at ``start``: its values and the offset just past it."""
    (cookie,) = struct.unpack_from("<I", view, start)
    pos = start + 4
    run_flags = b""
    if cookie & 0xFFFF == _COOKIE_RUNS:
        n = (cookie >> 16) + 1
        run_flags = bytes(view[pos : pos + (n + 7) // 8])
        pos += (n + 7) // 8
    elif cookie == _COOKIE_NO_RUNS:
        (n,) = struct.unpack_from("<I", view, pos)
        pos += 4
    else:
        raise ValueError(f"roaring: unknown cookie {cookie:#x}")
    descriptors = np.frombuffer(view, dtype="<u2", count=2 * n, offset=pos).reshape(n, 2)
    pos += 4 * n
    if not run_flags or n >= _NO_OFFSET_THRESHOLD:
        pos += 4 * n  # offsets: containers follow one another, so they are not needed
    parts: list[npt.NDArray[np.uint32]] = []
    arrays: list[tuple[int, int]] = []  # (key, cardinality) of array containers not yet read
    arrays_start = pos
    for i in range(n):
        key, cardinality = int(descriptors[i, 0]), int(descriptors[i, 1]) + 1
        is_run = bool(run_flags) and bool(run_flags[i // 8] >> (i % 8) & 1)
        if not is_run and cardinality <= _ARRAY_MAX:
            # Consecutive array containers are one stretch of 16-bit values: read them at once.
            if not arrays:
                arrays_start = pos
            arrays.append((key, cardinality))
            pos += 2 * cardinality
            continue
        if arrays:
            parts.append(_arrays(view, arrays_start, arrays))
            arrays = []
        values, pos = _container(view, pos, cardinality, is_run)
        if values.size != cardinality:
            raise ValueError(f"roaring: container {key} holds {values.size}, says {cardinality}")
        parts.append((np.uint32(key) << np.uint32(16)) | values)
    if arrays:
        parts.append(_arrays(view, arrays_start, arrays))
    if not parts:
        return np.empty(0, dtype=np.uint32), pos
    return np.concatenate(parts), pos


def _arrays(view: memoryview, start: int, containers: list[tuple[int, int]]) -> npt.NDArray[np.uint32]:
    keys, cardinalities = zip(*containers, strict=True)
    low = np.frombuffer(view, dtype="<u2", count=sum(cardinalities), offset=start).astype(np.uint32)
    high = np.repeat(np.array(keys, dtype=np.uint32), cardinalities) << np.uint32(16)
    result: npt.NDArray[np.uint32] = high | low
    return result


def _container(
    view: memoryview, pos: int, cardinality: int, is_run: bool
) -> tuple[npt.NDArray[np.uint32], int]:
    if is_run:
        (runs,) = struct.unpack_from("<H", view, pos)
        pairs = np.frombuffer(view, dtype="<u2", count=2 * runs, offset=pos + 2).reshape(runs, 2)
        ranges = [np.arange(s, s + length + 1, dtype=np.uint32) for s, length in pairs.tolist()]
        values = np.concatenate(ranges) if ranges else np.empty(0, dtype=np.uint32)
        return values, pos + 2 + 4 * runs
    if cardinality <= _ARRAY_MAX:
        array = np.frombuffer(view, dtype="<u2", count=cardinality, offset=pos)
        return array.astype(np.uint32), pos + 2 * cardinality
    bits = np.unpackbits(
        np.frombuffer(view, dtype=np.uint8, count=_BITSET_BYTES, offset=pos), bitorder="little"
    )
    return np.flatnonzero(bits).astype(np.uint32), pos + _BITSET_BYTES
