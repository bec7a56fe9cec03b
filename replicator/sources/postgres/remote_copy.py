"""Snapshot COPY chunks read by tasks elsewhere (Spark executors), handed back in range order.

With ``spark.snapshot_on_executors`` the key ranges ``parallel_copy`` plans on the reader's
connection are not COPYed by helper connections of this process: consecutive ranges
(``spark.snapshot_chunks_per_task``) become a :class:`ChunkTask` that a *runner*
(``spark.remote_call``: a one-task Spark job) executes where the cluster puts it. The task
opens its own connection with the engine's session settings (``session_conninfo``: the same
text output), imports the reader's snapshot (``BEGIN ... REPEATABLE READ READ ONLY; SET
TRANSACTION SNAPSHOT``), runs the very COPY statements the helpers would, parses each with the
same ``parse_chunk`` and returns the parsed chunks (Arrow travels pickled as IPC). The driver hands chunks on in range order exactly as with
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
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql as pgsql

from replicator.sources.postgres.copy_chunks import CopyLayout, ParsedChunk, parse_chunk
from replicator.sources.postgres.copy_out import copy_out
from replicator.sources.postgres.parallel_copy import read_in_order
from replicator.sources.postgres.replication import session_conninfo

log = logging.getLogger(__name__)

# Runs ``fn(arg)`` somewhere (a Spark executor) and returns its result (both picklable).
ChunkRunner = Callable[[Callable[[Any], Any], Any], Any]


@dataclass(frozen=True)
class ChunkTask:
    """Everything a task needs to read consecutive chunks; picklable, its repr shows no DSN."""

    dsn: str = field(repr=False)  # may hold a password: never printed
    snapshot: str  # the reader's exported snapshot
    # ``COPY (SELECT ... WHERE <range> ORDER BY key LIMIT n) TO STDOUT (FORMAT csv)``, in order
    copy_sqls: tuple[str, ...]
    layout: CopyLayout
    key_idx: tuple[int, ...]
    big_row_chars: int


@dataclass(frozen=True)
class ChunkRead:
    """One chunk's answer: the parsed chunk (None: the range was empty), who read it, or the
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


def read_chunks(task: ChunkTask) -> list[ChunkRead]:
    """Runs on the executor: the task's chunks COPYed, in order, inside the reader's snapshot
    (one connection) and parsed; a database error ends the list (the chunks before it stand)."""
    who = reader_id()
    out: list[ChunkRead] = []
    try:
        with psycopg.connect(session_conninfo(task.dsn), autocommit=True) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(
                pgsql.SQL("SET TRANSACTION SNAPSHOT {}").format(pgsql.Literal(task.snapshot))
            )
            for sql in task.copy_sqls:
                data = copy_out(conn, sql)
                parsed = (
                    parse_chunk(task.layout, data, task.key_idx, task.big_row_chars)
                    if data
                    else None
                )
                out.append(ChunkRead(parsed, who))
            conn.execute("COMMIT")
    except psycopg.Error as exc:
        out.append(ChunkRead(None, who, (type(exc).__name__, exc.sqlstate, str(exc))))
    return out


def raise_read_error(error: tuple[str, str | None, str]) -> None:
    """A task's database error as the psycopg class the driver path would have raised."""
    name, sqlstate, message = error
    if sqlstate:
        raise pgerrors.lookup(sqlstate)(message)
    cls = getattr(psycopg, name, None)
    if isinstance(cls, type) and issubclass(cls, psycopg.Error):
        raise cls(message)
    raise psycopg.OperationalError(message)


def _groups(
    items: Iterator[tuple[str, bool]], size: int
) -> Iterator[tuple[tuple[tuple[str, bool], ...], bool]]:
    while group := tuple(itertools.islice(items, size)):
        yield group, False  # (read_in_order's repeat flag: unused, each chunk carries its own)


@dataclass
class RemoteReads:
    """The driver's side: a table's chunks as tasks for ``runner``, ``per_task`` consecutive
    chunks a task (a Spark job costs ~0.3 s: one per 10k-row chunk would cost more than the
    read), at most ``slots`` tasks at once; handed on in range order."""

    runner: ChunkRunner
    dsn: str = field(repr=False)
    snapshot: str
    slots: int
    per_task: int = 1
    readers: Counter[str] = field(default_factory=Counter)  # chunks read, per executor
    _numbers: Any = field(default_factory=lambda: itertools.count(1))

    def chunks(
        self, table: str, statements: Iterator[tuple[str, bool]], layout: CopyLayout,
        key_idx: tuple[int, ...], big_row_chars: int,
    ) -> Iterator[tuple[ParsedChunk, bool]]:  # fmt: skip
        """The chunks of ``statements`` (COPY, may repeat), read by tasks, in order; a task's
        database error is raised (as its psycopg class) after the chunks read before it."""

        def read(_slot: int, group: tuple[tuple[str, bool], ...]) -> list[tuple[ChunkRead, bool]]:
            task = ChunkTask(
                self.dsn, self.snapshot, tuple(s for s, _ in group), layout, key_idx, big_row_chars
            )
            got: list[ChunkRead] = self.runner(read_chunks, task)
            return list(zip(got, (rep for _, rep in group), strict=False))  # shorter: an error

        for got, _ in read_in_order(range(self.slots), _groups(statements, self.per_task), read):
            for one, repeats in got:
                if one.error is not None:
                    raise_read_error(one.error)
                self._count(table, one)
                if one.parsed is not None:
                    yield one.parsed, repeats

    def _count(self, table: str, one: ChunkRead) -> None:
        p = one.parsed
        rows = 0 if p is None else p.block.num_rows if p.block is not None else len(p.rows)
        self.readers[one.reader] += 1
        log.info(
            "snapshot chunk %d of %s (%d rows) read by %s",
            next(self._numbers),
            table,
            rows,
            one.reader,
        )


def export_snapshot(conn: psycopg.Connection[Any]) -> str:
    """The snapshot of ``conn``'s open REPEATABLE READ transaction, importable until it ends."""
    row = conn.execute("SELECT pg_export_snapshot()").fetchone()
    assert row is not None
    return str(row[0])
