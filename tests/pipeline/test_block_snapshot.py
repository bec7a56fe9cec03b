"""Snapshot chunks as ONE block event each (``events.block.BlockEvent``) through the batcher,
the skip rule and staging: exactly once across a crash between chunks (and inside one), and
what the vectorised build refuses goes row by row. Pure: no database, no catalog."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from replicator.checkpoint import Checkpoint, Checkpoints
from replicator.commit.rules import not_yet_in
from replicator.config import BatchConfig
from replicator.events.block import BlockEvent, RowBlock, first_position, row_count, row_events
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.pipeline.batcher import Batcher
from replicator.pipeline.staging import stage_events

LSN = 7
TABLE = "public.t"
COLUMNS = [("id", "long"), ("v", "string")]
SCHEMA = TableSchema(table=TABLE, columns=(ColumnSpec(name="id", type="long"), ColumnSpec(name="v", type="string")),
                     key_columns=("id",))  # fmt: skip
ROWS = 20


def _block(first_key: int, n: int, v: str | None = "x") -> RowBlock:
    return RowBlock(pa.table({"id": pa.array(range(first_key, first_key + n), pa.int64()),
                              "v": pa.array([v] * n, pa.large_string())}))  # fmt: skip


def _chunks(sizes: list[int]) -> list[BlockEvent]:
    """The table (keys 0..ROWS-1, seq = key) read in chunks of these sizes."""
    out, key = [], 0
    for n in sizes:
        out.append(BlockEvent(TABLE, SCHEMA, _block(key, n), 0, n, "postgres", (LSN,), key))
        key += n
    assert key == ROWS
    return out


def _pos(seq: int) -> SourcePosition:
    return SourcePosition("postgres", (LSN, seq))


def test_block_event_positions_and_rows() -> None:
    (ev,) = _chunks([ROWS])
    assert row_count(ev) == ROWS and ev.position == _pos(ROWS - 1) and first_position(ev) == _pos(0)
    rows = row_events([ev])
    assert [r.position for r in rows] == [_pos(i) for i in range(ROWS)]
    assert [dict(r.after or {}) for r in rows] == [{"id": i, "v": "x"} for i in range(ROWS)]
    assert all(r.op is Op.READ and r.last_in_tx for r in rows)
    # The skip rule per row: a checkpoint before, inside, at the end of, or past the block.
    assert ev.after_position(SourcePosition("postgres", (LSN - 1, 99))) is ev
    assert ev.after_position(_pos(ROWS - 1)) is None and ev.after_position(_pos(ROWS + 5)) is None
    tail = ev.after_position(_pos(4))
    assert tail is not None and first_position(tail) == _pos(5) and tail.position == ev.position
    assert [r.after["id"] for r in row_events([tail]) if r.after] == list(range(5, ROWS))


def _run(chunks: list[ChangeEvent], table: list[int], cp: Checkpoint | None, crash_after: int | None,
         tmp_path: Path) -> Checkpoint | None:  # fmt: skip
    """The pipeline's part for one table: the runner's skip, the batcher (8-row batches),
    the skip rule, staging; a "commit" appends the staged keys and moves the checkpoint.
    ``crash_after``: the process dies after that many commits."""
    batcher = Batcher(BatchConfig(max_events=8, linger_seconds=60))
    commits = 0
    for ev in chunks:
        known = Checkpoints.at({} if cp is None else {TABLE: cp.position})
        if known.covers(ev.table, ev.position):
            continue
        batch = batcher.add(ev)
        if batch is None:
            continue
        events = not_yet_in(cp, batch.events[TABLE])
        staged = stage_events(events, COLUMNS, ("id",), DeadLetterSink(tmp_path / "dead.jsonl"))
        assert staged.table.column("__rep_op").to_pylist() == ["r"] * staged.events
        table.extend(staged.table.column("id").to_pylist())
        cp = Checkpoint(position=batch.end_position, writer_id="me")
        commits += 1
        if crash_after is not None and commits >= crash_after:
            return cp
    batch = batcher.flush()
    if batch is not None:
        staged = stage_events(not_yet_in(cp, batch.events[TABLE]), COLUMNS, ("id",), DeadLetterSink(tmp_path / "d"))
        table.extend(staged.table.column("id").to_pylist())
        cp = Checkpoint(position=batch.end_position, writer_id="me")
    return cp


@pytest.mark.parametrize("crash_after", [1, 2])
@pytest.mark.parametrize("again", [[4, 4, 4, 4, 4], [3, 3, 3, 3, 3, 5], [20], [1] * 20, [7, 13]])
def test_crash_between_chunks_exactly_once(tmp_path: Path, crash_after: int, again: list[int]) -> None:
    """Chunks committed, then a crash before the acknowledgement moved: the restarted source
    hands the same rows out again (same seqs), chunked differently (a checkpoint may fall
    inside a block): every row ends in the table exactly once, as plain 'r' rows."""
    table: list[int] = []
    cp = _run(list(_chunks([4, 4, 4, 4, 4])), table, None, crash_after, tmp_path)
    assert cp is not None and 0 < len(table) < ROWS
    cp = _run(list(_chunks(again)), table, cp, None, tmp_path)
    assert sorted(table) == list(range(ROWS)) and len(table) == ROWS
    assert cp is not None and cp.position == _pos(ROWS - 1)


def test_refused_block_goes_row_by_row(tmp_path: Path) -> None:
    """A null key in a block: the vectorised build refuses it, the rows go the per-row way,
    which dead-letters exactly that row and keeps the rest."""
    block = RowBlock(pa.table({"id": pa.array([1, None, 3], pa.int64()), "v": pa.array(["a", "b", "c"], pa.large_string())}))
    ev = BlockEvent(TABLE, SCHEMA, block, 0, 3, "postgres", (LSN,), 0)
    sink = DeadLetterSink(tmp_path / "dead.jsonl")
    staged = stage_events([ev], COLUMNS, ("id",), sink)
    assert staged.table.column("id").to_pylist() == [1, 3] and staged.dead_lettered == 1
    assert "key column id" in (tmp_path / "dead.jsonl").read_text()


def test_block_event_is_never_copied_as_one_row() -> None:
    (ev,) = _chunks([ROWS])
    with pytest.raises(TypeError, match="cannot be replaced as one row"):
        ev.replace(after={"id": 1, "v": "y"})
