"""The Iceberg side of a diff: which snapshot to compare, and its range digests and rows as
Iceberg Java reads them (Spark applies equality and position deletes).

Snapshot. The engine commits one snapshot per batch with the batch's end position in
``replicator.position``; snapshots by other writers (compaction, or anyone else) keep their
parent's position. A diff pins each table's current snapshot and its position; Spark reads
that snapshot by id from the metadata file (``snapshot-id``), so no catalog is configured in
Spark. (Reading an older snapshot "as of" the source position is not exact: a batch may hold
changes from both sides of that position.)

Digests run in Spark's Python workers (``mapInArrow``): each worker canonicalises its Arrow
batches, puts each row into its source range by binary search over the range bounds and
returns one (range, count, hash sum) row per range it saw. Nothing is sorted or shuffled and
each worker holds one Arrow batch (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows).
The detail pass keeps only rows of differing ranges, hash-partitions them by range and sorts
within partitions, so the driver streams them range after range (``toLocalIterator``).
"""

from __future__ import annotations

import marshal
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from replicator.checkpoint import checkpoint_at
from replicator.config import IcebergConfig
from replicator.events.model import SourcePosition
from replicator.iceberg.tables import SOURCE_TABLE_PROPERTY, engine_type, iceberg_table_name
from replicator.storage.fileio import file_io_properties
from replicator.verify.digest import (
    HASH_MOD,
    RangeDigest,
    RowCodec,
    RowRecord,
    canon_arrow,
    row_hash,
)
from replicator.verify.model import DiffError
from spark.s3a import configure_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_DIGEST_SCHEMA = pa.schema([("bucket", pa.int32()), ("n", pa.int64()), ("hsum", pa.int64())])
_DETAIL_SCHEMA = pa.schema([("bucket", pa.int32()), ("h", pa.int64()), ("row", pa.binary())])
DETAIL_ROWS_PER_PARTITION = 100_000  # bounds what the driver JVM holds per partition


@dataclass
class IcebergSnapshot:
    identifier: str
    table: Table
    snapshot_id: int | None  # None: the table has no snapshot yet (empty)
    position: SourcePosition | None
    schema: Schema

    @property
    def columns(self) -> dict[str, str]:
        """Column -> engine type, in schema order."""
        out = {}
        for f in self.schema.fields:
            try:
                out[f.name] = engine_type(f.field_type)
            except ValueError:
                out[f.name] = f"unsupported:{f.field_type}"
        return out


def load_table(catalog: Catalog, cfg: IcebergConfig, source_table: str) -> Table | None:
    ident = iceberg_table_name(cfg, source_table)
    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        return None
    owner = table.properties.get(SOURCE_TABLE_PROPERTY)
    if owner is not None and owner != source_table:
        raise DiffError(f"Iceberg table {ident} holds source table {owner}, not {source_table}")
    return table


def pin(table: Table, source_kind: str) -> IcebergSnapshot:
    """The table's current snapshot, pinned by id (Spark reads exactly it even if the engine
    commits meanwhile), with its own or inherited ``replicator.position``."""
    ident = ".".join(table.name())
    snap = table.current_snapshot()
    if snap is None:
        return IcebergSnapshot(ident, table, None, None, table.schema())
    cp = checkpoint_at(table, snap)  # other writers' snapshots keep their parent's
    pos: SourcePosition | None = cp.position if cp is not None else None
    if pos is not None and pos.source != source_kind:
        raise DiffError(
            f"{ident} was written from a {pos.source!r} source (position {pos}), not from "
            f"this {source_kind} source"
        )
    schema = table.metadata.schema_by_id(snap.schema_id) if snap.schema_id is not None else None
    return IcebergSnapshot(ident, table, snap.snapshot_id, pos, schema or table.schema())


def pin_cut(table: Table, snapshot_id: int, position: SourcePosition) -> IcebergSnapshot:
    """The snapshot a consistent cut tagged, standing for the source at ``position``."""
    ident = ".".join(table.name())
    snap = table.snapshot_by_id(snapshot_id)
    if snap is None:
        raise DiffError(f"{ident}: the snapshot {snapshot_id} of the cut is gone")
    schema = table.metadata.schema_by_id(snap.schema_id) if snap.schema_id is not None else None
    return IcebergSnapshot(ident, table, snapshot_id, position, schema or table.schema())


def frame(spark: SparkSession, snap: IcebergSnapshot, names: Sequence[str]) -> DataFrame:
    from pyspark.sql import functions as F

    # Tables on object storage: Iceberg Java reads them through Hadoop S3A, configured from
    # the same FileIO properties pyiceberg uses.
    configure_spark(spark, snap.table.metadata_location, file_io_properties(snap.table.io.properties))
    reader = spark.read.format("iceberg")
    if snap.snapshot_id is not None:
        reader = reader.option("snapshot-id", str(snap.snapshot_id))
    df = reader.load(snap.table.metadata_location)
    return df.select(*[F.col("`" + n.replace("`", "``") + "`") for n in names])


# -- Spark workers (pickled to Python workers; plain data only) --------------------------------


class _Rows:
    def __init__(self, codec: RowCodec, bounds: list[tuple[Any, ...]]) -> None:
        self.codec = codec
        self.bounds = bounds

    def rows(self, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, tuple[Any, ...]]]:
        """(range, canonical row) of every row."""
        types = self.codec.types
        key_idx = self.codec.key_idx
        sort_key = self.codec.sort_key_fn()
        bounds = self.bounds
        for batch in batches:
            if batch.num_rows == 0:
                continue
            cols = [canon_arrow(batch.column(i), t) for i, t in enumerate(types)]
            for row in zip(*cols, strict=True):
                yield bisect_left(bounds, sort_key(tuple([row[i] for i in key_idx]))), row


class DigestWorker(_Rows):
    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc: dict[int, list[int]] = {}
        for bucket, row in self.rows(batches):
            a = acc.get(bucket)
            if a is None:
                a = acc[bucket] = [0, 0]
            a[0] += 1
            a[1] += row_hash(row)
        if acc:
            ids = sorted(acc)
            sums = [acc[i][1] % HASH_MOD for i in ids]
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(ids, pa.int32()),
                    pa.array([acc[i][0] for i in ids], pa.int64()),
                    pa.array([s - HASH_MOD if s >= 1 << 63 else s for s in sums], pa.int64()),
                ],
                schema=_DIGEST_SCHEMA,
            )


class DetailWorker(_Rows):
    def __init__(self, codec: RowCodec, bounds: list[tuple[Any, ...]], buckets: set[int]) -> None:
        super().__init__(codec, bounds)
        self.buckets = buckets

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ids: list[int] = []
        hashes: list[int] = []
        rows: list[bytes] = []
        for bucket, row in self.rows(batches):
            if bucket in self.buckets:
                ids.append(bucket)
                h = row_hash(row)
                hashes.append(h - HASH_MOD if h >= 1 << 63 else h)  # as a signed long
                rows.append(marshal.dumps(row, 2))
                if len(ids) >= 10_000:
                    yield self._batch(ids, hashes, rows)
                    ids, hashes, rows = [], [], []
        if ids:
            yield self._batch(ids, hashes, rows)

    @staticmethod
    def _batch(ids: list[int], hashes: list[int], rows: list[bytes]) -> pa.RecordBatch:
        arrays = [
            pa.array(ids, pa.int32()),
            pa.array(hashes, pa.int64()),
            pa.array(rows, pa.binary()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=_DETAIL_SCHEMA)


# -- driver side -------------------------------------------------------------------------------


def digests(
    df: DataFrame, codec: RowCodec, bounds: list[tuple[Any, ...]]
) -> dict[int, RangeDigest]:
    out: dict[int, RangeDigest] = {}
    for r in df.mapInArrow(DigestWorker(codec, bounds), "bucket int, n long, hsum long").collect():
        d = out.get(r["bucket"])
        if d is None:
            d = out[r["bucket"]] = RangeDigest()
        d.merge(int(r["n"]), int(r["hsum"]) % HASH_MOD)
    return out


def detail(
    df: DataFrame, codec: RowCodec, bounds: list[tuple[Any, ...]], buckets: set[int],
    expected_rows: int,
) -> Iterator[tuple[int, list[RowRecord]]]:  # fmt: skip
    """The rows of the given ranges, one range at a time (each range's rows together).

    Up to DETAIL_ROWS_PER_PARTITION expected rows: one job, collected. Beyond: the rows are
    hash-partitioned by range and streamed partition by partition, so the driver holds about
    one partition however many ranges differ.
    """
    mapped = df.mapInArrow(DetailWorker(codec, bounds, buckets), "bucket int, h long, row binary")
    if expected_rows <= DETAIL_ROWS_PER_PARTITION:
        stream: Iterable[Any] = sorted(mapped.collect(), key=lambda r: int(r[0]))
    else:
        parts = min(len(buckets), -(-expected_rows // DETAIL_ROWS_PER_PARTITION), 64)
        stream = (
            mapped.repartition(parts, "bucket").sortWithinPartitions("bucket").toLocalIterator()
        )
    current: int | None = None
    rows: list[RowRecord] = []
    for r in stream:
        bucket = int(r[0])
        if bucket != current:
            if current is not None:
                yield current, rows
            current, rows = bucket, []
        rows.append(codec.record(marshal.loads(r[2]), int(r[1]) % HASH_MOD))
    if current is not None:
        yield current, rows
