"""Partition values of rows, for the fan-out writer: which partition of a spec each row is in.

A ``PartitionPlan`` is the picklable form of one Iceberg partition spec as the writers need
it: per partition field, the source column's name and Iceberg type and the transform. The
transforms of integer-backed columns (bucket, truncate and the time transforms of int, long,
date and timestamp columns) run over whole arrays in numpy (the spec's semantics: bucket is
Murmur3 of the value's 8-byte little-endian form, days floor towards the past, ...); any
other transform or type uses pyiceberg's own scalar transform (``Transform.transform``) once
per DISTINCT source value of a chunk. Tests hold the numpy ones to pyiceberg's.

Partition tuples travel from the writers to the driver as JSON (``encode_partition``): ints,
strings, floats, booleans and nulls as themselves, decimals and bytes tagged.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    DateType,
    IcebergType,
    IntegerType,
    LongType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyiceberg.utils.datetime import date_to_days, datetime_to_micros, time_to_micros

PartitionKey = tuple[Any, ...]


@dataclass(frozen=True)
class PartitionColumn:
    source: str  # the source column's name in the data files' schema
    source_type: IcebergType
    transform: Transform[Any, Any]
    name: str  # the partition field's name


@dataclass(frozen=True)
class PartitionPlan:
    spec_id: int
    columns: tuple[PartitionColumn, ...]

    @property
    def unpartitioned(self) -> bool:
        return not self.columns

    def split(self, rows: pa.Table) -> tuple[np.ndarray, list[PartitionKey]]:
        """(partition number of each row, the partition tuple of each number)."""
        n = rows.num_rows
        if not self.columns or n == 0:
            return np.zeros(n, dtype=np.int64), [()]
        per_field: list[np.ndarray] = []
        values: list[list[Any]] = []
        for column in self.columns:
            index, field_values = _field_values(rows.column(column.source), column)
            per_field.append(index)
            values.append(field_values)
        if len(per_field) == 1:
            codes, inverse = np.unique(per_field[0], return_inverse=True)
            keys = [(values[0][int(c)],) for c in codes]
            return inverse.reshape(-1).astype(np.int64), keys
        stacked = np.stack(per_field, axis=1)
        uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
        keys = [tuple(values[f][int(i)] for f, i in enumerate(row)) for row in uniq]
        return inverse.reshape(-1).astype(np.int64), keys


def partition_plan(spec: PartitionSpec, schema: Schema) -> PartitionPlan:
    """The writers' view of ``spec`` (source columns looked up in ``schema`` by field id)."""
    columns = []
    for field in spec.fields:
        source = schema.find_field(field.source_id)
        columns.append(PartitionColumn(source.name, source.field_type, field.transform, field.name))
    return PartitionPlan(spec.spec_id, tuple(columns))


def _field_values(column: pa.ChunkedArray | pa.Array, part: PartitionColumn) -> tuple[np.ndarray, list[Any]]:
    """Per row the index of its value in the returned list of distinct transformed values."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    transformed = _vectorized(array, part)
    if transformed is not None:
        distinct = pc.unique(transformed)
        index = pc.index_in(transformed, value_set=distinct, skip_nulls=False)
        return index.to_numpy(zero_copy_only=False).astype(np.int64), distinct.to_pylist()
    # Any other transform or type: pyiceberg's scalar transform once per distinct value.
    distinct = pc.unique(array)
    apply = part.transform.transform(part.source_type)
    values = [
        apply(_physical(part.source_type, v)) if v is not None else None
        for v in distinct.to_pylist()
    ]
    index = pc.index_in(array, value_set=distinct, skip_nulls=False)
    # Two distinct source values can share a transformed value (same day): renumber by it.
    numbering: dict[Any, int] = {}
    remap = np.array([numbering.setdefault(v, len(numbering)) for v in values], dtype=np.int64)
    return remap[index.to_numpy(zero_copy_only=False)], list(numbering)


_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 24 * _MICROS_PER_HOUR
_TIME_TRANSFORMS = (YearTransform, MonthTransform, DayTransform, HourTransform)


def _vectorized(array: pa.Array, part: PartitionColumn) -> pa.Array | None:
    """The transform over a whole array in numpy, for the transforms and types that are
    integers underneath (bucket, truncate and the time transforms of int, long, date and
    timestamp columns; the same values as pyiceberg's scalar transforms), else None."""
    transform, source = part.transform, part.source_type
    longs = _as_longs(array, source)
    if longs is None:
        return None
    values, valid = longs
    result: np.ndarray
    if isinstance(transform, BucketTransform):
        hashes = _murmur3_longs(values).astype(np.int64) & 0x7FFFFFFF
        result = hashes % transform.num_buckets
    elif isinstance(transform, TruncateTransform) and isinstance(source, IntegerType | LongType):
        result = values - np.mod(values, transform.width)  # floors, also below zero
    elif isinstance(transform, _TIME_TRANSFORMS) and isinstance(source, DateType | TimestampType | TimestamptzType):
        if isinstance(transform, HourTransform):
            if isinstance(source, DateType):
                return None
            result = np.floor_divide(values, _MICROS_PER_HOUR)
        else:
            days = values if isinstance(source, DateType) else np.floor_divide(values, _MICROS_PER_DAY)
            if isinstance(transform, DayTransform):
                result = days
            else:
                unit = "datetime64[Y]" if isinstance(transform, YearTransform) else "datetime64[M]"
                result = days.astype("datetime64[D]").astype(unit).astype(np.int64)
    else:
        return None
    if isinstance(transform, TruncateTransform) and isinstance(source, LongType):
        return pa.array(result, type=pa.int64(), mask=~valid)  # truncate keeps the source type
    return pa.array(result.astype(np.int32), type=pa.int32(), mask=~valid)


def _as_longs(array: pa.Array, source: IcebergType) -> tuple[np.ndarray, np.ndarray] | None:
    """(values as int64, validity) in Iceberg's integer representation of ``source``."""
    if isinstance(source, IntegerType | LongType):
        ints = array.cast(pa.int64())
    elif isinstance(source, DateType):
        if not pa.types.is_date32(array.type):
            return None
        ints = array.cast(pa.int32()).cast(pa.int64())
    elif isinstance(source, TimestampType | TimestamptzType):
        if not pa.types.is_timestamp(array.type):
            return None
        ints = array.cast(pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
    else:
        return None
    valid = pc.is_valid(ints).to_numpy(zero_copy_only=False)
    values = pc.fill_null(ints, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return values, valid


def _murmur3_longs(values: np.ndarray) -> np.ndarray:
    """Murmur3 x86 32-bit (seed 0) of each value's 8-byte little-endian form, as Iceberg's
    bucket transform hashes int, long, date and timestamp values."""
    c1, c2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
    words = values.astype("<i8").view("<u4").reshape(-1, 2)
    h = np.zeros(len(values), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for i in (0, 1):
            k = words[:, i] * c1
            k = (k << np.uint32(15)) | (k >> np.uint32(17))
            k = k * c2
            h ^= k
            h = (h << np.uint32(13)) | (h >> np.uint32(19))
            h = h * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h = h * np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h = h * np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h


def encode_partition(key: PartitionKey) -> str:
    return orjson.dumps([_encode(v) for v in key]).decode()


def decode_partition(text: str) -> PartitionKey:
    return tuple(_decode(v) for v in orjson.loads(text)) if text else ()


def _encode(value: Any) -> Any:
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "decimal" in value:
            return Decimal(value["decimal"])
        return bytes.fromhex(value["bytes"])
    return value


def _physical(source_type: IcebergType, value: Any) -> Any:
    """A Python value (as pyarrow gives it) in the physical form pyiceberg's scalar transforms
    take: dates as days, times and timestamps as microseconds (since the epoch / midnight),
    uuids as bytes; other values as they are."""
    if isinstance(source_type, TimestampType | TimestamptzType) and isinstance(value, datetime.datetime):
        return datetime_to_micros(value)
    if isinstance(source_type, DateType) and isinstance(value, datetime.date):
        return date_to_days(value)
    if isinstance(source_type, TimeType) and isinstance(value, datetime.time):
        return time_to_micros(value)
    if isinstance(source_type, UUIDType) and isinstance(value, uuid.UUID):
        return value.bytes
    return value
