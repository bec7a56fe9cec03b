"""Rewrite commits (``replace`` snapshots) on hand-built tables, judged by Spark, DuckDB and
pyiceberg's own scan (which refuses equality deletes: it reads the table only once none are left).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table

from replicator.errors import CommitConflictError
from replicator.iceberg.rewrite import commit_rewrite
from replicator.iceberg.row_delta import commit_row_delta
from tests.iceberg.tablekit import (
    SCHEMA,
    Row,
    data_file,
    eq_deletes,
    file_count,
    id_name,
    pos_deletes,
    sql_catalog,
)
from tests.judges import assert_no_duplicate_data_files, duckdb_rows, spark_files, spark_rows

CHECKPOINT = {"replicator.checkpoint": '{"stand-in": "must survive every rewrite"}'}


@dataclass
class Built:
    table: Table
    files: dict[str, DataFile]
    expected: list[Row]


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    return sql_catalog(tmp_path)


@pytest.fixture
def built(catalog: SqlCatalog) -> Built:
    """Three row deltas: ids 1..5; update 2 (equality delete); delete 3 (equality delete)."""
    table = catalog.create_table("db.t", SCHEMA, properties={"format-version": "2", **CHECKPOINT})
    files: dict[str, DataFile] = {}
    files["d1"] = data_file(table, "d1", [(i, f"n{i}") for i in range(1, 6)])
    commit_row_delta(table, data_files=[files["d1"]], delete_files=[], snapshot_properties={})
    files["d2"] = data_file(table, "d2", [(2, "two-v2"), (6, "six")])
    files["e2"] = eq_deletes(table, "e2", [2])
    commit_row_delta(
        table, data_files=[files["d2"]], delete_files=[files["e2"]], snapshot_properties={}
    )
    files["e3"] = eq_deletes(table, "e3", [3, 6])
    files["p3"] = pos_deletes(table, "p3", [(files["d1"].file_path, 4)])  # id 5
    commit_row_delta(
        table, data_files=[], delete_files=[files["e3"], files["p3"]], snapshot_properties={}
    )
    expected = [(1, "n1"), (2, "two-v2"), (4, "n4")]
    return Built(table, files, expected)


def pyiceberg_rows(table: Table) -> list[Row]:
    return id_name(table.scan().to_arrow().to_pylist())


def assert_reads(table: Table, expected: list[Row], *, pyiceberg_too: bool = True) -> None:
    location = table.metadata_location
    assert id_name(spark_rows(location)) == expected
    assert id_name(duckdb_rows(location)) == expected
    if pyiceberg_too:
        assert pyiceberg_rows(table) == expected
    assert_no_duplicate_data_files(location)


def convert(built: Built) -> Table:
    """Replace both equality deletes by the positions they hit (ids 2 and 3 of d1; 6 of d2)."""
    t, f = built.table, built.files
    parent = t.current_snapshot()
    assert parent is not None
    converted = pos_deletes(
        t, "conv", [(f["d1"].file_path, 1), (f["d1"].file_path, 2), (f["d2"].file_path, 1)]
    )
    f["conv"] = converted
    return commit_rewrite(
        t,
        expected_snapshot_id=parent.snapshot_id,
        remove=[f["e2"], f["e3"]],
        add_deletes=[converted],
        summary={"replicator.maintenance": "conversion"},
    )


@pytest.mark.spark
def test_equality_deletes_replaced_by_position_deletes(built: Built) -> None:
    with pytest.raises(ValueError, match="equality deletes"):
        pyiceberg_rows(built.table)
    parent = built.table.current_snapshot()
    assert parent is not None
    table = convert(built)
    assert_reads(table, built.expected)

    head = table.current_snapshot()
    assert head is not None and head.parent_snapshot_id == parent.snapshot_id
    assert head.summary is not None
    summary = head.summary.additional_properties
    assert head.summary.operation.value == "replace"
    assert summary["replicator.maintenance"] == "conversion"
    assert summary["removed-equality-delete-files"] == "2"
    assert summary["added-position-delete-files"] == "1"
    assert summary["total-equality-deletes"] == "0"
    assert summary["total-position-deletes"] == "4"
    assert summary["total-delete-files"] == "2"
    assert summary["total-data-files"] == "2"
    assert summary["total-records"] == "7"
    assert table.properties["replicator.checkpoint"] == CHECKPOINT["replicator.checkpoint"]
    kinds = sorted(r["content_type"] for r in spark_files(table.metadata_location))
    assert kinds == ["DATA", "DATA", "POSITION_DELETES", "POSITION_DELETES"]


def _statuses(table: Table, manifests: list) -> dict[str, tuple[ManifestEntryStatus, int | None]]:  # type: ignore[type-arg]
    out: dict[str, tuple[ManifestEntryStatus, int | None]] = {}
    for manifest in manifests:
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            out[entry.data_file.file_path.rsplit("/", 1)[-1]] = (entry.status, entry.sequence_number)
    return out


def test_a_rewrite_merges_the_parents_small_manifests(built: Built) -> None:
    """The head a rewrite leaves lists one manifest per content (readers pay per manifest: the
    soak's 10k-row tables read 2-8x slower than a compacted copy with three manifests or more)."""
    table = convert(built)
    head = table.current_snapshot()
    assert head is not None
    after = head.manifests(table.io)
    assert sorted(m.content for m in after) == [ManifestContent.DATA, ManifestContent.DELETES]
    # Sequence numbers kept (deletes keep applying as before); the removals recorded as DELETED.
    assert _statuses(table, after) == {
        "d1.parquet": (ManifestEntryStatus.EXISTING, 1),
        "d2.parquet": (ManifestEntryStatus.EXISTING, 2),
        "e2.parquet": (ManifestEntryStatus.DELETED, 2),
        "e3.parquet": (ManifestEntryStatus.DELETED, 3),
        "p3.parquet": (ManifestEntryStatus.EXISTING, 3),
        "conv.parquet": (ManifestEntryStatus.ADDED, 4),
    }
    assert pyiceberg_rows(table) == built.expected


def test_manifests_not_touched_are_kept_when_merging_is_off(built: Built) -> None:
    with built.table.transaction() as tx:
        tx.set_properties({"commit.manifest-merge.enabled": "false"})
    parent = built.table.current_snapshot()
    assert parent is not None
    before = {m.manifest_path: m for m in parent.manifests(built.table.io)}
    table = convert(built)
    head = table.current_snapshot()
    assert head is not None
    after = head.manifests(table.io)
    # Both DATA manifests are kept as they are; the two DELETES manifests holding e2 and e3 are
    # rewritten as one (p3 stays live as EXISTING), and the new position deletes get their own.
    kept = [m for m in after if m.manifest_path in before]
    assert sorted(m.content for m in kept) == [ManifestContent.DATA, ManifestContent.DATA]
    rewritten = [m for m in after if m.manifest_path not in before]
    assert all(m.content == ManifestContent.DELETES for m in rewritten)
    assert _statuses(table, rewritten) == {
        "e2.parquet": (ManifestEntryStatus.DELETED, 2),
        "e3.parquet": (ManifestEntryStatus.DELETED, 3),
        "p3.parquet": (ManifestEntryStatus.EXISTING, 3),
        "conv.parquet": (ManifestEntryStatus.ADDED, 4),
    }


@pytest.mark.spark
def test_compaction_keeps_later_deletes_applying(built: Built) -> None:
    """Rewrite data files with an explicit sequence number: deletes committed after the rewritten
    files still hit the new file, older ones (already applied) do not hit it again."""
    table = convert(built)
    t, f = table, built.files
    head = t.current_snapshot()
    assert head is not None
    compacted = data_file(t, "compacted", built.expected)
    removed = [f["d1"], f["d2"], f["p3"], f["conv"]]
    # Highest data sequence number among the rewritten data files: d2's (2). The equality delete
    # e2 (sequence 2) was already applied and converted; it would not hit sequence 2 anyway.
    t = commit_rewrite(
        t,
        expected_snapshot_id=head.snapshot_id,
        remove=removed,
        add_data=[compacted],
        data_sequence_number=2,
        summary={"replicator.maintenance": "compaction"},
    )
    assert_reads(t, built.expected)
    now = t.current_snapshot()
    assert now is not None
    entries = [e for m in now.manifests(t.io) for e in m.fetch_manifest_entry(t.io)]
    assert [(e.data_file.file_path.rsplit("/", 1)[-1], e.sequence_number) for e in entries] == [
        ("compacted.parquet", 2)
    ]
    # A later equality delete (sequence 6) applies to the compacted rows.
    commit_row_delta(
        t, data_files=[], delete_files=[eq_deletes(t, "e6", [1])], snapshot_properties={}
    )
    assert_reads(t, [(2, "two-v2"), (4, "n4")], pyiceberg_too=False)
    assert t.properties["replicator.checkpoint"] == CHECKPOINT["replicator.checkpoint"]


def test_stale_expected_snapshot_is_a_conflict(built: Built) -> None:
    t = built.table
    head = t.current_snapshot()
    assert head is not None and head.parent_snapshot_id is not None
    before = file_count(t, ".avro")
    with pytest.raises(CommitConflictError):
        commit_rewrite(
            t,
            expected_snapshot_id=head.parent_snapshot_id,
            remove=[built.files["e2"]],
            summary={"replicator.maintenance": "conversion"},
        )
    assert file_count(t, ".avro") == before  # nothing written


def test_removing_a_file_that_is_not_live_is_refused(built: Built) -> None:
    t = built.table
    head = t.current_snapshot()
    assert head is not None
    before = file_count(t, ".avro")
    stranger = data_file(t, "stranger", [(9, "x")])
    with pytest.raises(ValueError, match="not live"):
        commit_rewrite(t, expected_snapshot_id=head.snapshot_id, remove=[stranger])
    assert file_count(t, ".avro") == before  # manifests of the failed attempt removed
    assert t.current_snapshot() == head
    with pytest.raises(ValueError, match="at least one"):
        commit_rewrite(t, expected_snapshot_id=head.snapshot_id, remove=[])
    with pytest.raises(ValueError, match="reserved|shadow"):
        commit_rewrite(
            t,
            expected_snapshot_id=head.snapshot_id,
            remove=[built.files["e2"]],
            summary={"total-records": "1"},
        )


def test_a_rewrite_lists_one_manifest_per_content(built: Built) -> None:
    """A compaction removing files listed by several manifests lists one manifest per content,
    its removal records and the new file in it (not one per source manifest, nor a removal
    manifest beside the new one): readers that open every listed manifest (pyiceberg plans that
    way, deleted-only ones included) paid for each until the next commit dropped them."""
    with built.table.transaction() as tx:  # two DATA manifests to start from
        tx.set_properties({"commit.manifest-merge.enabled": "false"})
    t = convert(built)
    with t.transaction() as tx:
        tx.remove_properties("commit.manifest-merge.enabled")
    f = built.files
    head = t.current_snapshot()
    assert head is not None
    assert sum(m.content == ManifestContent.DATA for m in head.manifests(t.io)) == 2  # d1's, d2's
    t = commit_rewrite(
        t,
        expected_snapshot_id=head.snapshot_id,
        remove=[f["d1"], f["d2"], f["p3"], f["conv"]],
        add_data=[data_file(t, "compacted", built.expected)],
        data_sequence_number=2,
        summary={"replicator.maintenance": "compaction"},
    )
    now = t.current_snapshot()
    assert now is not None
    listed = [(m.content, m.added_files_count, m.existing_files_count, m.deleted_files_count)
              for m in now.manifests(t.io)]
    # The delete manifest would hold removals only: the rewrite does not list it (DELETED
    # entries are informational; the parent still lists the removed delete files).
    assert sorted(listed) == [(ManifestContent.DATA, 1, 0, 2)]
    assert pyiceberg_rows(t) == built.expected
