"""Splitting a batch by key hash into shards, each mapped on its own and all committed as ONE
snapshot, leaves the table the source has: judged by the reference model of Iceberg deletes
(``iceberg_semantics``), over histories with key changes, deferred key permutations, replays."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from hypothesis import currently_in_test_context, event, given
from hypothesis import strategies as st

from ops_mapping import BatchMapper, MappingPolicy
from ops_mapping.iceberg_semantics import batch_commit_parts
from ops_mapping.split import changes_a_key, shard_of_rows, split_by_key
from tests.ops_mapping.opsmap_harness import (
    COMPOSITE,
    SIMPLE,
    Ev,
    Layout,
    Replica,
    events_batch,
    source_apply,
)
from tests.ops_mapping.opsmap_properties import Scenario, ops_settings, scenarios


def _commit_split(rep: Replica, events: Sequence[Ev], shards: int, chunk: int) -> int:
    """One batch as ``shards`` mappers' outputs in one model commit; returns the shards used."""
    layout = rep.layout
    # As the pipeline stages it: the after-key-in-table flags only when a key moves.
    moves = any(e.op == "u" and e.after is not None and layout.key_of(e.after) != e.before for e in events)
    live = set(rep.live()) if moves else None
    whole = pa.Table.from_batches([events_batch(layout, events, live)]) if events else None
    parts = [] if whole is None else split_by_key(whole, layout.key_columns, shards)
    data: dict[str, list[dict[str, object]]] = {}
    positions: list[tuple[str, int]] = []
    equality: list[tuple[object, ...]] = []
    number = len(rep.table.commits) + 1
    for i, part in enumerate(parts):
        mapper = BatchMapper(layout.key_columns, layout.schema, rep.policy)
        chunks = [mapper.map_chunk(b) for b in part.to_batches(max_chunksize=chunk)]
        out = batch_commit_parts(chunks, mapper.finish(), f"b{number}-s{i}-f")
        data.update(out.data_files)
        positions += out.position_deletes
        equality += out.equality_deletes
    if len(parts) > 1 and currently_in_test_context():
        event("split")
    assert len(set(equality)) == len(equality), "two shards equality-deleted one key"
    rep.table.commit(data, positions, equality)
    for e in events:
        source_apply(rep.source, layout, e, rep.newer)
    assert not rep.newer
    return len(parts)


@ops_settings()
@given(
    st.sampled_from(["valid", "absent_deletes", "chaos", "valid", "chaos", "deferred"]).flatmap(scenarios),
    st.integers(2, 4),
    st.integers(1, 7),
)
def test_split_by_key_then_mapping_equals_the_source(sc: Scenario, shards: int, chunk: int) -> None:
    rep = Replica(sc.layout, sc.policy)
    for number, events in enumerate(sc.batches):
        _commit_split(rep, events, shards, chunk)
        assert rep.table.duplicate_keys() == {}, f"duplicate keys after batch {number}"
        assert rep.live() == rep.source, f"table differs from source after batch {number}"


def _c(seq: int, k: int) -> Ev:
    return Ev(seq, "c", None, {"id": k, "val": f"v{seq}"})


def test_a_batch_of_many_keys_is_split_and_each_keys_events_stay_in_order() -> None:
    events = [_c(i, i % 20) if i < 20 else Ev(i, "u", (i % 20,), {"id": i % 20, "val": f"u{i}"}) for i in range(60)]
    events += [Ev(60 + i, "d", (i,), None) for i in range(0, 20, 3)]
    whole = pa.Table.from_batches([events_batch(SIMPLE, events)])
    parts = split_by_key(whole, SIMPLE.key_columns, 4)
    assert len(parts) == 4 and sum(p.num_rows for p in parts) == whole.num_rows
    seen: set[object] = set()
    for p in parts:
        keys = {k if k is not None else b for k, b in zip(p.column("id").to_pylist(), p.column("__rep_bk__id").to_pylist(), strict=True)}
        assert not keys & seen  # a key in one shard only
        seen |= keys
        seq = p.column("__rep_seq").to_pylist()
        assert seq == sorted(seq)
    rep = Replica(SIMPLE, MappingPolicy())
    assert _commit_split(rep, events, 4, 5) == 4
    assert rep.live() == rep.source


def test_a_key_change_keeps_the_batch_whole() -> None:
    moved = [_c(1, 1), _c(2, 2), Ev(3, "u", (1,), {"id": 7, "val": "moved"}), Ev(4, "d", (7,), None)]
    whole = pa.Table.from_batches([events_batch(SIMPLE, moved)])
    assert changes_a_key(whole, SIMPLE.key_columns)
    assert split_by_key(whole, SIMPLE.key_columns, 4) == [whole]
    rep = Replica(SIMPLE, MappingPolicy())
    _commit_split(rep, [_c(1, 1), _c(2, 2)], 4, 10)
    assert _commit_split(rep, [Ev(3, "u", (1,), {"id": 2, "val": "x"}), Ev(4, "u", (2,), {"id": 1, "val": "y"}, deferred=True)], 4, 1) == 1


def test_a_composite_key_change_in_one_column_keeps_the_batch_whole() -> None:
    layout: Layout = COMPOSITE
    events = [Ev(1, "c", None, {"tenant": "a", "id": 1, "val": 1, "note": None}),
              Ev(2, "u", ("a", 1), {"tenant": "b", "id": 1, "val": 2, "note": None})]
    whole = pa.Table.from_batches([events_batch(layout, events)])
    assert split_by_key(whole, layout.key_columns, 3) == [whole]
    same = pa.Table.from_batches([events_batch(layout, events[:1])])
    assert not changes_a_key(same, layout.key_columns)


def test_equal_float_keys_share_a_shard() -> None:
    t = pa.table({"__rep_seq": pa.array(range(4), pa.int64()), "__rep_op": ["c", "d", "c", "d"],
                  "__rep_bk__k": pa.array([None, -0.0, None, 2.5]), "k": pa.array([0.0, None, 2.5, None])})  # fmt: skip
    of = shard_of_rows(t, ["k"], 7)
    assert of[0] == of[1] and of[2] == of[3]
