"""Apply one table's part of a batch: stage -> apply stage -> ONE row-delta snapshot.

Commit protocol (README "Exactly once", docs/architecture.md): files are written under a name
unique to the attempt, then ONE snapshot per table per batch is committed carrying the
table's new ``Checkpoint`` (summary + table property, atomically), tables strictly in batch
order, batches strictly in sequence. Each attempt starts from the table's checkpoint as the
catalog has it NOW: events the table already holds are dropped (a crash after a commit, a
commit whose response was lost, a retry after a conflict), so nothing is applied twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent

from replicator.checkpoint import (
    BatchPlan,
    Checkpoint,
    checkpoint_commit_properties,
    read_checkpoint,
)
from replicator.errors import (
    BadInputError,
    CommitConflictError,
    CommitStateUnknownError,
    FencedError,
    SchemaChangeError,
    TerminalError,
)
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.events.unavailable import fill_unavailable, has_unavailable
from replicator.iceberg.files import (
    data_file_from_parquet,
    equality_delete_arrow_schema,
    equality_delete_file_from_parquet,
    position_delete_arrow_schema,
    position_delete_file_from_parquet,
)
from replicator.iceberg.lookup import IcebergRowLookup
from replicator.iceberg.row_delta import commit_row_delta
from replicator.iceberg.tables import TableManager, TableState, engine_type
from replicator.pipeline.chunks import (
    UNFILLABLE_IN_CHUNKS,
    ChunkStore,
    SpilledTable,
    align,
    same_layout,
    spilled_pending,
)
from replicator.pipeline.crashpoints import crash_point
from replicator.pipeline.staging import (
    STOP,
    BadChangeError,
    StagedBatch,
    deferred_key_moves,
    renumbered,
    stage_events,
    staged_schema,
    with_held_keys,
)
from replicator.retry import call_with_retries
from replicator.sources.debezium_files import POSITION_SOURCE as DEBEZIUM_POSITION_SOURCE
from spark.apply_stage import (
    StageResult,
    StageSpec,
    StageTask,
    apply_batch_with_spark,
    apply_local,
)
from spark.file_writer import (
    CONTENT_DATA,
    CONTENT_EQUALITY_DELETES,
    CONTENT_POSITION_DELETES,
    WriterSpec,
)
from spark.object_storage import delete_file, file_io_properties, open_output

log = logging.getLogger(__name__)

MAX_COMMIT_ATTEMPTS = 5


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
    # Where chunks of transactions larger than a batch are staged (``pipeline.spill``).
    chunk_store: ChunkStore | None = None


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
class _Written:
    data: list[DataFile] = field(default_factory=list)
    deletes: list[DataFile] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [f.file_path for f in [*self.data, *self.deletes]]


def merged_schema(events: Sequence[ChangeEvent]) -> TableSchema:
    """All columns any event of the batch carries, in first-seen order (a column added
    mid-batch joins at the end; the latest type of a column wins)."""
    seen: dict[int, TableSchema] = {}
    for ev in events:
        if ev.schema_ is None and ev.op is Op.TRUNCATE:
            continue  # a TRUNCATE needs no columns (MySQL's may not know them)
        if ev.schema_ is None:
            raise TerminalError("event carries no table schema", table=ev.table, position=ev.position)
        seen.setdefault(id(ev.schema_), ev.schema_)
    schemas = list(seen.values())
    if len(schemas) == 1:
        return schemas[0]
    cols: dict[str, ColumnSpec] = {}
    for s in schemas:
        for c in s.columns:
            cols[c.name] = c
    last = schemas[-1]
    return TableSchema(table=last.table, columns=tuple(cols.values()), key_columns=last.key_columns)


@dataclass
class BatchOutcome:
    """Per table of a batch: its checkpoint after the batch, or why it was stopped."""

    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    stopped: dict[str, str] = field(default_factory=dict)


@dataclass
class _TablePart:
    """One table's part of a batch on its way to a commit."""

    state: TableState
    events: Sequence[ChangeEvent]
    totals: TableTotals
    current: Checkpoint | None = None  # the table's checkpoint the files were built against
    parent_id: int | None = None
    staged: StagedBatch | None = None
    written: _Written | None = None
    done: Checkpoint | None = None  # set when the table already holds every event
    counted: bool = False
    truncate: bool = False  # the batch truncates the table: its commit removes every file
    spilled: SpilledTable | None = None  # the part of a large transaction staged in chunks
    chunks: tuple[str, ...] = ()  # staged chunk files this attempt reads before ``staged``
    chunk_rows: int = 0


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
    parts: dict[str, _TablePart] = {}
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
        part = _TablePart(state, table_events, totals(table), spilled=spill)
        try:
            _prepare(env, part, mine, attempt=1)
        except BadChangeError as exc:
            outcome.stopped[table] = str(exc)  # nothing of this batch is committed for it
            continue
        parts[table] = part
    _write(env, [p for p in parts.values() if p.done is None], batch)
    for table, part in parts.items():
        outcome.checkpoints[table] = _commit(env, part, batch, mine)
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
    env: ApplyEnv, part: _TablePart, mine: Checkpoint, *, attempt: int, basis: Checkpoint | None = None
) -> None:
    """Read where the table stands and keep only the events it lacks."""
    table = part.state.table
    parent = table.current_snapshot()
    current = read_checkpoint(table)
    _check_fence(part.state, current, basis, mine, attempt)
    part.current, part.parent_id = current, parent.snapshot_id if parent else None
    part.written = part.staged = part.done = None
    part.chunks, part.chunk_rows = (), 0
    pending = _not_yet_in(current, part.events)
    spill = part.spilled
    if spill is not None and not spilled_pending(current.position if current else None, spill):
        spill = None  # the table holds the whole transaction
    if not pending and spill is None:
        part.done = current if current is not None else mine
        return
    # A TRUNCATE empties the table at its position: what came before it in the batch does
    # not matter, the commit removes every file, and the changes after it apply on top.
    cut = max((i for i, e in enumerate(pending) if e.op is Op.TRUNCATE), default=None)
    part.truncate = cut is not None or (spill is not None and spill.truncate)
    if cut is not None:
        pending = pending[cut + 1 :]
        spill = None  # the chunks came before it
    if spill is not None and any(has_unavailable(e.after) or has_unavailable(e.before) for e in pending):
        raise BadChangeError(UNFILLABLE_IN_CHUNKS, table=part.state.source_table, position=pending[0].position)
    pending = _fill_unavailable(env, part.state, pending, use_table=not part.truncate)
    staged = _stage(env, part, pending, spill)
    part.staged = _with_held_keys(env, part, staged, spill)


def _with_held_keys(
    env: ApplyEnv, part: _TablePart, staged: StagedBatch, spill: SpilledTable | None
) -> StagedBatch:
    """When a key move of this batch may land on a key the table still holds (a deferred
    unique check, ``staging.deferred_key_moves``), tell the mapper which of those keys the
    table does hold (one lookup); the common case (no such move) costs one vector test.
    With staged chunks, the analysis goes on from theirs, and the chunks get the flags too."""
    keys = part.state.key_columns
    wanted: set[Any] = set()
    if spill is not None:
        wanted |= spill.moved_again
        if staged.events:
            wanted |= deferred_key_moves(staged.table, keys, set(spill.moved_to))
    elif staged.events:
        wanted = deferred_key_moves(staged.table, keys)
    held: set[Any] = set()
    if wanted and not part.truncate:  # else the table is empty before these events
        lookup = IcebergRowLookup(env.spark if env.spark is not None else _local_spark, part.state.table, keys)
        held = {k for k, row in lookup(sorted(wanted, key=repr)).items() if row is not None}
    if spill is not None:
        _chunks_for_stage(env, part, spill, held)
    if not wanted:
        return staged
    return dataclasses.replace(staged, table=with_held_keys(staged.table, keys, held))


def _chunks_for_stage(env: ApplyEnv, part: _TablePart, spill: SpilledTable, held: set[Any]) -> None:
    """The staged chunks as the stage reads them: a chunk staged before the table gained a
    column (or widened one) is rewritten in the table's layout now, and when the table held
    keys that the transaction moves rows onto, every chunk gets the mapper's flags. One chunk
    in memory at a time; rewritten files go to the chunk store (scratch, like the rest)."""
    keys = part.state.key_columns
    schema = part.state.table.schema()
    layout = staged_schema([(f.name, engine_type(f.field_type)) for f in schema.fields], keys)
    io_props = file_io_properties(part.state.table.io.properties)
    store = env.chunk_store
    assert store is not None, "chunks were staged without a chunk store"
    rewrites = store.new_prefix()
    out: list[str] = []
    for i in range(spill.first_chunk, spill.chunks):
        location = store.location(spill.prefix, i)
        if held or not same_layout(spill.layout_of(i), layout):
            table = align(store.read(location, io_props), layout)
            if held:
                table = with_held_keys(table, keys, held)
            location = store.write(table, rewrites, io_props)
        out.append(location)
    part.chunks = tuple(out)
    part.chunk_rows = spill.live_rows


def _fill_unavailable(
    env: ApplyEnv, state: TableState, events: Sequence[ChangeEvent], *, use_table: bool = True
) -> Sequence[ChangeEvent]:
    """Replace Debezium's unavailable-value placeholders (``events.unavailable``) with the
    value from an earlier event of the batch or the table's current row. An event whose
    value is found nowhere becomes a bad change (``errors.on_bad_change``): a placeholder is
    never written as data."""
    if not events or events[0].position.source != DEBEZIUM_POSITION_SOURCE:
        return events  # only Debezium input carries it (Postgres fills TOAST at the source)
    keys = state.key_columns
    lookup = (
        IcebergRowLookup(env.spark if env.spark is not None else _local_spark, state.table, keys)
        if use_table
        else None  # after a TRUNCATE in this batch the table's rows are gone
    )
    pending = list(events)
    while True:
        try:
            return fill_unavailable(pending, keys, lookup)
        except BadInputError as exc:
            i = next((i for i, e in enumerate(pending) if e.position == exc.position), None)
            if i is None:
                raise
            pending[i] = _unfillable(pending[i], keys, exc.message)


def _unfillable(ev: ChangeEvent, keys: Sequence[str], reason: str) -> ChangeEvent:
    """``ev`` as a bad change: its before key only (a 'c' keeps none: it is dropped)."""
    row = ev.before if ev.op is Op.DELETE or ev.before is not None else ev.after
    before = None if ev.op is Op.CREATE or row is None else {k: row.get(k) for k in keys}
    return ev.replace(before=before, after=None, error=reason)


def _local_spark() -> Any:
    from spark.session import get_spark

    return get_spark()


def _stage(
    env: ApplyEnv, part: _TablePart, events: Sequence[ChangeEvent], spill: SpilledTable | None = None
) -> StagedBatch:
    schema = part.state.table.schema()
    columns = [(f.name, engine_type(f.field_type)) for f in schema.fields]
    t0 = time.perf_counter()
    staged = stage_events(events, columns, part.state.key_columns, env.dead_letters, env.on_bad_change)
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


def _commit(env: ApplyEnv, part: _TablePart, batch: BatchCommit, mine: Checkpoint) -> Checkpoint:
    """The commit loop of one table (see the module docstring)."""
    state = part.state
    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        if part.done is not None:
            if attempt > 1:
                log.info("%s: batch ending at %s is already in the table", state.identifier, batch.end)
            return part.done
        assert part.written is not None
        env.crash("files-written")
        summary, properties = checkpoint_commit_properties(mine)
        table = state.table
        t0 = time.perf_counter()
        try:
            commit_row_delta(
                table,
                data_files=part.written.data,
                delete_files=part.written.deletes,
                snapshot_properties=summary,
                table_properties=properties,
                expected_parent_snapshot_id=part.parent_id,
                remove_all=part.truncate,
            )
        except CommitConflictError:
            # Someone committed first. Our files stay valid only if the table's checkpoint
            # did not move (e.g. a maintenance commit): then they are committed again on the
            # new head; otherwise the table's part is rebuilt from the new checkpoint.
            log.warning("%s: commit conflict (attempt %d), re-reading the table", state.identifier, attempt)
            state.table = table.refresh()
            _retry(env, part, batch, mine, attempt + 1, discard=True)
            continue
        except CommitStateUnknownError as exc:
            # The catalog may or may not have taken it: the checkpoint says which.
            log.warning("%s: commit outcome unknown (%s), re-reading the table", state.identifier, exc)
            state.table = table.refresh()
            if read_checkpoint(state.table) == mine:
                break
            # The files may be referenced after all: leave them to orphan cleanup.
            _retry(env, part, batch, mine, attempt + 1, discard=False)
            continue
        finally:
            part.totals.commit_seconds += time.perf_counter() - t0
        state.table = table.refresh()
        break
    else:
        if part.written is not None:
            _discard(state, part.written)
        raise CommitConflictError(
            f"commit still conflicting after {MAX_COMMIT_ATTEMPTS} attempts",
            table=state.source_table, position=batch.end,
        )  # fmt: skip
    if part.written is not None:
        part.totals.data_files += len(part.written.data)
        part.totals.delete_files += len(part.written.deletes)
        eq = sum(1 for f in part.written.deletes if f.content == DataFileContent.EQUALITY_DELETES)
        part.totals.equality_delete_files += eq
        part.totals.position_delete_files += len(part.written.deletes) - eq
    part.totals.snapshots += 1
    return mine


def _retry(
    env: ApplyEnv, part: _TablePart, batch: BatchCommit, mine: Checkpoint, attempt: int, *, discard: bool
) -> None:
    basis, written = part.current, part.written
    table = part.state.table
    current = read_checkpoint(table)
    if discard and current == basis and written is not None:
        # Only the head moved (not the checkpoint): same files, on the new head.
        _check_fence(part.state, current, basis, mine, attempt)
        parent = table.current_snapshot()
        part.parent_id = parent.snapshot_id if parent else None
        return
    if discard and written is not None:
        _discard(part.state, written)
    _prepare(env, part, mine, attempt=attempt, basis=basis)
    if part.done is None:
        _write(env, [part], batch)


def _not_yet_in(current: Checkpoint | None, events: Sequence[ChangeEvent]) -> Sequence[ChangeEvent]:
    """The events the table does not hold yet (events are in position order)."""
    if not events or current is None or current.position.source != events[0].position.source:
        return events
    done = current.position
    if events[0].position > done:
        return events
    return [e for e in events if e.position > done]


def _check_fence(
    state: TableState, current: Checkpoint | None, basis: Checkpoint | None, mine: Checkpoint, attempt: int
) -> None:
    """Refuse to write under a newer owner of the source (a higher fencing token), or when
    another engine committed to the table while this one was working on it."""
    if current is None or current.writer_id == mine.writer_id:
        return
    theirs, ours = current.fencing_token, mine.fencing_token
    if theirs is not None and ours is not None:
        if theirs > ours:
            raise FencedError(
                f"a newer engine (fencing token {theirs} > ours {ours}) owns this table",
                table=state.source_table,
                hint="stop this engine; the other one is replicating",
            )
        return  # an older owner's commits are a prefix of the same log: build on them
    if attempt > 1 and current != basis:
        raise FencedError(
            f"another writer ({current.writer_id}) committed to this table; stopping instead "
            "of writing duplicates",
            table=state.source_table,
            position=mine.position,
        )


def _write(env: ApplyEnv, parts: Sequence[_TablePart], batch: BatchCommit) -> None:
    """Write every part's files: ONE Spark job for all of them."""
    todo = [p for p in parts if p.staged is not None and (p.staged.events or p.chunks)]
    for p in parts:
        if p.staged is not None and not p.staged.events and not p.chunks:
            p.written = _Written()  # everything dead-lettered: commit the position alone
    if not todo:
        return
    t0 = time.perf_counter()
    rows = sum(p.staged.table.num_rows + p.chunk_rows for p in todo if p.staged is not None)
    in_driver = env.engine == "local" or rows <= env.driver_max_rows

    def run_stage() -> list[StageResult]:
        # Each attempt gets new batch ids (new file names): a transient storage error in the
        # writers reruns the stage; a failed attempt's files are never committed.
        name = f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}"
        stage_dir = env.staging_dir / name
        io_props = file_io_properties(todo[0].state.table.io.properties)
        tasks: list[StageTask] = []
        try:
            for i, p in enumerate(todo):
                assert p.staged is not None
                spec = _stage_spec(p.state, batch.plan)
                if in_driver or not p.staged.table.num_rows:
                    path = ""  # in this process, or only staged chunks
                elif env.staging_uri is not None:
                    path = f"{env.staging_uri.rstrip('/')}/{name}/{i:05d}.parquet"
                    with open_output(path, io_props) as out:
                        pq.write_table(p.staged.table, out, compression="lz4")
                else:
                    stage_dir.mkdir(parents=True, exist_ok=True)
                    path = str(stage_dir / f"{i:05d}.parquet")
                    pq.write_table(p.staged.table, path, compression="lz4")
                tasks.append(StageTask(staged_path=path, spec=spec, io_properties=io_props,
                                       rows=p.staged.table.num_rows + p.chunk_rows,
                                       chunk_paths=p.chunks))  # fmt: skip
            if in_driver:
                return [
                    apply_local(p.staged.table, t.spec, chunk_paths=t.chunk_paths, io_properties=io_props)  # type: ignore[union-attr]
                    for p, t in zip(todo, tasks, strict=True)
                ]
            return apply_batch_with_spark(env.spark, tasks)
        finally:
            if env.staging_uri is not None:
                for t in tasks:
                    if t.staged_path:
                        delete_file(t.staged_path, io_props)
            shutil.rmtree(stage_dir, ignore_errors=True)

    results = call_with_retries(run_stage, what="apply stage")
    seconds = (time.perf_counter() - t0) / len(todo)
    for p, result in zip(todo, results, strict=True):
        p.totals.stage_seconds += seconds
        p.written = _describe(p, result)
        p.staged = None  # the events live on in the files; free the Arrow copy


def _describe(part: _TablePart, result: StageResult) -> _Written:
    """Iceberg DataFiles for the files the stage wrote (footers only)."""
    table = part.state.table
    key_ids = list(table.schema().identifier_field_ids)
    out = _Written()
    totals = part.totals
    for f in result.files:
        if f.content == CONTENT_DATA:
            out.data.append(data_file_from_parquet(table, f.path, file_size=f.size))
            totals.rows_written += f.records
        elif f.content == CONTENT_POSITION_DELETES:
            out.deletes.append(position_delete_file_from_parquet(table, f.path))
            totals.position_deletes += f.records
        elif f.content == CONTENT_EQUALITY_DELETES:
            out.deletes.append(equality_delete_file_from_parquet(table, f.path, key_ids))
            totals.equality_deletes += f.records
    return out


def _discard(state: TableState, written: _Written) -> None:
    """Delete files of an attempt the catalog did not take (never referenced)."""
    io = state.table.io
    for path in written.paths:
        with contextlib.suppress(Exception):  # best effort: orphan cleanup catches the rest
            io.delete(path)


def _stage_spec(state: TableState, plan: BatchPlan) -> StageSpec:
    table = state.table
    schema = table.schema()
    return StageSpec(
        writer=WriterSpec(
            data_location=f"{table.location().rstrip('/')}/data",
            batch_id=f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}",
            data_schema=schema_to_pyarrow(schema),
            equality_schema=equality_delete_arrow_schema(schema, list(schema.identifier_field_ids)),
            position_schema=position_delete_arrow_schema(),
            io_properties=file_io_properties(table.io.properties),
        ),
        key_columns=state.key_columns,
        data_columns=tuple(f.name for f in schema.fields),
        policy=plan.policy,
    )
