"""PostgresSource with streaming of in-progress transactions (pgoutput protocol 2) against a
private server: ``logical_decoding_work_mem`` at its minimum (64kB, set for the replication
session through the DSN) makes the server stream every transaction of more than a few
hundred rows while it runs. Each streamed transaction must come out exactly as an
unstreamed one: whole, in commit order, at its commit's positions, without what was rolled
back."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pg_testkit as kit
import psycopg
import pytest

from replicator.checkpoint import Checkpoints
from replicator.events.block import BlockEvent, row_events
from replicator.events.model import ChangeEvent
from sample_dbs.postgres.server import PrivatePostgres

pytestmark = pytest.mark.integration

Sql = Callable[..., Any]
Make = Callable[..., Any]
SMALL_WORK_MEM = " options='-c logical_decoding_work_mem=64kB'"
ROWS = 2000  # about 100 kB of changes: streamed in several blocks
_names = itertools.count()


@pytest.fixture
def pg_dsn(pg_versioned_server: PrivatePostgres) -> Iterator[str]:
    """Every version under test (the protocol's details moved across 14..18)."""
    name = f"streaming{next(_names)}"
    yield pg_versioned_server.create_database(name)
    pg_versioned_server.drop_database(name)


def _source(make_source: Make, pg_dsn: str, tmp_path: Path, **kw: Any) -> Any:
    src = make_source(dsn=pg_dsn + SMALL_WORK_MEM, state_dir=tmp_path / "state", **kw)
    src.start(Checkpoints.at({}))
    kit.drain(src)
    return src


def _marker(sql: Sql, n: int) -> Callable[[list[ChangeEvent]], bool]:
    sql("INSERT INTO marker VALUES (%s)", (n,))
    return lambda evs: any(e.table == "public.marker" and e.after and e.after["n"] == n for e in evs)


def _received(src: Any, messages: int) -> None:
    """Poll until the source has spooled ``messages`` messages of open transactions (the
    walsender streams a block once the transaction holds 64kB of changes)."""
    deadline = time.monotonic() + 15
    while src.streamed_stats.messages_spooled < messages:
        assert list(src.poll()) == [] and time.monotonic() < deadline, src.streamed_stats


def _spools(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "state" / "streamed").rglob("*.xact"))


def _check_transactions(events: list[ChangeEvent]) -> None:
    """Whole transactions in commit order: one position prefix each, indexes rising, the
    flag on the last event only."""
    by_tx: dict[object, list[ChangeEvent]] = {}
    for e in events:
        by_tx.setdefault(e.position.parts[0], []).append(e)
    assert [e.position for e in events] == sorted(e.position for e in events)
    for evs in by_tx.values():
        assert len({e.tx_id for e in evs}) == 1
        assert [e.last_in_tx for e in evs] == [False] * (len(evs) - 1) + [True]


@pytest.fixture
def tables(sql: Sql) -> None:
    sql("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE marker (n int PRIMARY KEY)")


def test_big_transaction_streamed_with_another_committing_between(
    sql: Sql, make_source: Make, pg_dsn: str, tmp_path: Path, tables: None
) -> None:
    src = _source(make_source, pg_dsn, tmp_path)
    with psycopg.connect(pg_dsn) as big:
        big.execute(f"INSERT INTO t SELECT g, 'big' || g FROM generate_series(1, {ROWS}) g")
        _received(src, ROWS // 2)  # the first blocks arrive; nothing comes out yet
        assert src._streamed.open_transactions == 1 and _spools(tmp_path)
        sql("INSERT INTO t VALUES (-1, 'small')")  # commits while the big one runs
        big.execute(f"UPDATE t SET v = 'late' WHERE id > {ROWS - 10}")
        big.commit()
    events = kit.drain(src, _marker(sql, 1))
    _check_transactions(events)
    t = [e for e in events if e.table == "public.t"]
    assert [e.after["id"] for e in t[:2]] == [-1, 1]  # the small one committed first
    assert len(t) == 1 + ROWS + 10 and t[-1].op.value == "u" and t[-1].after["v"] == "late"
    assert src.streamed_stats.committed == 1 and not _spools(tmp_path)


def test_rolled_back_streamed_transaction_gives_nothing(
    sql: Sql, make_source: Make, pg_dsn: str, tmp_path: Path, tables: None
) -> None:
    src = _source(make_source, pg_dsn, tmp_path)
    with psycopg.connect(pg_dsn) as big:
        big.execute(f"INSERT INTO t SELECT g, 'gone' || g FROM generate_series(1, {ROWS}) g")
        # Streamed before the rollback (PostgreSQL 18 neither streams nor sends a transaction
        # already rolled back when the walsender reaches it).
        _received(src, ROWS // 2)
        big.rollback()
    sql("INSERT INTO t VALUES (-1, 'kept')")
    events = kit.drain(src, _marker(sql, 1))
    assert [e.after["id"] for e in events if e.table == "public.t"] == [-1]
    assert src.streamed_stats.aborted == 1 and not _spools(tmp_path)


def test_rollback_to_savepoint_drops_only_that_part(
    sql: Sql, make_source: Make, pg_dsn: str, tmp_path: Path, tables: None
) -> None:
    src = _source(make_source, pg_dsn, tmp_path)
    with psycopg.connect(pg_dsn) as big:
        big.execute(f"INSERT INTO t SELECT g, 'a' || g FROM generate_series(1, {ROWS}) g")
        big.execute("SAVEPOINT outer_sp")
        big.execute(f"INSERT INTO t SELECT g, 'b' || g FROM generate_series({ROWS + 1}, {2 * ROWS}) g")
        big.execute("SAVEPOINT inner_sp")  # nested: rolled back with outer_sp
        big.execute(f"UPDATE t SET v = 'nested' WHERE id <= {ROWS}")
        _received(src, 2 * ROWS)  # some of the savepoints' changes were streamed
        big.execute("ROLLBACK TO SAVEPOINT outer_sp")
        big.execute(f"DELETE FROM t WHERE id <= {ROWS // 2}")  # in the savepoint kept open
        big.commit()
    events = kit.drain(src, _marker(sql, 1))
    _check_transactions(events)
    t = [e for e in events if e.table == "public.t"]
    assert [e.op.value for e in t] == ["c"] * ROWS + ["d"] * (ROWS // 2)
    assert {e.after["v"][0] for e in t if e.after} == {"a"}
    assert src.streamed_stats.subtransactions_aborted >= 1


def test_reconnect_mid_stream_streams_the_transaction_again(
    sql: Sql, make_source: Make, pg_dsn: str, tmp_path: Path, tables: None
) -> None:
    src = _source(make_source, pg_dsn, tmp_path)
    with psycopg.connect(pg_dsn) as big:
        big.execute(f"INSERT INTO t SELECT g, 'x' || g FROM generate_series(1, {ROWS}) g")
        _received(src, ROWS // 2)
        assert _spools(tmp_path)
        sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots")
        list(src.poll())  # notices the lost session
        big.execute(f"INSERT INTO t SELECT g, 'y' || g FROM generate_series({ROWS + 1}, {2 * ROWS}) g")
        big.commit()
    events = kit.drain(src, _marker(sql, 1))
    _check_transactions(events)
    t = [e.after["id"] for e in events if e.table == "public.t"]
    assert t == list(range(1, 2 * ROWS + 1)) and src.stats.reconnects >= 1
    assert src.streamed_stats.committed == 1 and not _spools(tmp_path)


def test_streaming_off_gives_the_same_events(
    sql: Sql, make_source: Make, pg_dsn: str, tmp_path: Path, tables: None
) -> None:
    src = _source(make_source, pg_dsn, tmp_path, streaming="off")
    assert src.streamed_stats is None
    sql(f"INSERT INTO t SELECT g, 'big' || g FROM generate_series(1, {ROWS}) g")
    events = kit.drain(src, _marker(sql, 1))
    _check_transactions(events)
    assert len([e for e in events if e.table == "public.t"]) == ROWS


def test_a_streamed_transaction_replays_its_runs_as_block_events(
    sql: Sql, make_source: Make, pg_dsn: str, tmp_path: Path, tables: None
) -> None:
    """``source.change_blocks``: the replayed Inserts, Updates and Deletes come undecoded and
    become block events, row for row the events the per-row path gives."""
    rows = _source(make_source, pg_dsn, tmp_path / "rows", slot="rows")
    blocks = _source(make_source, pg_dsn, tmp_path / "blocks", slot="blocks", change_blocks=8)
    with psycopg.connect(pg_dsn) as big:
        big.execute(f"INSERT INTO t SELECT g, 'big' || g FROM generate_series(1, {ROWS}) g")
        big.execute(f"UPDATE t SET v = 'late' WHERE id > {ROWS - 10}")
        big.execute("DELETE FROM t WHERE id = 5")
    want = kit.drain(rows, _marker(sql, 1))
    got = kit.drain(blocks, lambda evs: any(e.table == "public.marker" for e in evs), rows=False)
    assert blocks.streamed_stats.committed == 1
    mine = [e for e in got if e.table == "public.t"]
    assert all(type(e) is BlockEvent for e in mine)  # inserts, updates and the delete
    assert [e.op.value for e in row_events(mine)][-11:] == ["u"] * 10 + ["d"]
    assert [_fields(e) for e in row_events(got)] == [_fields(e) for e in want]
    _check_transactions(row_events(got))


def _fields(e: ChangeEvent) -> tuple[Any, ...]:
    return (e.table, e.op, e.before, dict(e.after or {}), e.position, e.tx_id, e.last_in_tx, e.ts_ms)
