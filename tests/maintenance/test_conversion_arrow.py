"""Key-range pruning of the in-process conversion (no Spark: the bounds logic only; the
conversion itself is judged in test_conversion.py)."""

from __future__ import annotations

import struct

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.types import LongType, NestedField, StringType

from replicator.maintenance.conversion_arrow import _may_hold

ID = NestedField(1, "id", LongType(), required=True)


def _file(lower: bytes | None, upper: bytes | None, field_id: int = 1) -> DataFile:
    bounds = {} if lower is None or upper is None else {field_id: lower}
    return DataFile.from_args(lower_bounds=bounds, upper_bounds={} if upper is None else {field_id: upper})


def keys(*values: int) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(values, pa.int64())])


def test_ranges_that_miss_are_skipped_and_touching_ones_kept() -> None:
    f = _file(struct.pack("<q", 10), struct.pack("<q", 20))
    assert not _may_hold(f, ID, keys(1, 9))
    assert not _may_hold(f, ID, keys(21, 500))
    assert _may_hold(f, ID, keys(20, 500))
    assert _may_hold(f, ID, keys(1, 10))
    assert _may_hold(f, ID, keys(1, 500))  # a range around the file's: kept (no key inside known)


def test_unknown_or_odd_bounds_are_kept() -> None:
    assert _may_hold(_file(None, None), ID, keys(1))
    assert _may_hold(_file(b"\x01", b"\x02"), ID, keys(1))  # not an integer encoding
    assert _may_hold(_file(struct.pack("<q", 1), struct.pack("<q", 2)),
                     NestedField(1, "id", StringType(), required=True), keys(9))


def test_bounds_written_before_int_to_long_promotion() -> None:
    f = _file(struct.pack("<i", 10), struct.pack("<i", 20))  # 4-byte bounds, column now long
    assert not _may_hold(f, ID, keys(1, 2))
    assert _may_hold(f, ID, keys(15))
