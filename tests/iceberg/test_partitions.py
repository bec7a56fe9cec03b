"""Partition specs of the engine's tables (issue 24): a created table gets its configured spec
as the default beside an unpartitioned one (for global equality deletes) in one commit; a
pre-created partitioned table gets an unpartitioned spec added, not made the default; a
partition_by naming no column is refused with the columns listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import BucketTransform

from replicator.config import IcebergConfig
from replicator.errors import ConfigError
from replicator.events.model import ColumnSpec, TableSchema
from replicator.iceberg.partitions import ensure_global_spec, global_spec_id, sort_columns
from replicator.iceberg.tables import TableManager
from tests.iceberg.tablekit import SCHEMA, sql_catalog

ORDERS = TableSchema(
    table="public.orders",
    columns=(ColumnSpec(name="id", type="long", nullable=False), ColumnSpec(name="created", type="timestamptz"),
             ColumnSpec(name="note", type="string")),
    key_columns=("id",),
)  # fmt: skip


def manager(tmp_path: Path, **iceberg: object) -> tuple[SqlCatalog, TableManager]:
    catalog = sql_catalog(tmp_path)
    cfg = IcebergConfig.model_validate({"catalog_uri": "sqlite:///x.db", "warehouse": str(tmp_path), **iceberg})
    catalog.create_namespace_if_not_exists(cfg.namespace)
    return catalog, TableManager(catalog, cfg)


def test_created_table_gets_configured_spec_and_sort_order(tmp_path: Path) -> None:
    _catalog, tables = manager(
        tmp_path,
        partition_by={"public.orders": ["day(created)", "bucket(16, id)"]},
        sort_by={"public.orders": ["note desc"]},
    )
    t = tables.ensure(ORDERS).table
    assert [(f.name, str(f.transform)) for f in t.spec().fields] == [
        ("created_day", "day"), ("id_bucket_16", "bucket[16]")
    ]  # fmt: skip
    assert global_spec_id(t) is not None and global_spec_id(t) != t.metadata.default_spec_id
    assert sort_columns(t) == (("note", "descending", False),)
    assert len(t.metadata.metadata_log) == 0  # one creation commit


def test_partition_by_of_a_missing_column_is_refused(tmp_path: Path) -> None:
    _catalog, tables = manager(tmp_path, partition_by={"public.orders": ["day(created_at)"]})
    with pytest.raises(ConfigError) as exc:
        tables.ensure(ORDERS)
    assert "no column 'created_at'" in str(exc.value) and "id, created, note" in str(exc.value)


def test_precreated_partitioned_table_gets_an_unpartitioned_spec_not_as_default(tmp_path: Path) -> None:
    catalog = sql_catalog(tmp_path)
    catalog.create_namespace_if_not_exists("db")
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket"))
    t = catalog.create_table("db.t", SCHEMA, partition_spec=spec, properties={"format-version": "2"})
    assert global_spec_id(t) is None
    added = ensure_global_spec(t)
    t = catalog.load_table("db.t")
    assert t.metadata.specs()[added].is_unpartitioned()
    assert t.spec().fields and t.metadata.default_spec_id != added
    assert ensure_global_spec(t) == added  # once
