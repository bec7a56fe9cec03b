"""Snapshot: consistent with the binlog, overlapping with live writes, resumable."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mysql_testkit import TestDb, apply, drain

from replicator.checkpoint import Checkpoints
from replicator.events.block import row_events
from replicator.events.model import ChangeEvent, Op
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.snapshot import (
    SNAPSHOT_BASE,
    decode_key,
    encode_key,
    is_snapshot_parts,
    snapshot_parts,
)
from sample_dbs.mysql.server import load_schema
from sample_dbs.mysql.workload import ShopWorkload

Model = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def test_snapshot_positions_and_keys() -> None:
    snap = snapshot_parts("binlog.000003", 1234, 0)
    assert snap == ("binlog.000003", 1234, SNAPSHOT_BASE) and is_snapshot_parts(snap)
    assert snapshot_parts("binlog.000003", 1234, 10**9) < (
        "binlog.000003",
        1234,
        0,
    )  # first tx at P
    assert snap > ("binlog.000003", 1200, 5) and snap > ("binlog.000002", 99999, 0)
    from datetime import date, datetime, timedelta
    from decimal import Decimal

    key = (
        1,
        "x",
        b"\x00\xff",
        Decimal("1.50"),
        2.5,
        datetime(2024, 1, 2, 3, 4, 5, 6),
        date(2024, 1, 2),
        timedelta(hours=-3, microseconds=7),
        None,
    )
    assert decode_key(encode_key(key)) == key


def _truth(db: TestDb, make_source: Callable[..., MySQLSource], tables: list[str]) -> Model:
    """The tables' current content, read by a fresh snapshot."""
    src = make_source(db, tables=tables)
    src.start(Checkpoints.at({}))
    model: Model = {}
    events = drain(src)
    assert all(e.op is Op.READ for e in events)
    apply(model, events)
    src.close()
    return model


@pytest.mark.integration
def test_snapshot_overlapping_live_writes_converges(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    load_schema(db.server, dbname=db.name)
    tables = [f"{db.name}.{t}" for t in ("customers", "products", "orders", "order_items")]
    wl = ShopWorkload(seed=11)
    conn = db.connect()
    wl.populate(conn, customers=60, products=30, orders=60)
    src = make_source(db, tables=tables, snapshot_chunk_rows=7, poll_max_events=5)
    src.start(Checkpoints.at({}))
    assert src.replay.snapshot_rows is False and src.replay.changes_until is None  # exactly the stream start
    model: Model = {}
    steps = 0

    def writer() -> None:  # runs through and past the snapshot
        nonlocal steps
        for steps in range(1, 201):  # noqa: B007
            wl.step(conn)

    th = threading.Thread(target=writer)
    th.start()
    snapshot_rows = 0
    try:
        while src.snapshot_in_progress:  # read the snapshot while the workload writes
            got = row_events(src.poll())
            snapshot_rows += len(got)
            apply(model, got)
    finally:
        th.join()
    conn.close()
    streamed = drain(src)
    apply(model, streamed)
    assert steps == 200 and snapshot_rows > 200 and len(streamed) > 100
    assert {"insert", "update", "delete", "pk_update", "multi_statement_tx"} <= set(wl.counts)
    truth = _truth(db, make_source, tables)
    for t in tables:
        for k in sorted(set(model.get(t, {})) | set(truth.get(t, {}))):
            a, b = model.get(t, {}).get(k), truth.get(t, {}).get(k)
            if a != b:
                diff = {
                    c: (a.get(c), b.get(c))
                    for c in (a or b or {})
                    if not a or not b or a.get(c) != b.get(c)
                }
                print("DIFF", t, k, {c: (repr(x)[:60], repr(y)[:60]) for c, (x, y) in diff.items()})
    assert model == truth


def _two_tables(db: TestDb) -> list[str]:
    db.sql(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE b (k1 INT, k2 VARCHAR(5), v INT, PRIMARY KEY (k1, k2))",
        "INSERT INTO a VALUES " + ", ".join(f"({i}, 'a{i}')" for i in range(1, 13)),
        "INSERT INTO b VALUES " + ", ".join(f"({i // 3}, 'k{i % 3}', {i})" for i in range(30)),
    )
    return [f"{db.name}.a", f"{db.name}.b"]


def _interrupt_and_change(db: TestDb, src: MySQLSource, n: int) -> list[ChangeEvent]:
    src.start(Checkpoints.at({}))
    first: list[ChangeEvent] = []
    while len(first) < n:
        first.extend(src.poll())
    first = first[:n]
    src.acknowledge(first[-1].position)  # the pipeline committed a batch ending here
    src.close()
    db.sql(
        "INSERT INTO a VALUES (100, 'new')",
        "UPDATE a SET v = 'changed' WHERE id = 2",
        "DELETE FROM b WHERE k1 = 9",
        "UPDATE b SET v = -1 WHERE k1 = 0",
        "INSERT INTO b VALUES (50, 'z', 50)",
    )
    return first


@pytest.mark.integration
@pytest.mark.parametrize("with_state", [True, False])
def test_interrupted_snapshot_resumes(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path, with_state: bool
) -> None:
    tables = _two_tables(db)
    state = tmp_path / "state" if with_state else None
    # the state files belong to a server_id: a restarted engine keeps its id
    src = make_source(
        db, tables=tables, snapshot_chunk_rows=5, state_dir=state, poll_max_events=3, server_id=4711
    )
    first = _interrupt_and_change(db, src, 12 + 17)  # all of a, 17 rows of b (3 full chunks)
    assert [e.table for e in first].count(f"{db.name}.b") == 17
    end = first[-1].position
    committed = {t: end for t in tables}
    again = make_source(db, tables=tables, snapshot_chunk_rows=5, state_dir=state, server_id=4711)
    again.start(Checkpoints.at(committed))
    # the new snapshot is newer than the resume point: the stream repeats what it saw
    until = again.replay.changes_until
    assert again.replay.snapshot_rows and until is not None
    assert until.parts[:2] > end.parts[:2]
    rest = drain(again)
    snap = [e for e in rest if e.op is Op.READ]
    repeated = [e for e in rest if e.op is not Op.READ and e.position <= until]
    assert len(repeated) == 9  # the row changes made between the two snapshots
    assert all(e.position > end for e in rest)
    assert all(e.position.parts[:2] == end.parts[:2] for e in snap)  # same snapshot point
    if with_state:  # continues after the last acknowledged chunk boundary (b's 15th row)
        assert all(e.table == f"{db.name}.b" for e in snap)
        assert snap[0].after == {"k1": 5, "k2": "k0", "v": 15}
    else:  # no state: the unfinished tables are read again from their start
        assert sum(e.table == f"{db.name}.a" for e in snap) == 13
    model: Model = {}
    apply(model, first)
    apply(model, rest)
    assert model == _truth(db, make_source, tables)


@pytest.mark.integration
@pytest.mark.parametrize("with_state", [True, False])
def test_idle_table_and_acknowledged_offsets(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Path, with_state: bool
) -> None:
    tables = _two_tables(db)
    state = tmp_path / "state" if with_state else None
    src = make_source(db, tables=tables, state_dir=state, server_id=4712)
    src.start(Checkpoints.at({}))
    snap = drain(src)
    db.sql("INSERT INTO a VALUES (200, 'x')", "INSERT INTO a VALUES (201, 'y')")
    stream = drain(src)
    src.acknowledge(snap[-1].position)
    src.acknowledge(stream[-1].position)
    src.close()
    last_b = [e for e in snap if e.table.endswith(".b")][-1].position
    committed = {
        tables[0]: stream[-1].position,
        tables[1]: last_b,
    }  # b: no change since its snapshot
    again = make_source(db, tables=tables, state_dir=state, server_id=4712)
    again.start(Checkpoints.at(committed))
    evs = drain(again)
    if with_state:  # b's snapshot is known complete; the stream resumes after the acked position
        assert evs == [] and again.resume_position >= (
            str(stream[-1].position.parts[0]),
            int(stream[-1].position.parts[1]),
        )
    else:  # b's committed position is a snapshot position: it is read again
        assert {e.table for e in evs} == {tables[1]} and len(evs) == 30


@pytest.mark.integration
def test_both_ways_to_pin_the_snapshot_point(db: TestDb) -> None:
    """MariaDB's lock-free binlog_snapshot_* status and the MySQL way (FLUSH TABLES WITH READ
    LOCK around SHOW MASTER STATUS) agree; the latter needs RELOAD, with a hint."""
    from replicator.errors import SourceSetupError
    from replicator.sources.mysql.setup import connect, master_status, parse_dsn
    from replicator.sources.mysql.snapshot import open_consistent_snapshot

    db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    root = connect(parse_dsn(db.server.root_dsn))
    repl = connect(parse_dsn(db.dsn))
    try:
        now = master_status(root)
        assert open_consistent_snapshot(root, True) == now
        root.rollback()
        assert open_consistent_snapshot(root, False) == now
        with pytest.raises(SourceSetupError) as err:
            open_consistent_snapshot(repl, False)
        assert (err.value.hint or "").startswith("GRANT RELOAD ON *.* TO 'repl'@'%'")
    finally:
        root.close()
        repl.close()
