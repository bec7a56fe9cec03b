"""``COPY ... TO STDOUT`` read into one buffer, draining libpq's buffer between waits.

The protocol sends one CopyData message per row. psycopg's ``Copy`` hands out one row per
``read()`` (a generator and a wait for each), which cost about a third of a snapshot
chunk's read time for narrow rows. Here every message libpq already holds is taken in a
tight loop, and the socket is waited on only when its buffer is empty. Errors are psycopg's
own: a failed statement raises its ``psycopg.errors`` class (the error result's SQLSTATE),
a broken connection ``OperationalError``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.waiting import Ready, Wait

_Gen = Generator[Wait, Ready | int, None]


def copy_out(conn: psycopg.Connection[Any], query: str) -> bytes:
    """Every byte ``query`` (a ``COPY ... TO STDOUT``) sends, in order."""
    buf = bytearray()
    with conn.lock:
        conn.wait(_copy_out(conn.pgconn, query.encode(conn.info.encoding), buf, conn.info.encoding))
    return bytes(buf)


def _copy_out(pgconn: Any, query: bytes, buf: bytearray, encoding: str) -> _Gen:
    pgconn.send_query(query)
    while pgconn.flush() != 0:  # the query is on its way (it fits the send buffer at once, mostly)
        ready = yield Wait.RW
        if ready & Ready.R:
            pgconn.consume_input()
    first = yield from _result(pgconn)
    if first is None or first.status != pq.ExecStatus.COPY_OUT:
        results = [first] if first is not None else []
        while (res := (yield from _result(pgconn))) is not None:
            results.append(res)
        _raise_failed(results, encoding, "COPY TO STDOUT did not start")
    get = pgconn.get_copy_data
    while True:
        n, data = get(1)
        if n > 0:
            buf += data
        elif n == 0:  # nothing buffered: wait for the socket
            yield Wait.R
            pgconn.consume_input()
        else:  # -1: the copy is over; its outcome follows
            break
    results = []
    while (res := (yield from _result(pgconn))) is not None:
        results.append(res)
    if len(results) != 1 or results[0].status != pq.ExecStatus.COMMAND_OK:
        _raise_failed(results, encoding, "COPY TO STDOUT did not end with one command result")


def _result(pgconn: Any) -> Generator[Wait, Ready | int, Any]:
    """The next result (None: no more), waiting without blocking."""
    while pgconn.is_busy():
        yield Wait.R
        pgconn.consume_input()
    return pgconn.get_result()


def _raise_failed(results: list[Any], encoding: str, otherwise: str) -> None:
    for res in results:
        if res.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(res, encoding=encoding)
    raise psycopg.ProgrammingError(otherwise)
