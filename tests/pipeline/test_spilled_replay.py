"""The checkpoint rule for a spilled transaction at apply time (``apply._prepare``): a table
whose checkpoint already covers the transaction takes nothing of it again (a replay, or a
conflict retry that finds it committed), and the staged layout matches what the chunks'
check compares against."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from replicator.checkpoint import Checkpoint, Checkpoints, plan_batch
from replicator.commit.rules import SpilledRange, spill_needed
from replicator.errors import TerminalError
from replicator.events.block import BlockEvent, RowBlock
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.pipeline.apply import BatchCommit, TableTotals, apply_batch
from replicator.pipeline.runner import Replicator
from replicator.pipeline.spill import Spiller
from replicator.pipeline.staging import stage_events, staged_schema
from tests.maintenance.support import config

SCHEMA = TableSchema(
    table="public.t",
    columns=(ColumnSpec(name="id", type="long", nullable=False), ColumnSpec(name="v", type="string")),
    key_columns=("id",),
)


def _events(n: int, lsn: int = 500) -> list[ChangeEvent]:
    out = []
    for i in range(n):
        op, key = (Op.CREATE, i) if i < n // 2 else (Op.UPDATE, i - n // 2)  # update rows of chunk 1
        out.append(ChangeEvent(
            "public.t", op, {"id": key} if op is Op.UPDATE else None, {"id": key, "v": f"v{i}"},
            position=SourcePosition("postgres", (lsn, i)), schema=SCHEMA, tx_id="9", last_in_tx=i == n - 1,
        ))  # fmt: skip
    return out


def test_staged_schema_is_the_layout_stage_events_builds() -> None:
    cols = [("id", "long"), ("v", "string")]
    staged = stage_events(_events(4), cols, ["id"], DeadLetterSink(None))
    want = staged_schema(cols, ["id"])
    assert staged.table.schema.names == want.names and staged.table.schema.types == want.types


def test_a_covered_spilled_transaction_is_not_applied_again(tmp_path: Path) -> None:
    engine = Replicator(config(tmp_path), engine="local")
    env = engine.env
    events = _events(40)
    spiller = Spiller(env, engine.chunk_store)
    spiller({"public.t": events[:15]})
    spiller({"public.t": events[15:30]})
    spilled = spiller.take()
    assert spilled["public.t"].chunks == 2
    end = events[-1].position
    commit = BatchCommit(
        end=end,
        plan=plan_batch(events[0].position, end, engine.source.replay, Checkpoints(), target_file_bytes=1 << 27),
        fencing_token=None,
        acknowledged=None,
    )
    totals = TableTotals()
    first = apply_batch(env, {"public.t": events[30:]}, commit, lambda _t: totals, spilled)
    assert not first.stopped
    table = env.tables.load_existing("public.t")
    assert table is not None
    table.table = table.table.refresh()
    assert len(table.table.metadata.snapshots) == 1
    rows = sorted(table.table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": i, "v": f"v{i + 20}"} for i in range(20)]

    again = apply_batch(env, {"public.t": events[30:]}, commit, lambda _t: totals, spilled)
    assert again.checkpoints == first.checkpoints
    assert len(table.table.refresh().metadata.snapshots) == 1  # nothing committed twice
    engine.chunk_store.discard()


def test_a_spilled_range_starts_at_the_first_row_of_a_block_event(tmp_path: Path) -> None:
    """A run of inserts carried as ONE block event (position: its last row) that opens a
    spilled transaction: the range starts at its first row, so a checkpoint inside it is
    refused (``spill_needed``) instead of applying part of the transaction twice."""
    engine = Replicator(config(tmp_path), engine="local")
    block = RowBlock(pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(["x"] * 10, pa.large_string())}))
    ev = BlockEvent("public.t", SCHEMA, block, 0, 10, "postgres", (500,), 0, Op.CREATE, None, "9", False)
    spiller = Spiller(engine.env, engine.chunk_store)
    spiller({"public.t": [ev]})
    spilled = spiller.take()["public.t"]
    assert spilled.first == SourcePosition("postgres", (500, 0))
    assert spilled.last == SourcePosition("postgres", (500, 9))
    inside = Checkpoint(position=SourcePosition("postgres", (500, 4)), writer_id="other")
    assert isinstance(spill_needed("public.t", inside, SpilledRange(spilled.first, spilled.last)), TerminalError)
    engine.chunk_store.discard()
