"""A snapshot chunk converted column-wise (``sources/mysql/blocks.py``): the same values as
the row-by-row path for every column type, refused chunks row by row, the skip rule inside a
block, and one block event per chunk for a consumer that takes blocks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from mysql_testkit import TestDb, drain
from test_mysql_types import COLUMNS, EMPTY, ROW1

from replicator.checkpoint import Checkpoints
from replicator.events.block import BlockEvent, BlockRow
from replicator.events.model import ChangeEvent, Op
from replicator.sources.common.snapshot import Boundary
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.blocks import chunk_block
from replicator.sources.mysql.emit import SourceStats
from replicator.sources.mysql.position import BinlogPoint, BinlogPosition, snapshot_parts
from replicator.sources.mysql.setup import TableInfo
from replicator.sources.mysql.snapshot import Chunk, SnapTable, snap_table
from replicator.sources.mysql.snapshot_phase import MySnapshotPhase
from replicator.sources.mysql.types import ColumnDef

# -- unit -------------------------------------------------------------------------------------

DEFS = [
    ColumnDef("id", "int"),
    ColumnDef("b", "tinyint", is_bool=True),
    ColumnDef("u", "bigint", unsigned=True),
    ColumnDef("d", "decimal", precision=10, scale=2),
    ColumnDef("f", "float"),
    ColumnDef("bt", "bit", length=10),
    ColumnDef("tm", "time", fsp=3),
    ColumnDef("dt", "date"),
    ColumnDef("ts", "timestamp", fsp=6),
    ColumnDef("s", "set", values=("a", "b")),
]
ROWS = [
    (1, 2, 2**64 - 1, Decimal("-1.50"), 0.25, b"\x02\x01", timedelta(seconds=-1), date(2024, 2, 29),
     datetime(2024, 1, 2, 3, 4, 5, 6), {"b", "a"}),
    (2, None, None, None, None, None, None, None, None, None),
    (3, 0, 0, Decimal("0.00"), 1e38, b"\x00\x00", timedelta(0), date(1, 1, 1), datetime(1970, 1, 1), "b"),
]  # fmt: skip


def _table(defs: list[ColumnDef] = DEFS, zero_dates: str = "null") -> SnapTable:
    return snap_table(TableInfo("s", "t", (defs[0].name,)), defs, zero_dates)


def _block(t: SnapTable, rows: list[tuple[Any, ...]]) -> Any:
    return chunk_block(t.rows.names, [m.spec.type for m in t.mappings], t.rows.snapshot, rows)


def test_block_values_are_the_row_paths() -> None:
    t = _table()
    block = _block(t, ROWS)
    assert block is not None
    for i, row in enumerate(ROWS):
        want = t.rows.from_snapshot(row)
        got = dict(block.row(i))
        assert got == want
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}
    assert block.row(0)["ts"].tzinfo is UTC


@pytest.mark.parametrize(
    ("defs", "rows"),
    [
        ([ColumnDef("id", "int"), ColumnDef("dt", "date")], [(1, date(2024, 1, 1)), (2, "0000-00-00")]),
        ([ColumnDef("id", "int"), ColumnDef("v", "smallint")], [(1, 2**40)]),  # out of int32
        ([ColumnDef("id", "int"), ColumnDef("v", "varchar")], [(1, "x"), (2, b"x")]),  # bytes for text
        ([ColumnDef("id", "int"), ColumnDef("v", "double")], [(1, 1)]),  # an int, not a float
        ([ColumnDef("id", "int"), ColumnDef("v", "decimal", precision=5, scale=1)], [(1, Decimal("1.25"))]),
        ([ColumnDef("id", "int"), ColumnDef("j", "json", is_json=True)], [(1, b"\xff")]),
    ],
)  # fmt: skip
def test_refused_chunks_go_row_by_row(defs: list[ColumnDef], rows: list[tuple[Any, ...]]) -> None:
    t = _table(defs)
    assert _block(t, rows) is None
    assert t.rows.zero_count == 0  # the row path counts zero dates, once


def _phase(t: SnapTable, committed: BinlogPosition | None, blocks: bool) -> MySnapshotPhase:
    phase = MySnapshotPhase()
    phase._snap_point = BinlogPoint("binlog.000002", 400)
    phase._committed = {} if committed is None else {t.info.qualified: committed}
    phase.stats = SourceStats()
    phase.snapshot_blocks = blocks
    return phase


@pytest.mark.parametrize("blocks", [True, False])
@pytest.mark.parametrize("done_seq", [None, 5, 11, 12, 30])
def test_rows_at_or_below_the_committed_position_are_skipped(blocks: bool, done_seq: int | None) -> None:
    t = _table()
    rows = [(i, *ROWS[0][1:]) for i in range(20)]
    chunk = Chunk(t, rows, 10, Boundary(29, 0, (19,)), _block(t, rows))
    done = None if done_seq is None else BinlogPosition(*snapshot_parts("binlog.000002", 400, done_seq))
    evs = list(_phase(t, done, blocks)._block_events(chunk, 2, 20))
    row_path = [_phase(t, done, False)._snapshot_event(chunk, i, snapshot_parts("binlog.000002", 400, 10 + i))
                for i in range(2, 20)]  # fmt: skip
    want = [e for e in row_path if e is not None]
    got = [one for e in evs for one in (e.events() if isinstance(e, BlockEvent) else [e])]
    assert [(e.position, dict(e.after or {})) for e in got] == [(e.position, e.after) for e in want]
    assert len(evs) == (min(len(want), 1) if blocks else len(want))


# -- integration ------------------------------------------------------------------------------


def _rows(events: list[ChangeEvent]) -> list[ChangeEvent]:
    return [one for e in events for one in (e.events() if isinstance(e, BlockEvent) else [e])]


@pytest.mark.integration
def test_every_type_block_rows_equal_the_row_paths(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    db.sql(f"CREATE TABLE alltypes ({COLUMNS})")
    db.sql(f"INSERT INTO alltypes VALUES ({ROW1})", "INSERT INTO alltypes (id) VALUES (2)", EMPTY.format(3))
    table = f"{db.name}.alltypes"
    by_block = make_source(db, tables=[table])
    by_block.start(Checkpoints.at({}))
    by_block.snapshot_blocks = True  # as the pipeline's reader sets it
    blocks = drain(by_block, blocks=True)
    by_row = make_source(db, tables=[table])
    by_row.start(Checkpoints.at({}))
    assert by_row._snap is not None
    by_row._snap.blocks = False  # the row-by-row path: pymysql tuples -> from_snapshot
    rows = drain(by_row, blocks=True)
    assert [type(e) for e in blocks] == [BlockEvent]  # one chunk, one event
    got = _rows(blocks)
    assert all(type(e.after) is BlockRow for e in got)
    assert [e.op for e in got] == [e.op for e in rows] == [Op.READ] * 3
    assert [e.position.parts[2] for e in got] == [e.position.parts[2] for e in rows]
    assert got[0].schema_ == rows[0].schema_
    for g, r in zip(got, rows, strict=True):
        after, want = dict(g.after or {}), r.after or {}
        assert after == want
        assert {k: type(v) for k, v in after.items()} == {k: type(v) for k, v in want.items()}
    assert by_block.stats.snapshot_rows == by_row.stats.snapshot_rows == 3

