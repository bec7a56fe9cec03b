"""Golden cases: exact outputs of BatchMapper for the classic CDC shapes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ops_mapping import BatchMapper, MappingPolicy, OpsMappingError
from ops_mapping.iceberg_semantics import IcebergTableModel, apply_batch
from tests.ops_mapping.opsmap_harness import (
    COMPOSITE,
    SIMPLE,
    Ev,
    Replica,
    eq_keys,
    events_batch,
    map_batch,
    pos_deletes,
    written,
)


def c(seq: int, k: int, val: str, op: str = "c") -> Ev:
    return Ev(seq, op, None, {"id": k, "val": val})


def r(seq: int, k: int, val: str) -> Ev:
    return c(seq, k, val, "r")


def u(seq: int, old: int, new: int, val: str) -> Ev:
    return Ev(seq, "u", (old,), {"id": new, "val": val})


def d(seq: int, k: int) -> Ev:
    return Ev(seq, "d", (k,), None)


def live(rep: Replica) -> dict[int, str]:
    return {k[0]: row["val"] for k, row in rep.live().items()}


def test_insert_update_delete_in_one_batch_uses_position_deletes_only() -> None:
    rep = Replica(SIMPLE)
    run = rep.batch([c(1, 1, "a"), u(2, 1, 1, "b"), d(3, 1)])
    assert [(f, p, row["val"]) for f, p, row in written(run)] == [(0, 0, "a"), (0, 1, "b")]
    assert pos_deletes(run) == [(0, 0), (0, 1)]
    assert eq_keys(run) == []
    assert live(rep) == {}
    s = run.tail.stats
    assert (s.events, s.rows_written, s.position_deletes, s.equality_deletes, s.data_files) == (
        3,
        2,
        2,
        0,
        1,
    )
    assert s.live_rows_written == 0


def test_insert_update_delete_over_three_batches_uses_equality_deletes() -> None:
    rep = Replica(SIMPLE)
    first = rep.batch([c(1, 1, "a")])
    assert (pos_deletes(first), eq_keys(first)) == ([], [])
    assert live(rep) == {1: "a"}
    second = rep.batch([u(2, 1, 1, "b")])
    assert (pos_deletes(second), eq_keys(second)) == ([], [(1,)])
    assert live(rep) == {1: "b"}
    third = rep.batch([d(3, 1)])
    assert (pos_deletes(third), eq_keys(third), written(third)) == ([], [(1,)], [])
    assert live(rep) == {}


def test_delete_then_reinsert_in_one_batch() -> None:
    rep = Replica(SIMPLE)
    rep.batch([c(1, 1, "a")])
    run = rep.batch([d(2, 1), c(3, 1, "z")])
    assert eq_keys(run) == [(1,)]
    assert pos_deletes(run) == []
    assert live(rep) == {1: "z"}


def test_primary_key_change_across_batches() -> None:
    rep = Replica(SIMPLE)
    rep.batch([c(1, 1, "a"), c(2, 3, "c")])
    run = rep.batch([u(3, 1, 2, "b")])
    assert eq_keys(run) == [(1,)]  # the new key is not upserted by default
    assert [row for _, _, row in written(run)] == [{"id": 2, "val": "b"}]
    assert live(rep) == {2: "b", 3: "c"}


def test_primary_key_change_within_one_batch() -> None:
    rep = Replica(SIMPLE)
    run = rep.batch([c(1, 1, "a"), u(2, 1, 2, "b"), u(3, 2, 1, "c")])
    assert pos_deletes(run) == [(0, 0), (0, 1)]
    assert eq_keys(run) == []
    assert live(rep) == {1: "c"}


def test_key_change_onto_a_key_written_in_this_batch_replaces_its_row() -> None:
    rep = Replica(SIMPLE)  # not something a valid source sends, but it must not duplicate
    run = rep.batch([c(1, 1, "a"), c(2, 2, "b"), u(3, 1, 2, "c")])
    assert pos_deletes(run) == [(0, 0), (0, 1)]
    assert live(rep) == {2: "c"}


def test_before_key_column_is_cast_to_the_key_type() -> None:
    batch = events_batch(SIMPLE, [c(1, 1, "a"), d(2, 1), d(3, 7)])
    i = batch.schema.get_field_index("__rep_bk__id")
    batch = batch.set_column(i, "__rep_bk__id", batch.column(i).cast(pa.int32()))
    mapper = BatchMapper(("id",), SIMPLE.schema)
    chunk = mapper.map_chunk(batch)
    assert chunk.equality_deletes.to_pylist() == [{"id": 7}]
    assert chunk.equality_deletes.schema.field("id").type == pa.int64()
    assert mapper.finish().stats.position_deletes == 1


def test_primary_key_change_upserts_new_key_when_creates_upsert() -> None:
    rep = Replica(SIMPLE, MappingPolicy(upsert_creates=True))
    rep.batch([c(1, 1, "a")])
    run = rep.batch([u(2, 1, 2, "b"), u(3, 2, 2, "c")])
    assert eq_keys(run) == [(1,), (2,)]
    assert pos_deletes(run) == [(0, 0)]
    assert live(rep) == {2: "c"}


def test_update_of_key_created_two_batches_earlier() -> None:
    rep = Replica(SIMPLE)
    rep.batch([c(1, 1, "a")])
    rep.batch([c(2, 2, "b")])
    run = rep.batch([u(3, 1, 1, "a2"), u(4, 1, 1, "a3")])
    assert eq_keys(run) == [(1,)]
    assert pos_deletes(run) == [(0, 0)]
    assert live(rep) == {1: "a3", 2: "b"}


def test_delete_of_absent_key_is_one_harmless_equality_delete() -> None:
    rep = Replica(SIMPLE)
    rep.batch([c(1, 1, "a")])
    run = rep.batch([d(2, 9), d(3, 9)])
    assert eq_keys(run) == [(9,)]
    assert written(run) == []
    assert run.tail.stats.data_files == 0
    assert live(rep) == {1: "a"}


def test_insert_delete_insert_in_one_batch_leaves_one_row() -> None:
    rep = Replica(SIMPLE, MappingPolicy(upsert_creates=True))
    run = rep.batch([c(1, 1, "a"), d(2, 1), c(3, 1, "b"), d(4, 1), c(5, 1, "c")])
    assert pos_deletes(run) == [(0, 0), (0, 1)]
    assert eq_keys(run) == [(1,)]  # once per batch, from the first upserting insert
    assert live(rep) == {1: "c"}


def test_reads_upsert_by_default_and_creates_do_not() -> None:
    rep = Replica(SIMPLE)
    rep.batch([c(1, 1, "a"), c(2, 2, "b")])
    run = rep.batch([r(3, 1, "a"), r(4, 1, "a"), c(5, 3, "c")])
    assert eq_keys(run) == [(1,)]
    assert pos_deletes(run) == [(0, 0)]
    assert live(rep) == {1: "a", 2: "b", 3: "c"}
    blind = Replica(SIMPLE, MappingPolicy(upsert_reads=False))
    blind.batch([c(1, 1, "a")])
    blind.batch([r(2, 1, "a")])
    assert blind.table.duplicate_keys() == {(1,): 2}  # what upsert_reads prevents


def test_state_carries_over_chunks() -> None:
    rep = Replica(SIMPLE)
    run = rep.batch([c(1, 1, "a"), c(2, 2, "b"), d(3, 1), u(4, 2, 2, "b2")], cuts=[1, 3, 3])
    assert pos_deletes(run) == [(0, 0), (0, 1)]
    assert eq_keys(run) == []
    assert [len(ch.data) for ch in run.chunks] == [1, 1, 0, 1]
    assert live(rep) == {2: "b2"}


# Row estimate of SIMPLE: validity 2 bits + int64 + string offset = 98 bits -> 13 bytes, + len.
def test_file_rolling_with_tiny_target() -> None:
    rep = Replica(SIMPLE, MappingPolicy(target_file_bytes=30))
    events = [c(i, i, "x") for i in range(1, 6)] + [d(6, 1), d(7, 5), d(8, 3)]
    run = rep.batch(events, cuts=[3])
    assert run.tail.file_rows == (2, 2, 1)
    assert run.tail.file_estimated_bytes == (28, 28, 14)
    slices = [(s.file_index, s.first_pos, s.num_rows) for ch in run.chunks for s in ch.data]
    assert slices == [(0, 0, 2), (1, 0, 1), (1, 1, 1), (2, 0, 1)]
    assert pos_deletes(run) == [(0, 0), (1, 0), (2, 0)]
    assert live(rep) == {2: "x", 4: "x"}


def test_oversized_rows_get_a_file_each() -> None:
    rep = Replica(SIMPLE, MappingPolicy(target_file_bytes=20))
    run = rep.batch([c(1, 1, "x" * 50), c(2, 2, "y"), c(3, 3, "z" * 50), c(4, 4, "w")])
    assert run.tail.file_rows == (1, 1, 1, 1)
    assert run.tail.file_estimated_bytes == (63, 14, 63, 14)


def test_position_delete_table_sorts_by_path() -> None:
    run = map_batch(
        SIMPLE,
        [c(i, i, "x") for i in range(1, 6)] + [d(6, 5), d(7, 1)],
        MappingPolicy(target_file_bytes=30),
    )
    table = run.tail.position_delete_table(["s3://t/data/b.parquet", "x", "s3://t/data/a.parquet"])
    assert table.to_pylist() == [
        {"file_path": "s3://t/data/a.parquet", "pos": 0},
        {"file_path": "s3://t/data/b.parquet", "pos": 0},
    ]
    assert table.schema.field("pos").metadata == {b"PARQUET:field_id": b"2147483545"}
    with pytest.raises(OpsMappingError, match="2 file paths for 3"):
        run.tail.position_delete_table(["a", "b"])


def test_composite_key_with_partial_key_change() -> None:
    rep = Replica(COMPOSITE)

    def row(tenant: str, i: int, val: int) -> dict[str, object]:
        return {"tenant": tenant, "id": i, "val": val, "note": None}

    rep.batch([Ev(1, "c", None, row("a", 1, 1)), Ev(2, "c", None, row("b", 1, 2))])
    run = rep.batch([Ev(3, "u", ("a", 1), row("c", 1, 3)), Ev(4, "d", ("b", 1), None)])
    assert eq_keys(run) == [("a", 1), ("b", 1)]
    assert run.chunks[0].equality_deletes.schema == pa.schema(
        [("tenant", pa.string()), ("id", pa.int32())]
    )
    assert set(rep.live()) == {("c", 1)}


def test_key_position_map_tracks_live_rows() -> None:
    mapper = BatchMapper(("id",), SIMPLE.schema, MappingPolicy(target_file_bytes=30))
    mapper.map_chunk(events_batch(SIMPLE, [c(i, i, "x") for i in range(1, 4)] + [d(4, 2)]))
    keys = mapper.key_positions
    assert (keys.position((1,)), keys.position((2,)), keys.position((3,))) == ((0, 0), None, (1, 0))
    assert len(keys) == 2 and (3,) in keys and sorted(keys) == [(1,), (3,)]
    assert (2,) not in keys and (1, 1) not in keys and 1 not in keys
    mapper.finish()
    assert len(keys) == 0  # memory is released at finish


def test_empty_batch_and_empty_chunks() -> None:
    mapper = BatchMapper(("id",), SIMPLE.schema)
    chunk = mapper.map_chunk(events_batch(SIMPLE, []))
    assert chunk.data == () and chunk.equality_deletes.num_rows == 0
    tail = mapper.finish()
    assert tail.position_deletes.num_rows == 0 and tail.file_rows == ()
    assert tail.position_deletes.schema.names == ["file_index", "pos"]
    table = IcebergTableModel(("id",))
    apply_batch(table, [chunk], tail)
    assert table.live_rows() == []


def test_columns_in_any_order_and_extra_rep_columns_ignored() -> None:
    batch = events_batch(SIMPLE, [c(1, 1, "a"), d(2, 1)])
    table = pa.Table.from_batches([batch])
    table = table.select(["val", "__rep_op", "id", "__rep_bk__id", "__rep_seq"])
    table = table.append_column("__rep_source_ts", pa.array([10, 11], pa.int64()))
    mapper = BatchMapper(["id"], SIMPLE.schema)
    chunk = mapper.map_chunk(table.to_batches()[0])
    assert chunk.data[0].rows.schema == SIMPLE.schema
    assert mapper.finish().stats.position_deletes == 1


# -- errors --------------------------------------------------------------------------------


def _map(events: list[Ev]) -> None:
    BatchMapper(("id",), SIMPLE.schema).map_chunk(events_batch(SIMPLE, events))


def test_null_after_key_names_the_event() -> None:
    bad = Ev(7, "c", None, {"id": None, "val": "a"})
    with pytest.raises(OpsMappingError, match=r"after key.*seq=7, op='c', key=\(None,\)") as e:
        _map([c(5, 1, "a"), d(6, 1), bad])
    assert (e.value.seq, e.value.op, e.value.key) == (7, "c", (None,))
    assert isinstance(e.value, ValueError)


def test_null_before_key_names_the_event() -> None:
    with pytest.raises(OpsMappingError, match="before key") as e:
        _map([c(1, 1, "a"), Ev(2, "u", None, {"id": 1, "val": "b"})])
    assert (e.value.seq, e.value.op) == (2, "u")


def test_null_in_one_column_of_composite_key() -> None:
    mapper = BatchMapper(COMPOSITE.key_columns, COMPOSITE.schema)
    events = [Ev(3, "d", ("a", 1), None), Ev(4, "d", (None, 2), None)]
    with pytest.raises(OpsMappingError) as e:
        mapper.map_chunk(events_batch(COMPOSITE, events))
    assert (e.value.seq, e.value.key) == (4, (None, 2))


def test_unknown_op() -> None:
    with pytest.raises(OpsMappingError, match="unknown __rep_op") as e:
        _map([c(1, 1, "a"), Ev(2, "x", None, {"id": 1, "val": "b"})])
    assert (e.value.seq, e.value.op) == (2, "x")


def test_sequence_must_increase_within_and_across_chunks() -> None:
    with pytest.raises(OpsMappingError, match="must increase") as e:
        _map([c(1, 1, "a"), c(3, 2, "b"), c(3, 3, "c")])
    assert e.value.seq == 3
    mapper = BatchMapper(("id",), SIMPLE.schema)
    mapper.map_chunk(events_batch(SIMPLE, [c(5, 1, "a")]))
    with pytest.raises(OpsMappingError, match="across chunks"):
        mapper.map_chunk(events_batch(SIMPLE, [c(4, 2, "a")]))


def test_contract_violations() -> None:
    batch = events_batch(SIMPLE, [c(1, 1, "a")])
    with pytest.raises(OpsMappingError, match="missing columns"):
        BatchMapper(("id",), SIMPLE.schema).map_chunk(batch.drop_columns(["__rep_bk__id"]))
    wrong = pa.schema([("id", pa.int32()), ("val", pa.string())])
    with pytest.raises(OpsMappingError, match="data schema says int32"):
        BatchMapper(("id",), wrong).map_chunk(batch)
    extra = pa.schema([("id", pa.int64())])
    with pytest.raises(OpsMappingError, match=r"unexpected data columns \['val'\]"):
        BatchMapper(("id",), extra).map_chunk(batch)
    with pytest.raises(OpsMappingError, match="not in the data schema"):
        BatchMapper(("nope",), SIMPLE.schema)
    with pytest.raises(OpsMappingError, match="empty"):
        BatchMapper((), SIMPLE.schema)
    with pytest.raises(TypeError):
        BatchMapper(("id",), SIMPLE.schema).map_chunk(pa.Table.from_batches([batch]))
    with pytest.raises(ValueError):
        MappingPolicy(target_file_bytes=0)


def test_finish_ends_the_batch() -> None:
    mapper = BatchMapper(("id",), SIMPLE.schema)
    mapper.finish()
    with pytest.raises(OpsMappingError, match="after finish"):
        mapper.map_chunk(events_batch(SIMPLE, [c(1, 1, "a")]))
    with pytest.raises(OpsMappingError, match="twice"):
        mapper.finish()


def test_errors_leave_state_untouched() -> None:
    mapper = BatchMapper(("id",), SIMPLE.schema)
    mapper.map_chunk(events_batch(SIMPLE, [c(1, 1, "a")]))
    with pytest.raises(OpsMappingError):
        mapper.map_chunk(events_batch(SIMPLE, [d(2, 1), Ev(3, "c", None, {"id": None, "val": ""})]))
    assert mapper.key_positions.position((1,)) == (0, 0)
    mapper.map_chunk(events_batch(SIMPLE, [d(2, 1)]))
    assert mapper.finish().stats.position_deletes == 1


def test_key_swap_in_one_batch_under_a_deferrable_key() -> None:
    """Issue 10 item 12: ``UPDATE t SET id = 3 - id`` -> u 1->2, u 2->1 (rows of an earlier
    batch): each row moves; the table's old rows go by equality delete."""
    rep = Replica(SIMPLE)
    rep.batch([c(1, 1, "one"), c(2, 2, "two")])
    run = rep.batch([
        Ev(3, "u", (1,), {"id": 2, "val": "was one"}, deferred=True),
        Ev(4, "u", (2,), {"id": 1, "val": "was two"}, deferred=True),
    ])
    assert live(rep) == {1: "was two", 2: "was one"} == {k[0]: v["val"] for k, v in rep.source.items()}
    assert sorted(eq_keys(run)) == [(1,), (2,)] and pos_deletes(run) == []


def test_key_swap_of_rows_written_in_the_same_batch() -> None:
    rep = Replica(SIMPLE)
    run = rep.batch([
        c(1, 1, "one"), c(2, 2, "two"),
        Ev(3, "u", (1,), {"id": 2, "val": "was one"}, deferred=True),
        Ev(4, "u", (2,), {"id": 1, "val": "was two"}, deferred=True),
    ])
    assert live(rep) == {1: "was two", 2: "was one"}
    assert pos_deletes(run) == [(0, 0), (0, 1)] and eq_keys(run) == []


@pytest.mark.parametrize("cuts", [(), (2,), (1, 3)])
def test_plain_reads_appended_whole_keep_the_per_row_rules(cuts: tuple[int, ...]) -> None:
    """Plain reads (not upserted: a snapshot chunk of new keys) are appended in one step; a
    key read twice in the batch, within a chunk or across chunks, still replaces its
    earlier row by a position delete, exactly as row by row."""
    plain = MappingPolicy(upsert_reads=False)
    rep = Replica(SIMPLE, plain)
    run = rep.batch([r(1, 1, "a"), r(2, 2, "b"), r(3, 3, "c"), r(4, 4, "d")], cuts)
    assert pos_deletes(run) == [] and eq_keys(run) == []
    assert live(rep) == {1: "a", 2: "b", 3: "c", 4: "d"}
    again = Replica(SIMPLE, plain)
    run = again.batch([r(1, 1, "a"), r(2, 2, "b"), r(3, 1, "a2"), r(4, 3, "c")], cuts)
    assert pos_deletes(run) == [(0, 0)] and eq_keys(run) == []
    assert live(again) == {1: "a2", 2: "b", 3: "c"}
