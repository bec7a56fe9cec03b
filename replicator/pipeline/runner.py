"""The replication loop: poll the source, batch at transaction boundaries, apply, commit,
and only then acknowledge the source."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replicator.config import RunConfig, redact_dsn
from replicator.errors import ReplicatorError, SchemaChangeError, TerminalError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeBatch, SourcePosition
from replicator.iceberg.tables import (
    SOURCE_TABLE_PROPERTY,
    TableManager,
    committed_position,
    open_catalog,
    recorded_upsert_until,
)
from replicator.pipeline.apply import ApplyContext, TableTotals, apply_table
from replicator.pipeline.batcher import Batcher
from replicator.pipeline.crashpoints import crash_point
from replicator.sources.base import ChangeSource

log = logging.getLogger(__name__)

IDLE_SLEEP_SECONDS = 0.5


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


def build_source(cfg: RunConfig, dead_letters: DeadLetterSink) -> ChangeSource:
    src = cfg.source
    if src.type == "debezium-json":
        from replicator.sources.debezium_files import DebeziumFileSource

        assert src.path is not None
        return DebeziumFileSource(
            src.path, dead_letters=dead_letters, tables=src.tables, primary_keys=src.primary_keys
        )
    if src.type == "postgres":
        from replicator.sources.postgres.source import PostgresSource

        assert src.dsn is not None
        return PostgresSource(
            src.dsn, dead_letters=dead_letters, slot=src.slot, publication=src.publication,
            tables=src.tables, state_dir=cfg.state_dir,
        )
    if src.type == "mysql":
        from replicator.sources.mysql.source import MySQLSource

        assert src.dsn is not None
        return MySQLSource(
            src.dsn, dead_letters=dead_letters, server_id=src.server_id, tables=src.tables,
            state_dir=cfg.state_dir,
        )
    raise TerminalError(f"source type {src.type!r} is not available yet")


@contextmanager
def state_lock(state_dir: Path) -> Iterator[None]:
    """One engine per state directory: a second one is refused instead of duplicating."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fh = (state_dir / "engine.lock").open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise TerminalError(
            f"another replicator is running with state directory {state_dir}",
            hint="stop it first; two engines on the same tables would write duplicates",
        ) from None
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


class Replicator:
    def __init__(
        self,
        cfg: RunConfig,
        *,
        engine: str = "spark",
        spark: Any = None,
        source: ChangeSource | None = None,
    ) -> None:
        self.cfg = cfg
        self.dead_letters = DeadLetterSink(cfg.dead_letter_path)
        self.catalog = open_catalog(cfg.iceberg)
        self.tables = TableManager(self.catalog, cfg.iceberg)
        self.source = source or build_source(cfg, self.dead_letters)
        if engine == "spark" and spark is None:
            from spark.session import get_spark

            spark = get_spark()
        self.ctx = ApplyContext(
            tables=self.tables,
            dead_letters=self.dead_letters,
            staging_dir=cfg.state_dir / "staging",
            writer_id=cfg.writer_id or f"replicator@{socket.gethostname()}",
            engine=engine,
            target_file_bytes=cfg.iceberg.target_file_bytes,
            spark=spark,
        )
        self.committed: dict[str, SourcePosition] = {}
        # Overlap bounds recorded by earlier runs: a fresh snapshot committed before a crash
        # still overlaps the stream the next run replays.
        self.recorded_until: list[SourcePosition] = []
        self.summary = RunSummary(tables=self.ctx.totals)

    def _load_committed(self) -> None:
        ns = self.cfg.iceberg.namespace
        for ident in self.catalog.list_tables(ns):
            table = self.catalog.load_table(ident)
            source_table = table.properties.get(SOURCE_TABLE_PROPERTY)
            if source_table is None:
                continue
            pos = committed_position(table)
            if pos is not None:
                self.committed[source_table] = pos
            until = recorded_upsert_until(table)
            if until is not None:
                self.recorded_until.append(until)
        if self.committed:
            for t, p in sorted(self.committed.items()):
                log.info("resuming %s after %s", t, p)

    def run(self, *, until_idle: bool = False, max_batches: int | None = None) -> RunSummary:
        start = time.monotonic()
        where = self.cfg.source.path or redact_dsn(self.cfg.source.dsn or "")
        log.info("source %s %s -> catalog %s, warehouse %s", self.cfg.source.type, where,
                 redact_dsn(self.cfg.iceberg.catalog_uri), self.cfg.iceberg.warehouse)
        with state_lock(self.cfg.state_dir):
            self._load_committed()
            self.source.start(dict(self.committed))
            try:
                self._loop(until_idle=until_idle, max_batches=max_batches)
            finally:
                self.source.close()
        self.summary.dead_letters = self.dead_letters.total
        self.summary.seconds = time.monotonic() - start
        return self.summary

    def _loop(self, *, until_idle: bool, max_batches: int | None) -> None:
        batcher = Batcher(self.cfg.batch)
        while True:
            try:
                got, done = self._consume_poll(batcher, max_batches)
            except ReplicatorError:
                # The source stopped (e.g. at a RENAME): commit the complete transactions
                # read before the stopping statement, or every restart replays and loses them.
                batch = batcher.flush()
                if batch is not None:
                    self._apply(batch)
                raise
            if done:
                return
            # Close a partial batch only when the source has gone quiet or the batch has
            # lingered: closing after every poll made batches as small as one poll (10k
            # events) and paid Spark's fixed per-job cost far too often (benchmarks/results).
            batch = batcher.flush() if got == 0 or batcher.lingered else None
            if batch is not None:
                self._apply(batch)
                if max_batches is not None and self.summary.batches >= max_batches:
                    return
            if got == 0 and batcher.pending == 0:
                if until_idle:
                    log.info("source is idle; everything read is committed")
                    return
                time.sleep(IDLE_SLEEP_SECONDS)

    def _consume_poll(self, batcher: Batcher, max_batches: int | None) -> tuple[int, bool]:
        """Feed one poll into the batcher, applying batches as they close. Returns (events
        polled, whether max_batches was reached)."""
        got = 0
        for ev in self.source.poll():
            got += 1
            self.summary.events_seen += 1
            done = self.committed.get(ev.table)
            if done is not None and done.source == ev.position.source and ev.position <= done:
                self.summary.events_skipped += 1
                continue
            if ev.table in self.summary.stopped:
                self.summary.events_held += 1
                continue
            batch = batcher.add(ev)
            if batch is not None:
                self._apply(batch)
                if max_batches is not None and self.summary.batches >= max_batches:
                    return got, True
        return got, False

    def _ack_position(self, end: SourcePosition) -> SourcePosition | None:
        """How far the source may forget: not past anything a stopped table still needs."""
        if not self.summary.stopped:
            return end
        held = [self.committed.get(t) for t in self.summary.stopped]
        if any(p is None or p.source != end.source for p in held):
            return None
        return min([end, *[p for p in held if p is not None]])

    def _apply(self, batch: ChangeBatch) -> None:
        t0 = time.perf_counter()
        self.ctx.upsert_reads = self.source.reads_may_repeat
        first = min(evs[0].position for evs in batch.events.values())
        bounds = [p for p in [self.source.upsert_until, *self.recorded_until]
                  if p is not None and p.source == first.source]
        until = max(bounds) if bounds else None
        self.ctx.upsert_creates = until is not None and first <= until
        # Record the bound while a table's commits are still inside the overlap.
        self.ctx.upsert_until = until if until is not None and batch.end_position <= until else None
        self.ctx.fencing_token = self.source.fencing_token
        for table in batch.tables:
            if table in self.summary.stopped:
                continue
            try:
                apply_table(self.ctx, batch.events[table], batch.end_position)
            except SchemaChangeError as exc:
                # Stop this table only; its committed data stays intact and its events are
                # held (never acknowledged) until someone fixes it and restarts.
                self.summary.stopped[table] = str(exc)
                log.error("stopping table %s: %s", table, exc)
                continue
            self.committed[table] = batch.end_position
        crash_point("committed")
        # Only now is every table's part of the batch durable: tell the source.
        ack = self._ack_position(batch.end_position)
        if ack is not None:
            self.source.acknowledge(ack)
        if getattr(self.source, "snapshot_in_progress", False):
            crash_point("snapshot-batch")
        self.summary.batches += 1
        self.summary.last_position = batch.end_position
        log.info(
            "batch %d: %d events, %d table(s), up to %s, %.2fs",
            self.summary.batches, batch.event_count, len(batch.tables), batch.end_position,
            time.perf_counter() - t0,
        )
