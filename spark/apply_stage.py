"""The ordered apply stage: each table's batch through ops_mapping into Iceberg files.

``apply_batch_with_spark`` runs ONE Spark job per batch: the tables are grouped into one task
per parallel slot (``group_tasks``), so the tables of a batch are mapped in parallel across
executors while each table's events stay in ONE ordered worker (per-key order is the whole correctness story: a delete overtaking its insert
would leave a stale row). A task streams its table's staged Parquet file (written in
sequence order) through the pure mapper and the file writer; it keeps the key-to-position
map, never the batch's rows, and returns one row per file written. The driver turns them
into Iceberg DataFiles. The staged files must be readable where the tasks run: the driver's
disk in local mode, shared storage on a cluster.

``apply_local`` runs the same worker in-process without Spark: for batches of at most
``spark.driver_max_rows`` changes (a job's fixed cost is most of a small batch's time), for
a table's part of plain snapshot reads of any size (``pipeline.stage_tasks.appends_only``), for
the ``local`` engine of tests that exercise the mapping alone, and as the benchmarks'
baseline of the stage's overhead.
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from ops_mapping import SEQ_COLUMN as SEQ
from ops_mapping import BatchMapper, MappingPolicy, MappingStats, MultisetMapper
from replicator.faults import maybe_lose_executor
from replicator.storage.file_writer import POSITION_PATH, TableFileWriter, WriterSpec, WrittenFile
from replicator.storage.fileio import open_input
from replicator.storage.partitioning import PartitionKey, decode_partition, encode_partition
from spark.appends import append_rows, plain_appends
from spark.warm import note_python_job

RESULT_SCHEMA = pa.schema(
    [
        ("content", pa.int32()),
        ("path", pa.string()),
        ("records", pa.int64()),
        ("size", pa.int64()),
        ("stats", pa.string()),
        ("partition", pa.string()),  # the file's partition tuple (replicator.storage.partitioning's JSON)
        ("spec_id", pa.int32()),  # its partition spec; -1: the writer's (the table's default)
        # Its Parquet footer as written (a pickled FileMetaData): the driver describes the file
        # without reading it back; null: it reads the footer.
        ("footer", pa.binary()),
        # Position deletes kept in memory (``WriterSpec.position_deletes_in_memory``, only in
        # the committing process): their rows as an Arrow IPC stream; no file was written.
        ("rows", pa.binary()),
    ]
)
RESULT_DDL = (
    "content int, path string, records long, size long, stats string, partition string, spec_id int, "
    "footer binary, rows binary"
)

# `content` of the result row a worker sends instead of files when storage failed: the
# message travels as data, so the driver can tell a passing outage from a bug without
# parsing Spark's Java exception text.
CONTENT_STORAGE_ERROR = -2


class StageStorageError(OSError):
    """The stage's worker could not write its files (storage error; message from pyarrow)."""


@dataclass(frozen=True)
class StageSpec:
    writer: WriterSpec
    key_columns: tuple[str, ...]
    data_columns: tuple[str, ...]
    policy: MappingPolicy
    # A table without a primary key: ``key_columns`` are every column, mapped as a multiset
    # of whole rows (``MultisetMapper``; ``table_rows`` name rows by their fingerprint).
    keyless: bool = False
    # ``delete_mode: position``: the live rows of earlier batches of the keys this batch may
    # delete (``BatchMapper``'s ``table_rows``), and each named data file's (spec id,
    # partition): their position deletes go to the partition of the file they name.
    table_rows: pa.Table | None = None
    table_homes: dict[str, tuple[int, PartitionKey]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class StageResult:
    files: list[WrittenFile]
    stats: dict[str, int]


class WorkerSteps:
    """What a stage worker tells about its own work, for measurement (the benchmarks' Spark
    daemon installs one with :func:`observe_workers` before it forks the workers). The base
    class does nothing; calls come once per chunk and once per table, never per row."""

    def chunk_done(self, *, mapped: float, written: float) -> None:
        """One chunk of staged rows: seconds mapping it, seconds writing its files' rows."""

    def table_done(self, *, mapped: float, written: float, closed: float) -> None:
        """The table's batch is done: seconds of the mapper's finish, of writing its position
        deletes, of closing the files."""


_worker_steps = WorkerSteps()


def observe_workers(steps: WorkerSteps) -> None:
    """Report the steps of every stage worker of this process (and of processes forked from
    it) to ``steps``."""
    global _worker_steps
    _worker_steps = steps


def _mapper(spec: StageSpec, data_schema: pa.Schema) -> BatchMapper:
    if spec.keyless:
        return MultisetMapper(data_schema, spec.policy, table_rows=spec.table_rows)
    return BatchMapper(spec.key_columns, data_schema, spec.policy, table_rows=spec.table_rows)


def _worker(spec: StageSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            yield from write(batches)
        except OSError as exc:
            # Files written so far are orphans (never committed); the driver retries the
            # stage under a new batch id if the error is transient.
            yield pa.RecordBatch.from_pylist(
                [{"content": CONTENT_STORAGE_ERROR, "path": f"{type(exc).__name__}: {exc}"[:4000],
                  "records": 0, "size": 0, "stats": "{}", "partition": "", "spec_id": -1, "footer": None,
                  "rows": None}],
                schema=RESULT_SCHEMA,
            )

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = TableFileWriter(spec.writer)
        mapper: BatchMapper | None = None
        steps, clock = _worker_steps, time.perf_counter
        for batch in batches:
            if mapper is None:
                # Types as they arrive (Spark hands over string, not large_string); the file
                # writer casts to the Iceberg file schema.
                data_schema = pa.schema([batch.schema.field(n) for n in spec.data_columns])
                mapper = _mapper(spec, data_schema)
            if batch.num_rows == 0:
                continue
            started = clock()
            chunk = mapper.map_chunk(batch)
            mapped = clock()
            for piece in chunk.data:
                writer.write_data(piece.file_index, piece.rows)
            writer.write_equality_deletes(chunk.equality_deletes)
            steps.chunk_done(mapped=mapped - started, written=clock() - mapped)
        if mapper is None:
            return
        started = clock()
        tail = mapper.finish()
        mapped = clock()
        writer.write_position_deletes(tail.position_deletes)
        writer.write_position_deletes_by_home(tail.table_position_deletes, spec.table_homes, kind="tposdel")
        written = clock()
        try:
            files = writer.close()
        finally:
            steps.table_done(mapped=mapped - started, written=written - mapped, closed=clock() - written)
        stats = orjson.dumps(_stats_dict(tail.stats)).decode()
        yield pa.RecordBatch.from_pylist(
            [
                {"content": f.content, "path": f.path, "records": f.records, "size": f.size, "stats": stats,
                 "partition": encode_partition(f.partition), "spec_id": -1 if f.spec_id is None else f.spec_id,
                 "footer": None if f.footer is None else pickle.dumps(f.footer),
                 "rows": None if f.rows is None else _ipc(f.rows)}
                for f in files
            ]
            or [{"content": -1, "path": "", "records": 0, "size": 0, "stats": stats, "partition": "", "spec_id": -1,
                 "footer": None, "rows": None}],
            schema=RESULT_SCHEMA,
        )

    return run


def _stats_dict(stats: MappingStats) -> dict[str, int]:
    return {k: int(v) for k, v in dataclasses.asdict(stats).items()}


def _collect(rows: list[dict[str, Any]]) -> StageResult:
    for r in rows:
        if r["content"] == CONTENT_STORAGE_ERROR:
            raise StageStorageError(r["path"])
    files = [
        WrittenFile(content=r["content"], path=r["path"], records=r["records"], size=r["size"],
                    partition=decode_partition(r["partition"]),
                    spec_id=None if r.get("spec_id", -1) in (-1, None) else r["spec_id"],
                    footer=_footer(r.get("footer")), rows=_rows(r.get("rows")))
        for r in rows
        if r["content"] >= 0
    ]
    stats = orjson.loads(rows[0]["stats"]) if rows else {}
    return StageResult(files=files, stats=stats)


def _footer(pickled: bytes | None) -> pq.FileMetaData | None:
    # Written by this project's own stage worker (``_worker``), never by a user.
    got = None if pickled is None else pickle.loads(pickled)  # noqa: S301
    return got if isinstance(got, pq.FileMetaData) else None


def _ipc(rows: pa.Table) -> bytes:
    # A few data files' paths repeated on every row: dictionary-encoded, ~12 bytes a row.
    at = rows.schema.get_field_index(POSITION_PATH)
    if at >= 0 and not pa.types.is_dictionary(rows.schema.field(at).type):
        paths = pc.dictionary_encode(rows.column(at))
        rows = rows.set_column(at, rows.schema.field(at).with_type(paths.type), paths)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as out:
        out.write_table(rows)
    return bytes(sink.getvalue().to_pybytes())


def _rows(ipc: bytes | None) -> pa.Table | None:
    if ipc is None:
        return None
    rows = pa.ipc.open_stream(ipc).read_all()
    at = rows.schema.get_field_index(POSITION_PATH)
    if at >= 0 and pa.types.is_dictionary(rows.schema.field(at).type):  # the writer's schema again
        plain = rows.schema.field(at).type.value_type
        rows = rows.set_column(at, rows.schema.field(at).with_type(plain), pc.cast(rows.column(at), plain))
    return rows


def merge_results(results: Sequence[StageResult]) -> StageResult:
    """The results of the tasks one table's batch was split into (``spark.table_parallelism``)
    as one: every task's files (each task names its own), the counters summed."""
    if len(results) == 1:
        return results[0]
    stats: dict[str, int] = {}
    for r in results:
        for k, v in r.stats.items():
            stats[k] = stats.get(k, 0) + int(v)
    return StageResult(files=[f for r in results for f in r.files], stats=stats)


@dataclass(frozen=True)
class StageTask:
    """One table's part of a batch: its staged events (Parquet, in sequence order) and how
    to map and write them."""

    staged_path: str  # a local path (local mode) or a URI every executor reads; "": none
    spec: StageSpec
    # FileIO properties for a staged URI on object storage: secrets, kept out of repr.
    io_properties: dict[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    rows: int = 0  # staged rows: the task's weight when tables are grouped into Spark tasks
    # Chunks of a transaction larger than a batch, staged before ``staged_path`` (same
    # layout, ``__rep_seq`` numbered on across them): read first, in order, through the
    # same mapper, one file at a time.
    chunk_paths: tuple[str, ...] = ()


STAGE_READ_ROWS = 65_536


def staged_batches(
    paths: Sequence[str], io_properties: dict[str, str], rows: int = STAGE_READ_ROWS
) -> Iterator[pa.RecordBatch]:
    """The rows of staged files, in order, one file open at a time."""
    for path in paths:
        if "://" in path:
            fh = open_input(path, io_properties)
        else:
            fh = pafs.LocalFileSystem().open_input_file(path)
        with fh:
            yield from pq.ParquetFile(fh).iter_batches(batch_size=rows)


def _run_task(task: StageTask) -> list[dict[str, Any]]:
    paths = [*task.chunk_paths, *([task.staged_path] if task.staged_path else [])]
    out = list(_worker(task.spec)(staged_batches(paths, task.io_properties)))
    return pa.Table.from_batches(out, schema=RESULT_SCHEMA).to_pylist() if out else []


def _for_attempt(task: StageTask, attempt: int) -> StageTask:
    """A retried Spark task (executor lost) writes under its own file names: the lost
    attempt's files, maybe half written, are never the ones the driver commits."""
    if attempt == 0:
        return task
    writer = dataclasses.replace(task.spec.writer, batch_id=f"{task.spec.writer.batch_id}-a{attempt}")
    return dataclasses.replace(task, spec=dataclasses.replace(task.spec, writer=writer))


def _run_partition(
    groups: Iterable[list[tuple[int, StageTask]]],
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx is not None else 0
    for group in groups:
        for index, task in group:
            maybe_lose_executor(attempt)
            yield index, _run_task(_for_attempt(task, attempt))


# In local mode, a batch staging at most this many rows in all runs as ONE Spark task (the
# tasks share the driver's machine): a second task costs
# more than it saves (measured here on local[2]: a trivial job of 2 tasks 0.33-0.53 s, of 1
# task 0.18-0.26 s; the worker maps and writes ~8 us a row, so 20k rows split in two save
# ~0.08 s). Small batches are the steady-state case, where that time is commit-to-visible lag.
ONE_TASK_MAX_ROWS = 20_000


def group_tasks(
    tasks: Sequence[StageTask], slots: int, *, one_task_max_rows: int = 0
) -> list[list[tuple[int, StageTask]]]:
    """The tables of a batch as at most ``slots`` groups of about equal staged rows (largest
    first onto the lightest group); one group when they stage at most ``one_task_max_rows``.
    A Spark task costs a Python worker each (measured here: 100 one-table tasks took 25-40 s
    on local[2] under load, 2 tasks under 1 s), so a batch runs one task per slot, not per
    table; each table still goes through ONE worker."""
    if sum(t.rows for t in tasks) <= one_task_max_rows:
        slots = 1
    slots = max(1, min(slots, len(tasks)))
    groups: list[list[tuple[int, StageTask]]] = [[] for _ in range(slots)]
    load = [0] * slots
    for index in sorted(range(len(tasks)), key=lambda i: -tasks[i].rows):
        g = min(range(slots), key=load.__getitem__)
        groups[g].append((index, tasks[index]))
        load[g] += max(tasks[index].rows, 1)
    return groups


def apply_batch_with_spark(spark: Any, tasks: Sequence[StageTask]) -> list[StageResult]:
    """ONE Spark job for the tables of a batch, one task per parallel slot (executor cores);
    results in the order of ``tasks``."""
    if not tasks:
        return []
    sc = spark.sparkContext
    # On a cluster, executors are other machines: tables of a batch always spread over them.
    small = ONE_TASK_MAX_ROWS if str(sc.master).startswith("local") else 0
    groups = group_tasks(tasks, int(sc.defaultParallelism), one_task_max_rows=small)
    rdd = sc.parallelize(groups, numSlices=len(groups))
    done = dict(rdd.mapPartitions(_run_partition).collect())
    note_python_job()
    return [_collect(done[i]) for i in range(len(tasks))]


def apply_batch_local(tasks: Sequence[StageTask]) -> list[StageResult]:
    """The same tasks in this process, without Spark."""
    return [_collect(_run_task(t)) for t in tasks]


def apply_local(
    staged: pa.Table,
    spec: StageSpec,
    *,
    chunk_rows: int = 65_536,
    chunk_paths: Sequence[str] = (),
    io_properties: dict[str, str] | None = None,
) -> StageResult:
    """The same worker in this process, without Spark (staged chunk files first)."""
    seq = staged.column(SEQ)
    # Staging numbers rows in order: no sort (a copy of every column) unless they are not.
    ordered = staged if len(seq) < 2 or pc.all(pc.less(seq[:-1], seq[1:])).as_py() else staged.sort_by(SEQ)
    if not chunk_paths and not spec.keyless and plain_appends(ordered, spec.key_columns, spec.policy.upsert_reads):
        # What the mapper would write, without its key map (``spark.appends``).
        files, stats = append_rows(ordered, spec.data_columns, TableFileWriter(spec.writer), spec.policy.target_file_bytes)
        return StageResult(files=files, stats=_stats_dict(stats))
    batches = itertools.chain(
        staged_batches(chunk_paths, io_properties or {}, chunk_rows),
        ordered.to_batches(max_chunksize=chunk_rows),
    )
    out = list(_worker(spec)(batches))
    return _collect(pa.Table.from_batches(out, schema=RESULT_SCHEMA).to_pylist())
