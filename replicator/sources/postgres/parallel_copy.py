"""Snapshot chunks of one table read by several connections at once, handed on in key order.

Every helper connection imports the reader's snapshot (``SET TRANSACTION SNAPSHOT``: the
slot's exported one, or the one a resumed snapshot exports from its own transaction), so all
chunks see exactly the rows the one-connection read sees. The chunks are key ranges, planned
ahead on the reader's own connection: the key ``chunk_rows`` rows past the previous range's
end (``OFFSET n - 1 LIMIT 1``, the key index only) closes a range; the table's last range
is open. Each range is one ``COPY (SELECT ... WHERE lo < key <= hi ...)`` on a free helper,
parsed into Arrow on that helper's thread (psycopg waits on the socket and pyarrow parses
without holding the interpreter lock).

Order. The consumer takes chunks strictly in range order (the batcher, the boundaries, the
read frontier and the skip rule depend on it): a chunk read early waits. Memory: at most one
chunk per helper in flight beyond the one being handed on.

Errors are the helper's own psycopg errors, raised when their chunk's turn comes (a helper's
later chunks fail after its first error, so the first failure in range order is the cause).
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg import sql as pgsql

T = TypeVar("T")
W = TypeVar("W")  # what reads a range: a helper connection, or a slot for a remote task
Q = TypeVar("Q")  # a range: its WHERE clause, or several of them (``remote_copy``)
Key = tuple[str | None, ...]


def share_snapshot(
    reader: psycopg.Connection[Any], helpers: Sequence[psycopg.Connection[Any]], name: str | None
) -> None:
    """Open ``helpers`` inside the reader's snapshot: ``name`` (exported by the slot; its
    exporting session must still be open) or, None, one the reader exports now from its open
    REPEATABLE READ transaction (valid while that transaction lasts: until the snapshot ends)."""
    if name is None:
        row = reader.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        name = str(row[0])
    for conn in helpers:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(pgsql.SQL("SET TRANSACTION SNAPSHOT {}").format(pgsql.Literal(name)))


def key_ranges(
    conn: psycopg.Connection[Any], source: str, keys: Sequence[str], chunk_rows: int,
    after: Key | None, upto: Key | None, repeating: bool,
) -> Iterator[tuple[str, bool]]:  # fmt: skip
    """WHERE clauses of the table's successive chunks (each at most ``chunk_rows`` rows, in
    key order, after ``after``), each with whether its rows may repeat (``frontier.py``):
    with a read frontier ``upto``, keys up to it first (repeating), then the keys past it.
    ``conn`` loads values as text (the keys' text output, as the boundaries keep them)."""
    order = ", ".join(keys)

    def lits(key: Key) -> str:
        return ", ".join(pgsql.Literal(v).as_string(conn) for v in key)

    lo = after
    for rep in [True, False] if repeating and upto is not None else [repeating]:
        while True:
            conds = [] if lo is None else [f"({order}) > ({lits(lo)})"]
            if upto is not None:
                conds.append(f"({order}) {'<=' if rep else '>'} ({lits(upto)})")
            where = " WHERE " + " AND ".join(conds) if conds else ""
            row = conn.execute(
                f"SELECT {order} FROM {source}{where} ORDER BY {order} "
                f"OFFSET {int(chunk_rows) - 1} LIMIT 1"
            ).fetchone()
            if row is None:  # fewer rows than a chunk left: the open range ends it
                yield where, rep
                break
            hi: Key = tuple(row)
            yield f"{where}{' AND' if conds else ' WHERE'} ({order}) <= ({lits(hi)})", rep
            lo = hi


def read_in_order(
    helpers: Sequence[W],
    ranges: Iterator[tuple[Q, bool]],
    read: Callable[[W, Q], T | None],
) -> Iterator[tuple[T, bool]]:
    """``read(helper, where)`` of every range on the helpers, up to one per helper at once,
    yielded in range order (None results, empty ranges, skipped). Stopping early (closing
    the generator) cancels the ranges not started and waits for the reads in flight."""
    free: queue.SimpleQueue[W] = queue.SimpleQueue()
    for conn in helpers:
        free.put(conn)

    def task(where: Q) -> T | None:
        conn = free.get()  # never waits: no more tasks in flight than helpers
        try:
            return read(conn, where)
        finally:
            free.put(conn)

    window: deque[tuple[Future[T | None], bool]] = deque()
    with ThreadPoolExecutor(len(helpers), thread_name_prefix="snapshot-copy") as pool:

        def fill() -> None:
            while len(window) < len(helpers):
                nxt = next(ranges, None)
                if nxt is None:
                    return
                window.append((pool.submit(task, nxt[0]), nxt[1]))

        try:
            fill()
            while window:
                fut, rep = window.popleft()
                got = fut.result()
                fill()  # the next ranges are read while this chunk is handed on
                if got is not None:
                    yield got, rep
        finally:
            for fut, _ in window:
                fut.cancel()
