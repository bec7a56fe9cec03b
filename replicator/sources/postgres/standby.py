"""Logical decoding on a physical standby (PostgreSQL 16+): what differs from a primary.

A standby is read-only and replays the primary's WAL; its logical slot decodes that WAL. So:

* publication: a standby cannot run CREATE/ALTER PUBLICATION. It must exist already (made on
  the primary, replayed here); with ``source.primary`` the engine makes it there and waits
  until the standby has replayed it. Otherwise the error names the statement to run.
* slot creation waits for a running-transactions record from the primary (its background
  writer logs one about every 15 s while it writes). With ``source.primary`` the engine asks
  for one every second (``pg_log_standby_snapshot()``); either way it logs what it waits for.
* fencing token: see ``Standby.fencing_token``.
* the WAL head is what the standby has replayed (``retained.HEAD_QUERY``); a fresh snapshot's
  bound is what it has received (``snapshot.SNAPSHOT_BOUND_QUERY``).
* incremental snapshots are off: their watermarks are logical messages written on the
  source, which a standby cannot write. Tables added later are copied before streaming
  resumes, as on servers older than 14.
* settings: ``hot_standby_feedback = on`` (else the primary may vacuum catalog rows the
  slot still needs, and the standby invalidates the slot: every table must be copied again).

On promotion the slot stays (it is the new primary's now) and the next start finds a primary:
the ordinary path, with a fencing token from the same transaction id sequence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from replicator.errors import SourceSetupError, TransientError
from replicator.sources.postgres import setup
from replicator.sources.postgres.replication import session_conninfo

log = logging.getLogger(__name__)

STANDBY_MIN_VERSION = 160000  # logical decoding on a standby came with PostgreSQL 16
NUDGE_SECONDS = 1.0  # how often a slot creation asks the primary for a running-xacts record
REPLAY_WAIT_SECONDS = 60.0  # for the standby to replay a publication made on the primary


def detect(conn: psycopg.Connection[Any], primary_dsn: str | None) -> Standby | None:
    """A ``Standby`` when ``conn``'s server is in recovery, else None (a primary: the
    ordinary path; ``source.primary`` is then not needed and not used)."""
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    if row is None or not row[0]:
        if primary_dsn is not None:
            log.warning("source.primary is set but source.dsn is not a standby: not used")
        return None
    log.info("source.dsn is a standby (in recovery): reading from it, %s", (
        "with source.primary for the publication and the fencing token" if primary_dsn
        else "without source.primary: the publication must exist already"))  # fmt: skip
    return Standby(primary_dsn)


@dataclass(frozen=True)
class Standby:
    """The source server is a physical standby; ``primary_dsn``: ``source.primary``."""

    primary_dsn: str | None = field(default=None, repr=False)  # may hold a password

    def _primary(self) -> psycopg.Connection[Any]:
        assert self.primary_dsn is not None
        try:
            return psycopg.connect(session_conninfo(self.primary_dsn), autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise TransientError(f"cannot connect to source.primary: {exc}") from exc

    # -- checks ------------------------------------------------------------------------------
    def check(self, conn: psycopg.Connection[Any], *, failover_slot: bool = False) -> None:
        version = conn.info.server_version
        if version < STANDBY_MIN_VERSION:
            raise SourceSetupError(
                f"source.dsn is a standby of PostgreSQL {version // 10000}; logical decoding on "
                "a standby needs PostgreSQL 16 or later",
                hint="point source.dsn at the primary, or upgrade the servers to 16+",
            )
        if failover_slot:
            # The server refuses FAILOVER for a slot made on a standby: failover slots are made
            # on the primary and synced to standbys (README "High availability").
            raise SourceSetupError(
                "source.failover_slot is for a slot on the primary; source.dsn is a standby",
                hint="set source.failover_slot: false (a standby's own slot stays with it when "
                "it is promoted)",
            )
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('hot_standby_feedback', 'primary_slot_name')"
        ).fetchall())  # fmt: skip
        if settings.get("hot_standby_feedback") != "on":
            raise SourceSetupError(
                "hot_standby_feedback is off on the standby: the primary may then remove "
                "catalog rows the replication slot still needs, and the standby invalidates "
                "the slot (every table would have to be copied again)",
                hint="ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf();  -- on the standby",
            )
        if not settings.get("primary_slot_name"):
            log.warning("the standby streams without a physical slot (primary_slot_name): while "
                        "it is disconnected the primary ignores its feedback and may remove "
                        "catalog rows the logical slot needs (the slot is then invalidated)")  # fmt: skip
        if self.primary_dsn is not None:
            with self._primary() as p:
                self._check_primary(conn, p)

    @staticmethod
    def _check_primary(conn: psycopg.Connection[Any], primary: psycopg.Connection[Any]) -> None:
        row = primary.execute("SELECT pg_is_in_recovery(), current_database()").fetchone()
        assert row is not None
        if row[0]:
            raise SourceSetupError("source.primary is itself in recovery (a standby), not the primary",
                                   hint="set source.primary to the server the standby replicates from")  # fmt: skip
        if row[1] != conn.info.dbname:
            raise SourceSetupError(
                f"source.primary is database {row[1]!r}, source.dsn {conn.info.dbname!r}: "
                "publications belong to one database", hint="name the same database in both",
            )  # fmt: skip
        query = "SELECT system_identifier::text FROM pg_control_system()"
        try:  # restricted to superusers by default: checked where allowed
            ours, theirs = (c.execute(query).fetchone() for c in (conn, primary))
        except pgerrors.InsufficientPrivilege:
            return
        if ours != theirs:
            raise SourceSetupError(
                "source.primary is another cluster than source.dsn's (system identifiers "
                f"{theirs[0] if theirs else '?'} and {ours[0] if ours else '?'})",
                hint="set source.primary to the server the standby replicates from",
            )

    @staticmethod
    def check_slot(conn: psycopg.Connection[Any], slot: str) -> None:
        """A slot the standby invalidated (the primary removed rows or WAL it needed) can
        give no more changes: say so instead of failing at START_REPLICATION."""
        row = conn.execute(
            "SELECT conflicting FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is not None and row[0]:
            raise SourceSetupError(
                f"slot {slot!r} was invalidated on the standby (the primary removed catalog rows "
                "or WAL it needed: hot_standby_feedback, primary_slot_name); its changes are "
                "gone and the tables must be copied again",
                hint=f"SELECT pg_drop_replication_slot({setup.quote_literal(slot)});  -- on the standby",
            )

    # -- fencing -------------------------------------------------------------------------------
    def fencing_token(self, conn: psycopg.Connection[Any]) -> int:
        """A token from the primary's 64-bit transaction id sequence, as on a primary
        (``setup.acquire_fence``), so checkpoints stay comparable when the engine moves
        between the primary and the standby, and across a promotion.

        With ``source.primary``: ``pg_current_xact_id()`` there, a new xid, larger than every
        earlier owner's token (whether it read the primary or this standby): the full guarantee.
        Without it, a standby cannot take an xid; the token is the next xid the standby knows
        of (``pg_snapshot_xmax`` of its snapshot). It never exceeds what the primary hands out
        next (no false fence after a promotion), but two owners with no write on the primary
        between them get the same token, and an equal token does not fence: the slot (one
        streaming reader) and the advisory lock on the standby then keep a second engine out.
        A standby lagging behind an engine that read the primary may also give a smaller
        token: that engine's later commits then fence this one (it stops; it never writes
        under a newer owner)."""
        if self.primary_dsn is not None:
            with self._primary() as p:
                row = p.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        else:
            row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
        assert row is not None
        return int(row[0])

    # -- publication ---------------------------------------------------------------------------
    def publication(
        self, conn: psycopg.Connection[Any], name: str, tables: Sequence[setup.TableInfo]
    ) -> list[setup.TableInfo]:
        """``setup.ensure_publication`` for a standby: made on the primary (``source.primary``),
        then checked here once replayed; without a primary, a missing publication (or table)
        is an error whose hint is the statement to run on the primary."""
        if self.primary_dsn is not None:
            with self._primary() as p:
                added = setup.ensure_publication(p, name, tables)
                row = p.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            if added:
                assert row is not None
                log.info("publication %s on the primary now has %s", name, [t.qualified for t in added])
                wait_replayed(conn, str(row[0]))
            setup.ensure_publication(conn, name, tables)  # checks it; nothing left to change
            return added
        try:
            return setup.ensure_publication(conn, name, tables)
        except SourceSetupError as exc:
            if not isinstance(exc.__cause__, pgerrors.ReadOnlySqlTransaction):
                raise
            raise SourceSetupError(
                f"publication {name!r} is missing on the standby or lacks tables, and a standby "
                "cannot change it: run the hint on the primary (or set source.primary)",
                hint=f"{exc.hint}  -- on the primary",
            ) from exc

    # -- slot creation -------------------------------------------------------------------------
    @contextmanager
    def creating_slot(self) -> Iterator[None]:
        """Around CREATE_REPLICATION_SLOT on the standby: with ``source.primary``, ask the
        primary for a running-transactions record every ``NUDGE_SECONDS`` until it is done."""
        if self.primary_dsn is None:
            yield
            return
        stop = threading.Event()
        thread = threading.Thread(target=self._nudge, args=(stop,), name="standby-snapshot", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=10)

    def _nudge(self, stop: threading.Event) -> None:
        try:
            with self._primary() as p:
                while True:
                    p.execute("SELECT pg_log_standby_snapshot()")
                    if stop.wait(NUDGE_SECONDS):
                        return
        except (psycopg.Error, TransientError) as exc:  # only slower: the bgwriter logs one too
            log.warning("cannot call pg_log_standby_snapshot() on source.primary (%s); the slot "
                        "waits for the primary's background writer", exc)  # fmt: skip


def wait_replayed(conn: psycopg.Connection[Any], lsn: str, timeout: float = REPLAY_WAIT_SECONDS) -> None:
    """Until the standby has replayed the primary's WAL up to ``lsn``."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()
        if row is not None and row[0]:
            return
        if time.monotonic() > deadline:
            raise TransientError(f"the standby has not replayed the primary's WAL up to {lsn} "
                                 f"within {timeout:.0f} s (replication lag?)")  # fmt: skip
        time.sleep(0.1)
