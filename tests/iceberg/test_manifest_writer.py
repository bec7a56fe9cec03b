"""Our manifest writer on format-v2 tables (data, position and equality deletes), judged by
Spark and DuckDB, and read back by pyiceberg's own manifest reader; the Avro metadata and
schema of what we write; partitioned v3 tables with deletion vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestContent as PyManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import StaticTable, Table
from pyiceberg.transforms import IdentityTransform

from replicator.iceberg.dv_commit import commit_files
from replicator.iceberg.manifest_schema import ContentFile, FileContent
from replicator.iceberg.manifest_writer import content_file
from replicator.iceberg.roaring import positions
from replicator.iceberg.v3_metadata import create_v3_table
from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, pos_deletes, sql_catalog
from tests.judges import duckdb_rows, spark_files, spark_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _rows(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return sorted((r["id"], r["name"]) for r in rows)


@pytest.fixture
def v2(tmp_path: Path) -> tuple[Table, list[str], list[list[tuple[int, str]]]]:
    """Three v2 commits with our manifests: data; data + position + equality deletes; deletes."""
    table = sql_catalog(tmp_path).create_table("db.t", SCHEMA, properties={"format-version": "2"})
    locations: list[str] = []
    expected: list[list[tuple[int, str]]] = []

    def commit(want: list[tuple[int, str]], **kwargs: Any) -> None:
        nonlocal table
        head = table.current_snapshot()
        table = commit_files(table, expected_parent_snapshot_id=head.snapshot_id if head else None, **kwargs).table
        locations.append(table.metadata_location)
        expected.append(sorted(want))

    d1 = data_file(table, "d1", [(i, f"n{i}") for i in range(1, 6)])
    commit([(i, f"n{i}") for i in range(1, 6)], data_files=[content_file(d1)])
    # id 8 inserted and deleted in one batch (position delete), id 2 updated (equality delete
    # of the old row: does not reach the new row, same sequence number).
    d2 = data_file(table, "d2", [(8, "tmp"), (2, "two"), (6, "six")])
    commit(
        [(1, "n1"), (2, "two"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "six")],
        data_files=[content_file(d2)],
        delete_files=[content_file(pos_deletes(table, "p2", [(d2.file_path, 0)])), content_file(eq_deletes(table, "e2", [2]))],
    )
    commit(
        [(1, "n1"), (2, "two"), (4, "n4"), (5, "n5")],
        delete_files=[content_file(eq_deletes(table, "e3", [6])), content_file(pos_deletes(table, "p3", [(d1.file_path, 2)]))],
    )
    return table, locations, expected


@pytest.mark.spark
def test_spark_reads_v2_tables_with_our_manifests(v2: Any, spark: SparkSession) -> None:
    table, locations, expected = v2
    for location, want in zip(locations, expected, strict=True):
        assert _rows(spark_rows(location)) == want
    kinds = sorted(f["content_type"] for f in spark_files(locations[-1]))
    assert kinds == ["DATA", "DATA", "EQUALITY_DELETES", "EQUALITY_DELETES", "POSITION_DELETES", "POSITION_DELETES"]


def test_duckdb_reads_v2_tables_with_our_manifests(v2: Any) -> None:
    _, locations, expected = v2
    for location, want in zip(locations, expected, strict=True):
        assert _rows(duckdb_rows(location)) == want


def test_pyiceberg_reads_our_v2_manifests(v2: Any) -> None:
    table, _, _ = v2
    head = table.current_snapshot()
    manifests = head.manifests(table.io)
    assert sorted(m.content for m in manifests) == [PyManifestContent.DATA, PyManifestContent.DATA, PyManifestContent.DELETES, PyManifestContent.DELETES]
    entries = [e for m in manifests for e in m.fetch_manifest_entry(table.io)]
    assert len(entries) == 6
    eq = [e.data_file for e in entries if e.data_file.equality_ids]
    assert [list(f.equality_ids) for f in eq] == [[1], [1]]
    assert {e.sequence_number for e in entries} == {1, 2, 3}


def test_avro_metadata_and_schema_of_our_manifests(v2: Any) -> None:
    table, _, _ = v2
    head = table.current_snapshot()
    deletes = [m for m in head.manifests(table.io) if m.content == PyManifestContent.DELETES][0]
    with AvroFile[Any](table.io.new_input(deletes.manifest_path)) as reader:
        meta = reader.header.meta
        schema = json.loads(meta["avro.schema"])
    assert meta["content"] == "deletes" and meta["format-version"] == "2"
    assert meta["partition-spec-id"] == "0" and json.loads(meta["partition-spec"]) == []
    assert json.loads(meta["schema"])["fields"][0]["name"] == "id"
    assert schema["name"] == "manifest_entry"
    data_file_schema = next(f for f in schema["fields"] if f["name"] == "data_file")
    assert data_file_schema["field-id"] == 2 and data_file_schema["type"]["name"] == "r2"
    fields = {f["name"]: f for f in data_file_schema["type"]["fields"]}
    assert fields["equality_ids"]["field-id"] == 135
    assert fields["equality_ids"]["type"][1]["items"] == "int"  # list<int>, as Java needs
    assert "content_offset" not in fields and "referenced_data_file" in fields
    with AvroFile[Any](table.io.new_input(head.manifest_list)) as reader:
        list_meta = reader.header.meta
    assert list_meta["snapshot-id"] == str(head.snapshot_id)
    assert list_meta["sequence-number"] == "3" and "first-row-id" not in list_meta


def test_v3_refuses_position_delete_files_and_v2_refuses_vectors(v2: Any, tmp_path: Path) -> None:
    table, _, _ = v2
    head = table.current_snapshot()
    d1 = next(e.data_file for m in head.manifests(table.io) for e in m.fetch_manifest_entry(table.io) if e.data_file.content == 0)
    with pytest.raises(ValueError, match="format-version 3"):
        commit_files(table, deletion_vectors={d1.file_path: positions([0])}, expected_parent_snapshot_id=head.snapshot_id)
    (tmp_path / "c3").mkdir()
    v3 = create_v3_table(sql_catalog(tmp_path / "c3"), "db.t", SCHEMA, location=f"file://{tmp_path}/c3/t")
    with pytest.raises(ValueError, match="deletion vectors, not position delete files"):
        commit_files(v3, delete_files=[ContentFile(FileContent.POSITION_DELETES, "file:///x.parquet", "PARQUET", (), 1, 10)])


# --------------------------------------------------------------- partitioned v3


@pytest.mark.spark
def test_partitioned_v3_table_with_vectors(tmp_path: Path, spark: SparkSession) -> None:
    catalog: SqlCatalog = sql_catalog(tmp_path)
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="name"))
    table = create_v3_table(catalog, "db.p", SCHEMA, location=f"file://{tmp_path}/db/p", partition_spec=spec)
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "1"}),
                       pa.field("name", pa.string(), metadata={"PARQUET:field_id": "2"})])  # fmt: skip
    files = []
    for part in ("a", "b"):
        path = f"{table.location()}/data/name={part}/f.parquet"
        Path(path.removeprefix("file://")).parent.mkdir(parents=True)
        ids = [i for i in range(10) if (i % 2 == 0) == (part == "a")]
        pq.write_table(pa.table({"id": ids, "name": [part] * len(ids)}, schema=arrow), path.removeprefix("file://"))
        size = Path(path.removeprefix("file://")).stat().st_size
        files.append(ContentFile(FileContent.DATA, path, "PARQUET", (part,), len(ids), size))
    table = commit_files(table, data_files=files).table
    head = table.current_snapshot()
    assert head is not None
    # delete rows at position 1 of each file: ids 2 (a) and 3 (b)
    table = commit_files(
        table, deletion_vectors={f.file_path: positions([1]) for f in files},
        expected_parent_snapshot_id=head.snapshot_id,
    ).table  # fmt: skip
    expected = [i for i in range(10) if i not in (2, 3)]
    location = table.metadata_location
    assert sorted(r["id"] for r in spark_rows(location)) == expected
    assert sorted(r["id"] for r in duckdb_rows(location)) == expected
    assert sorted(StaticTable.from_metadata(location).scan().to_arrow().column("id").to_pylist()) == expected
    only_a = spark.read.format("iceberg").load(location).where("name = 'a'").collect()
    assert sorted(r["id"] for r in only_a) == [0, 4, 6, 8]
    puffins = [f for f in spark_files(location) if f["file_format"] == "PUFFIN"]
    assert len(puffins) == 2


def test_a_merged_manifest_keeps_the_min_sequence_number_of_its_older_entries(tmp_path: Path) -> None:
    """A merged data manifest holds this snapshot's new files (sequence number inherited) and
    older EXISTING ones: its min sequence number is the older ones', not the snapshot's.
    Taking the snapshot's made pyiceberg (it skips delete manifests older than the data
    manifests' min) drop older position deletes: deleted rows came back."""
    table = sql_catalog(tmp_path).create_table(
        "db.t", SCHEMA, properties={"format-version": "2", "commit.manifest.min-count-to-merge": "1"}
    )

    def commit(**kwargs: Any) -> Table:
        head = table.current_snapshot()
        return commit_files(table, expected_parent_snapshot_id=head.snapshot_id if head else None, **kwargs).table

    d1 = data_file(table, "d1", [(1, "a"), (2, "b"), (3, "c")])
    table = commit(data_files=[content_file(d1)])
    table = commit(delete_files=[content_file(pos_deletes(table, "p1", [(d1.file_path, 1)]))])  # id 2
    table = commit(data_files=[content_file(data_file(table, "d3", [(4, "d")]))])
    head = table.current_snapshot()
    assert head is not None
    data = [m for m in head.manifests(table.io) if m.content == PyManifestContent.DATA]
    assert len(data) == 1 and data[0].existing_files_count == 1 and data[0].added_files_count == 1  # merged
    assert data[0].min_sequence_number == 1
    assert _rows(table.scan().to_arrow().to_pylist()) == [(1, "a"), (3, "c"), (4, "d")]
