"""Row-delta commits (data + position/equality delete files) on a real SqlCatalog table.

The tables are judged by readers that implement Iceberg's delete semantics (``tests/judges.py``):
Spark/Iceberg Java (primary judge, ``spark`` marker) and DuckDB's iceberg_scan.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import LongType, StringType

from replicator.errors import CommitConflictError
from replicator.iceberg.files import (
    POSITION_DELETE_FILE_PATH_ID,
    POSITION_DELETE_POS_ID,
    data_file_from_parquet,
    equality_delete_arrow_schema,
    equality_delete_file_from_parquet,
)
from replicator.iceberg.row_delta import commit_row_delta
from tests.iceberg.tablekit import (
    SCHEMA,
    Row,
    data_file,
    eq_deletes,
    file_count,
    id_name,
    manifest_entries,
    pos_deletes,
    sql_catalog,
    write_parquet,
)
from tests.judges import (
    assert_no_duplicate_data_files,
    duckdb_rows,
    spark_files,
    spark_rows,
    spark_snapshot_summaries,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# --- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    return sql_catalog(tmp_path)


@pytest.fixture
def make_table(catalog: SqlCatalog) -> Callable[..., Table]:
    def make(name: str = "t", properties: dict[str, str] | None = None) -> Table:
        props = {"format-version": "2", **(properties or {})}
        return catalog.create_table(f"db.{name}", SCHEMA, properties=props)

    return make


@pytest.fixture
def table(make_table: Callable[..., Table]) -> Table:
    return make_table()


@dataclass
class Scenario:
    """Three row deltas; ``locations``/``expected`` hold the table state after each."""

    table: Table
    snapshots: list[Snapshot] = field(default_factory=list)
    locations: list[str] = field(default_factory=list)
    expected: list[list[Row]] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)

    def commit(self, data: list[DataFile], deletes: list[DataFile], expected: list[Row]) -> None:
        parent = self.snapshots[-1].snapshot_id if self.snapshots else None
        position = str(len(self.snapshots) + 1)
        snapshot = commit_row_delta(
            self.table,
            data_files=data,
            delete_files=deletes,
            snapshot_properties={"replicator.position": position},
            expected_parent_snapshot_id=parent,
        )
        self.snapshots.append(snapshot)
        self.locations.append(self.table.metadata_location)
        self.expected.append(sorted(expected))


@pytest.fixture
def scenario(table: Table) -> Scenario:
    s = Scenario(table)
    # 1: plain insert of ids 1..5.
    d1 = data_file(table, "d1", [(i, f"n{i}") for i in range(1, 6)])
    s.paths["d1"] = d1.file_path
    s.commit([d1], [], [(i, f"n{i}") for i in range(1, 6)])

    # 2: a batch that inserts 8 and deletes it again (position delete at row 0 of its own file),
    # updates id 2 (equality delete of the old row + new row in the same commit) and inserts
    # 6 and 7. The equality delete must not hit the new id=2 row: same sequence number.
    d2 = data_file(table, "d2", [(8, "tmp"), (2, "two-v2"), (6, "six"), (7, "seven")])
    s.paths["d2"] = d2.file_path
    s.commit(
        [d2],
        [pos_deletes(table, "pd2", [(d2.file_path, 0)]), eq_deletes(table, "ed2", [2])],
        [(1, "n1"), (2, "two-v2"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "six"), (7, "seven")],
    )

    # 3: deletes only: id 6 by equality, id 3 by position (row 2 of d1).
    s.commit(
        [],
        [eq_deletes(table, "ed3", [6]), pos_deletes(table, "pd3", [(d1.file_path, 2)])],
        [(1, "n1"), (2, "two-v2"), (4, "n4"), (5, "n5"), (7, "seven")],
    )
    return s


MERGE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "2",
}


@pytest.fixture
def merged_scenario(make_table: Callable[..., Table]) -> Scenario:
    """Row deltas on a table that merges DATA manifests on commit."""
    table = make_table("merged", MERGE_PROPERTIES)
    s = Scenario(table)
    s.commit([data_file(table, "a1", [(1, "a"), (2, "b")])], [], [(1, "a"), (2, "b")])
    s.commit(
        [data_file(table, "a2", [(2, "b2"), (3, "c")])],
        [eq_deletes(table, "e2", [2])],
        [(1, "a"), (2, "b2"), (3, "c")],
    )
    s.commit(
        [data_file(table, "a3", [(4, "d")])],
        [eq_deletes(table, "e3", [3])],
        [(1, "a"), (2, "b2"), (4, "d")],
    )
    return s


# --- files.py ------------------------------------------------------------------------------


def test_data_file_statistics_from_footer(table: Table) -> None:
    df = data_file(table, "d", [(3, "c"), (1, None), (7, "a")])
    path = df.file_path
    assert df.content == DataFileContent.DATA
    assert df.record_count == 3
    assert df.file_size_in_bytes == os.path.getsize(path.removeprefix("file://"))
    assert df.spec_id == table.metadata.default_spec_id
    assert len(df.partition) == 0
    assert df.equality_ids is None
    assert df.value_counts == {1: 3, 2: 3}
    assert df.null_value_counts == {1: 0, 2: 1}
    assert from_bytes(LongType(), df.lower_bounds[1]) == 1
    assert from_bytes(LongType(), df.upper_bounds[1]) == 7
    assert from_bytes(StringType(), df.lower_bounds[2]) == "a"
    assert from_bytes(StringType(), df.upper_bounds[2]) == "c"


def test_data_file_honours_metrics_config(make_table: Callable[..., Table]) -> None:
    table = make_table(
        properties={
            "write.metadata.metrics.default": "counts",
            "write.metadata.metrics.column.id": "full",
        }
    )
    df = data_file(table, "d", [(1, "x"), (2, "y")])
    assert set(df.lower_bounds) == {1} and set(df.upper_bounds) == {1}
    assert df.value_counts == {1: 2, 2: 2}


def test_position_delete_file_bounds(table: Table) -> None:
    one = pos_deletes(table, "p1", [("file:///x/b.parquet", 4), ("file:///x/b.parquet", 9)])
    assert one.content == DataFileContent.POSITION_DELETES
    assert one.record_count == 2
    # A single referenced data file: exact (untruncated) equal bounds, so readers can target it.
    assert one.lower_bounds[POSITION_DELETE_FILE_PATH_ID] == b"file:///x/b.parquet"
    assert one.upper_bounds[POSITION_DELETE_FILE_PATH_ID] == b"file:///x/b.parquet"
    assert from_bytes(LongType(), one.upper_bounds[POSITION_DELETE_POS_ID]) == 9

    long_path = "file:///x/" + "d" * 40 + ".parquet"  # beyond the default truncate(16)
    two = pos_deletes(table, "p2", [(long_path, 1), ("file:///x/a.parquet", 0)])
    assert two.lower_bounds[POSITION_DELETE_FILE_PATH_ID] == b"file:///x/a.parquet"
    assert two.upper_bounds[POSITION_DELETE_FILE_PATH_ID] == long_path.encode()


def test_equality_delete_file(table: Table) -> None:
    ed = eq_deletes(table, "e", [4, 2])
    assert ed.content == DataFileContent.EQUALITY_DELETES
    assert ed.equality_ids == [1]
    assert ed.record_count == 2
    assert set(ed.value_counts) == {1}
    assert from_bytes(LongType(), ed.lower_bounds[1]) == 2
    assert from_bytes(LongType(), ed.upper_bounds[1]) == 4
    assert equality_delete_arrow_schema(table.schema(), [1]).names == ["id"]


def test_equality_delete_file_must_contain_keys(table: Table) -> None:
    arrow = equality_delete_arrow_schema(table.schema(), [2])
    path = write_parquet(table, "names", [{"name": "a"}], arrow)
    with pytest.raises(ValueError, match="missing"):
        equality_delete_file_from_parquet(table, path, [1])
    with pytest.raises(ValueError):
        equality_delete_file_from_parquet(table, path, [99])


def test_file_without_field_ids_is_rejected(table: Table) -> None:
    path = write_parquet(table, "noids", [{"id": 1}], pa.schema([pa.field("id", pa.int64())]))
    with pytest.raises(ValueError, match="field ids"):
        data_file_from_parquet(table, path)


def test_files_of_the_same_names_are_described_by_their_own_field_ids(table: Table) -> None:
    """The per-schema work is shared between files of one schema only: the same column names
    under other field ids are those ids' (here: one the table lacks)."""
    data_file(table, "first", [(1, "a")])
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "1"}),
                       pa.field("name", pa.string(), metadata={"PARQUET:field_id": "99"})])  # fmt: skip
    path = write_parquet(table, "other_ids", [{"id": 1, "name": "a"}], arrow)
    with pytest.raises(ValueError, match="field id 99"):
        data_file_from_parquet(table, path)
    assert data_file(table, "again", [(2, "b")]).value_counts == {1: 1, 2: 1}


# --- row_delta.py: what readers see --------------------------------------------------------


SCENARIOS = pytest.mark.parametrize("scenario_name", ["scenario", "merged_scenario"])


@pytest.mark.spark
@SCENARIOS
def test_spark_reads_each_snapshot(
    scenario_name: str, request: pytest.FixtureRequest, spark: SparkSession
) -> None:
    scenario: Scenario = request.getfixturevalue(scenario_name)
    for location, expected in zip(scenario.locations, scenario.expected, strict=True):
        assert id_name(spark_rows(location)) == expected


@SCENARIOS
def test_duckdb_reads_each_snapshot(scenario_name: str, request: pytest.FixtureRequest) -> None:
    scenario: Scenario = request.getfixturevalue(scenario_name)
    for location, expected in zip(scenario.locations, scenario.expected, strict=True):
        assert id_name(duckdb_rows(location)) == expected


@pytest.mark.spark
def test_spark_sees_files_and_summaries(scenario: Scenario, spark: SparkSession) -> None:
    location = scenario.locations[-1]
    assert_no_duplicate_data_files(location)
    files = spark_files(location)
    kinds = sorted(f["content_type"] for f in files)
    assert kinds == ["DATA"] * 2 + ["EQUALITY_DELETES"] * 2 + ["POSITION_DELETES"] * 2
    assert [f["equality_ids"] for f in files if f["content"] == 2] == [[1], [1]]
    # Each position delete file targets one data file: Iceberg Java sees equal, untruncated
    # file_path bounds (what ContentFileUtil.referencedDataFile relies on).
    bounds = (
        spark.read.format("iceberg")
        .load(location + "#delete_files")
        .where("content = 1")
        .select("lower_bounds", "upper_bounds")
        .collect()
    )
    assert len(bounds) == 2
    for row in bounds:
        lower = bytes(row["lower_bounds"][POSITION_DELETE_FILE_PATH_ID]).decode()
        upper = bytes(row["upper_bounds"][POSITION_DELETE_FILE_PATH_ID]).decode()
        assert lower == upper
        assert lower in (scenario.paths["d1"], scenario.paths["d2"])
    summaries = spark_snapshot_summaries(location)
    assert [s["operation"] for s in summaries] == ["append", "overwrite", "delete"]
    assert [s["summary"]["replicator.position"] for s in summaries] == ["1", "2", "3"]


# --- row_delta.py: snapshot structure ------------------------------------------------------


def test_manifest_contents_and_sequence_numbers(scenario: Scenario) -> None:
    table = scenario.table
    s1, s2, _ = scenario.snapshots
    manifests = s2.manifests(table.io)

    new = [m for m in manifests if m.added_snapshot_id == s2.snapshot_id]
    assert sorted(m.content for m in new) == [ManifestContent.DATA, ManifestContent.DELETES]
    assert [m.manifest_path for m in manifests if m.added_snapshot_id == s1.snapshot_id] == [
        m.manifest_path for m in s1.manifests(table.io)
    ]

    for manifest in manifests:
        kinds = {e.data_file.content for e in manifest_entries(table, manifest)}
        if manifest.content == ManifestContent.DATA:
            assert kinds == {DataFileContent.DATA}
        else:
            assert kinds <= {DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES}
            assert kinds
        for entry in manifest_entries(table, manifest):
            # New entries inherit the committing snapshot's sequence number.
            owner = s2 if manifest.added_snapshot_id == s2.snapshot_id else s1
            assert manifest.sequence_number == owner.sequence_number
            assert entry.sequence_number == owner.sequence_number
            assert entry.file_sequence_number == owner.sequence_number
            assert entry.snapshot_id == owner.snapshot_id


def test_manifest_merge_keeps_sequence_numbers(merged_scenario: Scenario) -> None:
    table = merged_scenario.table
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    data = [m for m in manifests if m.content == ManifestContent.DATA]
    assert len(data) == 1  # merged: commit.manifest.min-count-to-merge=2
    assert len(manifests) == 3  # + one DELETES manifest per commit with deletes (never merged)
    sequence = {
        Path(e.data_file.file_path).stem: e.sequence_number
        for e in manifest_entries(table, data[0])
    }
    assert sequence == {"a1": 1, "a2": 2, "a3": 3}


def test_no_file_listed_twice(scenario: Scenario) -> None:
    table = scenario.table
    for snapshot in scenario.snapshots:
        paths = [
            e.data_file.file_path
            for m in snapshot.manifests(table.io)
            for e in manifest_entries(table, m)
        ]
        assert len(paths) == len(set(paths))
    last = scenario.snapshots[-1].manifests(table.io)
    assert len(last) == 4  # data of 1; data and deletes of 2; deletes of 3


def test_snapshot_summary(scenario: Scenario) -> None:
    s1, s2, s3 = scenario.snapshots
    assert s1.summary is not None and s2.summary is not None and s3.summary is not None
    assert s1.summary.operation.value == "append"
    assert s2.summary.operation.value == "overwrite"
    assert s3.summary.operation.value == "delete"
    assert s2.summary["replicator.position"] == "2"
    expected = {
        "added-data-files": "1",
        "added-records": "4",
        "added-delete-files": "2",
        "added-position-delete-files": "1",
        "added-equality-delete-files": "1",
        "added-position-deletes": "1",
        "added-equality-deletes": "1",
        "total-data-files": "2",
        "total-delete-files": "2",
        "total-records": "9",
        "total-position-deletes": "1",
        "total-equality-deletes": "1",
    }
    assert {k: s2.summary.get(k) for k in expected} == expected
    assert s3.summary["total-delete-files"] == "4"
    assert s3.summary["total-records"] == "9"  # deletes do not change total-records
    assert "added-data-files" not in s3.summary.additional_properties


def test_three_commits_three_snapshots(scenario: Scenario) -> None:
    table = scenario.table
    assert [s.snapshot_id for s in table.metadata.snapshots] == [
        s.snapshot_id for s in scenario.snapshots
    ]
    assert [s.sequence_number for s in scenario.snapshots] == [1, 2, 3]
    parents = [s.parent_snapshot_id for s in scenario.snapshots]
    assert parents == [None] + [s.snapshot_id for s in scenario.snapshots[:-1]]
    assert table.current_snapshot() == scenario.snapshots[-1]


# --- row_delta.py: concurrency, empty batches, input checks ---------------------------------


def test_stale_expected_parent_is_a_conflict(scenario: Scenario) -> None:
    table = scenario.table
    before = file_count(table, ".avro")
    d = data_file(table, "late", [(50, "x")])
    with pytest.raises(CommitConflictError) as info:
        commit_row_delta(
            table,
            data_files=[d],
            delete_files=[],
            snapshot_properties={},
            expected_parent_snapshot_id=scenario.snapshots[0].snapshot_id,
        )
    assert info.value.transient
    with pytest.raises(CommitConflictError):
        commit_row_delta(
            table,
            data_files=[d],
            delete_files=[],
            snapshot_properties={},
            expected_parent_snapshot_id=None,
        )
    assert file_count(table, ".avro") == before  # rejected before writing anything
    assert table.current_snapshot() == scenario.snapshots[-1]


def test_interleaved_writers_conflict_at_the_catalog(catalog: SqlCatalog, table: Table) -> None:
    base = commit_row_delta(
        table,
        data_files=[data_file(table, "d1", [(1, "a")])],
        delete_files=[],
        snapshot_properties={},
    )
    writer_a = catalog.load_table("db.t")
    writer_b = catalog.load_table("db.t")
    commit_row_delta(
        writer_a,
        data_files=[data_file(writer_a, "a", [(2, "a")])],
        delete_files=[eq_deletes(writer_a, "ea", [1])],
        snapshot_properties={"replicator.position": "a"},
        expected_parent_snapshot_id=base.snapshot_id,
    )
    before = file_count(table, ".avro")
    with pytest.raises(CommitConflictError):
        # writer_b's own metadata still says base is the head: only the catalog can tell.
        commit_row_delta(
            writer_b,
            data_files=[data_file(writer_b, "b", [(3, "b")])],
            delete_files=[eq_deletes(writer_b, "eb", [1])],
            snapshot_properties={"replicator.position": "b"},
            expected_parent_snapshot_id=base.snapshot_id,
        )
    assert file_count(table, ".avro") == before  # the failed attempt's manifests are removed
    current = catalog.load_table("db.t").current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary["replicator.position"] == "a"


def test_empty_batch_records_its_position(scenario: Scenario) -> None:
    table = scenario.table
    parent = scenario.snapshots[-1]
    snapshot = commit_row_delta(
        table,
        data_files=[],
        delete_files=[],
        snapshot_properties={"replicator.position": "4"},
        expected_parent_snapshot_id=parent.snapshot_id,
    )
    assert snapshot.parent_snapshot_id == parent.snapshot_id
    assert parent.sequence_number is not None
    assert snapshot.sequence_number == parent.sequence_number + 1
    assert snapshot.summary is not None and parent.summary is not None
    assert snapshot.summary.operation.value == "append"
    assert snapshot.summary["replicator.position"] == "4"
    for total in ("total-records", "total-data-files", "total-delete-files"):
        assert snapshot.summary[total] == parent.summary[total]
    paths = sorted(m.manifest_path for m in snapshot.manifests(table.io))
    assert paths == sorted(m.manifest_path for m in parent.manifests(table.io))
    assert id_name(duckdb_rows(table.metadata_location)) == scenario.expected[-1]


def test_empty_batch_on_empty_table(table: Table) -> None:
    snapshot = commit_row_delta(
        table,
        data_files=[],
        delete_files=[],
        snapshot_properties={"replicator.position": "0"},
        expected_parent_snapshot_id=None,
    )
    assert snapshot.parent_snapshot_id is None
    assert snapshot.manifests(table.io) == []
    assert duckdb_rows(table.metadata_location) == []


def test_invalid_inputs(table: Table) -> None:
    d = data_file(table, "d", [(1, "a")])
    e = eq_deletes(table, "e", [1])

    def commit(**kwargs: Any) -> None:
        args: dict[str, Any] = {"data_files": [], "delete_files": [], "snapshot_properties": {}}
        commit_row_delta(table, **{**args, **kwargs})

    with pytest.raises(ValueError, match="content"):
        commit(data_files=[e])
    with pytest.raises(ValueError, match="content DATA"):
        commit(delete_files=[d])
    with pytest.raises(ValueError, match="more than once"):
        commit(data_files=[d, d])
    with pytest.raises(ValueError, match="shadow"):
        commit(data_files=[d], snapshot_properties={"total-records": "1"})
    with pytest.raises(ValueError, match="must be str"):
        commit(data_files=[d], snapshot_properties={"replicator.position": 1})
    assert table.current_snapshot() is None
