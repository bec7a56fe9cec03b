"""Orphan-file cleanup: delete files under a table's location that nothing references.

Orphans come from attempts that died before their catalog commit (data and delete files,
manifests, manifest lists, metadata files), from a crash between a snapshot expiry's commit
and its deletes, and from old metadata files. Referenced = the current metadata file, the
metadata log, and every manifest list, manifest and data/delete file of every snapshot that
is still in the table (any branch or tag), plus statistics files.

A file is removed only when it is also older than the safety age: a commit in flight (this
engine's next batch, or another tool's) has written its files but not yet committed them.
Listing needs pyiceberg's ``PyArrowFileIO`` (local files, S3, GCS, ADLS, HDFS); other FileIOs
cannot list, and their tables are skipped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.maintenance import Crash, no_crash
from replicator.maintenance.common import normalize_path

log = logging.getLogger(__name__)

KIND = "orphans"


@dataclass(frozen=True)
class OrphanResult:
    files: int  # deleted
    bytes: int


def referenced_paths(table: Table) -> set[str]:
    """Every file the table's metadata references (normalized, see ``normalize_path``)."""
    meta = table.metadata
    refs = {normalize_path(table.metadata_location)}
    refs.update(normalize_path(e.metadata_file) for e in meta.metadata_log)
    refs.update(normalize_path(s.statistics_path) for s in meta.statistics)
    refs.update(normalize_path(s.statistics_path) for s in meta.partition_statistics)
    seen: set[str] = set()
    for snap in meta.snapshots:
        refs.add(normalize_path(snap.manifest_list))
        for m in read_manifests(snap, table.io):
            if m.manifest_path in seen:
                continue
            seen.add(m.manifest_path)
            refs.add(normalize_path(m.manifest_path))
            for entry in manifest_entries(m, table.io, live_only=False):
                refs.add(normalize_path(entry.data_file.file_path))
    return refs


def find_orphans(
    table: Table, *, min_age_seconds: float, now: float | None = None
) -> list[tuple[str, int]]:
    """(path, size) of files under the table's location that nothing references and that
    are older than ``min_age_seconds``."""
    io = table.io
    if not isinstance(io, PyArrowFileIO):
        log.warning("cannot list files of %s (FileIO %s): orphans not removed",
                    ".".join(table.name()), type(io).__name__)
        return []
    scheme, netloc, root = PyArrowFileIO.parse_location(table.location(), io.properties)
    fs = io.fs_by_scheme(scheme, netloc)
    infos = fs.get_file_info(FileSelector(root.rstrip("/"), recursive=True, allow_not_found=True))
    cutoff = (time.time() if now is None else now) - min_age_seconds
    candidates = [
        i for i in infos
        if i.type == FileType.File and i.mtime is not None and i.mtime.timestamp() < cutoff
    ]
    if not candidates:
        return []
    # Read the references only after listing: a file committed meanwhile is in the metadata.
    refs = referenced_paths(table.refresh())
    return [(i.path, i.size or 0) for i in candidates if i.path not in refs
            and not i.base_name.startswith("version-hint")]


def remove_orphans(
    table: Table, *, min_age_seconds: float, now: float | None = None, crash: Crash = no_crash
) -> OrphanResult:
    """Delete orphan files older than ``min_age_seconds``; no commit (the metadata does not
    change)."""
    orphans = find_orphans(table, min_age_seconds=min_age_seconds, now=now)
    if not orphans:
        return OrphanResult(0, 0)
    scheme = PyArrowFileIO.parse_location(table.location(), table.io.properties)[0]
    files = size = 0
    for path, nbytes in orphans:
        try:
            table.io.delete(path if scheme == "file" else f"{scheme}://{path}")
        except FileNotFoundError:
            continue
        files += 1
        size += nbytes
        crash("orphans-deleting")
    log.info("%s: removed %d orphan file(s), %d bytes", ".".join(table.name()), files, size)
    return OrphanResult(files, size)
