"""The diff pipeline in memory: the real digest code and the real Spark worker functions
(called on Arrow batches directly), with lists standing in for Postgres and Spark."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from replicator.events.types import arrow_type
from replicator.verify.digest import (
    HASH_MOD,
    DiffCollector,
    RangeDigest,
    RowCodec,
    RowRecord,
    SourceRanges,
    differing_ranges,
    row_hash,
)
from replicator.verify.iceberg_side import DetailWorker, DigestWorker


def arrow_batches(
    codec: RowCodec, rows: Sequence[Sequence[Any]], batch_rows: int = 7
) -> list[pa.RecordBatch]:
    """Engine values -> Arrow batches typed like the engine's files (what Spark hands over)."""
    schema = pa.schema([(n, arrow_type(t)) for n, t in zip(codec.names, codec.types, strict=True)])
    out = []
    for i in range(0, len(rows), batch_rows):
        part = rows[i : i + batch_rows]
        cols = [pa.array([r[j] for r in part], schema.field(j).type) for j in range(len(schema))]
        out.append(pa.RecordBatch.from_arrays(cols, schema=schema))
    return out


def source_ranges(codec: RowCodec, rows: Sequence[Sequence[Any]], chunk_rows: int) -> SourceRanges:
    """Like PostgresSide.scan: rows in key order, cut into ranges (raw key = canonical key)."""
    canon = [codec.canon_values(r) for r in rows]
    sort_key = codec.sort_key_fn()
    canon.sort(key=lambda r: sort_key(tuple(r[i] for i in codec.key_idx)))
    ranges = SourceRanges(chunk_rows)
    for r in canon:
        key = tuple(r[i] for i in codec.key_idx)
        ranges.add(sort_key(key), row_hash(r), key)
    ranges.finish()
    return ranges


def diff_in_memory(
    codec: RowCodec,
    source: Sequence[Sequence[Any]],
    iceberg: Sequence[Sequence[Any]],
    *,
    chunk_rows: int = 4,
    max_keys: int = 10_000,
    seed: int = 0,
) -> tuple[DiffCollector, list[int], int]:
    """(collector, differing range ids, Iceberg row count). Iceberg rows arrive shuffled and
    split over two "partitions", as Spark may deliver them."""
    ranges = source_ranges(codec, source, chunk_rows)
    shuffled = list(iceberg)
    random.Random(seed).shuffle(shuffled)
    parts = [shuffled[: len(shuffled) // 2], shuffled[len(shuffled) // 2 :]]
    ice: dict[int, RangeDigest] = {}
    for part in parts:
        for out in DigestWorker(codec, ranges.bounds)(iter(arrow_batches(codec, part))):
            for r in out.to_pylist():
                ice.setdefault(r["bucket"], RangeDigest()).merge(r["n"], r["hsum"] % HASH_MOD)
    bad = differing_ranges(ranges.digests, ice)
    collector = DiffCollector(codec, max_keys)
    by_bucket: dict[int, list[RowRecord]] = {b: [] for b in bad}
    import marshal

    for part in parts:
        worker = DetailWorker(codec, ranges.bounds, set(bad))
        for out in worker(iter(arrow_batches(codec, part))):
            for r in out.to_pylist():
                row = marshal.loads(r["row"])
                assert r["h"] % HASH_MOD == row_hash(row)
                by_bucket[r["bucket"]].append(codec.record(row, r["h"] % HASH_MOD))
    sort_key = codec.sort_key_fn()
    src_records = [codec.record(codec.canon_values(r)) for r in source]
    for b in bad:
        lo, hi = ranges.range_limits(b)
        lo_k = sort_key(lo) if lo is not None else None
        hi_k = sort_key(hi) if hi is not None else None
        chunk = [
            r
            for r in src_records
            if (lo_k is None or r.sort_key > lo_k) and (hi_k is None or r.sort_key <= hi_k)
        ]
        collector.compare(chunk, by_bucket[b])
    return collector, bad, sum(d.count for d in ice.values())
