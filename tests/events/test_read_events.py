"""read_events: the snapshot hot path's events are exactly the ones the constructor gives."""

from __future__ import annotations

import pickle

from replicator.events.model import (
    ChangeEvent,
    ColumnSpec,
    Op,
    SourcePosition,
    TableSchema,
    read_events,
)


def test_read_events_equal_constructed_events() -> None:
    schema = TableSchema(table="public.t", columns=(ColumnSpec(name="id", type="long"),), key_columns=("id",))
    rows = [{"id": 1}, {"id": 2}]
    got = read_events("public.t", schema, rows, "postgres", [(7, 0), (7, 1)])
    want = [
        ChangeEvent("public.t", Op.READ, None, row, position=SourcePosition("postgres", (7, i)),
                    schema=schema, last_in_tx=True)  # fmt: skip
        for i, row in enumerate(rows)
    ]
    assert got == want
    assert [type(e) for e in got] == [ChangeEvent, ChangeEvent]
    assert got[1].position == SourcePosition("postgres", (7, 1)) and hash(got[1].position) == hash(want[1].position)
    assert got[0].after is rows[0]  # taken as given, as the constructor does
    assert pickle.loads(pickle.dumps(got[0])) == want[0]
    assert got[0].replace(op=Op.CREATE).op is Op.CREATE
