"""Snapshot expiry: drop snapshots past the retention, then the files only they referenced.

This module picks what to expire (never a branch or tag head), commits its removal
(``RemoveSnapshotsUpdate``) together with the "last maintenance" property in one catalog
commit, and then deletes the manifest lists, manifests and data/delete files that no remaining snapshot references. A crash between the
commit and the deletes leaves unreferenced files that orphan cleanup removes later.

Kept: the newest ``keep`` snapshots of main's history, every snapshot younger than
``max_age_seconds`` unless more than ``max_count`` newer snapshots of main follow it (0: no
cap; never fewer than ``keep``), every branch and tag head (consistent cuts are tags). The cap
bounds metadata.json for a table committing every second: every reader parses every snapshot
in it at each table load (135 KB at 73 snapshots in the position-mode soak). The checkpoint is a
table property bound to a snapshot id, read the same whether or not that snapshot still
exists (``replicator.checkpoint.table``); a table whose checkpoint lives only in snapshot
summaries (written before the property existed) is not expired, because its position is found
by walking ancestors.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
)

from replicator.checkpoint import CHECKPOINT_PROPERTY, checkpoint_at
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.table_updates import commit_table_updates
from replicator.maintenance import Crash, no_crash
from replicator.maintenance.common import last_maintenance_record, live_files, normalize_path

log = logging.getLogger(__name__)

KIND = "expiry"


@dataclass(frozen=True)
class ExpiryResult:
    snapshots: int  # expired
    files_deleted: int  # manifest lists, manifests, data and delete files


def snapshots_to_expire(
    table: Table, *, keep: int, max_age_seconds: float, now_ms: int | None = None, max_count: int = 0
) -> list[Snapshot]:
    """The snapshots past retention (oldest first)."""
    meta = table.metadata
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    protected = {ref.snapshot_id for ref in meta.refs.values()}
    chain: list[int] = []  # main's history, newest first
    snap = meta.snapshot_by_name(MAIN_BRANCH)
    while snap is not None:
        chain.append(snap.snapshot_id)
        snap = meta.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    cutoff = now_ms - int(max_age_seconds * 1000)
    keep_ids = protected | set(chain[:keep])
    over_cap = set(chain[max(keep, max_count):]) if max_count else set()
    out = [
        s for s in meta.snapshots
        if (s.timestamp_ms < cutoff or s.snapshot_id in over_cap) and s.snapshot_id not in keep_ids
    ]  # fmt: skip
    return sorted(out, key=lambda s: s.timestamp_ms)


def checkpoint_only_in_summaries(table: Table) -> bool:
    """The table's checkpoint is found by walking ancestors (no table property yet)."""
    if CHECKPOINT_PROPERTY in table.properties:
        return False
    return checkpoint_at(table, table.current_snapshot()) is not None


def expire_snapshots(
    table: Table,
    *,
    keep: int,
    max_age_seconds: float,
    now_ms: int | None = None,
    crash: Crash = no_crash,
    max_count: int = 0,
) -> tuple[Table, ExpiryResult]:
    """Expire what is past retention; returns the refreshed table and what was done."""
    if checkpoint_only_in_summaries(table):
        log.warning(
            "not expiring %s: its checkpoint is only in snapshot summaries (the next batch "
            "writes it as a table property)", ".".join(table.name()),
        )
        return table, ExpiryResult(0, 0)
    expired = snapshots_to_expire(
        table, keep=keep, max_age_seconds=max_age_seconds, now_ms=now_ms, max_count=max_count
    )
    if not expired:
        return table, ExpiryResult(0, 0)
    expired_ids = {s.snapshot_id for s in expired}
    kept = [s for s in table.metadata.snapshots if s.snapshot_id not in expired_ids]
    io = table.io

    # One catalog commit of the removal and the record, under the head it was planned on (a
    # moved head fails it: the next slice plans again). Not pyiceberg's ExpireSnapshots: its
    # by_ids() re-derives (deep-copies) the whole metadata twice per snapshot, quadratic in the
    # snapshots (expiring 56 of ~100 took ~10 s a step in the position-mode soak).
    head = table.metadata.current_snapshot_id
    updates = (
        RemoveSnapshotsUpdate.model_validate({"snapshot-ids": [s.snapshot_id for s in expired]}),
        SetPropertiesUpdate(updates=last_maintenance_record(KIND, {"snapshots": len(expired)})),
    )
    requirements = (AssertTableUUID(uuid=table.metadata.table_uuid),
                    AssertRefSnapshotId.model_validate({"ref": MAIN_BRANCH, "snapshot-id": head}))
    crash("expiry-before-commit")
    table = commit_table_updates(table, updates, requirements)
    crash("expiry-committed")

    # Only now may files go: the catalog no longer lists the snapshots that used them.
    kept_manifests, kept_files = live_files(table, kept)
    deleted = 0
    seen: set[str] = set()
    for snap in expired:
        doomed = [snap.manifest_list]
        for m in read_manifests(snap, io):
            if normalize_path(m.manifest_path) in kept_manifests or m.manifest_path in seen:
                continue
            seen.add(m.manifest_path)
            for entry in manifest_entries(m, io, live_only=False):
                path = entry.data_file.file_path
                if normalize_path(path) not in kept_files and path not in seen:
                    seen.add(path)
                    doomed.append(path)
            doomed.append(m.manifest_path)  # after its entries were read
        for path in doomed:
            if _delete(table, path):
                deleted += 1
    log.info("%s: expired %d snapshot(s), deleted %d file(s)", ".".join(table.name()), len(expired), deleted)
    return table, ExpiryResult(len(expired), deleted)


def _delete(table: Table, path: str) -> bool:
    try:
        table.io.delete(path)
    except FileNotFoundError:
        return False  # a previous attempt got there (crash after some deletes)
    except OSError as exc:  # orphan cleanup retries it later
        log.warning("could not delete %s: %s", path, exc)
        return False
    return True
