"""Manifest lists and manifests read once per process, by path.

Iceberg never changes a file in place: every commit writes its manifest list and manifests
under new names, so what a committed path holds never changes. pyiceberg parses each file's
Avro schema again on every open (a few ms per manifest, mostly pydantic), and one batch's
commit, the health check after it, a conversion and a compaction each read the same
manifests. Only committed manifests are cached: a manifest of a commit in progress has no
sequence number yet, and its entries inherit one when read.

The cached entries are shared: callers must not change them (pyiceberg's manifest writers
copy what they write; nothing here mutates an entry it read).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table.snapshots import Snapshot

# Entries kept across all tables (each a DataFile with its column statistics, ~1-3 KB): the
# live manifests of a few hundred tables between maintenance runs.
MAX_CACHED_ENTRIES = 20_000
# Manifest lists kept (each a few ManifestFile records).
MAX_CACHED_LISTS = 512

_lock = threading.Lock()
_entries: OrderedDict[tuple[str, int, int | None], list[ManifestEntry]] = OrderedDict()
_entry_count = 0
_lists: OrderedDict[str, list[ManifestFile]] = OrderedDict()


def manifest_entries(
    manifest: ManifestFile, io: FileIO, *, live_only: bool = True
) -> list[ManifestEntry]:
    """The entries of ``manifest`` (without DELETED ones when ``live_only``), as
    ``ManifestFile.fetch_manifest_entry`` reads them: sequence numbers inherited."""
    seq = manifest.sequence_number
    if seq is None or seq < 0:  # not committed yet: its entries' inheritance is not final
        return manifest.fetch_manifest_entry(io, discard_deleted=live_only)
    key = (manifest.manifest_path, seq, manifest.added_snapshot_id)
    with _lock:
        entries = _entries.get(key)
        if entries is not None:
            _entries.move_to_end(key)
    if entries is None:
        entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
        _remember(key, entries)
    if not live_only:
        return list(entries)
    return [e for e in entries if e.status != ManifestEntryStatus.DELETED]


def read_manifests(snapshot: Snapshot, io: FileIO) -> list[ManifestFile]:
    """The manifests ``snapshot``'s manifest list names (``Snapshot.manifests``)."""
    path = snapshot.manifest_list
    with _lock:
        manifests = _lists.get(path)
        if manifests is not None:
            _lists.move_to_end(path)
            return list(manifests)
    manifests = list(snapshot.manifests(io))
    with _lock:
        _lists[path] = manifests
        while len(_lists) > MAX_CACHED_LISTS:
            _lists.popitem(last=False)
    return list(manifests)


def _remember(key: tuple[str, int, int | None], entries: list[ManifestEntry]) -> None:
    global _entry_count
    if len(entries) > MAX_CACHED_ENTRIES // 4:
        return  # one huge manifest would evict everything else
    with _lock:
        if key in _entries:
            return
        _entries[key] = entries
        _entry_count += len(entries)
        while _entry_count > MAX_CACHED_ENTRIES and _entries:
            _, old = _entries.popitem(last=False)
            _entry_count -= len(old)


def clear() -> None:
    """Forget everything (tests; a process that deletes and recreates warehouses)."""
    global _entry_count
    with _lock:
        _entries.clear()
        _lists.clear()
        _entry_count = 0


def file_counts(table: Any) -> tuple[int, int, int]:
    """(data, position delete, equality delete) files of the table's current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None or not read_manifests(snapshot, table.io):
        return 0, 0, 0  # (pyiceberg's files() fails on an empty manifest list, e.g. after TRUNCATE)
    counts = Counter(int(c) for c in table.inspect.files().column("content").to_pylist())
    return counts[0], counts[1], counts[2]
