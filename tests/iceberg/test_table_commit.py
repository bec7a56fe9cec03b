"""The engine's commit entry points on a format-v3 table (``table_commit``): a batch's
position deletes become deletion vectors merged with the data files' live ones, equality
deletes stay files, a TRUNCATE removes everything, and a rewrite removes a data file together
with its vector. Judged at every snapshot by DuckDB, pyiceberg and (marked spark) Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable, Table

from replicator.config import IcebergConfig
from replicator.errors import ConfigError
from replicator.events.model import ColumnSpec, TableSchema
from replicator.iceberg import sql_commit
from replicator.iceberg.dv_commit import live_deletion_vectors
from replicator.iceberg.roaring import positions
from replicator.iceberg.table_commit import (
    commit_batch,
    commit_replace,
    vectors_from_position_files,
)
from replicator.iceberg.tables import TABLE_PROPERTIES, TableManager
from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, pos_deletes, sql_catalog
from tests.judges import duckdb_rows, spark_files, spark_rows


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    # as open_catalog does: a SQL catalog writes v3 metadata through v3_metadata
    cat = sql_commit.FastCommitSqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("db")
    return cat


@pytest.fixture
def table(catalog: SqlCatalog) -> Table:
    return catalog.create_table("db.t", SCHEMA, properties={**TABLE_PROPERTIES, "format-version": "3"})


def _head(table: Table) -> int | None:
    head = table.current_snapshot()
    return head.snapshot_id if head is not None else None


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return sorted(r["id"] for r in rows)


def _batches(table: Table) -> list[tuple[str, list[int]]]:
    """Four commits; (metadata location, live ids) after each."""
    seen = []
    f1 = data_file(table, "f1", [(i, f"n{i}") for i in range(10)])
    p1 = pos_deletes(table, "p1", [(f1.file_path, 2), (f1.file_path, 3)])
    vectors = vectors_from_position_files(table, [p1.file_path])
    commit_batch(table, data_files=[f1], delete_files=[], vectors=vectors, snapshot_properties={"k": "1"},
                 expected_parent_snapshot_id=None)  # fmt: skip
    seen.append((table.metadata_location, [0, 1, *range(4, 10)]))
    f2 = data_file(table, "f2", [(i, f"m{i}") for i in range(10, 15)])
    p2 = pos_deletes(table, "p2", [(f1.file_path, 5), (f2.file_path, 0)])
    e2 = eq_deletes(table, "e2", [7])
    commit_batch(table, data_files=[f2], delete_files=[e2],
                 vectors=vectors_from_position_files(table, [p2.file_path]),
                 snapshot_properties={}, expected_parent_snapshot_id=_head(table))  # fmt: skip
    seen.append((table.metadata_location, [0, 1, 4, 6, 8, 9, *range(11, 15)]))
    # a rewrite: f1 with its vector applied (and the equality delete) becomes f3; e2 converted
    f3 = data_file(table, "f3", [(i, f"n{i}") for i in (0, 1, 4, 6, 8, 9)])
    commit_replace(table, expected_snapshot_id=_head(table), remove=[f1, e2], add_data=[f3])
    seen.append((table.metadata_location, [0, 1, 4, 6, 8, 9, *range(11, 15)]))
    f4 = data_file(table, "f4", [(20, "x"), (21, "y")])
    commit_batch(table, data_files=[f4], delete_files=[], vectors={f4.file_path: positions([0])},
                 snapshot_properties={}, expected_parent_snapshot_id=_head(table), remove_all=True)  # fmt: skip
    seen.append((table.metadata_location, [21]))
    return seen


def test_v3_commits_read_equal_by_duckdb_and_pyiceberg(table: Table) -> None:
    for i, (location, expected) in enumerate(_batches(table)):
        assert _ids(duckdb_rows(location)) == expected
        if i != 1:  # pyiceberg 0.12 reads no equality deletes (batch 2 has one)
            assert sorted(StaticTable.from_metadata(location).scan().to_arrow().column("id").to_pylist()) == expected


def test_vectors_merge_and_go_with_their_data_file(table: Table) -> None:
    seen = _batches(table)
    after_batch_2 = StaticTable.from_metadata(seen[1][0])
    by_name = {Path(p).stem: v.tolist() for p, v in live_deletion_vectors(after_batch_2).items()}
    assert by_name == {"f1": [2, 3, 5], "f2": [0]}  # f1's vector merged with the new position
    after_rewrite = StaticTable.from_metadata(seen[2][0])
    assert {Path(p).stem for p in live_deletion_vectors(after_rewrite)} == {"f2"}
    assert after_rewrite.current_snapshot().summary.operation.value == "replace"  # type: ignore[union-attr]
    assert {Path(p).stem for p in live_deletion_vectors(table)} == {"f4"}


@pytest.mark.spark
def test_v3_commits_read_equal_by_spark(table: Table) -> None:
    for location, expected in _batches(table):
        assert _ids(spark_rows(location)) == expected
    deletes = [f for f in spark_files(table.metadata_location) if f["content"] != 0]
    assert deletes and all(f["file_format"] == "PUFFIN" for f in deletes)


def _manager(catalog: SqlCatalog, version: int, **more: Any) -> TableManager:
    cfg = IcebergConfig.model_validate({"catalog_uri": "sqlite://", "warehouse": "/tmp/x", "namespace": "db",
                                        "format_version": version, **more})  # fmt: skip
    return TableManager(catalog, cfg)


_ORDERS = TableSchema(
    table="public.orders", columns=(ColumnSpec(name="id", type="long"), ColumnSpec(name="v", type="string")), key_columns=("id",)
)


@pytest.mark.parametrize("version", [2, 3])
def test_tables_are_created_at_the_configured_version(catalog: SqlCatalog, version: int) -> None:
    state = _manager(catalog, version).ensure(_ORDERS)
    assert state.table.format_version == version
    assert catalog.load_table("db.orders").format_version == version


def test_an_existing_table_keeps_its_version(catalog: SqlCatalog) -> None:
    _manager(catalog, 3).ensure(_ORDERS)
    state = _manager(catalog, 2).ensure(_ORDERS)  # found, not created: v3 stays v3
    assert state.table.format_version == 3


def test_a_catalog_that_cannot_write_v3_is_a_config_error(tmp_path: Path) -> None:
    plain = sql_catalog(tmp_path)  # pyiceberg's own SQL commit: refuses v3 metadata
    with pytest.raises(ConfigError, match="format version 3"):
        _manager(plain, 3).ensure(_ORDERS)


def test_v3_table_gets_its_spec_and_sort_order_even_after_a_cut_short_creation(catalog: SqlCatalog) -> None:
    shape = {"partition_by": {"public.orders": ["bucket(4, id)"]}, "sort_by": {"public.orders": ["v"]}}
    state = _manager(catalog, 3, **shape).ensure(_ORDERS)
    assert state.table.format_version == 3
    assert not state.table.spec().is_unpartitioned() and not state.table.sort_order().is_unsorted
    # a crash between the creation's two commits: the table exists, plain, without snapshots
    bare = _manager(catalog, 3, table_names={"public.orders": "bare"}).ensure(_ORDERS).table
    assert bare.spec().is_unpartitioned()
    again = _manager(catalog, 3, table_names={"public.orders": "bare"}, **shape).ensure(_ORDERS).table
    assert not again.spec().is_unpartitioned() and not again.sort_order().is_unsorted


def _forty_batches(table: Table) -> set[int]:
    """Forty batches, each a data file with a vector on it and on the previous batch's file
    (merged with that file's vector); asserts the manifest list stays bounded. Live ids."""
    from replicator.iceberg.manifest_writer import read_manifest_list
    from replicator.iceberg.row_delta import MANIFESTS_PER_CONTENT_MAX

    live: set[int] = set()
    previous = None
    most = 0
    for i in range(40):
        f = data_file(table, f"b{i}", [(10 * i + k, "x") for k in range(10)])
        live |= {10 * i + k for k in range(10)}
        vectors = {f.file_path: positions([0])}
        live.discard(10 * i)
        if previous is not None:
            vectors[previous.file_path] = positions([i % 5 + 1])
            live.discard(10 * (i - 1) + i % 5 + 1)
        commit_batch(table, data_files=[f], delete_files=[], vectors=vectors, snapshot_properties={},
                     expected_parent_snapshot_id=_head(table))  # fmt: skip
        previous = f
        head = table.current_snapshot()
        assert head is not None
        listed = read_manifest_list(table.io, head.manifest_list)
        most = max(most, max(sum(1 for m in listed if m.content == c) for c in {m.content for m in listed}))
    assert most <= MANIFESTS_PER_CONTENT_MAX + 2
    return live


def test_v3_manifest_list_stays_bounded_and_reads_the_same(table: Table) -> None:
    """Small manifests are merged; nothing changes meaning."""
    live = _forty_batches(table)
    assert _ids(duckdb_rows(table.metadata_location)) == sorted(live)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == sorted(live)
    assert len(live_deletion_vectors(table)) == 40


@pytest.mark.spark
def test_v3_merged_manifests_read_by_spark_with_unique_row_ids(table: Table, spark: Any) -> None:
    live = _forty_batches(table)
    assert _ids(spark_rows(table.metadata_location)) == sorted(live)
    rows = spark.read.format("iceberg").load(table.metadata_location).select("_row_id").collect()
    ids = [r["_row_id"] for r in rows]
    assert None not in ids and len(set(ids)) == len(live)
