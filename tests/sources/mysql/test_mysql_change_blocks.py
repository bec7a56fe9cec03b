"""Binlog rows events as blocks (``source.change_blocks``, ``changeblock.py``): the same
changes, values, positions, transactions and dead letters as row by row."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoints
from replicator.events.block import BlockEvent, row_events
from replicator.events.model import ChangeEvent, Op
from replicator.sources.mysql import MySQLSource

pytestmark = pytest.mark.integration

COLUMNS = (
    "id INT, k2 VARCHAR(8), b TINYINT(1), i INT, bi BIGINT, ubi BIGINT UNSIGNED, "
    "d DECIMAL(14,2), d50 DECIMAL(50,5), f FLOAT, db DOUBLE, t VARCHAR(40), tx TEXT, "
    "bin VARBINARY(8), dt DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME, "
    "e ENUM('x','y'), PRIMARY KEY (id, k2)"
)


def _row(rng: random.Random, key: int, zero_date: bool = False) -> str:
    def maybe(v: str) -> str:
        return "NULL" if rng.random() < 0.15 else v

    binary = "X'" + "ab" * rng.randint(0, 8) + "'"
    dt = (
        "'0000-00-00'"
        if zero_date
        else maybe(f"'20{rng.randint(10, 30)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}'")
    )
    return (
        f"({key}, 'k{key % 3}', {maybe(str(rng.randint(0, 1)))}, {maybe(str(rng.randint(-2**31, 2**31 - 1)))}, "
        f"{maybe(str(rng.randint(-2**63, 2**63 - 1)))}, {maybe(str(rng.randint(0, 2**64 - 1)))}, "
        f"{maybe(f'{rng.randint(-10**12, 10**12) / 100:.2f}')}, {maybe(str(rng.randint(-10**40, 10**40)))}, "
        f"{maybe(repr(rng.uniform(-1e6, 1e6)))}, {maybe(repr(rng.uniform(-1e300, 1e300)))}, "
        f"{maybe(repr('é' * rng.randint(0, 5) + str(key)))}, {maybe(repr('x' * rng.randint(0, 300)))}, "
        f"{maybe(binary)}, {dt}, "
        f"{maybe(repr(f'2024-01-0{rng.randint(1, 9)} 0{rng.randint(0, 9)}:1{rng.randint(0, 9)}:00.{rng.randint(0, 999999):06d}'))}, "
        f"{maybe(repr(f'2024-01-0{rng.randint(1, 9)} 03:04:05.{rng.randint(0, 999):03d}'))}, "
        f"{maybe(repr(f'-{rng.randint(0, 838)}:00:01'))}, {maybe(repr(rng.choice('xy')))})"
    )  # fmt: skip


def _workload(db: TestDb, seed: int) -> None:
    rng = random.Random(seed)
    db.sql("SET SESSION sql_mode = ''")  # allows the zero date below (in its own session)
    keys = list(range(1, 41))
    db.tx(f"INSERT INTO w VALUES {', '.join(_row(rng, k) for k in keys)}")
    db.tx(
        "UPDATE w SET i = i + 1, t = CONCAT(t, 'u') WHERE id <= 30",  # keeps its keys
        "UPDATE w SET id = id + 1000 WHERE id > 35",  # moves its keys: row by row
        "DELETE FROM w WHERE id BETWEEN 10 AND 12",
        f"INSERT INTO w VALUES {', '.join(_row(rng, k) for k in range(100, 103))}",
        "INSERT INTO w VALUES " + _row(rng, 200),  # one row: under the threshold
    )
    conn = db.connect()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        rows = [
            _row(rng, k, zero_date=k == 303) for k in range(300, 306)
        ]  # a zero date: library way
        cur.execute(f"INSERT INTO w VALUES {', '.join(rows)}")
        cur.execute("UPDATE w SET f = -f WHERE id >= 300")
    conn.commit()
    conn.close()


def _canonical(events: list[ChangeEvent]) -> list[tuple[Any, ...]]:
    out = []
    for e in row_events(events):
        key = None
        if e.op is Op.UPDATE and e.before is not None:  # a block 'u' has none: its key is kept
            key = tuple(e.before[k] for k in e.schema_.key_columns)  # type: ignore[union-attr]
            if e.after is not None and key == tuple(e.after[k] for k in e.schema_.key_columns):  # type: ignore[union-attr]
                key = None
        before = dict(e.before) if e.op is Op.DELETE and e.before is not None else None
        after = dict(e.after) if e.after is not None else None
        out.append((e.table, e.op, key, before, after, tuple(e.position.parts), e.ts_ms, e.tx_id,
                    e.last_in_tx, e.error))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_blocks_equal_row_by_row(
    db: TestDb, make_source: Callable[..., MySQLSource], seed: int
) -> None:
    db.sql(f"CREATE TABLE w ({COLUMNS})")
    name = f"{db.name}.w"
    rows_src = make_source(db, tables=[name], zero_dates="dead-letter")
    block_src = make_source(db, tables=[name], zero_dates="dead-letter", change_blocks=2)
    for src in (rows_src, block_src):
        src.start(Checkpoints())
        assert drain(src) == []
    _workload(db, seed)
    by_rows, by_blocks = drain(rows_src), drain(block_src)
    blocks = [e for e in by_blocks if type(e) is BlockEvent]
    assert {e.op for e in blocks} == {Op.CREATE, Op.UPDATE}  # the path was taken
    assert all(type(e) is not BlockEvent for e in by_rows)
    assert _canonical(by_blocks) == _canonical(by_rows)
    assert block_src.stats.dead_letters == rows_src.stats.dead_letters == 1  # the zero date
    assert block_src.stats.changes == rows_src.stats.changes


def test_a_block_partly_committed_goes_row_by_row(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    """A restart whose table committed part of a rows event: the rest, row by row."""
    db.sql(f"CREATE TABLE w ({COLUMNS})")
    name = f"{db.name}.w"
    first = make_source(db, tables=[name], change_blocks=2)
    first.start(Checkpoints())
    assert drain(first) == []
    rng = random.Random(3)
    db.tx(f"INSERT INTO w VALUES {', '.join(_row(rng, k) for k in range(1, 11))}")
    got = row_events(drain(first))
    assert len(got) == 10
    first.close()
    again = make_source(db, tables=[name], change_blocks=2)
    again.start(Checkpoints.at({name: got[3].position}))
    rest = drain(again)
    assert [tuple(e.position.parts) for e in rest] == [tuple(e.position.parts) for e in got[4:]]
    assert all(type(e) is not BlockEvent for e in rest)
