"""The private pyiceberg names our snapshot producers depend on (the list in
``replicator/iceberg/row_delta.py``'s docstring) still exist with the shape we use. A pyiceberg
upgrade that moves or renames one fails here, by name, instead of deep inside a commit."""

from __future__ import annotations

import inspect
from pathlib import Path

import pyiceberg
from pyiceberg.manifest import ManifestWriterV2
from pyiceberg.table import Table, Transaction
from pyiceberg.table.update import snapshot as snapshot_update

PINNED = "0.12.0"  # the version the list was checked against (pyproject pins it)

PRODUCER_METHODS = (
    "_commit", "_manifests", "_summary", "_existing_manifests", "_process_manifests",
    "new_manifest_writer", "new_manifest_output", "_clean_all_uncommitted",
)  # fmt: skip
PRODUCER_ATTRIBUTES = (
    "_added_data_files", "_snapshot_id", "_compression", "_transaction", "_io", "_operation",
    "_parent_snapshot_id", "_target_branch",
)  # fmt: skip


def test_pyiceberg_is_the_version_the_list_was_checked_against() -> None:
    assert pyiceberg.__version__ == PINNED, (
        f"pyiceberg {pyiceberg.__version__}: re-check the private names listed in "
        "replicator/iceberg/row_delta.py, then update PINNED"
    )


def test_merge_append_producer_has_what_we_use() -> None:
    cls = getattr(snapshot_update, "_MergeAppendFiles", None)
    assert cls is not None, "pyiceberg.table.update.snapshot._MergeAppendFiles is gone"
    missing = [m for m in PRODUCER_METHODS if not callable(getattr(cls, m, None))]
    assert not missing, f"_MergeAppendFiles lacks {missing}"
    params = inspect.signature(snapshot_update._SnapshotProducer.__init__).parameters
    for name in ("operation", "transaction", "io", "snapshot_properties", "branch"):
        assert name in params, f"_SnapshotProducer.__init__ lost its {name!r} argument"


def test_producer_attributes_exist_on_a_real_producer(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    wh = f"{tmp_path}"
    catalog = SqlCatalog("t", uri=f"sqlite:///{wh}/c.db", warehouse=f"file://{wh}")
    catalog.create_namespace("n")
    table: Table = catalog.create_table("n.t", Schema(NestedField(1, "id", LongType(), required=True)))
    tx = table.transaction()
    producer = snapshot_update._MergeAppendFiles(
        operation=snapshot_update.Operation.APPEND, transaction=tx, io=table.io, snapshot_properties={},
        branch="main",
    )  # fmt: skip
    missing = [a for a in PRODUCER_ATTRIBUTES if not hasattr(producer, a)]
    assert not missing, f"a _MergeAppendFiles instance lacks {missing}"
    # producer_transaction caches table_metadata keyed on these two.
    assert tx._table is table and tx._updates == ()
    assert isinstance(Transaction.__dict__.get("table_metadata"), property)


def test_cached_table_metadata_follows_staged_updates(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.table.update import SetPropertiesUpdate
    from pyiceberg.types import LongType, NestedField

    from replicator.iceberg.row_delta import producer_transaction

    wh = f"{tmp_path}"
    catalog = SqlCatalog("t", uri=f"sqlite:///{wh}/c.db", warehouse=f"file://{wh}")
    catalog.create_namespace("n")
    table: Table = catalog.create_table("n.t", Schema(NestedField(1, "id", LongType(), required=True)))
    tx = producer_transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first  # computed once
    tx._apply((SetPropertiesUpdate(updates={"k": "v"}),), ())
    assert tx.table_metadata.properties["k"] == "v"  # recomputed after staging
    assert "k" not in first.properties
    # The staged view is pyiceberg's update_table_metadata less its clock and deep copy.
    from pyiceberg.table.update import update_table_metadata

    theirs = update_table_metadata(table.metadata, tx._updates)
    ours = tx.table_metadata
    assert ours.model_copy(update={"last_updated_ms": theirs.last_updated_ms}) == theirs


def test_manifest_writer_and_transaction_hooks() -> None:
    for name in ("_with_partition", "content", "_meta", "add_entry", "to_manifest_file"):
        assert hasattr(ManifestWriterV2, name), f"ManifestWriterV2.{name} is gone"
    for name in ("_apply", "commit_transaction"):
        assert callable(getattr(Transaction, name, None)), f"Transaction.{name} is gone"


def test_sql_catalog_commit_hooks() -> None:
    """What ``replicator.iceberg.sql_commit`` replaces or calls on a SqlCatalog."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import update

    for name in ("_convert_orm_to_iceberg", "_write_metadata", "_update_and_stage_table",
                 "_parse_metadata_version", "_load_file_io", "identifier_to_tuple"):  # fmt: skip
        assert callable(getattr(SqlCatalog, name, None)), f"SqlCatalog.{name} is gone"
    for name in ("_apply_table_update", "_TableMetadataUpdateContext", "_update_table_metadata_log"):
        assert hasattr(update, name), f"pyiceberg.table.update.{name} is gone"
    params = inspect.signature(SqlCatalog._update_and_stage_table).parameters
    assert list(params)[1:] == ["current_table", "table_identifier", "requirements", "updates"]
