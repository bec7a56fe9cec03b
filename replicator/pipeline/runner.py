"""The replication loop: poll the source, batch at transaction boundaries, apply, commit,
and only then acknowledge the source."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from replicator.checkpoint import Checkpoints, plan_batch, read_checkpoint
from replicator.config import RunConfig
from replicator.errors import TerminalError
from replicator.events.block import BlockEvent, first_position, row_count
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeBatch, ChangeEvent, Op, SourcePosition
from replicator.iceberg.manifests import file_counts
from replicator.iceberg.tables import (
    SOURCE_TABLE_PROPERTY,
    TableManager,
    iceberg_table_name,
    open_catalog,
)
from replicator.maintenance.scheduler import Maintainer, SlicePacer
from replicator.metrics.observer import NULL_OBSERVER, Observer
from replicator.pipeline.apply import ApplyEnv, BatchCommit, BatchOutcome, TableTotals, apply_batch
from replicator.pipeline.arrow_pool import run_pool
from replicator.pipeline.assembly import (
    build_source,
    column_policy,
    default_writer_id,
    executor_chunk_reads,
    state_lock,
)
from replicator.pipeline.batcher import Batcher
from replicator.pipeline.catchup import CatchUp
from replicator.pipeline.chunks import ChunkStore, SpilledTable
from replicator.pipeline.crashpoints import crash_point
from replicator.pipeline.cuts import CutKeeper
from replicator.pipeline.gc_policy import run_thresholds
from replicator.pipeline.observe import NULL_STEP_OBSERVER, StepObserver
from replicator.pipeline.pk_indexes import position_indexes
from replicator.pipeline.reader import Failed, Idle, SourceReader
from replicator.pipeline.resnapshot import ResnapshotKeeper
from replicator.pipeline.retained import RetainedLogWatcher
from replicator.pipeline.spill import Spiller
from replicator.sources.base import ChangeSource

log = logging.getLogger(__name__)

IDLE_SLEEP_SECONDS = 0.5
_OP = attrgetter("op")  # counting ops per batch for metrics: the cheapest walk over events


@dataclass
class RunSummary:
    batches: int = 0
    events_seen: int = 0
    events_skipped: int = 0  # at or before the table's committed position (replays)
    events_held: int = 0  # of stopped tables: not applied, not acknowledged
    dead_letters: int = 0
    tables: dict[str, TableTotals] = field(default_factory=dict)
    last_position: SourcePosition | None = None
    seconds: float = 0.0
    # Tables stopped by a change the engine cannot apply (message per table); their events
    # are held back: the source is not acknowledged past what they have committed.
    stopped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppliedBatch:
    """A batch whose tables' commits are done, as the after-commit hooks see it."""

    batch: ChangeBatch
    live: dict[str, tuple[Any, ...]]  # the events applied, per table not stopped before it
    outcome: BatchOutcome
    started: float  # time.perf_counter() when applying began
    # The events staged in chunks before the batch closed, per table (not in ``live``).
    spilled: Mapping[str, SpilledTable] = field(default_factory=dict)


def _start_spark(cfg: RunConfig) -> Any:
    """The shared Spark session, on the configured cluster if one is named."""
    from spark.session import DEFAULT_MASTER, get_spark, use_cluster

    if cfg.spark.master is not None or cfg.spark.conf:
        use_cluster(cfg.spark.master or DEFAULT_MASTER, cfg.spark.conf)
    return get_spark()


def _staging(cfg: RunConfig) -> tuple[Path, str | None]:
    """Where batches are staged: a local folder, and the shared storage URI (a cluster's
    executors read it) when ``spark.staging`` names one."""
    staging = cfg.spark.staging
    staging_dir = Path(staging) if staging and "://" not in staging else cfg.state_dir / "staging"
    return staging_dir, staging if staging and "://" in staging else None


def _slice_pacer(cfg: RunConfig) -> SlicePacer:
    """When maintenance slices run, and for how long (the first comes every_seconds in)."""
    m = cfg.maintenance
    return SlicePacer(m.every_seconds, m.max_time_share, time.monotonic(), busy_seconds=m.busy_slice_seconds)


class Replicator:
    def __init__(
        self,
        cfg: RunConfig,
        *,
        engine: str = "spark",
        spark: Any = None,
        source: ChangeSource | None = None,
        observer: Observer | None = None,
        stop: threading.Event | None = None,
        steps: StepObserver | None = None,
    ) -> None:
        self.cfg = cfg
        self.observer = observer or NULL_OBSERVER
        # Set (e.g. by a SIGTERM handler): stop reading, leave the pending batch uncommitted
        # (it is read again after a restart: the source was never acknowledged past it).
        self.stop = stop or threading.Event()
        self.dead_letters = DeadLetterSink(cfg.dead_letter_path)
        self.dead_letters.on_put = lambda d: self.observer.dead_letter(d.table or "?", d.reason)
        self.columns = column_policy(cfg.source)
        if self.columns is not None:
            self.dead_letters.redact = self.columns.redact
        self.catalog = open_catalog(cfg.iceberg)
        self.tables = TableManager(self.catalog, cfg.iceberg, crash=crash_point, keyless=cfg.keyless_tables)
        self.source = source or build_source(cfg, self.dead_letters)
        if engine == "spark" and spark is None:
            spark = _start_spark(cfg)
        staging_dir, staging_uri = _staging(cfg)
        # Chunks of a transaction larger than a batch (``pipeline.spill``); scratch.
        chunk_uri = f"{staging_uri.rstrip('/')}/chunks" if staging_uri is not None else None
        self.chunk_store = ChunkStore(staging_dir / "chunks", chunk_uri)
        self.env = ApplyEnv(
            tables=self.tables,
            dead_letters=self.dead_letters,
            staging_dir=staging_dir,
            staging_uri=staging_uri,
            writer_id=cfg.writer_id or default_writer_id(),
            engine=engine,
            target_file_bytes=cfg.iceberg.target_file_bytes,
            spark=spark,
            on_bad_change=cfg.errors.on_bad_change,
            driver_max_rows=cfg.driver_max_rows, table_parallelism=cfg.spark.table_parallelism,
            parallel_tables=cfg.iceberg.tables_at_once,
            row_fill=self.source.needs_row_fill, chunk_store=self.chunk_store,
            indexes=position_indexes(cfg, self._spark),
            delete_mode_of=cfg.iceberg.delete_mode_of,
            steps=steps or NULL_STEP_OBSERVER,
        )
        self.spiller = Spiller(self.env, self.chunk_store)
        self.batcher: Batcher | None = None  # the running loop's (tests read its peak)
        # Where every table stands (read from the tables at start, advanced by each commit),
        # and how far the source has been told it may forget.
        self.checkpoints = Checkpoints()
        self.acknowledged: SourcePosition | None = None
        self.summary = RunSummary()
        self._reader: SourceReader | None = None
        self._catch = CatchUp(None)  # what --until-idle waits for (set per run)
        self._watcher: RetainedLogWatcher | None = None
        self.cuts = CutKeeper(
            self.catalog, cfg.iceberg.namespace, every_seconds=cfg.iceberg.cut_every_seconds,
            keep=cfg.iceberg.cuts_keep,
        )  # fmt: skip
        self._snapshot_in_progress = False  # as the source said after the last events read
        # Called (run loop thread) when the source is idle and everything read is committed.
        self.on_idle: Callable[[], None] | None = None
        self._idle_streak = 0
        self._idle_hook_done = 0.0
        self._file_counts: dict[str, tuple[int, int, int]] = {}  # live files per table, last read
        # Table maintenance, run between batches on this thread: the engine is the single
        # writer of its tables, so maintenance never races a batch's commit.
        self.maintainer = (
            Maintainer(cfg.maintenance, spark=self._spark, crash=crash_point)
            if cfg.maintenance.enabled else None
        )  # fmt: skip
        self._slices = _slice_pacer(cfg)
        # What follows a batch's commits, in this order (each step relies on the ones before).
        self.after_commit: tuple[Callable[[AppliedBatch], None], ...] = (
            self._record, self._acknowledge, self._resnapshots, self._cut, self._count,
            self._maintain_between,
        )  # fmt: skip
        self.resnapshots = ResnapshotKeeper(cfg.state_dir, self.tables, self.source)

    def _spark(self) -> Any:
        if self.env.spark is not None:
            return self.env.spark
        from spark.session import get_spark

        return get_spark()

    def _maintain(self, *, idle: bool = False) -> None:
        """One bounded maintenance slice over the tables this run holds, when due; ``idle``:
        the source is quiet and everything read is committed (compaction then finishes)."""
        m = self.maintainer
        started = time.monotonic()
        if m is None or not self._slices.due(started, idle=idle):
            return
        budget = self._slices.budget(started, self.cfg.maintenance.slice_seconds, idle=idle)
        # Changes arriving: the slice fits before the pending batch is due, or waits for a gap.
        fitted = budget if idle else self._slices.fit(started, budget, self._room())
        if fitted is None:
            return
        states = [
            s for t in sorted(self.checkpoints.positions())
            if t not in self.summary.stopped and (s := self.tables.load_existing(t)) is not None
        ]  # fmt: skip
        try:
            reader = self._reader
            sliced = time.perf_counter()
            try:
                tables, reports = m.run_slice(
                    [s.table for s in states], budget_seconds=fitted, idle=idle,
                    changes_waiting=reader.events_waiting if reader is not None else None,
                )  # fmt: skip
            finally:
                self.env.steps.maintenance_slice(time.perf_counter() - sliced)
            for state, table in zip(states, tables, strict=True):
                state.table = table
            source_of = {s.identifier: s.source_table for s in states}
            for r in reports:
                self.observer.maintenance_run(source_of.get(r.table, r.table), r.kind)
        except Exception as exc:
            # Maintenance must not stop replication: the tables stay correct (each step is
            # one atomic commit) and the next slice tries again.
            if isinstance(exc, TerminalError):  # e.g. a file the current snapshot references is gone
                log.error("maintenance failed: %s; replication goes on", exc)
            else:
                log.warning("maintenance failed; replication goes on", exc_info=True)
            for state in states:
                state.table = state.table.refresh()
        finally:
            self._slices.done(started, time.monotonic(), unfinished=m.unfinished and not idle)

    def _room(self) -> float:
        """Seconds until the oldest change read and not committed is due (``Batcher.room``)."""
        batcher, reader = self.batcher, self._reader
        oldest = reader.oldest_read() if reader is not None else None
        return self.cfg.batch.linger_seconds if batcher is None else batcher.room(oldest)

    def _load_checkpoints(self) -> None:
        ns = self.cfg.iceberg.namespace
        found = {}
        for ident in self.catalog.list_tables(ns):
            table = self.catalog.load_table(ident)
            source_table = table.properties.get(SOURCE_TABLE_PROPERTY)
            if source_table is None:
                continue
            cp = read_checkpoint(table)
            if cp is not None:
                found[source_table] = cp
            if self.observer.enabled:
                self._file_counts[source_table] = file_counts(table)
                self._report_files(source_table)
        self.checkpoints = Checkpoints(found)
        self.acknowledged = self.checkpoints.acknowledged
        for t, cp in sorted(found.items()):
            log.info("resuming %s after %s", t, cp.position)

    def run(self, *, until_idle: bool = False, max_batches: int | None = None) -> RunSummary:
        start = time.monotonic()
        where = self.cfg.source.location
        log.info("source %s %s -> %s; %s", self.cfg.source.type, where, self.cfg.iceberg.describe_catalog(),
                 self.cfg.iceberg.describe_parallel_tables())  # fmt: skip
        if self.env.engine == "spark":
            log.info("apply: %s", self.cfg.describe_apply())
        with state_lock(self.cfg.state_dir), run_thresholds(), run_pool(self.cfg.arrow_memory_pool):
            self._load_checkpoints()
            executor_chunk_reads(self.cfg, self.source, self.env.spark)  # before the snapshot starts
            self.source.start(self.checkpoints)
            self.resnapshots.start(sorted(self.checkpoints.positions()))
            watcher = RetainedLogWatcher(
                self.source, self.observer, lambda: self.acknowledged,
                every=self.cfg.metrics.retained_check_seconds,
                warn_bytes=self.cfg.metrics.retained_warn_bytes,
            )  # fmt: skip
            self._watcher = watcher
            try:
                self.observer.started()
                watcher.start()
                self._catch = self._catch_up(until_idle)
                idle = self._loop(until_idle=until_idle, max_batches=max_batches)
                self.resnapshots.tick()  # a copy whose last acknowledgement came with the stop
                if idle:
                    # Everything read is committed: the run ends with a cut at that position.
                    self.cuts.cut(self._holds(), consistent=self._consistent())
            finally:
                self.observer.ended()
                watcher.stop()
                self.source.close()
        self.summary.dead_letters = self.dead_letters.total
        self.summary.seconds = time.monotonic() - start
        return self.summary

    def _catch_up(self, until_idle: bool) -> CatchUp:
        """What ``--until-idle`` waits for: the source's log head now (fixed for the run)."""
        head = self.source.head_position() if until_idle else None
        if head is not None:
            log.info("run until idle: the source is at %s; the run ends once everything before it is committed", head)
        return CatchUp(head)

    def _consistent(self) -> bool:
        """Every table holds the source's state at one position (none stopped or behind)."""
        return not self.summary.stopped and not self._snapshot_in_progress

    def _holds(self) -> SourcePosition | None:
        """The position every table holds now (after the last fully committed batch)."""
        if self.summary.last_position is not None:
            return self.summary.last_position
        positions = list(self.checkpoints.positions().values())
        return max(positions) if positions and len({p.source for p in positions}) == 1 else None

    def _loop(self, *, until_idle: bool, max_batches: int | None) -> bool:
        """Run until done; True when it ended because the source was idle (--until-idle)."""
        # Chunks a killed run left behind: their transaction is read again from the source.
        self.chunk_store.clear()
        # With batch.stage_every_events, complete transactions are staged as the batch fills,
        # so the driver holds about that many events whatever the batch size (not while a
        # snapshot is copied; not for a source whose events are filled from earlier ones:
        # pipeline.batcher).
        batch = self.cfg.batch
        batcher = self.batcher = Batcher(
            batch, spill=self.spiller, stage_every=None if self.env.row_fill else batch.stage_every_events,
            may_stage=lambda: not self._snapshot_in_progress,
        )  # fmt: skip
        reader = self._reader = SourceReader(
            self.source, max_events=self.cfg.batch.max_events, idle_sleep=IDLE_SLEEP_SECONDS,
            keepalive_seconds=self.source.keepalive_seconds, transform=self.columns, held=lambda: batcher.held,
            held_cap=lambda: batcher.memory_cap,
        )  # fmt: skip
        self.env.steps.run_started(queued=lambda: reader.queued, held=lambda: batcher.held)
        reader.start()
        try:
            while True:
                done = self._consume(reader, batcher, until_idle, max_batches)
                if done:
                    return done == "idle"
                if self.stop.is_set():
                    log.info("stopping: %d uncommitted event(s) are left to the next run", batcher.pending)
                    return False
        finally:
            reader.stop()  # the last acknowledgement reaches the source
            self._reader = None
            self.spiller.take()  # an uncommitted transaction's chunks: read again next run
            self.chunk_store.discard()

    def _consume(
        self, reader: SourceReader, batcher: Batcher, until_idle: bool, max_batches: int | None
    ) -> str | None:
        """Apply what the reader handed over; "idle" or "enough" when the run is done."""
        for item in reader.items(timeout=batcher.wait_seconds(IDLE_SLEEP_SECONDS)):
            if self.stop.is_set():
                return None  # the loop stops; nothing half-applied: batches apply whole
            if isinstance(item, Failed):
                # The source stopped (e.g. at a RENAME): commit the complete transactions
                # read before the stopping statement, or every restart replays and loses them.
                batch = batcher.flush()
                if batch is not None:
                    self._apply(batch)
                raise item.error
            if isinstance(item, Idle):
                # The source has gone quiet: commit what is complete.
                batch = batcher.flush()
                if batch is not None:
                    self._apply(batch)
                    if self._enough(max_batches):
                        return "enough"
                self._catch.taken(item.reached, None)
                self._observe_idle(batcher.pending > 0)
                if batcher.pending == 0 and self.resnapshots.tick():
                    continue  # a request picked up: the source has work again
                if batcher.pending == 0:
                    self._maintain(idle=True)
                    if until_idle and self._caught_up(batcher):
                        return "idle"
                    self._idle(item)
                continue
            self._snapshot_in_progress, batcher.behind = item.snapshot_in_progress, item.behind
            self._idle_streak = 0
            read_at = item.first_read
            for ev in item.events:
                rows = row_count(ev)
                self.summary.events_seen += rows
                if self.checkpoints.covers(ev.table, ev.position):
                    self.summary.events_skipped += rows
                    continue
                if ev.table in self.summary.stopped:
                    self.summary.events_held += rows
                    continue
                if rows > 1:  # a snapshot block: only the rows past the table's checkpoint
                    ev = self._not_covered(ev)
                batch = batcher.add(ev, read_at)
                if batch is not None:
                    self._apply(batch)
                    if self._enough(max_batches):
                        return "enough"
                    if self.stop.is_set():
                        return None  # stop after the batch in progress, not after the chunk
            self.observer.loop(pending=batcher.pending > 0, caught_up=False)
            self._catch.taken(item.reached, item.events[-1].position if item.events else None)
            if until_idle and self._catch.head is not None and self._caught_up(batcher):
                return "idle"
        # Everything handed over is in the batcher. Close a partial batch that has lingered
        # (bounds commit-to-visible lag under steady load) only now, not after a chunk while
        # more wait in the queue, nor while the source reads a backlog (``behind``): a batch
        # then grows to its size limits instead of paying Spark's fixed cost per chunk.
        if batcher.lingered and self._flush(batcher) and self._enough(max_batches):
            return "enough"
        return None

    def _observe_idle(self, pending: bool) -> None:
        """A quiet poll: caught up only if nothing is pending and the reader is at the
        source's head (the same rule as --until-idle; a silent walsender may be decoding)."""
        if not self.observer.enabled:
            return
        watcher = self._watcher
        head, caught, behind = self._catch.against(watcher.head if watcher is not None else None)
        self.observer.source_behind(None if head is None else str(head), behind)
        self.observer.loop(pending=pending, caught_up=not pending and caught)

    def _caught_up(self, batcher: Batcher) -> bool:
        """--until-idle: everything the source had at run start is committed (pipeline/catchup.py)."""
        committed = self.summary.last_position
        if getattr(self.source, "incremental_active", False):
            return False  # a table is still being copied (sources/common/incremental.py)
        if not self._catch.done(pending=batcher.pending > 0, committed=committed):
            self._catch.log_waiting(committed)
            return False
        if self._catch.head is None:
            log.info("source is idle; everything read is committed")
        else:
            log.info(
                "caught up with the source's position at run start (%s); committed up to %s%s",
                self._catch.head, committed,
                f"; {batcher.pending} event(s) read after it are left to the next run" if batcher.pending else "",
            )  # fmt: skip
        return True

    def _flush(self, batcher: Batcher) -> bool:
        """Commit the pending batch if it ends at a transaction boundary."""
        batch = batcher.flush()
        if batch is None:
            return False
        self._apply(batch)
        return True

    def _idle(self, item: Idle) -> None:
        """Tell ``on_idle`` once two polls that began after its last call found nothing (a
        change committed just before a poll may not be visible to it yet)."""
        if self.on_idle is None or item.started <= self._idle_hook_done:
            return
        self._idle_streak += 1
        if self._idle_streak >= 2:
            self._idle_streak = 0
            try:
                self.on_idle()
            finally:
                self._idle_hook_done = time.monotonic()

    def _enough(self, max_batches: int | None) -> bool:
        return max_batches is not None and self.summary.batches >= max_batches

    def _ack_position(self, end: SourcePosition) -> SourcePosition | None:
        """How far the source may forget: not past anything a stopped table still needs."""
        if not self.summary.stopped:
            return end
        held = [self.checkpoints.position(t) for t in self.summary.stopped]
        if any(p is None or p.source != end.source for p in held):
            return None
        return min([end, *[p for p in held if p is not None]])

    def _not_covered(self, ev: ChangeEvent) -> ChangeEvent:
        """A block event's rows the table's committed position does not cover (the skip
        rule per row: a checkpoint may end inside a block)."""
        done = self.checkpoints.position(ev.table)
        if done is None or type(ev) is not BlockEvent:
            return ev
        tail = ev.after_position(done)
        assert tail is not None  # the whole block is covered: skipped before
        self.summary.events_skipped += row_count(ev) - row_count(tail)
        return tail

    def _apply(self, batch: ChangeBatch) -> None:
        t0 = time.perf_counter()
        self.observer.applying()
        spilled = self.spiller.take()  # the batch's transaction's chunks, if it outgrew the batch
        firsts = [first_position(evs[0]) for evs in batch.events.values()]
        first = min([*firsts, *(s.first for s in spilled.values())])
        commit = BatchCommit(
            end=batch.end_position,
            plan=plan_batch(
                first, batch.end_position, self.source.replay, self.checkpoints,
                target_file_bytes=self.cfg.iceberg.target_file_bytes,
            ),
            fencing_token=self.source.fencing_token,
            acknowledged=self.acknowledged,
            source_id=self.source.source_id,
        )  # fmt: skip
        live = {t: evs for t, evs in batch.events.items() if t not in self.summary.stopped}
        applying = time.perf_counter()
        outcome = apply_batch(
            self.env, live, commit, lambda t: self.summary.tables.setdefault(t, TableTotals()),
            spilled={t: s for t, s in spilled.items() if t not in self.summary.stopped},
        )
        self.env.steps.batch_applied(live, time.perf_counter() - applying)
        # The batch's chunks are in its files now (or, for a stopped table, not needed: the
        # source is not acknowledged past them, so they are read again after a restart).
        self.chunk_store.discard()
        applied = AppliedBatch(batch, live, outcome, t0, spilled)
        for hook in self.after_commit:
            hook(applied)

    def _resnapshots(self, done: AppliedBatch) -> None:
        """After-commit hook 3: pick up resnapshot requests, publish finished copies."""
        self.resnapshots.tick()

    def _record(self, done: AppliedBatch) -> None:
        """After-commit hook 1: where each table stands; a stopped table stays stopped."""
        outcome = done.outcome
        for table, cp in outcome.checkpoints.items():
            self.checkpoints = self.checkpoints.with_checkpoint(table, cp)
        for table, why in outcome.stopped.items():
            # Stop this table only; its committed data stays intact and its events are
            # held (never acknowledged) until someone fixes it and restarts.
            self.summary.stopped[table] = why
            log.error("stopping table %s: %s", table, why)
        if outcome.stopped:
            self.observer.tables_stopped(len(self.summary.stopped))
        crash_point("committed")

    def _acknowledge(self, done: AppliedBatch) -> None:
        """After-commit hook 2: only now is every table's part of the batch durable: tell
        the source (not past what a stopped table still needs)."""
        ack = self._ack_position(done.batch.end_position)
        if ack is not None:
            (self._reader or self.source).acknowledge(ack)
            self.acknowledged = ack
        if self._snapshot_in_progress:
            crash_point("snapshot-batch")

    def _cut(self, done: AppliedBatch) -> None:
        """After-commit hook 3: a consistent cut when due."""
        batch = done.batch
        # Rows of an initial snapshot at the batch's end: some table may be half copied.
        copying = any(evs[-1].op is Op.READ for evs in batch.events.values())
        self.cuts.after_batch(batch.end_position, consistent=self._consistent() and not copying)

    def _count(self, done: AppliedBatch) -> None:
        """After-commit hook 4: the run's counters, metrics and the batch's log line."""
        batch = done.batch
        self.summary.batches += 1
        self.summary.last_position = batch.end_position
        if self.observer.enabled:
            self._observe(batch, done, time.perf_counter() - done.started)
        log.info(
            "batch %d: %d events, %d table(s), up to %s, %.2fs",
            self.summary.batches, batch.event_count, len(batch.tables), batch.end_position,
            time.perf_counter() - done.started,
        )  # fmt: skip

    def _maintain_between(self, _done: AppliedBatch) -> None:
        """After-commit hook 5: a bounded maintenance slice, as the tables' single writer."""
        self._maintain()

    def _observe(self, batch: ChangeBatch, done: AppliedBatch, seconds: float) -> None:
        """Tell the observer about a committed batch (only when metrics are on: this walks
        every event once)."""
        ops: Counter[tuple[str, str]] = Counter()
        for table, spilled in done.spilled.items():  # staged before the batch closed
            if table not in self.summary.stopped:
                for op_value, n in spilled.ops.items():
                    ops[(table, op_value)] += n
        for table, evs in done.live.items():
            for op, n in Counter(map(_OP, evs)).items():
                ops[(table, op.value)] += n
        newest = [evs[-1].ts_ms for evs in batch.events.values() if evs[-1].ts_ms is not None]
        newest += [s.newest_ms for s in done.spilled.values() if s.newest_ms is not None]
        committed = done.outcome.checkpoints
        self.observer.committed(seconds=seconds, events=ops, newest_source_ms=max(newest, default=None))
        for table in committed:
            # Read back, not added up: a TRUNCATE or a maintenance commit removes files.
            ident = iceberg_table_name(self.cfg.iceberg, table)
            self._file_counts[table] = file_counts(self.catalog.load_table(ident))
            self._report_files(table)

    def _report_files(self, table: str) -> None:
        data, pos, eq = self._file_counts.get(table, (0, 0, 0))
        self.observer.table_files(table, data=data, position_deletes=pos, equality_deletes=eq)

