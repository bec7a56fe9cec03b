"""Apply one batch to Iceberg: per table, stage -> apply stage -> one row-delta snapshot.

Commit protocol (see docs in README "Exactly once"): files are written under a name unique
to the attempt, then ONE snapshot per table per batch is committed with the batch's end
position in its summary, tables strictly in batch order, batches strictly in sequence.
A crash before the commit leaves unreferenced files only; a crash after it is recognised on
restart by the position in the summary, and the batch's events for that table are skipped.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table

from ops_mapping import MappingPolicy
from replicator.errors import CommitConflictError, FencedError, TerminalError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, ColumnSpec, SourcePosition, TableSchema
from replicator.iceberg.files import (
    data_file_from_parquet,
    equality_delete_arrow_schema,
    equality_delete_file_from_parquet,
    position_delete_arrow_schema,
    position_delete_file_from_parquet,
)
from replicator.iceberg.row_delta import commit_row_delta
from replicator.iceberg.tables import (
    FENCING_PROPERTY,
    POSITION_PROPERTY,
    UPSERT_UNTIL_PROPERTY,
    WRITER_PROPERTY,
    TableManager,
    TableState,
    committed_position,
    committed_writer,
    engine_type,
)
from replicator.pipeline.crashpoints import crash_point
from replicator.pipeline.staging import stage_events
from spark.apply_stage import StageResult, StageSpec, apply_local, apply_with_spark
from spark.file_writer import (
    CONTENT_DATA,
    CONTENT_EQUALITY_DELETES,
    CONTENT_POSITION_DELETES,
    WriterSpec,
)

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
    snapshots: int = 0
    dead_letters: int = 0
    stage_seconds: float = 0.0
    commit_seconds: float = 0.0


@dataclass
class ApplyContext:
    tables: TableManager
    dead_letters: DeadLetterSink
    staging_dir: Path
    writer_id: str
    engine: str  # "spark" or "local"
    target_file_bytes: int
    spark: Any = None
    upsert_reads: bool = True  # see ChangeSource.reads_may_repeat
    upsert_creates: bool = False  # see ChangeSource.upsert_until
    upsert_until: SourcePosition | None = None  # recorded in commits made inside the overlap
    fencing_token: int | None = None
    totals: dict[str, TableTotals] = field(default_factory=dict)


def merged_schema(events: Sequence[ChangeEvent]) -> TableSchema:
    """All columns any event of the batch carries, in first-seen order (a column added
    mid-batch joins at the end; the latest type of a column wins)."""
    seen: dict[int, TableSchema] = {}
    for ev in events:
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


def apply_table(ctx: ApplyContext, events: Sequence[ChangeEvent], end: SourcePosition) -> TableTotals:
    table_name = events[0].table
    totals = ctx.totals.setdefault(table_name, TableTotals())
    state = ctx.tables.ensure(merged_schema(events))
    table = state.table
    schema = table.schema()
    columns = [(f.name, engine_type(f.field_type)) for f in schema.fields]

    staged = stage_events(events, columns, state.key_columns, ctx.dead_letters)
    totals.dead_letters += staged.dead_lettered
    totals.events += staged.events

    t0 = time.perf_counter()
    result = _run_stage(ctx, state, staged.table) if staged.events else StageResult(files=[], stats={})
    totals.stage_seconds += time.perf_counter() - t0

    t1 = time.perf_counter()
    key_ids = list(schema.identifier_field_ids)
    data_files, delete_files = [], []
    for f in result.files:
        if f.content == CONTENT_DATA:
            data_files.append(data_file_from_parquet(table, f.path, file_size=f.size))
            totals.rows_written += f.records
        elif f.content == CONTENT_POSITION_DELETES:
            delete_files.append(position_delete_file_from_parquet(table, f.path))
            totals.position_deletes += f.records
        elif f.content == CONTENT_EQUALITY_DELETES:
            delete_files.append(equality_delete_file_from_parquet(table, f.path, key_ids))
            totals.equality_deletes += f.records
    crash_point("files-written")
    _commit(ctx, state, data_files, delete_files, end)
    totals.commit_seconds += time.perf_counter() - t1
    totals.data_files += len(data_files)
    totals.delete_files += len(delete_files)
    totals.snapshots += 1
    return totals


def _run_stage(ctx: ApplyContext, state: TableState, staged: Any) -> StageResult:
    table = state.table
    schema = table.schema()
    data_schema = schema_to_pyarrow(schema)
    spec = StageSpec(
        writer=WriterSpec(
            data_location=f"{table.location().rstrip('/')}/data",
            batch_id=f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}",
            data_schema=data_schema,
            equality_schema=equality_delete_arrow_schema(schema, list(schema.identifier_field_ids)),
            position_schema=position_delete_arrow_schema(),
        ),
        key_columns=state.key_columns,
        data_columns=tuple(f.name for f in schema.fields),
        policy=MappingPolicy(
            target_file_bytes=ctx.target_file_bytes,
            upsert_reads=ctx.upsert_reads,
            upsert_creates=ctx.upsert_creates,
        ),
    )
    if ctx.engine == "local":
        return apply_local(staged, spec)
    stage_dir = ctx.staging_dir / spec.writer.batch_id
    stage_dir.mkdir(parents=True, exist_ok=True)
    path = stage_dir / "events.parquet"
    pq.write_table(staged, path, compression="lz4")
    try:
        return apply_with_spark(ctx.spark, str(path), spec)
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)


def _check_fence(ctx: ApplyContext, state: TableState, parent: Any) -> None:
    """A newer owner of the source (higher token) has committed: this engine is a zombie."""
    if ctx.fencing_token is None or parent is None or parent.summary is None:
        return
    theirs = parent.summary.additional_properties.get(FENCING_PROPERTY)
    if theirs is not None and int(theirs) > ctx.fencing_token:
        raise FencedError(
            f"a newer engine (fencing token {theirs} > ours {ctx.fencing_token}) owns this table",
            table=state.source_table,
            hint="stop this engine; the other one is replicating",
        )


def _commit(
    ctx: ApplyContext, state: TableState, data_files: list, delete_files: list, end: SourcePosition
) -> None:
    props = {POSITION_PROPERTY: end.to_json(), WRITER_PROPERTY: ctx.writer_id}
    if ctx.fencing_token is not None:
        props[FENCING_PROPERTY] = str(ctx.fencing_token)
    if ctx.upsert_until is not None:
        props[UPSERT_UNTIL_PROPERTY] = ctx.upsert_until.to_json()
    for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
        table: Table = state.table
        parent = table.current_snapshot()
        _check_fence(ctx, state, parent)
        try:
            commit_row_delta(
                table,
                data_files=data_files,
                delete_files=delete_files,
                snapshot_properties=props,
                expected_parent_snapshot_id=parent.snapshot_id if parent else None,
            )
            state.table = table.refresh()
            return
        except CommitConflictError:
            state.table = table.refresh()
            done = committed_position(state.table)
            writer = committed_writer(state.table)
            if writer is not None and writer != ctx.writer_id:
                raise FencedError(
                    f"another writer ({writer}) committed to this table; stopping instead of writing duplicates",
                    table=state.source_table,
                    position=end,
                ) from None
            if done is not None and done.source == end.source and done >= end:
                log.info("%s: batch ending at %s was already committed", state.identifier, end)
                return
            log.warning("%s: commit conflict (attempt %d), retrying", state.identifier, attempt)
    raise CommitConflictError(
        f"commit still conflicting after {MAX_COMMIT_ATTEMPTS} attempts", table=state.source_table, position=end
    )
