"""``iceberg.format_version: 3`` against a REST catalog (the private `weed mini` server's):
the server creates format-v3 tables and takes commits of v3 metadata written by it; its S3
"table bucket" however refuses objects other than Parquet/Avro/JSON (``ACCESS_DENIED`` on a
``.puffin`` key anywhere in the table), so a deletion vector cannot be stored there. Both
checked, not assumed: a batch without row deletes commits; one with a deletion vector fails
on the Puffin write, before anything is committed, with a terminal error that names the table
and the refused file and says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.config import IcebergConfig
from replicator.errors import TerminalError
from replicator.events.model import ColumnSpec, TableSchema
from replicator.iceberg.roaring import positions
from replicator.iceberg.table_commit import commit_batch
from replicator.iceberg.tables import TableManager, open_catalog
from sample_dbs.object_store import PrivateSeaweed
from tests.iceberg.tablekit import data_file

pytestmark = pytest.mark.integration

_ITEMS = TableSchema(
    table="app.items", columns=(ColumnSpec(name="id", type="long"), ColumnSpec(name="v", type="string")),
    key_columns=("id",),
)


def test_rest_catalog_creates_v3_tables_and_its_bucket_refuses_puffin_files(seaweed: PrivateSeaweed) -> None:
    from tests.object_store.support import rest_iceberg

    cfg = IcebergConfig.model_validate({**rest_iceberg(seaweed, "fmt_v3"), "format_version": 3})
    table = TableManager(open_catalog(cfg), cfg).ensure(_ITEMS).table
    assert table.format_version == 3
    f1 = data_file(table, "f1", [(i, f"n{i}") for i in range(5)])
    commit_batch(table, data_files=[f1], delete_files=[], snapshot_properties={}, expected_parent_snapshot_id=None)
    loaded = open_catalog(cfg).load_table("fmt_v3.items")
    assert loaded.format_version == 3
    assert sorted(loaded.scan().to_arrow().column("id").to_pylist()) == list(range(5))

    f2 = data_file(loaded, "f2", [(9, "x")])
    with pytest.raises(TerminalError, match=r"(?s)refused the deletion-vector file .*\.puffin.*table=fmt_v3\.items.*format_version: 2"):
        commit_batch(loaded, data_files=[f2], delete_files=[], vectors={f1.file_path: positions([1])},
                     snapshot_properties={}, expected_parent_snapshot_id=loaded.current_snapshot().snapshot_id)  # type: ignore[union-attr]  # fmt: skip
    assert open_catalog(cfg).load_table("fmt_v3.items").current_snapshot() == loaded.current_snapshot()


def test_sql_catalog_v3_tables_store_deletion_vectors_in_a_general_purpose_bucket(
    seaweed: PrivateSeaweed, tmp_path: Path,
) -> None:
    """The same batch on an ordinary S3 bucket (SQL catalog): the vector is stored and
    pyiceberg reads the table with the row deleted."""
    from pyarrow import fs as pafs

    bucket = "dv" + seaweed.access_key[-6:]
    pafs.S3FileSystem(access_key=seaweed.access_key, secret_key=seaweed.secret_key, region="us-east-1",
                      endpoint_override=seaweed.s3_endpoint, allow_bucket_creation=True).create_dir(bucket)  # fmt: skip
    cfg = IcebergConfig.model_validate({
        "catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/s3.db", "warehouse": f"s3://{bucket}/wh",
                    **seaweed.s3_properties()},
        "namespace": "fmt_v3", "format_version": 3,
    })  # fmt: skip
    table = TableManager(open_catalog(cfg), cfg).ensure(_ITEMS).table
    f1 = data_file(table, "f1", [(i, f"n{i}") for i in range(5)])
    commit_batch(table, data_files=[f1], delete_files=[], snapshot_properties={}, expected_parent_snapshot_id=None)
    loaded = open_catalog(cfg).load_table("fmt_v3.items")
    commit_batch(loaded, data_files=[], delete_files=[], vectors={f1.file_path: positions([1, 3])},
                 snapshot_properties={}, expected_parent_snapshot_id=loaded.current_snapshot().snapshot_id)  # type: ignore[union-attr]  # fmt: skip
    final = open_catalog(cfg).load_table("fmt_v3.items")
    assert final.format_version == 3
    assert sorted(final.scan().to_arrow().column("id").to_pylist()) == [0, 2, 4]
    deletes = final.inspect.delete_files().to_pylist()
    assert [(d["file_format"], d["file_path"][:5]) for d in deletes] == [("PUFFIN", "s3://")], deletes
