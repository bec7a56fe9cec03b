"""Say why ``CREATE_REPLICATION_SLOT`` takes long while it takes long.

A logical slot starts at a consistent point: the server waits until every transaction that
was running when the slot was requested has ended (and, for the exported snapshot, for a
record listing the running transactions after that). Under write load, or behind one
session left "idle in transaction", that is tens of seconds to forever, with nothing in
the log. While the command runs, a thread reads ``pg_stat_activity`` / ``pg_locks`` on a
connection of its own every few seconds and logs what the walsender waits for.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from replicator.sources.postgres.replication import session_conninfo

log = logging.getLogger(__name__)

SLOT_WAIT_LOG_SECONDS = 5.0

# Transactions with an xid, other than the walsender's: what the snapshot builder waits for.
RUNNING_QUERY = """
SELECT count(*), min(xact_start)::text FROM pg_stat_activity
WHERE backend_xid IS NOT NULL AND pid <> %s
"""
PREPARED_QUERY = "SELECT count(*) FROM pg_prepared_xacts"
# The transaction the walsender is blocked on right now (it waits on each one's xid lock).
BLOCKER_QUERY = """
SELECT l.transactionid::text, a.pid, coalesce(a.state, '?'), a.xact_start::text
FROM pg_locks w
JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = w.transactionid AND l.granted
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE w.pid = %s AND NOT w.granted AND w.locktype = 'transactionid'
LIMIT 1
"""


def describe_wait(conn: psycopg.Connection[Any], slot: str, walsender_pid: int) -> str:
    """One line: what creating ``slot`` waits for now."""
    running, oldest = conn.execute(RUNNING_QUERY, (walsender_pid,)).fetchone() or (0, None)
    prepared_row = conn.execute(PREPARED_QUERY).fetchone()
    prepared = int(prepared_row[0]) if prepared_row else 0
    blocker = conn.execute(BLOCKER_QUERY, (walsender_pid,)).fetchone()
    what = f"waiting for {running} running transaction(s) to finish"
    if oldest is not None:
        what += f" (oldest started at {oldest})"
    if prepared:
        what += f", and {prepared} prepared transaction(s) (pg_prepared_xacts) to be committed or rolled back"
    if blocker is not None:
        xid, pid, state, since = blocker
        what += f"; now blocked by transaction {xid} of pid {pid} ({state}, started at {since})"
    elif not running:
        what += " (none visible to this role, or the server waits for its next running-transactions record)"
    return f"creating replication slot {slot}: {what}; a logical slot starts at a consistent point"


def describe_standby_wait(slot: str, nudged: bool) -> str:
    """One line: what creating ``slot`` on a standby waits for. Its consistent point comes
    from the primary's running-transactions records in the replayed WAL, not from sessions
    of the standby (there are none with an xid)."""
    how = ("source.primary is asked for one every second (pg_log_standby_snapshot())" if nudged
           else "SELECT pg_log_standby_snapshot(); on the primary sends one now, or set source.primary")  # fmt: skip
    return (f"creating replication slot {slot} on a standby: waiting for a running-transactions "
            "record from the primary (its background writer logs one about every 15 s while it "
            f"writes; and for the transactions it lists to end); {how}")  # fmt: skip


class SlotCreationProgress:
    """A context manager around the slot creation: logs every ``every`` seconds until it ends."""

    def __init__(
        self, dsn: str, slot: str, walsender_pid: int, every: float | None = None,
        standby: str | None = None,
    ) -> None:  # fmt: skip
        self.standby = standby  # on a standby: the line to log (``describe_standby_wait``)
        self.dsn = dsn
        self.slot = slot
        self.walsender_pid = walsender_pid
        self.every = SLOT_WAIT_LOG_SECONDS if every is None else every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slot-creation-progress", daemon=True)

    def __enter__(self) -> SlotCreationProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            while not self._stop.wait(self.every):
                if self.standby is not None:
                    log.info(self.standby)
                    continue
                try:
                    if conn is None:
                        conn = psycopg.connect(session_conninfo(self.dsn), autocommit=True, connect_timeout=10)
                    line = describe_wait(conn, self.slot, self.walsender_pid)
                except psycopg.Error as exc:
                    line = f"creating replication slot {self.slot}: still waiting (cannot tell why: {exc})"
                    if conn is not None:
                        conn.close()
                        conn = None
                if not self._stop.is_set():  # the slot may have been created meanwhile
                    log.info(line)
        finally:
            if conn is not None:
                conn.close()
