"""Issue 10 item 13: snapshot state and checkpoints are bound to the source's identity
(system identifier + database + slot); another source's state is refused, not reused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from replicator.checkpoint import Checkpoint, Checkpoints
from replicator.errors import SourceSetupError
from replicator.events.deadletter import DeadLetterSink
from replicator.sources.postgres import PostgresSource
from sample_dbs.postgres.server import PrivatePostgres

pytestmark = pytest.mark.integration
TABLE = "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g"


def _run(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def _source(dsn: str, tmp_path: Path, state: Path, **kw: Any) -> PostgresSource:
    return PostgresSource(
        dsn, dead_letters=DeadLetterSink(tmp_path / "dead.jsonl"), slot="s", publication="p",
        state_dir=state, snapshot_chunk_rows=10, poll_wait_s=0.2, progress=False, **kw,
    )  # fmt: skip


def test_snapshot_state_of_another_database_is_refused(
    pg_server: PrivatePostgres, tmp_path: Path
) -> None:
    """A half-done snapshot of database A leaves its state file; database B (another
    database that reuses the slot name and the state_dir, here with the slot position the
    file expects, as two clusters with the same history would have) must not resume after
    A's last key: the rows below it would never be read from B."""
    state = tmp_path / "state"
    a = pg_server.create_database("ident_a")
    b = pg_server.create_database("ident_b")
    sources: list[PostgresSource] = []
    try:
        _run(a, TABLE)
        first = _source(a, tmp_path, state, poll_max_messages=25)
        sources.append(first)
        first.start(Checkpoints())
        part = list(first.poll())
        first.acknowledge(part[-1].position)  # rows 1..20 (two chunks) are "in Iceberg"
        first.close()
        path = state / "postgres-s.snapshot.json"
        saved = json.loads(path.read_text())
        assert saved["last_key"] == ["20"] and saved.get("source_id") == first.source_id
        _run(a, "SELECT pg_drop_replication_slot('s')")

        _run(b, TABLE)
        confirmed = _run(
            b,
            "SELECT (lsn - '0/0')::bigint FROM pg_create_logical_replication_slot('s', 'pgoutput')",
        )[0][0]
        saved["snapshot_lsn"] = int(confirmed) - 1  # the slot position the file expects
        path.write_text(json.dumps(saved))
        second = _source(b, tmp_path, state)
        sources.append(second)
        with pytest.raises(SourceSetupError) as err:
            second.start(Checkpoints())
        msg = err.value.describe()
        assert str(path) in msg and "ident_a" in msg and "ident_b" in msg
        assert f"delete {path}" in msg

        path.unlink()  # what the message says to do: B's snapshot then starts over
        third = _source(b, tmp_path, state)
        sources.append(third)
        third.start(Checkpoints())
        ids = []
        while third.snapshot_in_progress:
            ids += [e.after["id"] for e in third.poll() if e.after]
        assert sorted(ids) == list(range(1, 101))
    finally:
        for s in sources:
            s.close()
        pg_server.drop_database("ident_a")
        pg_server.drop_database("ident_b")


def test_checkpoint_of_another_source_is_refused(
    pg_server: PrivatePostgres, tmp_path: Path
) -> None:
    dsn = pg_server.create_database("ident_c")
    sources: list[PostgresSource] = []
    try:
        _run(dsn, TABLE)
        src = _source(dsn, tmp_path, tmp_path / "state")
        sources.append(src)
        src.start(Checkpoints())
        own = src.source_id
        assert own is not None
        system_id = _run(dsn, "SELECT system_identifier FROM pg_control_system()")[0][0]
        oid = _run(dsn, "SELECT oid FROM pg_database WHERE datname = 'ident_c'")[0][0]
        assert own == f"postgres:{system_id}/{oid}:ident_c/s"
        events = []
        while src.snapshot_in_progress:
            events += list(src.poll())
        src.acknowledge(events[-1].position)
        src.close()

        def cps(source_id: str | None) -> Checkpoints:
            cp = Checkpoint(position=events[-1].position, writer_id="w", source_id=source_id)
            return Checkpoints({"public.t": cp})

        for ok in (own, None):  # its own, and one written before identities existed
            again = _source(dsn, tmp_path, tmp_path / "state")
            sources.append(again)
            again.start(cps(ok))
            again.close()
        other = own.replace(f"/{oid}:", f"/{int(oid) + 1}:")  # the database re-created
        # A table of another source in the same namespace, not selected here: not ours.
        shared = _source(dsn, tmp_path, tmp_path / "state")
        sources.append(shared)
        stranger = Checkpoint(position=events[-1].position, writer_id="w", source_id=other)
        shared.start(Checkpoints({"public.elsewhere": stranger}))
        shared.close()
        foreign = _source(dsn, tmp_path, tmp_path / "state")
        sources.append(foreign)
        with pytest.raises(SourceSetupError) as err:
            foreign.start(cps(other))
        msg = err.value.describe()
        assert "public.t" in msg and other in msg and own in msg and "drop those Iceberg" in msg
    finally:
        for s in sources:
            s.close()
        pg_server.drop_database("ident_c")


