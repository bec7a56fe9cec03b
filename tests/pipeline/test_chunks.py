"""Staged chunks of a transaction larger than a batch: the checkpoint rule per chunk range,
layout alignment, sequence numbers and the key-move analysis carried across chunks."""

import pyarrow as pa

from ops_mapping.contract import OP_COLUMN, SEQ_COLUMN, before_key_column
from replicator.events.model import SourcePosition
from replicator.pipeline.chunks import align
from replicator.pipeline.staging import deferred_key_moves, renumbered, staged_schema


def pos(*parts: int) -> SourcePosition:
    return SourcePosition("postgres", parts)


def test_align_adds_columns_the_table_gained_and_casts_promotions() -> None:
    old = pa.table({SEQ_COLUMN: pa.array([0, 1], pa.int64()), OP_COLUMN: ["c", "c"],
                    before_key_column("id"): pa.array([None, None], pa.int32()),
                    "id": pa.array([1, 2], pa.int32())})  # fmt: skip
    layout = staged_schema([("id", "long"), ("note", "string")], ["id"])
    out = align(old, layout)
    assert out.schema == layout
    assert out.column("id").to_pylist() == [1, 2] and out.column("note").null_count == 2


def test_renumbered_continues_the_sequence() -> None:
    t = pa.table({SEQ_COLUMN: pa.array([0, 1, 2], pa.int64()), OP_COLUMN: ["c", "u", "d"]})
    assert renumbered(t, 7).column(SEQ_COLUMN).to_pylist() == [7, 8, 9]
    assert renumbered(t, 0) is t


def _chunk(rows: list[tuple[str, int | None, int | None]]) -> pa.Table:
    ops, before, after = zip(*rows, strict=True)
    return pa.table({SEQ_COLUMN: pa.array(range(len(rows)), pa.int64()), OP_COLUMN: list(ops),
                     before_key_column("id"): pa.array(before, pa.int64()),
                     "id": pa.array(after, pa.int64())})  # fmt: skip


def test_key_moves_are_found_across_chunks() -> None:
    # update t set id = -id (chunk 1), then id = -id + 1 moves them again (chunk 2): the
    # second chunk's u of -1 moves a key the first chunk moved onto.
    moved: set[object] = set()
    first = deferred_key_moves(_chunk([("u", 1, -1), ("u", 2, -2)]), ["id"], moved)
    assert first == set() and moved == {(-1,), (-2,)}
    second = deferred_key_moves(_chunk([("u", -1, 2), ("c", None, 9)]), ["id"], moved)
    assert second == {(-1,)}
    # a chunk without key changes still sees a delete of a key moved earlier
    third = deferred_key_moves(_chunk([("d", -2, None)]), ["id"], moved)
    assert third == {(-2,)}
