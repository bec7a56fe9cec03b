"""Issue 23 item 5: creating the slot waits for the transactions running when it was asked
for; the log says so while it waits, naming the transaction in the way."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import replicator.sources.postgres.slot_wait as slot_wait
from replicator.checkpoint import Checkpoints

Sql = Callable[..., list[tuple[Any, ...]]]
WAIT_GUARD_SECONDS = 120.0  # the blocker gives up then (a hang guard, not a timing assertion)


def test_slot_creation_logs_what_it_waits_for(
    sql: Sql, make_source: Callable[..., Any], pg_dsn: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slot_wait, "SLOT_WAIT_LOG_SECONDS", 0.3)
    sql("CREATE TABLE t (id int PRIMARY KEY)")
    caplog.set_level(logging.INFO, logger="replicator.sources.postgres.slot_wait")
    seen = threading.Event()
    blocker_xid: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "running transaction(s) to finish" in record.getMessage():
                seen.set()

    handler = Seen()
    logging.getLogger("replicator.sources.postgres.slot_wait").addHandler(handler)
    ready = threading.Event()

    def hold_a_transaction() -> None:
        # An xid held open until the slot creation has said it waits (idle in transaction).
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT txid_current()::text").fetchone()
            assert row is not None
            blocker_xid.append(row[0])
            ready.set()
            seen.wait(WAIT_GUARD_SECONDS)
            conn.commit()

    blocker = threading.Thread(target=hold_a_transaction, daemon=True)
    blocker.start()
    try:
        ready.wait(WAIT_GUARD_SECONDS)
        src = make_source()
        src.start(Checkpoints({}))
    finally:
        seen.set()
        blocker.join()
        logging.getLogger("replicator.sources.postgres.slot_wait").removeHandler(handler)
    # Matched on what follows the slot's name: an earlier test's secret (e.g. a password
    # "repl") is masked in every later log line by the process-wide scrubbing filter.
    lines = [r.getMessage() for r in caplog.records if "running transaction(s) to finish" in r.getMessage()]
    assert lines, "nothing was logged while the slot creation waited"
    assert "waiting for 1 running transaction(s) to finish (oldest started at " in lines[0], lines[0]
    assert f"blocked by transaction {blocker_xid[0]} of pid " in lines[0], lines[0]
    assert "idle in transaction" in lines[0], lines[0]
