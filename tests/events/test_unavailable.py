"""Debezium's unavailable-value placeholder (unchanged TOASTed columns without REPLICA
IDENTITY FULL) is parsed into ``UNAVAILABLE`` and filled from earlier images, never written
as data (issue 10 item 7). Placeholder shapes as the Debezium 3.6 Postgres connector sends
them (captured with the real engine, see docs/debezium.md)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from replicator.errors import BadInputError
from replicator.events.debezium import DebeziumParser
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema
from replicator.events.unavailable import UNAVAILABLE, Key, fill_unavailable
from tests.events.dbz_lines import field, line, pos

PH = "__debezium_unavailable_value"
TOAST_FIELDS = [
    field("small", "int32"),
    field("ltxt", "string"),
    field("lby", "bytes"),
    {"type": "array", "items": {"type": "string", "optional": True}, "optional": True, "field": "larr"},
    field("lj", "string", "io.debezium.data.Json"),
    {"type": "array", "items": {"type": "int32", "optional": True}, "optional": True, "field": "lint"},
]
# What the connector sends for each column of an UPDATE that left them alone.
PLACEHOLDERS = {
    "ltxt": PH,
    "lby": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",  # base64 of the placeholder's bytes
    "larr": [PH],
    "lj": PH,
    "lint": list(PH.encode()),  # an int[]: the placeholder's bytes as numbers
}


def test_every_placeholder_shape_parses_to_unavailable() -> None:
    parser = DebeziumParser()
    ev = parser.parse(line(TOAST_FIELDS, {"id": 1, "small": 1, **PLACEHOLDERS}, op="u"), pos())
    assert ev is not None and ev.after is not None
    assert ev.after["small"] == 1
    for col in PLACEHOLDERS:
        assert ev.after[col] is UNAVAILABLE, col
    # string decimals / hex bytea / schemaless: the plain text is the placeholder too
    ev = DebeziumParser().parse(
        line([], {"id": 1, "nu": PH, "by": PLACEHOLDERS["lby"]}, op="u", schemas=False), pos()
    )
    assert ev is not None and ev.after is not None
    assert ev.after["nu"] is UNAVAILABLE and ev.after["by"] is UNAVAILABLE


def test_real_values_are_kept() -> None:
    real = {"id": 1, "small": 0, "ltxt": "x" * 3000, "lby": "q6ur", "larr": ["y"], "lj": "[1]",
            "lint": [95, 95]}
    ev = DebeziumParser().parse(line(TOAST_FIELDS, real), pos())
    assert ev is not None and ev.after is not None and UNAVAILABLE not in ev.after.values()
    assert ev.after["lint"] == "[95,95]" and ev.after["lby"] == b"\xab\xab\xab"


def test_sentinel_is_one_object() -> None:
    assert copy.deepcopy(UNAVAILABLE) is UNAVAILABLE
    assert pickle.loads(pickle.dumps(UNAVAILABLE)) is UNAVAILABLE
    assert "unavailable" in repr(UNAVAILABLE)


# --------------------------------------------------------------------------- fill_unavailable

SCHEMA = TableSchema(
    table="public.t",
    columns=(ColumnSpec(name="id", type="long", nullable=False), ColumnSpec(name="small", type="int"),
             ColumnSpec(name="big", type="string"), ColumnSpec(name="blob", type="binary")),
    key_columns=("id",),
)


def ev(op: str, n: int, after: dict[str, Any] | None = None, before: dict[str, Any] | None = None,
       tx: str | None = None) -> ChangeEvent:
    return ChangeEvent(table="public.t", op=Op(op), before=before, after=after, schema=SCHEMA,
                       position=SourcePosition(source="file", parts=("f", n)), tx_id=tx)


def row(i: int, small: int = 0, big: Any = "BIG", blob: Any = b"B") -> dict[str, Any]:
    return {"id": i, "small": small, "big": big, "blob": blob}


class Lookup:
    def __init__(self, rows: Mapping[Key, Mapping[str, Any] | None]) -> None:
        self.rows = rows
        self.calls: list[list[Key]] = []

    def __call__(self, keys: Sequence[Key]) -> Mapping[Key, Mapping[str, Any] | None]:
        self.calls.append(list(keys))
        return {k: self.rows.get(k) for k in keys}


def test_filled_from_the_latest_earlier_image_in_the_batch() -> None:
    events = [
        ev("c", 1, row(1, big="v1")),
        ev("u", 2, row(1, small=1, big="v2")),
        ev("u", 3, row(1, small=2, big=UNAVAILABLE, blob=UNAVAILABLE)),
        ev("u", 4, row(1, small=3, big=UNAVAILABLE, blob=UNAVAILABLE)),
    ]
    lookup = Lookup({})
    out = fill_unavailable(events, ("id",), lookup)
    assert out[2].after == row(1, small=2, big="v2") and out[3].after == row(1, small=3, big="v2")
    assert out[0] is events[0] and out[1] is events[1]  # untouched events are the same objects
    assert lookup.calls == []  # everything was in the batch


def test_filled_from_the_table_when_the_batch_has_no_image() -> None:
    events = [
        ev("u", 1, row(1, small=5, big=UNAVAILABLE)),
        ev("u", 2, row(2, small=6, big=UNAVAILABLE, blob=UNAVAILABLE)),
        ev("u", 3, row(1, small=7, big=UNAVAILABLE)),
        ev("c", 4, row(3, big="plain")),
    ]
    lookup = Lookup({(1,): row(1, big="t1", blob=b"1"), (2,): row(2, big="t2", blob=b"2")})
    out = fill_unavailable(events, ("id",), lookup)
    assert [e.after for e in out] == [
        row(1, small=5, big="t1", blob=b"B"), row(2, small=6, big="t2", blob=b"2"),
        row(1, small=7, big="t1", blob=b"B"), row(3, big="plain"),
    ]
    assert lookup.calls == [[(1,), (2,)]]  # one call, every key it needs


def test_key_change_create_filled_from_the_deleted_key() -> None:
    """A primary-key change (REPLICA IDENTITY DEFAULT) comes as d(old key) + c(new key) in
    one transaction; the create carries placeholders for the unchanged large columns."""
    events = [
        ev("d", 1, before={"id": 1, "small": None, "big": None, "blob": None}, tx="77"),
        ev("c", 2, row(10, small=1, big=UNAVAILABLE, blob=UNAVAILABLE), tx="77"),
        ev("u", 3, row(20, small=1, big="x")),
        ev("d", 4, before={"id": 20, "small": None, "big": None, "blob": None}, tx="78"),
        ev("c", 5, row(21, small=2, big=UNAVAILABLE), tx="78"),
    ]
    lookup = Lookup({(1,): row(1, big="old big", blob=b"old")})
    out = fill_unavailable(events, ("id",), lookup)
    assert out[1].after == row(10, small=1, big="old big", blob=b"old")
    assert out[4].after == row(21, small=2, big="x")  # key 20's image earlier in the batch
    assert lookup.calls == [[(1,)]]


@pytest.mark.parametrize(
    "events",
    [
        [ev("u", 9, row(5, big=UNAVAILABLE))],  # the row is not in the table
        [ev("c", 9, row(5, big=UNAVAILABLE))],  # a create that is no key change
        [ev("d", 8, before={"id": 1, "small": None, "big": None, "blob": None}, tx="1"),
         ev("c", 9, row(5, big=UNAVAILABLE), tx="2")],  # delete of another transaction
        [ev("c", 7, row(5, big="a")), ev("d", 8, before={"id": 5}),
         ev("u", 9, row(5, big=UNAVAILABLE))],  # deleted earlier in the batch
    ],
)
def test_a_value_found_nowhere_is_refused_by_name(events: list[ChangeEvent]) -> None:
    with pytest.raises(BadInputError) as info:
        fill_unavailable(events, ("id",), Lookup({}))
    err = info.value
    assert err.table == "public.t" and err.key == 5
    assert err.position == SourcePosition(source="file", parts=("f", 9))
    assert "'big'" in err.message and err.hint and "REPLICA IDENTITY FULL" in err.hint


def test_nothing_to_fill_calls_nothing() -> None:
    events = [ev("c", 1, row(1)), ev("u", 2, row(1, small=2)), ev("d", 3, before=row(1))]
    assert fill_unavailable(events, ("id",), None) == events
