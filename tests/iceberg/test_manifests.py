"""Manifest reads cached by path: the same entries as pyiceberg reads, each committed
manifest parsed once, uncommitted manifests never cached, and a bounded cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table

from replicator.iceberg import manifests
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.rewrite import commit_rewrite
from replicator.iceberg.row_delta import commit_row_delta
from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, sql_catalog


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    manifests.clear()
    yield
    manifests.clear()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of the manifests pyiceberg actually opened."""
    opened: list[str] = []
    real = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, io: Any, discard_deleted: bool = True) -> Any:
        opened.append(self.manifest_path)
        return real(self, io, discard_deleted=discard_deleted)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    return opened


def _table(tmp_path: Path) -> Table:
    cat = sql_catalog(tmp_path)
    table = cat.create_table("db.t", SCHEMA, properties={"format-version": "2"})
    d1 = data_file(table, "d1", [(1, "a"), (2, "b")])
    commit_row_delta(table, data_files=[d1], delete_files=[], snapshot_properties={})
    d2 = data_file(table, "d2", [(2, "b2")])
    commit_row_delta(table, data_files=[d2], delete_files=[eq_deletes(table, "e2", [2])],
                     snapshot_properties={})  # fmt: skip
    return table.refresh()


def _key(entries: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number,
             e.data_file.file_path) for e in entries]  # fmt: skip


def test_entries_are_pyiceberg_s_and_each_manifest_is_read_once(tmp_path: Path, reads: list[str]) -> None:
    table = _table(tmp_path)
    head = table.current_snapshot()
    assert head is not None
    listed = read_manifests(head, table.io)
    assert [m.manifest_path for m in listed] == [m.manifest_path for m in head.manifests(table.io)]
    for m in listed:
        for live in (True, False):
            assert _key(manifest_entries(m, table.io, live_only=live)) == _key(
                ManifestFile.fetch_manifest_entry(m, table.io, discard_deleted=live))
    reads.clear()
    for m in read_manifests(head, table.io):
        manifest_entries(m, table.io)
        manifest_entries(m, table.io, live_only=False)
    assert reads == []


def test_removed_files_show_as_deleted_entries_of_the_new_snapshot(tmp_path: Path) -> None:
    """A rewrite's new manifests are new paths: what earlier reads cached does not hide them."""
    table = _table(tmp_path)
    head = table.current_snapshot()
    assert head is not None
    for m in read_manifests(head, table.io):
        manifest_entries(m, table.io)  # cached before the rewrite
    files = [e.data_file for m in read_manifests(head, table.io) for e in manifest_entries(m, table.io)]
    d1 = next(f for f in files if f.file_path.endswith("d1.parquet"))
    merged = data_file(table, "m1", [(1, "a")])
    table = commit_rewrite(table, expected_snapshot_id=head.snapshot_id, remove=[d1],
                           add_data=[merged])  # fmt: skip
    new_head = table.current_snapshot()
    assert new_head is not None
    live = {e.data_file.file_path.rsplit("/", 1)[-1] for m in read_manifests(new_head, table.io)
            for e in manifest_entries(m, table.io)}  # fmt: skip
    assert "d1.parquet" not in live and "m1.parquet" in live
    removed = [e for m in read_manifests(new_head, table.io)
               for e in manifest_entries(m, table.io, live_only=False)
               if e.status == ManifestEntryStatus.DELETED]  # fmt: skip
    assert [e.data_file.file_path for e in removed] == [d1.file_path]


def test_a_manifest_without_a_sequence_number_is_not_cached(tmp_path: Path, reads: list[str]) -> None:
    """The manifests of a commit in progress inherit their sequence number when read."""
    table = _table(tmp_path)
    head = table.current_snapshot()
    assert head is not None
    m = read_manifests(head, table.io)[0]
    pending = ManifestFile.from_args(**{**{k: getattr(m, k) for k in (
        "manifest_path", "manifest_length", "partition_spec_id", "content", "min_sequence_number",
        "added_snapshot_id")}, "sequence_number": -1})
    reads.clear()
    manifest_entries(pending, table.io)
    manifest_entries(pending, table.io)
    assert reads == [m.manifest_path] * 2


def test_the_cache_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str]) -> None:
    monkeypatch.setattr(manifests, "MAX_CACHED_ENTRIES", 4)
    table = _table(tmp_path)
    head = table.current_snapshot()
    assert head is not None
    listed = read_manifests(head, table.io)
    for m in listed:
        manifest_entries(m, table.io)
    assert sum(len(v) for v in manifests._entries.values()) <= 4
