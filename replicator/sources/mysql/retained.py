"""How much binlog lies between the engine's committed position and the server's current
one, and whether the committed binlog file still exists (slot safety, ``status``)."""

from __future__ import annotations

import pymysql

from replicator.errors import TransientError
from replicator.sources.base import LogPosition, RetainedLog
from replicator.sources.mysql import setup


def binlog_retained(params: setup.ConnParams, committed: tuple[str, int] | None) -> RetainedLog:
    """Bytes of binlog from ``committed`` (file, offset) to the end of the newest file.

    MySQL keeps binlogs by age (``binlog_expire_logs_seconds``), not for its readers: when the
    committed file is purged the engine cannot resume and must re-snapshot."""
    try:
        conn = setup.connect(params)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW BINARY LOGS")
                logs = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
        finally:
            conn.close()
    except pymysql.err.Error as exc:
        raise TransientError(f"cannot list the binary logs: {exc}") from exc
    if committed is None:
        return RetainedLog(bytes=None, status="no committed position", detail="nothing committed yet")
    name, offset = committed
    names = [n for n, _ in logs]
    if name not in names:
        first = names[0] if names else "-"
        return RetainedLog(
            bytes=None, status="binlog purged",
            detail=f"committed file {name} is gone (oldest on the server: {first}); re-snapshot",
        )  # fmt: skip
    at = names.index(name)
    retained = max(0, logs[at][1] - offset) + sum(size for _, size in logs[at + 1:])
    return RetainedLog(
        bytes=retained, status="binlog present",
        detail=f"committed at {name}:{offset}, server at {logs[-1][0]}:{logs[-1][1]}",
    )  # fmt: skip


def binlog_position(file: str, offset: int) -> LogPosition:
    """A binlog point, ordered by the file's sequence number (``binlog.000012``) then offset."""
    number = file.rpartition(".")[2]
    return LogPosition((int(number) if number.isdigit() else 0, int(offset)), f"{file}:{offset}")


def binlog_head(params: setup.ConnParams) -> LogPosition:
    """The end of the binlog now (``SHOW MASTER STATUS`` / ``SHOW BINARY LOG STATUS``:
    ``ChangeSource.head_position``), on a connection of its own."""
    try:
        conn = setup.connect(params)
        try:
            file, offset = setup.master_status(conn)
        finally:
            conn.close()
    except pymysql.err.Error as exc:
        raise TransientError(f"cannot read the binlog position: {exc}") from exc
    return binlog_position(file, offset)
