"""The streaming replication protocol over libpq (psycopg's ``pq`` layer).

psycopg 3 has no replication API, but its ``pq.PGconn`` wraps libpq's COPY BOTH calls, which
is all the protocol needs: ``START_REPLICATION`` opens a COPY BOTH stream of XLogData ('w')
and keepalive ('k') frames; we answer with standby status updates ('r') whose *flush*
position advances the slot's ``confirmed_flush_lsn``.

Why the protocol and not ``pg_logical_slot_peek_binary_changes``: peeking always restarts at
the slot's confirmed position, so until the pipeline acknowledges, every poll would re-decode
everything not yet acknowledged (and with a change limit it would re-read the same first N
changes forever); a stream sends each change once, holds the slot active (a second reader is
refused by the server) and survives very large transactions without materialising them.
"""

from __future__ import annotations

import contextlib
import select
import struct
import time
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from replicator.errors import FencedError, SourceSetupError, TransientError
from replicator.sources.postgres.pgoutput import PG_EPOCH_US, lsn_to_str
from replicator.sources.postgres.setup import quote_ident, quote_literal
from replicator.sources.postgres.types import SESSION_OPTIONS

_XLOGDATA = struct.Struct(">QQq")  # start, wal end, send time
_KEEPALIVE = struct.Struct(">QqB")  # wal end, send time, reply requested
_STATUS = struct.Struct(">cQQQqB")  # 'r', written, flushed, applied, client time, reply
# The walsender sends every message as it decodes it, so a reader that keeps up wakes for a
# few messages at a time (~4 in a backlog of small changes: ~40,000 wake-ups, select and
# recv, for 160,000 messages, with the GIL handed back and forth each time). When the last
# wake-up brought fewer than TRICKLE_MESSAGES, the next one waits NAP_SECONDS (GIL released)
# before reading, so the socket gathers about a read's worth (libpq reads ~8 KiB at a time).
# A message waits at most that much longer: nothing next to the batch linger.
TRICKLE_MESSAGES = 32
NAP_SECONDS = 0.0002
# Between transactions a poll (``PostgresSource``) drains what is arriving: silence this long
# ends it. While the source reads a backlog (``behind``) it waits longer before taking silence
# for caught up: the walsender sends a transaction once it has decoded it whole, so it pauses
# before a large one (~5 ms per 500 changes), and such a pause taken for the backlog's end let
# the batch close by its linger halfway through it (issue 27: 100,000 changes over 100 tables
# committed as 2 batches, 200 commits, in 1 run of 6). A keepalive still ends it at once.
BETWEEN_TX_WAIT_SECONDS = 0.005
BEHIND_BETWEEN_TX_WAIT_SECONDS = 0.05


def between_tx_wait(behind: bool) -> float:
    """How long a poll waits for the next message between transactions (see above)."""
    return BEHIND_BETWEEN_TX_WAIT_SECONDS if behind else BETWEEN_TX_WAIT_SECONDS


def session_conninfo(dsn: str, **extra: Any) -> str:
    """The DSN plus the session settings that fix every value's text form."""
    params = conninfo_to_dict(dsn)
    opts = " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_OPTIONS.items())
    params["options"] = (str(params.get("options", "")) + " " + opts).strip()
    params.update(extra)
    return make_conninfo("", **params)


def _now_pg_us() -> int:
    return int(time.time() * 1_000_000) - PG_EPOCH_US


class ReplicationConnection:
    """A ``replication=database`` connection (walsender) driven through libpq."""

    def __init__(self, dsn: str) -> None:
        conninfo = session_conninfo(dsn, replication="database")
        self.pgconn = pq.PGconn.connect(conninfo.encode())
        if self.pgconn.status != pq.ConnStatus.OK:
            msg = self.pgconn.get_error_message()
            self.pgconn.finish()
            raise TransientError(f"replication connection failed: {msg}")
        self.wal_end = 0  # the server's last reported WAL position (keepalives / XLogData)
        self.received = 0  # start LSN of the last XLogData frame
        self.flushed = 0  # what we last reported as flushed (the slot's confirmed position)
        self._last_status = 0.0
        self._streaming = False
        self._got = 0  # messages (and keepalives) returned since the last wake-up

    @property
    def export_snapshot(self) -> str:
        """The CREATE_REPLICATION_SLOT option that exports the slot's snapshot: the option list
        of PostgreSQL 15+, the keyword of older servers (14 rejects the list)."""
        return "(SNAPSHOT 'export')" if self.pgconn.server_version >= 150000 else "EXPORT_SNAPSHOT"

    # -- commands ------------------------------------------------------------------------------
    def command(self, sql: str) -> list[tuple[str | None, ...]]:
        res = self.pgconn.exec_(sql.encode())
        if res.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            raise self._error(res, sql)
        return [
            tuple(
                None if (v := res.get_value(r, c)) is None else bytes(v).decode()
                for c in range(res.nfields)
            )
            for r in range(res.ntuples)
        ]

    def _error(self, res: pq.abc.PGresult, what: str) -> Exception:
        state = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
        msg = (res.error_message or self.pgconn.error_message or b"").decode().strip()
        if state == "55006":  # object_in_use: the slot is active in another walsender
            return FencedError(f"{msg}; another reader is streaming from this slot")
        if state == "42704":  # undefined_object
            return SourceSetupError(msg)
        if state.startswith("42"):
            return SourceSetupError(f"{what}: {msg}")
        return TransientError(f"{what}: {msg} (SQLSTATE {state or '?'})")

    def create_slot_exported(self, slot: str, *, failover: bool = False) -> tuple[int, str]:
        """Create a pgoutput slot and export its snapshot. Returns (consistent_lsn,
        snapshot_name); the snapshot stays importable until this connection runs another
        command or closes. ``failover``: a failover slot (PostgreSQL 17+)."""
        options = self.export_snapshot
        if failover:
            check_failover_supported(self.pgconn.server_version)
            options = "(SNAPSHOT 'export', FAILOVER true)"
        rows = self.command(f"CREATE_REPLICATION_SLOT {quote_ident(slot)} LOGICAL pgoutput {options}")
        _, consistent, snapshot, _ = rows[0]
        assert consistent is not None and snapshot is not None
        hi, lo = consistent.split("/")
        return (int(hi, 16) << 32) | int(lo, 16), snapshot

    def start(
        self,
        slot: str,
        publication: str,
        start_lsn: int,
        flushed: int,
        *,
        messages: bool = False,
        streaming: bool = False,
    ) -> None:
        """START_REPLICATION; ``flushed`` is the slot's confirmed position (never report less:
        PostgreSQL < 17 would move confirmed_flush_lsn backwards). ``streaming``: protocol
        version 2, in-progress transactions streamed (``streamed.py``; PostgreSQL 14+)."""
        self.flushed = flushed
        options = [
            f"\"proto_version\" '{2 if streaming else 1}'",
            f'"publication_names" {quote_literal(quote_ident(publication))}',
        ]
        if messages:
            options.append("\"messages\" 'true'")
        if streaming:
            options.append("\"streaming\" 'on'")
        sql = (
            f"START_REPLICATION SLOT {quote_ident(slot)} LOGICAL {lsn_to_str(start_lsn)} "
            f"({', '.join(options)})"
        )
        res = self.pgconn.exec_(sql.encode())
        if res.status != pq.ExecStatus.COPY_BOTH:
            raise self._error(res, "START_REPLICATION")
        self.pgconn.nonblocking = 1
        self._streaming = True
        self.send_status()  # at once: positions acknowledged while disconnected count now

    # -- streaming -----------------------------------------------------------------------------
    def read(self, timeout: float, status_interval: float = 10.0) -> bytes | None:
        """The next pgoutput message, or None when nothing arrives within ``timeout`` s.
        Keepalives are consumed here (and answered when the server asks)."""
        pgconn = self.pgconn
        deadline = -1.0
        while True:
            try:
                n, data = pgconn.get_copy_data(1)
            except psycopg.OperationalError as exc:
                raise TransientError(f"replication stream broke: {exc}") from exc
            if n > 0:
                kind = data[0]
                if kind == 0x77:  # 'w' XLogData
                    start, end, _ = _XLOGDATA.unpack_from(data, 1)
                    self.received = start
                    if end > self.wal_end:
                        self.wal_end = end
                    self._got += 1
                    return bytes(data[25:])
                if kind == 0x6B:  # 'k' keepalive
                    end, _, reply = _KEEPALIVE.unpack_from(data, 1)
                    if end > self.wal_end:
                        self.wal_end = end
                    if reply:
                        self.send_status()
                    self._got += 1
                    return b""  # lets the caller notice an idle point (wal_end moved)
                continue
            if n == -1:  # the server ended COPY: its error is in the next result
                res = pgconn.get_result()
                self._streaming = False
                raise (
                    self._error(res, "replication stream")
                    if res is not None
                    else TransientError("replication stream ended")
                )
            # n == 0: nothing buffered yet
            now = time.monotonic()
            if now - self._last_status >= status_interval:
                self.send_status()
            if deadline < 0:
                deadline = now + timeout
            remaining = deadline - now
            if remaining <= 0:
                return None
            ready, _, _ = select.select([pgconn.socket], [], [], min(remaining, status_interval))
            if ready:
                if self._got < TRICKLE_MESSAGES:
                    time.sleep(NAP_SECONDS)  # a trickle: let the socket gather more
                self._got = 0
                try:
                    pgconn.consume_input()
                except psycopg.OperationalError as exc:  # e.g. the server ended the session
                    raise TransientError(f"replication stream broke: {exc}") from exc

    def send_status(self, flushed: int | None = None) -> None:
        if flushed is not None and flushed > self.flushed:
            self.flushed = flushed
        if not self._streaming:
            return
        msg = _STATUS.pack(
            b"r", max(self.received, self.flushed), self.flushed, self.flushed, _now_pg_us(), 0
        )
        pgconn = self.pgconn
        try:
            if pgconn.put_copy_data(msg) != 1:
                raise TransientError("could not queue a standby status update")
            while pgconn.flush() == 1:  # non-blocking: wait until the socket takes the rest
                select.select([], [pgconn.socket], [], 1.0)
        except psycopg.OperationalError as exc:
            raise TransientError(f"replication stream broke: {exc}") from exc
        self._last_status = time.monotonic()

    def close(self) -> None:
        if self.pgconn.status == pq.ConnStatus.OK and self._streaming:
            with contextlib.suppress(TransientError):  # closing anyway
                self.send_status()
        self._streaming = False
        self.pgconn.finish()


FAILOVER_MIN_VERSION = 170000


def check_failover_supported(server_version: int) -> None:
    if server_version < FAILOVER_MIN_VERSION:
        major = server_version // 10000
        raise SourceSetupError(
            f"source.failover_slot needs PostgreSQL 17 or later (failover slots); this server "
            f"is PostgreSQL {major}",
            hint="set source.failover_slot: false (or upgrade the server to 17+)",
        )


def ensure_failover_slot(conn: psycopg.Connection[Any], dsn: str, slot: str) -> bool:
    """Make an existing (inactive) slot a failover slot; True when it was changed."""
    check_failover_supported(conn.info.server_version)
    row = conn.execute(
        "SELECT failover FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    if row is None or row[0]:
        return False
    repl = ReplicationConnection(dsn)
    try:
        repl.command(f"ALTER_REPLICATION_SLOT {quote_ident(slot)} (FAILOVER true)")
    finally:
        repl.close()
    return True


def source_identity(conn: psycopg.Connection[Any], dsn: str, slot: str) -> str:
    """``postgres:<system identifier>/<database oid>:<database>/<slot>``: what the slot's
    positions and the snapshot state belong to (``replicator.sources.common.identity``).
    The system identifier comes from ``IDENTIFY_SYSTEM`` (any REPLICATION role may run it,
    unlike ``pg_control_system()``)."""
    oid, name = conn.execute(
        "SELECT oid, datname FROM pg_database WHERE datname = current_database()"
    ).fetchone() or (0, "?")
    repl = ReplicationConnection(dsn)
    try:
        system_id = repl.command("IDENTIFY_SYSTEM")[0][0]
    finally:
        repl.close()
    return f"postgres:{system_id}/{oid}:{name}/{slot}"
