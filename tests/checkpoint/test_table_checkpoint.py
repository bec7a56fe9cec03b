"""Reading a table's checkpoint one way: written with the data, survives commits by other
tools and snapshot expiry, refuses a rollback under the engine."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from replicator.checkpoint import (
    CHECKPOINT_PROPERTY,
    Checkpoint,
    checkpoint_at,
    checkpoint_commit_properties,
    read_checkpoint,
)
from replicator.errors import TerminalError
from replicator.events.model import SourcePosition
from replicator.iceberg.row_delta import commit_row_delta


def make_table(tmp_path: Path) -> Table:
    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    cat.create_namespace("ns")
    schema = Schema(NestedField(1, "id", LongType(), required=True), identifier_field_ids=[1])
    return cat.create_table("ns.t", schema=schema, properties={"format-version": "2"})


def engine_commit(table: Table, lsn: int, writer: str = "w") -> Checkpoint:
    cp = Checkpoint(position=SourcePosition(source="postgres", parts=(lsn, 0)), writer_id=writer,
                    fencing_token=lsn)
    summary, props = checkpoint_commit_properties(cp)
    commit_row_delta(table, data_files=[], delete_files=[], snapshot_properties=summary,
                     table_properties=props)
    return cp


def foreign_append(table: Table) -> None:
    table.append(pa.table({"id": pa.array([1], pa.int64())}, schema=pa.schema([pa.field("id", pa.int64(), nullable=False)])))


def test_written_with_the_commit_and_read_back(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    assert read_checkpoint(table) is None
    cp = engine_commit(table, 10)
    got = read_checkpoint(table)
    assert got == cp and got is not None
    assert got.snapshot_id == table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert checkpoint_at(table, table.current_snapshot()) == cp


def test_survives_foreign_commits_and_expiry(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    engine_commit(table, 10)
    cp = engine_commit(table, 20)
    for _ in range(3):
        foreign_append(table)  # e.g. someone's compaction: no checkpoint in its summary
    head = table.current_snapshot()
    assert head is not None
    old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != head.snapshot_id]
    table.maintenance.expire_snapshots().by_ids(old).commit()
    table = table.refresh()
    assert len(table.snapshots()) == 1
    assert checkpoint_at(table, table.current_snapshot()) is None  # the summaries are gone...
    assert read_checkpoint(table) == cp  # ...the checkpoint is not


def test_rollback_under_the_engine_is_refused(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    first = engine_commit(table, 10)
    first_id = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    engine_commit(table, 20)
    table.manage_snapshots().rollback_to_snapshot(first_id).commit()
    with pytest.raises(TerminalError, match="rolled back"):
        read_checkpoint(table.refresh())
    assert checkpoint_at(table, table.current_snapshot()) == first


def test_legacy_table_without_the_property_reads_the_summaries(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    cp = Checkpoint(position=SourcePosition(source="postgres", parts=(5, 0)), writer_id="old")
    commit_row_delta(table, data_files=[], delete_files=[], snapshot_properties=cp.summary())
    foreign_append(table)
    assert CHECKPOINT_PROPERTY not in table.properties
    assert read_checkpoint(table) == cp
