"""Binlog rows events as blocks (``source.change_blocks``: the compiled decoder,
``rowarrow.py``, grouped over a poll by ``rowgroup.py``): the same changes, values, positions,
transactions, dead letters and resume points as row by row, and as the library alone."""

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
        "UPDATE w SET id = id + 1000 WHERE id > 35",  # moves its keys: old keys in the block
        "DELETE FROM w WHERE id BETWEEN 10 AND 12",
        f"INSERT INTO w VALUES {', '.join(_row(rng, k) for k in range(100, 103))}",
        "INSERT INTO w VALUES " + _row(rng, 200),  # one row
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
        if e.op in (Op.UPDATE, Op.DELETE) and e.before is not None:  # a block 'u' keeping its key has none
            key = tuple(e.before[k] for k in e.schema_.key_columns)  # type: ignore[union-attr]
            if e.after is not None and key == tuple(e.after[k] for k in e.schema_.key_columns):  # type: ignore[union-attr]
                key = None
        before = None  # only its key counts (a block's old image is its key)
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
    rows_src = make_source(db, tables=[name], zero_dates="dead-letter", change_blocks=0)
    lib_src = make_source(db, tables=[name], zero_dates="dead-letter", row_decoder="library")
    block_src = make_source(db, tables=[name], zero_dates="dead-letter")
    for src in (rows_src, lib_src, block_src):
        src.start(Checkpoints())
        assert drain(src) == []
    _workload(db, seed)
    by_rows, by_lib = drain(rows_src, blocks=True), drain(lib_src, blocks=True)
    by_blocks = drain(block_src, blocks=True)
    blocks = [e for e in by_blocks if type(e) is BlockEvent]
    assert {e.op for e in blocks} == {Op.UPDATE}  # one block per poll mixing kinds
    assert {o for e in blocks for o in e.block.ops.to_pylist()} == {"c", "u", "d"}  # type: ignore[union-attr]
    assert all(type(e) is not BlockEvent for e in by_rows + by_lib)
    assert _canonical(by_blocks) == _canonical(by_rows) == _canonical(by_lib)
    for attr in ("dead_letters", "changes", "transactions", "skipped"):
        assert getattr(block_src.stats, attr) == getattr(rows_src.stats, attr), attr
    assert block_src.stats.dead_letters == 1  # the zero date
    stream = block_src._stream
    assert stream is not None and stream.native_events >= 5 and stream.decoder == "compiled"
    assert block_src.dead_letters.path.read_text() == rows_src.dead_letters.path.read_text()


def test_a_block_partly_committed_goes_row_by_row(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    """A restart whose table committed part of a rows event: the rest, row by row."""
    db.sql(f"CREATE TABLE w ({COLUMNS})")
    name = f"{db.name}.w"
    first = make_source(db, tables=[name])
    first.start(Checkpoints())
    assert drain(first) == []
    rng = random.Random(3)
    db.tx(f"INSERT INTO w VALUES {', '.join(_row(rng, k) for k in range(1, 11))}")
    got = drain(first)
    assert len(got) == 10
    first.close()
    again = make_source(db, tables=[name])
    again.start(Checkpoints.at({name: got[3].position}))
    rest = drain(again, blocks=True)
    assert [tuple(e.position.parts) for e in rest] == [tuple(e.position.parts) for e in got[4:]]
    assert all(type(e) is not BlockEvent for e in rest)



def test_a_consumer_stopping_anywhere_in_a_group_loses_and_repeats_nothing(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    """A poll's group replayed in part (the consumer stops after k events), then a new
    poll: every change exactly once, in order, whatever k."""
    db.sql("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))", "CREATE TABLE b (id INT PRIMARY KEY, n INT)")
    tables = [f"{db.name}.a", f"{db.name}.b"]
    ref = make_source(db, tables=tables, change_blocks=0)
    srcs = {k: make_source(db, tables=tables) for k in range(1, 12)}
    for src in (ref, *srcs.values()):
        src.start(Checkpoints())
        assert drain(src) == []
    db.tx("INSERT INTO a VALUES (1, 'x'), (2, 'y')", "INSERT INTO b VALUES (1, 1)",
          "UPDATE a SET v = 'z' WHERE id = 1")  # fmt: skip
    db.sql("INSERT INTO b VALUES (2, 2), (3, 3)", "DELETE FROM a WHERE id = 2")
    db.tx("UPDATE b SET id = id + 10", "INSERT INTO a VALUES (5, 'w')")
    db.sql("ALTER TABLE a ADD COLUMN extra INT")
    db.sql("INSERT INTO a VALUES (6, 'q', 7)", "UPDATE a SET extra = 1 WHERE id = 6")
    want = _canonical(drain(ref))
    assert len(want) == 13
    for k, src in srcs.items():
        got: list[ChangeEvent] = []
        gen = src.poll()
        for ev in gen:
            got.append(ev)
            if len(got) == k:
                break
        gen.close()
        got.extend(drain(src, blocks=True))
        assert _canonical(got) == want, k


def test_a_full_group_goes_out_before_the_poll_ends(
    db: TestDb, make_source: Callable[..., MySQLSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    from replicator.sources.mysql import rowgroup

    monkeypatch.setattr(rowgroup, "GROUP_MAX_ROWS", 5)
    db.sql("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
    src = make_source(db, tables=[f"{db.name}.a"])
    src.start(Checkpoints())
    assert drain(src) == []
    for i in range(4):
        db.sql(f"INSERT INTO a VALUES ({3 * i}, 'x'), ({3 * i + 1}, 'y'), ({3 * i + 2}, 'z')")
    got = drain(src, blocks=True)
    assert [e.rows for e in got if type(e) is BlockEvent] == [3, 3, 3, 3]
    assert len({id(e.block) for e in got if type(e) is BlockEvent}) == 2  # two groups of 6 rows
    assert [e.after["id"] for e in row_events(got)] == list(range(12))  # type: ignore[index]


def test_a_state_dir_keeps_the_group(
    db: TestDb, make_source: Callable[..., MySQLSource], tmp_path: Any
) -> None:
    """With a state directory the stream has an incremental copier; while it holds no
    chunk, a poll's rows events still share one block per table (not one block each)."""
    db.sql("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
    src = make_source(db, tables=[f"{db.name}.a"], state_dir=tmp_path / "state")
    src.start(Checkpoints())
    assert drain(src) == []
    for i in range(5):
        db.sql(f"INSERT INTO a VALUES ({2 * i}, 'x'), ({2 * i + 1}, 'y')")
    got = drain(src, blocks=True)
    assert [e.rows for e in got if type(e) is BlockEvent] == [2] * 5
    assert len({id(e.block) for e in got if type(e) is BlockEvent}) == 1
