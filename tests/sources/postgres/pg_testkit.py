"""Helpers for the Postgres source tests: a pgoutput v1 *encoder* (the inverse of the
decoder, for synthetic streams and the benchmark) and small polling utilities."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from replicator.events.block import row_events
from replicator.events.model import ChangeEvent, Op
from replicator.sources.postgres.pgoutput import UNCHANGED_TOAST

# -- encoder -------------------------------------------------------------------------------------


def _cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def tuple_data(values: Sequence[Any]) -> bytes:
    out = [struct.pack(">h", len(values))]
    for v in values:
        if v is None:
            out.append(b"n")
        elif v is UNCHANGED_TOAST:
            out.append(b"u")
        elif isinstance(v, bytes):
            out.append(b"b" + struct.pack(">i", len(v)) + v)
        else:
            raw = str(v).encode()
            out.append(b"t" + struct.pack(">i", len(raw)) + raw)
    return b"".join(out)


def begin(final_lsn: int, commit_ts: int, xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", final_lsn, commit_ts, xid)


def commit(commit_lsn: int, end_lsn: int, commit_ts: int, flags: int = 0) -> bytes:
    return b"C" + struct.pack(">BQQq", flags, commit_lsn, end_lsn, commit_ts)


def stream_start(xid: int, first: bool = False) -> bytes:
    return b"S" + struct.pack(">IB", xid, first)


def stream_stop() -> bytes:
    return b"E"


def stream_commit(xid: int, commit_lsn: int, end_lsn: int, commit_ts: int, flags: int = 0) -> bytes:
    return b"c" + struct.pack(">IBQQq", xid, flags, commit_lsn, end_lsn, commit_ts)


def stream_abort(xid: int, subxid: int) -> bytes:
    return b"A" + struct.pack(">II", xid, subxid)


def in_stream(xid: int, message: bytes) -> bytes:
    """``message`` as sent inside a stream block: the (sub)transaction xid after its type."""
    return message[:1] + struct.pack(">I", xid) + message[1:]


def origin(lsn: int, name: str) -> bytes:
    return b"O" + struct.pack(">Q", lsn) + _cstr(name)


def relation(
    relid: int,
    namespace: str,
    name: str,
    columns: Sequence[tuple[int, str, int, int]],
    identity: str = "d",
) -> bytes:
    out = [
        b"R",
        struct.pack(">I", relid),
        _cstr(namespace),
        _cstr(name),
        identity.encode(),
        struct.pack(">h", len(columns)),
    ]
    for flags, col, oid, typmod in columns:
        out += [bytes([flags]), _cstr(col), struct.pack(">Ii", oid, typmod)]
    return b"".join(out)


def type_msg(oid: int, namespace: str, name: str) -> bytes:
    return b"Y" + struct.pack(">I", oid) + _cstr(namespace) + _cstr(name)


def insert(relid: int, new: Sequence[Any]) -> bytes:
    return b"I" + struct.pack(">I", relid) + b"N" + tuple_data(new)


def update(
    relid: int, new: Sequence[Any], old: Sequence[Any] | None = None, old_kind: str = "K"
) -> bytes:
    head = b"U" + struct.pack(">I", relid)
    if old is not None:
        head += old_kind.encode() + tuple_data(old)
    return head + b"N" + tuple_data(new)


def delete(relid: int, old: Sequence[Any], old_kind: str = "K") -> bytes:
    return b"D" + struct.pack(">I", relid) + old_kind.encode() + tuple_data(old)


def truncate(relids: Sequence[int], options: int = 0) -> bytes:
    return (
        b"T"
        + struct.pack(">iB", len(relids), options)
        + b"".join(struct.pack(">I", r) for r in relids)
    )


def message(prefix: str, content: bytes, lsn: int = 0, transactional: bool = True) -> bytes:
    return (
        b"M"
        + struct.pack(">BQ", int(transactional), lsn)
        + _cstr(prefix)
        + struct.pack(">i", len(content))
        + content
    )


# -- polling -------------------------------------------------------------------------------------


def drain(
    source: Any,
    until: Callable[[list[ChangeEvent]], bool] | None = None,
    timeout: float = 15.0,
    into: list[ChangeEvent] | None = None,
    rows: bool = True,
) -> list[ChangeEvent]:
    """Poll until ``until(events)`` holds (or, without it, until a poll comes back empty).
    ``rows``: block events (``source.change_blocks``) as their per-row events."""
    events: list[ChangeEvent] = [] if into is None else into
    deadline = time.monotonic() + timeout
    while True:
        got = list(source.poll())
        events.extend(row_events(got) if rows else got)
        if until is None and not got and not source.snapshot_in_progress:
            return events
        if until is not None and until(events):
            return events
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {len(events)} events")


def apply(
    model: dict[tuple[str, tuple[Any, ...]], dict[str, Any]], events: Iterable[ChangeEvent]
) -> None:
    """The simplest consumer: upsert c/r/u by key, delete d (tolerating missing keys)."""
    for e in events:
        assert e.schema_ is not None
        keys = e.schema_.key_columns
        if e.op is Op.DELETE:
            assert e.before is not None
            model.pop((e.table, tuple(e.before[k] for k in keys)), None)
            continue
        assert e.after is not None
        if e.op is Op.UPDATE and e.before is not None:
            old = (e.table, tuple(e.before[k] for k in keys))
            new = (e.table, tuple(e.after[k] for k in keys))
            if old != new:
                model.pop(old, None)
        model[(e.table, tuple(e.after[k] for k in keys))] = dict(e.after)
