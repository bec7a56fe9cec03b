"""The fan-out writer (issue 24): one data file per partition (a bounded number open at once),
the mapper's position deletes translated to (physical file, position) and written per
partition of the files they name."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DateType, IntegerType, LongType, TimestampType, TimestamptzType

from replicator.storage.file_writer import (
    CONTENT_DATA,
    CONTENT_POSITION_DELETES,
    TableFileWriter,
    WriterSpec,
)
from replicator.storage.partitioning import (
    PartitionColumn,
    PartitionPlan,
    decode_partition,
    encode_partition,
)

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("at", pa.timestamp("us", tz="UTC"))])
PLAN = PartitionPlan(
    spec_id=1,
    columns=(
        PartitionColumn("id", LongType(), BucketTransform(3), "id_bucket"),
        PartitionColumn("n", IntegerType(), IdentityTransform(), "n"),
    ),
)


def rows(ids: list[int], rng: random.Random) -> pa.Table:
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return pa.Table.from_pydict(
        {"id": ids, "n": [rng.randint(0, 2) for _ in ids],
         "at": [epoch + dt.timedelta(days=rng.randint(-3, 3)) for _ in ids]},
        schema=SCHEMA,
    )  # fmt: skip


def partition_of(row: dict[str, object]) -> tuple[object, ...]:
    return (BucketTransform(3).transform(LongType())(row["id"]), row["n"])


@pytest.mark.parametrize(
    ("max_open", "pending_max", "plan", "sort"),
    [(1, 10, PLAN, False), (2, 25, PLAN, False), (32, 10_000, PLAN, False),
     (2, 25, PLAN, True), (32, 10_000, PLAN, True), (32, 10_000, None, True), (32, 25, None, True)],
)  # fmt: skip
def test_fan_out_files_hold_one_partition_and_deletes_follow_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_open: int, pending_max: int,
    plan: PartitionPlan | None, sort: bool,
) -> None:  # fmt: skip
    import replicator.storage.file_writer

    monkeypatch.setattr(replicator.storage.file_writer, "PENDING_ROWS_MAX", pending_max)  # early flushes
    rng = random.Random(max_open)
    spec = WriterSpec(
        data_location=tmp_path.as_uri(), batch_id="b", data_schema=SCHEMA,
        equality_schema=pa.schema([("id", pa.int64())]),
        position_schema=pa.schema([("file_path", pa.string()), ("pos", pa.int64())]),
        partition=plan, max_open_files=max_open,
        sort_by=(("at", "ascending", True), ("id", "descending", True)) if sort else (),
    )  # fmt: skip
    writer = TableFileWriter(spec)
    logical: dict[int, list[dict[str, object]]] = {0: [], 1: []}
    for file_index, start in [(0, 0), (0, 40), (1, 100), (1, 130)]:
        chunk = rows(list(range(start, start + 30)), rng)
        writer.write_data(file_index, chunk)
        logical[file_index].extend(chunk.to_pylist())
        assert len(writer._opened) <= max_open
        assert writer._pending_total <= pending_max
    deleted = sorted((f, p) for f in (0, 1) for p in rng.sample(range(len(logical[f])), 12))
    writer.write_position_deletes(pa.table({"file_index": pa.array([f for f, _ in deleted], pa.int32()),
                                            "pos": pa.array([p for _, p in deleted], pa.int64())}))  # fmt: skip
    written = writer.close()

    data = [w for w in written if w.content == CONTENT_DATA]
    by_path = {w.path: pq.read_table(w.path.removeprefix("file://")).to_pylist() for w in data}
    assert sum(len(v) for v in by_path.values()) == 120
    for w in data:
        if plan is not None:
            assert {partition_of(r) for r in by_path[w.path]} == {w.partition}, w.path
        if sort:  # each row group in (at, -id) order
            parquet = pq.ParquetFile(w.path.removeprefix("file://"))
            for g in range(parquet.num_row_groups):
                got = [(r["at"], -r["id"]) for r in parquet.read_row_group(g).to_pylist()]
                assert got == sorted(got)
    if plan is None:
        assert {w.partition for w in data} == {()}
    elif max_open == 32:
        assert len(data) == len({w.partition for w in data})  # one file per partition
    else:
        assert len(data) > len({w.partition for w in data})  # evictions started new files
    named = []
    for w in (w for w in written if w.content == CONTENT_POSITION_DELETES):
        table = pq.read_table(w.path.removeprefix("file://")).to_pylist()
        pairs = [(d["file_path"], d["pos"]) for d in table]
        assert pairs == sorted(pairs)  # the spec's (file_path, pos) order
        homes = {next(x for x in data if x.path == p).partition for p, _ in pairs}
        assert homes == {w.partition}  # in the partition of the data files it names
        named += [by_path[p][pos] for p, pos in pairs]
    expected = [logical[f][p] for f, p in deleted]
    assert sorted(named, key=lambda r: r["id"]) == sorted(expected, key=lambda r: r["id"])


def test_day_transform_and_transport_round_trip() -> None:
    plan = PartitionPlan(1, (PartitionColumn("at", TimestamptzType(), DayTransform(), "at_day"),))
    at = [dt.datetime(1969, 12, 31, 23, 59, tzinfo=dt.UTC), dt.datetime(1970, 1, 2, 1, tzinfo=dt.UTC), None]
    table = pa.table({"at": pa.array(at, pa.timestamp("us", tz="UTC"))})
    codes, keys = plan.split(table)
    assert [keys[c] for c in codes] == [(-1,), (1,), (None,)]  # floor towards the past
    for key in [(-1,), (None,), ("x", 3)]:
        assert decode_partition(encode_partition(key)) == key


_SOURCES = {
    # Not within a width of the smallest int: truncate overflows there (Iceberg Java wraps
    # around as we do; pyiceberg's Python ints leave the int range).
    "int": (IntegerType(), pa.int32(), st.integers(-(2**31) + 10, 2**31 - 1)),
    "long": (LongType(), pa.int64(), st.integers(-(2**63) + 10, 2**63 - 1)),
    "date": (DateType(), pa.date32(), st.dates()),
    "ts": (TimestampType(), pa.timestamp("us"), st.datetimes()),
    "tstz": (TimestamptzType(), pa.timestamp("us", tz="UTC"), st.datetimes(timezones=st.just(dt.UTC))),
}


@settings(max_examples=300, deadline=None)
@example(source="long", transform="truncate[10]", data=None).via("a long past int32")
@given(
    source=st.sampled_from(sorted(_SOURCES)),
    transform=st.sampled_from(["bucket[16]", "bucket[7]", "truncate[10]", "year", "month", "day", "hour"]),
    data=st.data(),
)
def test_vectorized_transforms_equal_pyiceberg(source: str, transform: str, data: st.DataObject | None) -> None:
    from pyiceberg.partitioning import _to_partition_representation
    from pyiceberg.transforms import parse_transform

    iceberg_type, arrow_type, values = _SOURCES[source]
    t = parse_transform(transform)
    if not t.can_transform(iceberg_type):
        return
    raw = [2**40 + 5, -3, None] if data is None else data.draw(st.lists(st.one_of(st.none(), values), max_size=20))
    plan = PartitionPlan(1, (PartitionColumn("c", iceberg_type, t, "p"),))
    codes, keys = plan.split(pa.table({"c": pa.array(raw, arrow_type)}))
    scalar = t.transform(iceberg_type)
    expected = [scalar(_to_partition_representation(iceberg_type, v)) if v is not None else None for v in raw]
    assert [keys[c][0] for c in codes] == expected
