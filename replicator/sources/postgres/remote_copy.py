"""Snapshot COPY chunks read by tasks elsewhere (Spark executors), handed back in range order.

With ``spark.snapshot_on_executors`` the key ranges ``parallel_copy`` plans on the reader's
connection are not COPYed by helper connections of this process: each range becomes a
:class:`ChunkTask` that a *runner* (``spark.remote_call``: one Spark task) executes where the
cluster puts it. The task opens its own connection with the engine's session settings
(``session_conninfo``: the same text output), imports the reader's snapshot
(``BEGIN ... REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT``), runs the very COPY
statement the helpers would, parses it with the same ``parse_chunk`` and returns the parsed
chunk (Arrow travels pickled as IPC). The driver hands chunks on in range order exactly as with
helper connections (``read_in_order``), so boundaries, the read frontier, positions, resume
and exactly-once are the helper path's.

The snapshot imported is one the reader exports from its own open REPEATABLE READ transaction
(``pg_export_snapshot()``, after importing the slot's): the slot's exported snapshot dies when
its replication session runs its next command, while tasks import theirs whenever they start;
the reader's transaction lasts until the snapshot's last chunk is read (``SnapshotReader.finish``).

A task's database error comes back as data (class, SQLSTATE, message) and is raised here as the
same psycopg class, so the source classifies it exactly as a helper's own error. Which executor
read each chunk is logged and counted (``RemoteReads.readers``).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql as pgsql

from replicator.sources.postgres.copy_chunks import CopyLayout, ParsedChunk, parse_chunk
from replicator.sources.postgres.copy_out import copy_out
from replicator.sources.postgres.replication import session_conninfo

log = logging.getLogger(__name__)

# Runs ``fn(arg)`` somewhere (a Spark executor) and returns its result (both picklable).
ChunkRunner = Callable[[Callable[[Any], Any], Any], Any]


@dataclass(frozen=True)
class ChunkTask:
    """Everything a task needs to read one chunk; picklable, and its repr shows no DSN."""

    dsn: str = field(repr=False)  # may hold a password: never printed
    snapshot: str  # the reader's exported snapshot
    copy_sql: str  # ``COPY (SELECT ... WHERE <range> ORDER BY key LIMIT n) TO STDOUT (FORMAT csv)``
    layout: CopyLayout
    key_idx: tuple[int, ...]
    big_row_chars: int
    table: str
    number: int  # the chunk's place in the snapshot (log lines)


@dataclass(frozen=True)
class ChunkRead:
    """A task's answer: the parsed chunk (None: the range was empty), who read it, or the
    database error it met (class name, SQLSTATE, message)."""

    parsed: ParsedChunk | None
    reader: str
    error: tuple[str, str | None, str] | None = None


def reader_id() -> str:
    """Names the executor this runs on: a standalone executor's Python workers run in its
    work directory (``.../app-<id>/<executor id>``); elsewhere the worker daemon's pid (one
    daemon per executor) on this host."""
    cwd = os.getcwd()
    parent, name = os.path.split(cwd)
    if os.path.basename(parent).startswith("app-") and name.isdigit():
        return f"executor {name}@{socket.gethostname()}"
    return f"pid {os.getppid()}@{socket.gethostname()}"


def read_chunk(task: ChunkTask) -> ChunkRead:
    """Runs on the executor: one chunk COPYed inside the reader's snapshot and parsed."""
    who = reader_id()
    try:
        with psycopg.connect(session_conninfo(task.dsn), autocommit=True) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(
                pgsql.SQL("SET TRANSACTION SNAPSHOT {}").format(pgsql.Literal(task.snapshot))
            )
            data = copy_out(conn, task.copy_sql)
            conn.execute("COMMIT")
    except psycopg.Error as exc:
        return ChunkRead(None, who, (type(exc).__name__, exc.sqlstate, str(exc)))
    parsed = parse_chunk(task.layout, data, task.key_idx, task.big_row_chars) if data else None
    return ChunkRead(parsed, who)


def raise_read_error(error: tuple[str, str | None, str]) -> None:
    """A task's database error as the psycopg class the driver path would have raised."""
    name, sqlstate, message = error
    if sqlstate:
        raise pgerrors.lookup(sqlstate)(message)
    cls = getattr(psycopg, name, None)
    if isinstance(cls, type) and issubclass(cls, psycopg.Error):
        raise cls(message)
    raise psycopg.OperationalError(message)


@dataclass
class RemoteReads:
    """The driver's side: chunk tasks for ``runner``, at most ``slots`` at once."""

    runner: ChunkRunner
    dsn: str = field(repr=False)
    snapshot: str
    slots: int
    readers: Counter[str] = field(default_factory=Counter)  # chunks read, per executor
    _numbers: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read(
        self,
        table: str,
        copy_sql: str,
        layout: CopyLayout,
        key_idx: tuple[int, ...],
        big_row_chars: int,
    ) -> ParsedChunk | None:
        """One chunk read by a task (called from ``read_in_order``'s threads)."""
        with self._lock:
            number = next(self._numbers)
        task = ChunkTask(
            self.dsn, self.snapshot, copy_sql, layout, key_idx, big_row_chars, table, number
        )
        got: ChunkRead = self.runner(read_chunk, task)
        if got.error is not None:
            raise_read_error(got.error)
        rows = 0 if got.parsed is None else (
            got.parsed.block.num_rows if got.parsed.block is not None else len(got.parsed.rows)
        )  # fmt: skip
        with self._lock:
            self.readers[got.reader] += 1
        log.info(
            "snapshot chunk %d of %s (%d rows) read by %s", task.number, table, rows, got.reader
        )
        return got.parsed


def export_snapshot(conn: psycopg.Connection[Any]) -> str:
    """The snapshot of ``conn``'s open REPEATABLE READ transaction, importable until it ends."""
    row = conn.execute("SELECT pg_export_snapshot()").fetchone()
    assert row is not None
    return str(row[0])
