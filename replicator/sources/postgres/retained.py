"""How much WAL the server keeps for the replication slot (slot safety, ``status``)."""

from __future__ import annotations

import psycopg

from replicator.errors import TransientError
from replicator.sources.base import LogPosition, RetainedLog
from replicator.sources.postgres.pgoutput import lsn_to_str, str_to_lsn
from replicator.sources.postgres.replication import session_conninfo

# wal_status (PG 13+): reserved / extended are fine; unreserved: the slot is about to lose
# WAL it needs (max_slot_wal_keep_size); lost: it has, and the slot must be re-created.
# On a standby the head is what it has replayed (pg_current_wal_lsn() fails in recovery).
SLOT_QUERY = """
SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END
       - confirmed_flush_lsn, wal_status, active, confirmed_flush_lsn::text
FROM pg_replication_slots WHERE slot_name = %s
"""


def slot_retained(dsn: str, slot: str) -> RetainedLog:
    """WAL between the server's current position and the slot's confirmed flush position."""
    try:
        with psycopg.connect(session_conninfo(dsn), autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(SLOT_QUERY, (slot,)).fetchone()
    except psycopg.Error as exc:
        raise TransientError(f"cannot read replication slot {slot!r}: {exc}") from exc
    if row is None:
        return RetainedLog(bytes=None, status="missing", detail=f"slot {slot} does not exist")
    retained, wal_status, active, confirmed = row
    state = "active" if active else "inactive"
    return RetainedLog(
        bytes=None if retained is None else int(retained),
        status=str(wal_status or "unknown"),
        detail=f"slot {slot} ({state}) confirmed up to {confirmed}",
    )


# The end of the WAL as committed transactions see it: the write position (every commit
# made with synchronous_commit on is written and flushed before it returns); on a standby,
# what it has replayed.
HEAD_QUERY = """
SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text
"""


def lsn_position(lsn: int) -> LogPosition:
    return LogPosition((lsn,), lsn_to_str(lsn))


def wal_head(dsn: str) -> LogPosition:
    """The server's WAL position now (``ChangeSource.head_position``), on a connection of
    its own."""
    try:
        with psycopg.connect(session_conninfo(dsn), autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(HEAD_QUERY).fetchone()
    except psycopg.Error as exc:
        raise TransientError(f"cannot read the server's WAL position: {exc}") from exc
    if row is None or row[0] is None:
        raise TransientError("the server reported no WAL position")
    return lsn_position(str_to_lsn(str(row[0])))


def slot_confirmed(dsn: str, slot: str) -> LogPosition | None:
    """The slot's confirmed flush position (everything before it is committed to Iceberg),
    None when the slot does not exist."""
    try:
        with psycopg.connect(session_conninfo(dsn), autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                (slot,),
            ).fetchone()
    except psycopg.Error as exc:
        raise TransientError(f"cannot read replication slot {slot!r}: {exc}") from exc
    if row is None or row[0] is None:
        return None
    return lsn_position(str_to_lsn(str(row[0])))
