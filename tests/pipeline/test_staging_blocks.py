"""Staging snapshot rows carried as Arrow blocks (``events.block``): the sliced columns equal
the value-by-value build of the same rows, across blocks, promotions and missing columns;
anything the slices cannot stand for goes value by value."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from replicator.events.block import BlockEvent, BlockRow, RowBlock, row_events
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.pipeline.staging import stage_events


def _events(blocks: list[RowBlock], rows: list[tuple[int, int]]) -> list[ChangeEvent]:
    return [
        ChangeEvent("public.t", Op.READ, None, BlockRow(blocks[b], i),
                    position=SourcePosition("postgres", (1, n)), last_in_tx=True)
        for n, (b, i) in enumerate(rows)
    ]  # fmt: skip


def _as_dicts(events: list[ChangeEvent]) -> list[ChangeEvent]:
    return [e.replace(after=dict(e.after or {})) for e in events]


def _block(ids: list[int], vals: list[str | None]) -> RowBlock:
    return RowBlock(pa.table({
        "id": pa.array(ids, pa.int32()),
        "v": pa.array(vals, pa.large_string()),
        "d": pa.array([Decimal("1.50") if i % 2 else None for i in ids], pa.decimal128(5, 2)),
        "f": pa.array([i / 3 for i in ids], pa.float64()),
    }))  # fmt: skip


def test_block_slices_equal_value_by_value_build() -> None:
    a, b = _block([1, 2, 3, 4], ["a", None, "", "d"]), _block([5, 6], ["e\nf", "g"])
    events = _events([a, b], [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (0, 0)])
    # The table has promoted types (long, decimal(9,2)), a float, and a column no block has.
    columns = [("id", "long"), ("v", "string"), ("d", "decimal(9,2)"), ("f", "float"),
               ("added", "date")]  # fmt: skip
    sink = DeadLetterSink(None)
    fast = stage_events(events, columns, ["id"], sink)
    slow = stage_events(_as_dicts(events), columns, ["id"], sink)
    assert fast.table.equals(slow.table) and fast.table.schema == slow.table.schema
    assert fast.table.column("id").to_pylist() == [2, 3, 4, 5, 6, 1]
    assert (fast.events, fast.dead_lettered) == (6, 0)


def test_a_cast_the_values_would_refuse_goes_value_by_value(tmp_path: Path) -> None:
    """A decimal block column into a string table column: Arrow would cast it to text, the
    value-by-value build refuses it (dead letter): the slices must not stand in for it."""
    events = _events([_block([1, 2], ["a", "b"])], [(0, 0), (0, 1)])
    sink = DeadLetterSink(tmp_path / "dead.jsonl")
    staged = stage_events(events, [("id", "long"), ("d", "string")], ["id"], sink)
    assert staged.table.column("id").to_pylist() == [2]  # id 1 holds a decimal: no text
    assert staged.dead_lettered == 1 and sink.total == 1


def test_consecutive_block_events_are_staged_without_copying_their_rows() -> None:
    """Snapshot chunks handed on one after another (a checkpoint inside the first): the staged
    columns are the blocks' own buffers, sliced (issue 27 item 4: a batch's rows are not held
    twice until its commit), and equal the value-by-value build."""
    a, b = _block([1, 2, 3], ["a", "b", "c"]), _block([4, 5], ["d", None])
    schema = TableSchema(table="public.t", columns=(ColumnSpec(name="id", type="long"), ColumnSpec(name="v", type="string")),
                         key_columns=("id",))
    events: list[ChangeEvent] = [
        BlockEvent("public.t", schema, a, 1, 3, "postgres", (1,), 1),
        BlockEvent("public.t", schema, b, 0, 2, "postgres", (1,), 3),
    ]
    columns = [("id", "long"), ("v", "string")]
    sink = DeadLetterSink(None)
    fast = stage_events(events, columns, ["id"], sink)
    slow = stage_events(_as_dicts(row_events(events)), columns, ["id"], sink)
    assert fast.table.equals(slow.table) and fast.table.column("v").to_pylist() == ["b", "c", "d", None]
    staged = {c.buffers()[2].address for c in fast.table.column("v").chunks}
    assert staged == {blk.table.column("v").chunks[0].buffers()[2].address for blk in (a, b)}
