"""The ordered apply stage: one table's batch through ops_mapping into Iceberg files.

The batch is read by Spark from the staged Parquet file, gathered into ONE partition and
sorted by sequence (per-key order is the whole correctness story: a delete overtaking its
insert would leave a stale row), then ``mapInArrow`` streams it through the pure mapper and
the file writer. The worker keeps the key-to-position map, never the batch's rows. It
returns one row per file written; the driver turns them into Iceberg DataFiles.

``apply_local`` runs the same worker in-process without Spark (used by benchmarks as a
baseline of the stage's overhead, and by tests that exercise the mapping alone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson
import pyarrow as pa

from ops_mapping import BatchMapper, MappingPolicy, MappingStats
from replicator.pipeline.staging import SEQ
from spark.file_writer import TableFileWriter, WriterSpec, WrittenFile

RESULT_SCHEMA = pa.schema(
    [
        ("content", pa.int32()),
        ("path", pa.string()),
        ("records", pa.int64()),
        ("size", pa.int64()),
        ("stats", pa.string()),
    ]
)
RESULT_DDL = "content int, path string, records long, size long, stats string"


@dataclass(frozen=True)
class StageSpec:
    writer: WriterSpec
    key_columns: tuple[str, ...]
    data_columns: tuple[str, ...]
    policy: MappingPolicy


@dataclass(frozen=True)
class StageResult:
    files: list[WrittenFile]
    stats: dict[str, int]


def _worker(spec: StageSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = TableFileWriter(spec.writer)
        mapper: BatchMapper | None = None
        for batch in batches:
            if mapper is None:
                # Types as they arrive (Spark hands over string, not large_string); the file
                # writer casts to the Iceberg file schema.
                data_schema = pa.schema([batch.schema.field(n) for n in spec.data_columns])
                mapper = BatchMapper(spec.key_columns, data_schema, spec.policy)
            if batch.num_rows == 0:
                continue
            chunk = mapper.map_chunk(batch)
            for piece in chunk.data:
                writer.write_data(piece.file_index, piece.rows)
            writer.write_equality_deletes(chunk.equality_deletes)
        if mapper is None:
            return
        tail = mapper.finish()
        writer.write_position_deletes(tail.position_deletes)
        files = writer.close()
        stats = orjson.dumps(_stats_dict(tail.stats)).decode()
        yield pa.RecordBatch.from_pylist(
            [
                {"content": f.content, "path": f.path, "records": f.records, "size": f.size, "stats": stats}
                for f in files
            ]
            or [{"content": -1, "path": "", "records": 0, "size": 0, "stats": stats}],
            schema=RESULT_SCHEMA,
        )

    return run


def _stats_dict(stats: MappingStats) -> dict[str, int]:
    return {k: int(v) for k, v in dataclasses.asdict(stats).items()}


def _collect(rows: list[dict]) -> StageResult:
    files = [
        WrittenFile(content=r["content"], path=r["path"], records=r["records"], size=r["size"])
        for r in rows
        if r["content"] >= 0
    ]
    stats = orjson.loads(rows[0]["stats"]) if rows else {}
    return StageResult(files=files, stats=stats)


def apply_with_spark(spark: object, staged_path: str, spec: StageSpec) -> StageResult:
    """Run the stage on Spark: one partition, sorted by sequence."""
    df = spark.read.parquet(staged_path)  # type: ignore[attr-defined]
    ordered = df.coalesce(1).sortWithinPartitions(SEQ)
    rows = ordered.mapInArrow(_worker(spec), RESULT_DDL).collect()
    return _collect([r.asDict() for r in rows])


def apply_local(staged: pa.Table, spec: StageSpec, *, chunk_rows: int = 65_536) -> StageResult:
    """The same worker in this process, without Spark."""
    ordered = staged.sort_by(SEQ)
    out = list(_worker(spec)(iter(ordered.to_batches(max_chunksize=chunk_rows))))
    return _collect(pa.Table.from_batches(out, schema=RESULT_SCHEMA).to_pylist())
