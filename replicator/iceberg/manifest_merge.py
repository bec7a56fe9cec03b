"""Manifest merging for our own commits (``dv_commit``): the manifest list of the head stays
bounded however many commits there have been.

As ``row_delta`` does for pyiceberg's producer (and Iceberg Java's ``MergingSnapshotProducer``):
when a snapshot would list more than ``commit.manifest.min-count-to-merge`` (default
``MANIFESTS_PER_CONTENT_MAX``) manifests of one content type and partition spec, the ones
smaller than ``commit.manifest.target-size-bytes`` are merged into one; a table opts out with
``commit.manifest-merge.enabled=false``. Merged entries keep their data and file sequence
numbers (and v3 first row ids), so delete semantics and row lineage are unchanged: entries
this snapshot added stay ADDED (a null sequence number still inherits the snapshot's), entries
it removed stay DELETED, other removals are dropped, everything else is EXISTING.

A maintenance rewrite (``replace``: conversion, compaction) passes ``merge_all``: it merges
every group of two or more small manifests, whatever their count, so the head it leaves holds
one manifest per content and spec (its removal records inside it), as a compacted copy does.
Readers pay per listed manifest (pyiceberg opens every one, deleted-only ones included, and
builds an Avro reader for each): at the soak's 10k-row tables that was most of a read.
The manifests are small (a rewrite runs every few batches), so this costs a few reads.

A rewrite also lists no manifest of its own that holds only removals (a compaction that drops
every delete file of the table left a delete manifest of DELETED entries, which pyiceberg
opens at every read, ~2 ms against a 6 ms scan of a 10k-row table). The spec makes DELETED
entries informational (scans skip them; Iceberg Java drops them at the next commit anyway);
the snapshot summary still counts the removed files, and the removed files stay reachable
from the parent snapshot, so expiry by reachability (ours, Spark's ``expire_snapshots``)
deletes them when that snapshot goes. Only Iceberg Java's incremental cleanup, which reads a
snapshot's DELETED entries, would leave them to orphan cleanup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pyiceberg.table import Table, TableProperties
from pyiceberg.utils.properties import property_as_bool, property_as_int

from replicator.iceberg.commit_checks import MANIFESTS_PER_CONTENT_MAX
from replicator.iceberg.manifest_schema import FileEntry, ListedManifest, ManifestContent, Status
from replicator.iceberg.manifest_writer import read_manifest

__all__ = ["merge_small_manifests"]

WriteManifest = Callable[[ManifestContent, int, list[FileEntry]], ListedManifest]


def merge_small_manifests(
    table: Table, manifests: Sequence[ListedManifest], snapshot_id: int, write: WriteManifest,
    *, merge_all: bool = False,
) -> tuple[list[ListedManifest], list[ListedManifest]]:
    """(the manifests to list, in order, merged groups first; the manifests merged away or
    dropped). ``merge_all`` (a rewrite): merge the small manifests of a group however few they
    are, and drop this snapshot's manifests that hold only removals."""
    properties = table.metadata.properties
    if not property_as_bool(properties, TableProperties.MANIFEST_MERGE_ENABLED, True):
        return list(manifests), []
    most = property_as_int(properties, TableProperties.MANIFEST_MIN_MERGE_COUNT, MANIFESTS_PER_CONTENT_MAX) or 0
    most = 1 if merge_all else most
    target = property_as_int(
        properties, TableProperties.MANIFEST_TARGET_SIZE_BYTES, TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
    ) or TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT
    groups: dict[tuple[ManifestContent, int], list[ListedManifest]] = {}
    for manifest in manifests:  # new manifests first, as the caller lists them
        groups.setdefault((manifest.content, manifest.partition_spec_id), []).append(manifest)
    listed: list[ListedManifest] = []
    merged: list[ListedManifest] = []
    for (content, spec_id), group in groups.items():
        small = [m for m in group if m.manifest_length < target]
        if len(group) <= most or len(small) < 2:
            listed.extend(group)
            continue
        listed.append(write(content, spec_id, _entries(table, small, snapshot_id)))
        listed.extend(m for m in group if m.manifest_length >= target)
        merged.extend(small)
    if merge_all:
        bare = [m for m in listed if m.added_snapshot_id == snapshot_id and not m.has_live_files()]
        listed = [m for m in listed if m not in bare]
        merged.extend(bare)
    return listed, merged


def _entries(table: Table, manifests: list[ListedManifest], snapshot_id: int) -> list[FileEntry]:
    metadata = table.metadata
    out: list[FileEntry] = []
    for manifest in manifests:
        spec = metadata.specs()[manifest.partition_spec_id]
        for entry in read_manifest(table.io, manifest, spec, metadata.schema()):
            ours = entry.snapshot_id == snapshot_id
            if entry.status == Status.DELETED:
                if ours:  # removed by this snapshot: keep the record of it
                    out.append(entry)
            elif entry.status == Status.ADDED and ours:
                out.append(entry)  # a null sequence number inherits this snapshot's
            else:
                out.append(replace(entry, status=Status.EXISTING))
    return out
