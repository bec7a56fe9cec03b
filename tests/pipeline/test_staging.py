from decimal import Decimal

from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.pipeline.staging import OP, SEQ, before_key_column, stage_events

COLS = [("id", "long"), ("amount", "decimal(6,2)"), ("name", "string")]


def ev(i: int, op: Op, before: dict | None, after: dict | None) -> ChangeEvent:
    return ChangeEvent(table="s.t", op=op, before=before, after=after,
                       position=SourcePosition(source="x", parts=(i,)))


def test_layout_and_before_keys(tmp_path) -> None:
    dl = DeadLetterSink(tmp_path / "dl.jsonl")
    events = [
        ev(1, Op.CREATE, None, {"id": 1, "amount": Decimal("1.50"), "name": "a"}),
        ev(2, Op.UPDATE, None, {"id": 1, "amount": Decimal("2.00"), "name": "b"}),
        ev(3, Op.UPDATE, {"id": 1}, {"id": 2, "amount": None, "name": "c"}),
        ev(4, Op.DELETE, {"id": 2, "amount": None, "name": "c"}, None),
    ]
    staged = stage_events(events, COLS, ["id"], dl)
    t = staged.table
    assert t.column_names == [SEQ, OP, before_key_column("id"), "id", "amount", "name"]
    assert t.column(OP).to_pylist() == ["c", "u", "u", "d"]
    assert t.column(before_key_column("id")).to_pylist() == [None, 1, 1, 2]
    assert t.column("id").to_pylist() == [1, 1, 2, None]
    assert dl.total == 0


def test_unrepresentable_value_goes_to_dead_letters(tmp_path) -> None:
    dl = DeadLetterSink(tmp_path / "dl.jsonl")
    events = [
        ev(1, Op.CREATE, None, {"id": 1, "amount": Decimal("1.50"), "name": "a"}),
        ev(2, Op.CREATE, None, {"id": 2, "amount": Decimal("123456.5"), "name": "too big"}),
        ev(3, Op.CREATE, None, {"id": None, "amount": None, "name": "no key"}),
    ]
    staged = stage_events(events, COLS, ["id"], dl)
    assert staged.table.column("id").to_pylist() == [1]
    assert staged.dead_lettered == 2
    text = (tmp_path / "dl.jsonl").read_text()
    assert "amount" in text and "decimal(6,2)" in text and "x:2" in text
    assert "key column id is null" in text


def test_whole_row_staging_keeps_nulls_and_old_images_are_required(tmp_path) -> None:
    """A table without a primary key: every column is the row's identity, nulls included;
    an update or delete without its old image stops the table, naming it."""
    import pytest

    from replicator.pipeline.staging import BadChangeError, check_old_images

    dl = DeadLetterSink(tmp_path / "dl.jsonl")
    names = [c for c, _ in COLS]
    row = {"id": None, "amount": None, "name": "x"}
    events = [ev(1, Op.CREATE, None, row), ev(2, Op.DELETE, row, None), ev(3, Op.UPDATE, row, {**row, "id": 4})]
    check_old_images("s.t", events)
    t = stage_events(events, COLS, names, dl, whole_row=True).table
    assert t.column(before_key_column("name")).to_pylist() == [None, "x", "x"]
    assert t.column(before_key_column("id")).to_pylist() == [None, None, None] and dl.total == 0
    with pytest.raises(BadChangeError, match="no full old row image") as err:
        check_old_images("s.t", [ev(4, Op.UPDATE, None, row)])
    assert err.value.table == "s.t" and "REPLICA IDENTITY FULL" in (err.value.hint or "")
