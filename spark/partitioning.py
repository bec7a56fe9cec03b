"""Partition values of rows, for the fan-out writer: which partition of a spec each row is in.

A ``PartitionPlan`` is the picklable form of one Iceberg partition spec as the writers need
it: per partition field, the source column's name and Iceberg type and the transform. The
transforms are pyiceberg's own scalar ones (``Transform.transform``, the spec's reference
semantics: bucket is Murmur3 of the value's spec byte form, days floor towards the past, ...),
applied once per DISTINCT source value of a chunk, so a day or month field costs a handful of
Python calls per chunk; a bucket on a key costs one call per row.

Partition tuples travel from the writers to the driver as JSON (``encode_partition``): ints,
strings, floats, booleans and nulls as themselves, decimals and bytes tagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.partitioning import PartitionSpec, _to_partition_representation
from pyiceberg.schema import Schema
from pyiceberg.transforms import Transform
from pyiceberg.types import IcebergType

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
    distinct = pc.unique(array)
    apply = part.transform.transform(part.source_type)
    transformed = [
        apply(_to_partition_representation(part.source_type, v)) if v is not None else None
        for v in distinct.to_pylist()
    ]
    index = pc.index_in(array, value_set=distinct, skip_nulls=False)
    # Two distinct source values can share a transformed value (same day): renumber by it.
    numbering: dict[Any, int] = {}
    remap = np.array([numbering.setdefault(v, len(numbering)) for v in transformed], dtype=np.int64)
    out = list(numbering)
    return remap[index.to_numpy(zero_copy_only=False)], out


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
