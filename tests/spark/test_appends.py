"""``spark.appends``: a batch of plain appends written without the mapper's key map gives the
files the mapper gives (same rows, same files, same order, same counters), including files
rolled by size; a repeated key, an upserted read, another op or a float key goes through the
mapper (differential against ``_worker``, the stage's reference path)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops_mapping import MappingPolicy
from ops_mapping.contract import OP_COLUMN, SEQ_COLUMN, before_key_column
from replicator.iceberg.files import position_delete_arrow_schema
from replicator.storage.file_writer import WriterSpec
from spark.appends import plain_appends
from spark.apply_stage import StageResult, StageSpec, _collect, _worker, apply_local

_names = iter(range(10**9))


def _staged(keys: list[tuple[int, str]], texts: list[str], ops: list[str] | None = None) -> pa.Table:
    n = len(keys)
    ids = pa.array([k[0] for k in keys], pa.int64())
    tags = pa.array([k[1] for k in keys], pa.large_string())
    return pa.table({
        SEQ_COLUMN: pa.array(range(n), pa.int64()),
        OP_COLUMN: pa.array(ops or ["r"] * n, pa.string()),
        before_key_column("id"): pa.nulls(n, pa.int64()),
        before_key_column("tag"): pa.nulls(n, pa.large_string()),
        "id": ids, "tag": tags,
        "v": pa.array(texts, pa.large_string()),
        "f": pa.array([float(i) / 3 for i in range(n)], pa.float64()),
    })  # fmt: skip


def _spec(tmp: Path, keys: tuple[str, ...], target: int, *, upsert_reads: bool = False) -> StageSpec:
    data = pa.schema([("id", pa.int64()), ("tag", pa.large_string()), ("v", pa.large_string()), ("f", pa.float64())])
    writer = WriterSpec(data_location=f"file://{tmp}", batch_id=f"b{next(_names)}", data_schema=data,
                        equality_schema=pa.schema([data.field(k) for k in keys]),
                        position_schema=position_delete_arrow_schema())  # fmt: skip
    policy = MappingPolicy(target_file_bytes=target, upsert_reads=upsert_reads)
    return StageSpec(writer=writer, key_columns=keys, data_columns=tuple(data.names), policy=policy)


def _reference(staged: pa.Table, spec: StageSpec) -> StageResult:
    """The mapper's stage of the same rows (what a Spark task runs)."""
    out = list(_worker(spec)(iter(staged.to_batches(max_chunksize=7))))
    return _collect(pa.Table.from_batches(out).to_pylist())


def _contents(result: StageResult) -> list[tuple[int, list[dict[str, object]]]]:
    data = sorted((f for f in result.files if f.content == 0), key=lambda f: f.path)
    return [(f.records, pq.read_table(f.path.removeprefix("file://")).to_pylist()) for f in data]


def _same(tmp: Path, staged: pa.Table, keys: tuple[str, ...], target: int, **kw: bool) -> None:
    ours, ref = apply_local(staged, _spec(tmp, keys, target, **kw)), _reference(staged, _spec(tmp, keys, target, **kw))
    assert _contents(ours) == _contents(ref)
    assert [f.content for f in ours.files] == [f.content for f in ref.files]
    assert ours.stats == ref.stats


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(-5, 40), min_size=1, max_size=60),
    texts=st.data(),
    target=st.sampled_from([1, 60, 400, 2_000, 1 << 30]),
    composite=st.booleans(),
)
def test_plain_appends_write_what_the_mapper_writes(
    tmp_path_factory: pytest.TempPathFactory, ids: list[int], texts: st.DataObject, target: int, composite: bool
) -> None:
    tmp = tmp_path_factory.mktemp("appends")
    keys = [(i, f"t{i % 3}") for i in ids]
    values = texts.draw(st.lists(st.text(max_size=30), min_size=len(ids), max_size=len(ids)))
    staged = _staged(keys, values)
    key_columns = ("id", "tag") if composite else ("id",)
    distinct = len(set(keys if composite else ids)) == len(ids)
    assert plain_appends(staged, key_columns, upsert_reads=False) is distinct
    _same(tmp, staged, key_columns, target)


def test_what_the_mapper_must_decide_is_left_to_it(tmp_path: Path) -> None:
    staged = _staged([(1, "a"), (2, "b"), (3, "c")], ["x", "y", "z"])
    assert plain_appends(staged, ("id",), upsert_reads=False)
    assert not plain_appends(staged, ("id",), upsert_reads=True)  # each read deletes its key
    assert not plain_appends(_staged([(1, "a"), (1, "b")], ["x", "y"]), ("id",), upsert_reads=False)
    assert not plain_appends(_staged([(1, "a"), (2, "b")], ["x", "y"], ["r", "c"]), ("id",), upsert_reads=False)
    # -0.0 and 0.0 are one key to the mapper, two to Arrow: floats go through the mapper.
    floats = staged.set_column(staged.schema.get_field_index("f"), "f", pa.array([-0.0, 0.0, 1.0]))
    assert not plain_appends(floats, ("f",), upsert_reads=False)
    _same(tmp_path, staged, ("id",), 1 << 30, upsert_reads=True)
