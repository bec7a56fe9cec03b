"""Apply one table's part of a batch: stage -> apply stage -> ONE row-delta snapshot.

Commit protocol (README "Exactly once", docs/architecture.md): files are written under a name
unique to the attempt, then ONE snapshot per table per batch is committed carrying the
table's new ``Checkpoint`` (summary + table property, atomically), tables strictly in batch
order, batches strictly in sequence. Each attempt starts from the table's checkpoint as the
catalog has it NOW: events the table already holds are dropped (a crash after a commit, a
commit whose response was lost, a retry after a conflict), so nothing is applied twice.

The decisions (fence, skip, retry) are ``replicator.commit.TableCommit``'s, a pure state
machine; this module is its driver's ports: reading and committing the table
(``_TablePort``), staging its events, and writing every table's files in one job
(``_StageRunner``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFileContent

from ops_mapping import MappingPolicy
from replicator.checkpoint import (
    BatchPlan,
    Checkpoint,
    checkpoint_commit_properties,
    read_checkpoint,
)
from replicator.commit import (
    Action,
    CommitAnswer,
    CommitFiles,
    Done,
    Fail,
    SpilledRange,
    Staged,
    StageEvents,
    StageRefused,
    Stop,
    TableCommit,
    TableRead,
    drive,
    drive_together,
    write_together,
)
from replicator.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    SchemaChangeError,
)
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.events.unavailable import has_unavailable
from replicator.iceberg.branches import target_branch
from replicator.iceberg.files import equality_delete_arrow_schema, position_delete_arrow_schema
from replicator.iceberg.partitions import sort_columns
from replicator.iceberg.table_commit import commit_batch, uses_vectors
from replicator.iceberg.tables import TableManager, TableState, engine_type
from replicator.pipeline.batch_schema import merged_schema
from replicator.pipeline.chunks import (
    UNFILLABLE_IN_CHUNKS,
    ChunkStore,
    SpilledTable,
)
from replicator.pipeline.crashpoints import crash_point
from replicator.pipeline.observe import NULL_STEP_OBSERVER, StepObserver
from replicator.pipeline.pk_indexes import Positions, TableIndexes
from replicator.pipeline.stage_prep import chunks_for_stage, fill_from_table, held_keys, local_spark
from replicator.pipeline.stage_tasks import PartInput, appends_only, gathered, part_tasks
from replicator.pipeline.staging import (
    STOP,
    BadChangeError,
    StagedBatch,
    check_old_images,
    renumbered,
    stage_events,
    with_held_keys,
)
from replicator.pipeline.table_pool import TABLES_SHARED, commit_all, each_at_once
from replicator.pipeline.written import Written, describe, discard
from replicator.retry import call_with_retries
from replicator.storage.file_writer import WriterSpec
from replicator.storage.fileio import delete_file, file_io_properties
from replicator.storage.partitioning import partition_plan
from spark.apply_stage import (
    StageResult,
    StageSpec,
    StageTask,
    apply_batch_with_spark,
    apply_local,
)

log = logging.getLogger(__name__)


@dataclass
class TableTotals:
    events: int = 0
    rows_written: int = 0
    position_deletes: int = 0
    equality_deletes: int = 0
    data_files: int = 0
    delete_files: int = 0
    position_delete_files: int = 0
    equality_delete_files: int = 0
    deletion_vectors: int = 0
    snapshots: int = 0
    dead_letters: int = 0
    stage_seconds: float = 0.0
    commit_seconds: float = 0.0


@dataclass(frozen=True)
class ApplyEnv:
    """What applying needs for the whole run (fixed at start)."""

    tables: TableManager
    dead_letters: DeadLetterSink
    staging_dir: Path
    writer_id: str
    engine: str  # "spark" or "local"
    target_file_bytes: int
    spark: Any = None
    crash: Callable[[str], None] = crash_point
    # Staged batches on shared storage (a URI every executor reads, for a cluster); None: on
    # this machine's disk under staging_dir.
    staging_uri: str | None = None
    on_bad_change: str = STOP  # config errors.on_bad_change
    # A batch of at most this many staged rows runs the stage in this process, without a
    # Spark job (its fixed cost is most of a small batch's time); 0: always on Spark.
    driver_max_rows: int = 0
    # The source's events may carry unavailable-value placeholders (its needs_row_fill).
    row_fill: bool = False
    # Where chunks of transactions larger than a batch are staged (``pipeline.spill``).
    chunk_store: ChunkStore | None = None
    steps: StepObserver = NULL_STEP_OBSERVER  # timings of the steps (benchmarks)
    # ``delete_mode: position``: the tables' primary-key indexes, and which source tables
    # use them (config ``iceberg.delete_mode``); None: every table in equality mode.
    indexes: TableIndexes | None = None
    delete_mode_of: Callable[[str], str] = lambda _table: "equality"
    table_parallelism: int = 1  # config spark.table_parallelism (``stage_tasks``)
    parallel_tables: int = 1  # config iceberg.parallel_tables: tables written and committed at once

    def position_mode(self, source_table: str) -> bool:
        return self.indexes is not None and self.delete_mode_of(source_table) == "position"


@dataclass(frozen=True)
class BatchCommit:
    """What every table's commit of one batch records (fixed per batch)."""

    end: SourcePosition
    plan: BatchPlan
    fencing_token: int | None
    acknowledged: SourcePosition | None  # everything at or before it is durable everywhere
    source_id: str | None = None

    def checkpoint(self, writer_id: str) -> Checkpoint:
        return Checkpoint(
            position=self.end,
            writer_id=writer_id,
            fencing_token=self.fencing_token,
            overlap_until=self.plan.overlap_until,
            acknowledged=self.acknowledged,
            source_id=self.source_id,
        )


@dataclass
class BatchOutcome:
    """Per table of a batch: its checkpoint after the batch, or why it was stopped."""

    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)


@dataclass
class _TablePart:
    """One table's part of a batch: what the ports of its ``TableCommit`` work on (where it
    stands in the protocol is the machine's, not this record's)."""

    state: TableState
    events: Sequence[ChangeEvent]
    totals: TableTotals
    staged: StagedBatch | None = None
    written: Written | None = None
    counted: bool = False
    truncate: bool = False  # the batch truncates the table: its commit removes every file
    spilled: SpilledTable | None = None  # the part of a large transaction staged in chunks
    chunks: tuple[str, ...] = ()  # staged chunk files this attempt reads before ``staged``
    chunk_rows: int = 0
    policy: MappingPolicy = field(default_factory=MappingPolicy)  # the batch plan's
    head_id: int | None = None  # the head the last read found (the stage builds on it)
    # Position mode: the earlier batches' rows of the keys staged, valid at one snapshot.
    positions: Positions | None = None


_Run = tuple[TableCommit[_TablePart, Written], Action[_TablePart, Written]]


def apply_batch(
    env: ApplyEnv,
    events: Mapping[str, Sequence[ChangeEvent]],
    batch: BatchCommit,
    totals: Callable[[str], TableTotals],
    spilled: Mapping[str, SpilledTable] | None = None,
) -> BatchOutcome:
    """Make one batch durable: every table's files in ONE Spark job, then one commit per
    table, in the order of ``events``. A table with a change it cannot apply is stopped
    (``BatchOutcome.stopped``); the others go on. ``spilled``: the batch's transaction's
    events staged in chunks before ``events`` (``pipeline.spill``)."""
    outcome = BatchOutcome()
    runs: dict[str, tuple[_TablePort, _Run]] = {}
    mine = batch.checkpoint(env.writer_id)
    spilled = spilled or {}
    for table in dict.fromkeys([*spilled, *events]):
        table_events = events.get(table, ())
        spill = spilled.get(table)
        if spill is not None and spill.stopped is not None:
            outcome.stopped[table] = spill.stopped
            continue
        try:
            if all(e.op is Op.TRUNCATE and e.schema_ is None for e in table_events):
                existing = env.tables.load_existing(table)
                if existing is None:
                    continue  # nothing to empty: no Iceberg table yet
                state = existing
            else:
                state = env.tables.ensure(merged_schema(table_events))
        except SchemaChangeError as exc:
            outcome.stopped[table] = str(exc)
            continue
        port = _TablePort(env, _TablePart(state, table_events, totals(table), spilled=spill,
                                          policy=batch.plan.policy))  # fmt: skip
        commit: TableCommit[_TablePart, Written] = TableCommit.plan(
            state.source_table, table_events, mine,
            spilled=None if spill is None else SpilledRange(spill.first, spill.last, spill.truncate),
        )  # fmt: skip
        run = drive(*commit.start(), port, None)  # read, fence, skip, stage: up to the write
        if isinstance(run[1], Stop):
            outcome.stopped[table] = run[1].reason  # nothing of this batch is committed for it
            continue
        if isinstance(run[1], Fail):
            raise run[1].error
        runs[table] = (port, run)
    runner = _StageRunner(env, batch)
    written = write_together([run for _port, run in runs.values()], runner)  # ONE job
    ports = [port for port, _first in runs.values()]
    if env.parallel_tables > 1 and len(runs) > 1:
        # Their commits at once; a table's failure is raised below once all have finished.
        done = drive_together(written, ports, runner, commit_all(env.parallel_tables))
        for table, port, (_final, action) in zip(runs, ports, done, strict=True):
            outcome.checkpoints[table] = _settle(port.part, action, batch)
        return outcome
    for table, port, run in zip(runs, ports, written, strict=True):
        _final, action = drive(*run, port, runner)
        outcome.checkpoints[table] = _settle(port.part, action, batch)
    return outcome


def apply_table(
    env: ApplyEnv, totals: TableTotals, events: Sequence[ChangeEvent], batch: BatchCommit
) -> Checkpoint:
    """One table's part of a batch on its own (``apply_batch`` with one table)."""
    table = events[0].table
    outcome = apply_batch(env, {table: events}, batch, lambda _t: totals)
    if table in outcome.stopped:
        raise SchemaChangeError(outcome.stopped[table], table=table)
    return outcome.checkpoints[table]


def _prepare(
    env: ApplyEnv, part: _TablePart, events: Sequence[ChangeEvent], *, truncate: bool, spilled: bool
) -> None:
    """Stage the events the table lacks (``TableCommit`` chose them; ``truncate``: the
    commit empties the table first, so nothing is looked up in it; ``spilled``: the table
    lacks the chunks staged before the batch closed too, read first)."""
    part.written = part.staged = None
    part.chunks, part.chunk_rows = (), 0
    part.truncate = truncate
    spill = part.spilled if spilled else None
    if spill is not None and any(has_unavailable(e.after) or has_unavailable(e.before) for e in events):
        raise BadChangeError(UNFILLABLE_IN_CHUNKS, table=part.state.source_table, position=events[0].position)
    pending = events
    if events and env.row_fill:  # only Debezium input carries them (Postgres fills TOAST at the source)
        pending = fill_from_table(_spark_of(env), part.state, events, use_table=not part.truncate)
    if part.state.keyless:
        check_old_images(part.state.source_table, pending)
    staged = _stage(env, part, pending, spill)
    part.staged = _with_held_keys(env, part, staged, spill)
    part.positions = None
    if part.state.keyless or env.position_mode(part.state.source_table):
        part.positions = _earlier_rows(env, part, part.staged)


def _earlier_rows(env: ApplyEnv, part: _TablePart, staged: StagedBatch) -> Positions:
    """Position mode: where the rows of earlier batches are that this batch's events (and
    its staged chunks, read one at a time) may delete, at the head read."""
    assert env.indexes is not None
    io_props = file_io_properties(part.state.table.io.properties)
    store = env.chunk_store
    chunks = (store.read(c, io_props) for c in part.chunks) if store is not None else iter(())
    return env.indexes.positions(part.state, part.head_id, [staged.table], chunks, part.policy,
                                 truncate=part.truncate)  # fmt: skip


def _with_held_keys(
    env: ApplyEnv, part: _TablePart, staged: StagedBatch, spill: SpilledTable | None
) -> StagedBatch:
    """The staged batch with the mapper's flags for keys the table holds that this batch
    moves rows onto (``stage_prep.held_keys``); staged chunks are made ready for the stage
    with the same keys."""
    keys = part.state.key_columns
    # Without a key no row moves between keys: nothing is held.
    wanted, held = (set(), set()) if part.state.keyless else held_keys(
        _spark_of(env), part.state, staged, spill, truncate=part.truncate)  # fmt: skip
    if spill is not None:
        assert env.chunk_store is not None, "chunks were staged without a chunk store"
        part.chunks = chunks_for_stage(env.chunk_store, part.state, spill, held)
        part.chunk_rows = spill.live_rows
    if not wanted:
        return staged
    return dataclasses.replace(staged, table=with_held_keys(staged.table, keys, held))


def _spark_of(env: ApplyEnv) -> Any:
    """The run's Spark session, or the function that starts the local one when needed."""
    return env.spark if env.spark is not None else local_spark


def _stage(
    env: ApplyEnv, part: _TablePart, events: Sequence[ChangeEvent], spill: SpilledTable | None = None
) -> StagedBatch:
    schema = part.state.table.schema()
    columns = [(f.name, engine_type(f.field_type)) for f in schema.fields]
    t0 = time.perf_counter()
    staged = stage_events(events, columns, part.state.identity_columns, env.dead_letters, env.on_bad_change,
                          whole_row=part.state.keyless)  # fmt: skip
    env.steps.events_staged(part.state.source_table, time.perf_counter() - t0)
    if spill is not None:  # numbered on after the chunks'
        staged = dataclasses.replace(staged, table=renumbered(staged.table, spill.rows))
    if not part.counted:
        part.totals.dead_letters += staged.dead_lettered
        part.totals.events += staged.events
        if part.spilled is not None:
            part.totals.dead_letters += part.spilled.dead_lettered
            part.totals.events += part.spilled.events
        part.counted = True
    part.totals.stage_seconds += time.perf_counter() - t0
    return staged


@dataclass(frozen=True)
class _TablePort:
    """``replicator.commit.TablePort`` for one table: its catalog table and its staging."""

    env: ApplyEnv
    part: _TablePart

    def read(self, *, refresh: bool) -> TableRead:
        state = self.part.state
        if refresh:
            state.table = state.table.refresh()
        # A table being copied again is written to its resnapshot branch (``iceberg.branches``).
        parent = state.table.metadata.snapshot_by_name(target_branch(state.table))
        self.part.head_id = parent.snapshot_id if parent else None
        return TableRead(read_checkpoint(state.table), self.part.head_id)

    def stage(self, action: StageEvents) -> Staged[_TablePart] | StageRefused:
        try:
            _prepare(self.env, self.part, action.events, truncate=action.truncate, spilled=action.spilled)
        except BadChangeError as exc:
            return StageRefused(exc)
        return Staged(self.part)

    def commit(self, action: CommitFiles[Written]) -> CommitAnswer:
        return _commit(self.env, self.part, action)

    def discard(self, files: Written) -> None:
        discard(self.part.state.table, files)


@dataclass(frozen=True)
class _StageRunner:
    """``replicator.commit.StageRunner``: every staged part's files in one job (``_write``)."""

    env: ApplyEnv
    batch: BatchCommit

    def write(self, staged: Sequence[_TablePart]) -> list[Written]:
        parts = list(staged)
        _write(self.env, parts, self.batch)
        out = []
        for p in parts:
            assert p.written is not None
            out.append(p.written)
        return out


def _commit(env: ApplyEnv, part: _TablePart, action: CommitFiles[Written]) -> CommitAnswer:
    """One commit attempt: the files and the checkpoint as ONE row-delta snapshot, on the
    parent the files were built against. The machine decides what a refusal means."""
    state = part.state
    positions = part.positions
    if positions is not None and positions.snapshot_id != action.parent_id:
        # Position deletes name rows of the head they were looked up at: never committed
        # on another one (a file of theirs may be gone there). Staged again on the new head.
        log.warning("%s: the head moved from %s to %s under the batch's position deletes; staging it again",
                    state.identifier, positions.snapshot_id, action.parent_id)  # fmt: skip
        return CommitAnswer.STALE
    env.crash("files-written")
    summary, properties = checkpoint_commit_properties(action.checkpoint)
    table = state.table
    t0 = time.perf_counter()
    try:
        commit_batch(
            table,
            data_files=action.files.data,
            delete_files=action.files.deletes,
            vectors=action.files.vectors,
            snapshot_properties=summary,
            table_properties=properties,
            expected_parent_snapshot_id=action.parent_id,
            branch=target_branch(table),
            remove_all=action.truncate,
        )
    except CommitConflictError:
        log.warning("%s: commit conflict (attempt %d), re-reading the table", state.identifier, action.attempt)
        return CommitAnswer.CONFLICT
    except CommitStateUnknownError as exc:
        log.warning("%s: commit outcome unknown (%s), re-reading the table", state.identifier, exc)
        return CommitAnswer.UNKNOWN
    finally:
        part.totals.commit_seconds += time.perf_counter() - t0
    eq = sum(1 for f in action.files.deletes if f.content == DataFileContent.EQUALITY_DELETES)
    with TABLES_SHARED:  # tables may commit on several threads (``table_pool``)
        env.steps.snapshot_committed(
            ".".join(table.name()), seconds=time.perf_counter() - t0, data_files=len(action.files.data),
            position_delete_files=len(action.files.deletes) - eq, equality_delete_files=eq,
        )  # fmt: skip
        # ``commit_batch`` advanced ``table`` to the snapshot it committed: no catalog load. A
        # later commit by another writer shows as a conflict at our next commit (re-read then).
        if positions is not None and env.indexes is not None:
            env.crash("index-behind")
            head = state.table.metadata.snapshot_by_name(target_branch(state.table))
            assert head is not None
            env.indexes.committed(state, action.parent_id, head.snapshot_id, action.files.data, action.files.deletes,
                                  positions, truncate=action.truncate, vectors=action.files.vectors)  # fmt: skip
    return CommitAnswer.OK


def _settle(part: _TablePart, action: Action[_TablePart, Written], batch: BatchCommit) -> Checkpoint:
    """The table's checkpoint after its final action (a failure is raised)."""
    if isinstance(action, Fail):
        raise action.error
    assert isinstance(action, Done), action
    if action.files is None:
        if action.attempt > 1:
            log.info("%s: batch ending at %s is already in the table", part.state.identifier, batch.end)
        return action.checkpoint
    totals, files = part.totals, action.files
    totals.data_files += len(files.data)
    totals.deletion_vectors += len(files.vectors)
    totals.delete_files += len(files.deletes)
    eq = sum(1 for f in files.deletes if f.content == DataFileContent.EQUALITY_DELETES)
    totals.equality_delete_files += eq
    totals.position_delete_files += len(files.deletes) - eq
    totals.snapshots += 1
    return action.checkpoint


def _write(env: ApplyEnv, parts: Sequence[_TablePart], batch: BatchCommit) -> None:
    """Write every part's files: ONE Spark job for all of them."""
    todo = [p for p in parts if p.staged is not None and (p.staged.events or p.chunks)]
    for p in parts:
        if p.staged is not None and not p.staged.events and not p.chunks:
            p.written = Written()  # everything dead-lettered: commit the position alone
    if not todo:
        return
    t0 = time.perf_counter()
    rows = sum(p.staged.table.num_rows + p.chunk_rows for p in todo if p.staged is not None)
    small = env.engine == "local" or rows <= env.driver_max_rows
    # Plain appends (``appends_only``) are written here whatever their size; the batch's other
    # parts share ONE Spark job. driver_max_rows 0: all on Spark.
    here = [small or (env.driver_max_rows > 0 and appends_only(p.staged, p.policy, p.chunks, p.state.keyless)) for p in todo]

    def run_stage() -> list[StageResult]:
        # Each attempt gets new batch ids (new file names): a transient storage error in the
        # writers reruns the stage; a failed attempt's files are never committed.
        name = f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}"
        stage_dir = env.staging_dir / name
        io_props = file_io_properties(todo[0].state.table.io.properties)
        tasks: list[list[StageTask]] = []
        try:
            for i, p in enumerate(todo):
                assert p.staged is not None
                spec = _stage_spec(p.state, batch.plan, p.positions)
                if here[i]:
                    tasks.append([StageTask(staged_path="", spec=spec, io_properties=io_props, chunk_paths=p.chunks)])
                    continue
                if env.staging_uri is None:
                    stage_dir.mkdir(parents=True, exist_ok=True)
                where = f"{env.staging_uri.rstrip('/')}/{name}" if env.staging_uri is not None else str(stage_dir)
                part = PartInput(p.staged.table, spec, p.chunks, p.chunk_rows, uses_vectors(p.state.table))
                tasks.append(part_tasks(part, env.table_parallelism, io_props, f"{where}/{i:05d}"))
            mine = [i for i in range(len(todo)) if here[i]]
            results = dict(zip(mine, each_at_once(env.parallel_tables, [
                functools.partial(_write_here, env, todo[i], tasks[i][0], io_props) for i in mine]), strict=True))  # fmt: skip
            if there := [i for i in range(len(todo)) if not here[i]]:
                started = time.perf_counter()
                try:
                    done = apply_batch_with_spark(env.spark, [t for i in there for t in tasks[i]])
                    results.update(zip(there, gathered(done, [len(tasks[i]) for i in there]), strict=True))
                finally:
                    env.steps.files_written(time.perf_counter() - started, by="spark")
            return [results[i] for i in range(len(todo))]
        finally:
            if env.staging_uri is not None:
                for t in (t for ts in tasks for t in ts):
                    if t.staged_path:
                        delete_file(t.staged_path, io_props)
            shutil.rmtree(stage_dir, ignore_errors=True)

    results = call_with_retries(run_stage, what="apply stage")
    seconds = (time.perf_counter() - t0) / len(todo)
    for p, result in zip(todo, results, strict=True):
        p.totals.stage_seconds += seconds
        p.written = _describe(p, result)
        p.staged = None  # the events live on in the files; free the Arrow copy


def _write_here(env: ApplyEnv, part: _TablePart, task: StageTask, io_props: dict[str, str]) -> StageResult:
    """One table's files written in this process (no Spark job)."""
    assert part.staged is not None
    started = time.perf_counter()
    # v3: the position deletes become deletion vectors in this process: no file for them.
    spec = dataclasses.replace(task.spec, writer=dataclasses.replace(
        task.spec.writer, position_deletes_in_memory=uses_vectors(part.state.table)))  # fmt: skip
    try:
        return apply_local(part.staged.table, spec, chunk_paths=task.chunk_paths, io_properties=io_props)
    finally:
        with TABLES_SHARED:
            env.steps.files_written(time.perf_counter() - started, by="driver")


def _describe(part: _TablePart, result: StageResult) -> Written:
    """The stage's files for the commit, counted in the table's totals."""
    out = describe(part.state.table, result)
    unmatched = result.stats.get("unmatched_deletes", 0)
    if unmatched:
        log.warning("%s: %d update(s)/delete(s) named an old row image no live row equals (nothing "
                    "removed for them): the table may differ from the source; resnapshot it",
                    part.state.source_table, unmatched)  # fmt: skip
    totals = part.totals
    totals.rows_written += out.rows_written
    totals.position_deletes += out.position_deletes
    totals.equality_deletes += out.equality_deletes
    return out


def _stage_spec(state: TableState, plan: BatchPlan, positions: Positions | None = None) -> StageSpec:
    table = state.table
    schema = table.schema()
    return StageSpec(
        writer=WriterSpec(
            data_location=f"{table.location().rstrip('/')}/data",
            batch_id=f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}",
            data_schema=schema_to_pyarrow(schema),
            # A keyless table is never written an equality delete (its mapper has none).
            equality_schema=pa.schema([]) if state.keyless
            else equality_delete_arrow_schema(schema, list(schema.identifier_field_ids)),
            position_schema=position_delete_arrow_schema(),
            partition=partition_plan(table.metadata.spec(), schema),
            sort_by=sort_columns(table),
            target_file_bytes=plan.policy.target_file_bytes,
            io_properties=file_io_properties(table.io.properties),
        ),
        key_columns=state.identity_columns,
        keyless=state.keyless,
        data_columns=tuple(f.name for f in schema.fields),
        policy=plan.policy,
        table_rows=None if positions is None else positions.rows,
        table_homes={} if positions is None else dict(positions.homes),
    )
