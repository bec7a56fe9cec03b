"""Issue 10 item 11: the overlap bound of a fresh (resumed / added-table) snapshot must lie
above the commit of every transaction the snapshot sees, also with synchronous_commit=off,
where a commit is visible before its WAL is written (``pg_current_wal_lsn()`` is below it)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pg_testkit as kit
import psycopg
import pytest

from replicator.checkpoint import Checkpoints
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op
from replicator.sources.postgres import PostgresSource
from sample_dbs.postgres.server import PrivatePostgres

pytestmark = pytest.mark.integration


def _run(dsn: str, *statements: str) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            cur = conn.execute(s)
            rows = cur.fetchall() if cur.description else []
    return rows


def _judge(events: list[ChangeEvent], until: Any) -> dict[int, int]:
    """The table a consumer builds that applies inserts as upserts only at or below the
    source's declared bound (what the pipeline does); a blind insert of a key already
    present is a doubled row."""
    model: dict[int, int] = {}
    for e in events:
        if e.table != "public.t":
            continue
        if e.op is Op.DELETE:
            assert e.before is not None
            model.pop(e.before["id"], None)
            continue
        assert e.after is not None
        if e.op is Op.CREATE and e.position > until:
            assert e.after["id"] not in model, (
                f"row {e.after['id']} doubled: insert at {e.position.parts} is above the "
                f"overlap bound {until.parts} but the snapshot already holds the row"
            )
        if e.op is Op.UPDATE and e.before is not None:
            model.pop(e.before["id"], None)
        model[e.after["id"]] = e.after["v"]
    return model


def test_fresh_snapshot_bound_is_safe_with_synchronous_commit_off(
    pg_server: PrivatePostgres, tmp_path: Path
) -> None:
    dsn = pg_server.create_database("overlap")
    admin = pg_server.dsn_for("postgres")
    src: PostgresSource | None = None
    stop = threading.Event()
    writer: threading.Thread | None = None
    try:
        _run(
            dsn,
            "CREATE TABLE marker (n int PRIMARY KEY)",
            "CREATE TABLE t (id int PRIMARY KEY, v int)",
            "CREATE PUBLICATION p FOR TABLE t, marker",
            # The slot exists (a restart) and t has no committed position: t gets a fresh
            # snapshot, newer than the slot, with an overlap bound.
            "SELECT pg_create_logical_replication_slot('s', 'pgoutput')",
        )
        # The WAL writer writes async commits every wal_writer_delay: make that long, so a
        # commit stays visible-but-unwritten while the source starts.
        _run(admin, "ALTER SYSTEM SET wal_writer_delay = '10s'", "SELECT pg_reload_conf()")
        conn = psycopg.connect(dsn, autocommit=True)
        conn.execute("SET synchronous_commit = off")
        conn.execute("INSERT INTO marker VALUES (0)")  # wakes the WAL writer from hibernation
        time.sleep(0.5)
        conn.execute("INSERT INTO t SELECT g, g FROM generate_series(1, 200) g")
        written, inserted = conn.execute(
            "SELECT pg_current_wal_lsn(), pg_current_wal_insert_lsn()"
        ).fetchone() or (None, None)
        assert written is not None and inserted is not None
        assert written < inserted, "the commit was written already: the race was not set up"

        def write() -> None:  # concurrent async commits while the snapshot is read
            i = 1000
            while not stop.is_set():
                conn.execute("INSERT INTO t VALUES (%s, 0)", (i,))
                conn.execute("UPDATE t SET v = v + 1 WHERE id = %s", (i % 200 + 1,))
                i += 1
                time.sleep(0.002)

        src = PostgresSource(
            dsn, dead_letters=DeadLetterSink(tmp_path / "dead.jsonl"), slot="s",
            publication="p", tables=["public.t", "public.marker"], snapshot_chunk_rows=20,
            poll_max_messages=20, poll_wait_s=0.2, progress=False,
        )  # fmt: skip
        src.start(Checkpoints())
        writer = threading.Thread(target=write)
        writer.start()
        until = src.replay.changes_until
        assert src.snapshot_in_progress and until is not None
        events: list[ChangeEvent] = []
        while src.snapshot_in_progress:
            events += list(src.poll())
            time.sleep(0.01)
        stop.set()
        writer.join()
        conn.execute("SET synchronous_commit = on")
        conn.execute("INSERT INTO marker VALUES (1)")  # flushes everything before it
        conn.close()
        kit.drain(src, lambda ev: any(e.table == "public.marker" and e.after == {"n": 1}
                                      for e in ev), timeout=30, into=events)  # fmt: skip
        assert sum(e.op is Op.READ and e.table == "public.t" for e in events) >= 200
        model = _judge(events, until)
        assert model == dict(_run(dsn, "SELECT id, v FROM t"))
    finally:
        stop.set()
        if writer is not None:
            writer.join()
        if src is not None:
            src.close()
        _run(admin, "ALTER SYSTEM RESET wal_writer_delay", "SELECT pg_reload_conf()")
        _run(dsn, "SELECT pg_drop_replication_slot('s')")
        pg_server.drop_database("overlap")
