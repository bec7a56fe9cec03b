"""Small helpers every maintenance step shares: file paths as the file system lists them,
the files a set of snapshots references, and the "last maintenance" record."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import orjson
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.maintenance import LAST_MAINTENANCE_PROPERTY


def normalize_path(location: str) -> str:
    """A location as the file system lists it: ``file:///a/b`` and ``/a/b`` -> ``/a/b``,
    ``s3://bucket/k`` -> ``bucket/k``."""
    return PyArrowFileIO.parse_location(location)[2]


def snapshot_manifests(table: Table, snapshot: Snapshot) -> list[ManifestFile]:
    return list(read_manifests(snapshot, table.io))


def live_files(table: Table, snapshots: Iterable[Snapshot]) -> tuple[set[str], set[str]]:
    """(manifest paths, data/delete file paths live in any of ``snapshots``), normalized."""
    manifests: dict[str, ManifestFile] = {}
    for snap in snapshots:
        for m in snapshot_manifests(table, snap):
            manifests.setdefault(m.manifest_path, m)
    files: set[str] = set()
    for m in manifests.values():
        for entry in manifest_entries(m, table.io, live_only=True):
            if entry.status != ManifestEntryStatus.DELETED:
                files.add(normalize_path(entry.data_file.file_path))
    return {normalize_path(p) for p in manifests}, files


def last_maintenance_record(kind: str, counts: Mapping[str, int]) -> dict[str, str]:
    """The table property recording a maintenance step (set in the step's own commit)."""
    doc = {"kind": kind, "at_ms": int(time.time() * 1000), **counts}
    return {LAST_MAINTENANCE_PROPERTY: orjson.dumps(doc).decode()}


def read_last_maintenance(table: Table) -> dict[str, object] | None:
    raw = table.properties.get(LAST_MAINTENANCE_PROPERTY)
    if raw is None:
        return None
    value = orjson.loads(raw)
    return value if isinstance(value, dict) else None
