"""The MERGE / pyiceberg baselines take the rows the engine's source hands out, block events
included (``source.change_blocks`` is on by default for Postgres): the first `make bench` with
blocks on failed every baseline with "Column 'id' is declared non-nullable but contains nulls"."""

from __future__ import annotations

import pyarrow as pa

from benchmarks.baselines import latest_per_key
from replicator.events.block import BlockEvent, RowBlock
from replicator.events.model import ColumnSpec, Op, TableSchema

SCHEMA = TableSchema(
    table="public.t",
    columns=(
        ColumnSpec(name="id", type="long", nullable=False),
        ColumnSpec(name="v", type="string"),
    ),
    key_columns=("id",),
)


def test_latest_per_key_takes_the_rows_of_block_events() -> None:
    block = RowBlock(
        pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "v": pa.array(["a", "b", "c"], pa.large_string()),
            }
        )
    )
    ev = BlockEvent(
        "public.t", SCHEMA, block, 0, 3, "postgres", (500,), 0, Op.CREATE, None, "9", True
    )
    latest = latest_per_key([ev])
    assert {k: dict(v) if v is not None else None for k, v in latest.items()} == {
        1: {"id": 1, "v": "a"},
        2: {"id": 2, "v": "b"},
        3: {"id": 3, "v": "c"},
    }
