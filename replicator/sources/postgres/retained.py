"""How much WAL the server keeps for the replication slot (slot safety, ``status``)."""

from __future__ import annotations

import psycopg

from replicator.errors import TransientError
from replicator.sources.base import RetainedLog
from replicator.sources.postgres.replication import session_conninfo

# wal_status (PG 13+): reserved / extended are fine; unreserved: the slot is about to lose
# WAL it needs (max_slot_wal_keep_size); lost: it has, and the slot must be re-created.
SLOT_QUERY = """
SELECT pg_current_wal_lsn() - confirmed_flush_lsn, wal_status, active, confirmed_flush_lsn::text
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
