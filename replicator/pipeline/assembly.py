"""What a run is assembled from: its source (built from the config), its writer id, the
lock that keeps one engine per state directory, and the column rules the reader applies."""

from __future__ import annotations

import fcntl
import functools
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from replicator.config import RunConfig, SourceConfig
from replicator.errors import TerminalError
from replicator.events.columns import ColumnPolicy, TableColumnRules
from replicator.events.deadletter import DeadLetterSink
from replicator.sources.base import ChangeSource


def column_policy(src: SourceConfig) -> ColumnPolicy | None:
    """``source.columns`` as the reader applies it; None when no table has rules."""
    if not src.columns:
        return None
    rules = {
        t: TableColumnRules(exclude=frozenset(r.exclude), hash=frozenset(r.hash))
        for t, r in src.columns.items()
    }
    return ColumnPolicy(rules, src.hash_key())


def build_source(cfg: RunConfig, dead_letters: DeadLetterSink) -> ChangeSource:
    """The run's source: read in a child process when ``source.reader_process`` is on."""
    if getattr(cfg.source, "reader_process", False):
        from replicator.pipeline.reader_process import ProcessSource

        where = f"{cfg.source.type} source {cfg.source.location}"
        return ProcessSource(partial(build_source_here, cfg), dead_letters, name=where)
    return build_source_here(cfg, dead_letters)


def build_source_here(cfg: RunConfig, dead_letters: DeadLetterSink) -> ChangeSource:
    """The source itself, read in this process (and in a reader process's child)."""
    src = cfg.source
    if src.type == "debezium-json":
        from replicator.sources.debezium_files import DebeziumFileSource

        assert src.path is not None
        return DebeziumFileSource(
            src.path, dead_letters=dead_letters, tables=src.tables, primary_keys=src.primary_keys,
            state_dir=cfg.state_dir, exactly_once=src.delivery == "exactly-once",
        )
    if src.type == "postgres":
        from replicator.sources.postgres.source import PostgresSource

        assert src.dsn is not None
        return PostgresSource(
            src.dsn, dead_letters=dead_letters, slot=src.slot, publication=src.publication,
            tables=src.tables, state_dir=cfg.state_dir, snapshot_copy=src.snapshot_copy,
            snapshot_connections=src.snapshot_connections,
            failover_slot=src.failover_slot, streaming=src.streaming,
            primary_dsn=src.primary.dsn if src.primary is not None else None,
            keyless_tables=src.keyless_tables, change_blocks=src.change_blocks,
        )
    if src.type == "mysql":
        from replicator.sources.mysql.source import MySQLSource

        assert src.dsn is not None
        return MySQLSource(
            src.dsn, dead_letters=dead_letters, server_id=src.server_id, tables=src.tables,
            state_dir=cfg.state_dir, zero_dates=src.zero_dates, row_decoder=src.row_decoder,
            keyless_tables=src.keyless_tables, change_blocks=src.change_blocks,
        )
    raise TerminalError(f"source type {src.type!r} is not available yet")


def executor_chunk_reads(cfg: RunConfig, source: ChangeSource, spark: Any) -> None:
    """``spark.snapshot_on_executors``: the source's snapshot chunks are read by Spark tasks
    (``sources.postgres.remote_copy``); nothing without a Spark session (the local engine)."""
    if not cfg.spark.snapshot_on_executors or spark is None:
        return
    from replicator.sources.postgres.snapshot_phase import PgSnapshotPhase
    from spark.remote_call import run_on_executor

    if not isinstance(source, PgSnapshotPhase):
        return

    source.chunk_runner = functools.partial(run_on_executor, spark)
    source.chunks_per_task = cfg.spark.snapshot_chunks_per_task


def default_writer_id() -> str:
    """Unique per process: two engines on one host (or one pod name) never share it."""
    return f"replicator@{socket.gethostname()}/{os.getpid()}-{uuid.uuid4().hex[:8]}"


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
