"""Row-delta commits: add data files and position/equality delete files as ONE snapshot.

The equivalent of Iceberg Java's ``RowDelta`` for a CDC batch, now a thin entry over
``table_commit.commit_batch`` (our own manifests through ``dv_commit.commit_files``, only public
pyiceberg table updates and requirements). Kept for callers that want the committed snapshot
back; the pipeline and maintenance use ``table_commit`` directly.

All new entries inherit the snapshot's sequence number (spec: "sequence number inheritance"):
equality deletes apply only to rows of earlier commits, position deletes also reach rows of the
same commit. Manifests are merged on commit (``manifest_merge``). The commit asserts that the
branch head is still the snapshot the caller based its work on (``AssertRefSnapshotId``); a
conflict raises ``CommitConflictError`` and is never retried or rebased here, because a CDC
batch must not be re-applied on top of a state it did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from replicator.iceberg.commit_checks import (
    MANIFESTS_PER_CONTENT_MAX,
    UNSET,
    _Unset,
    check_expected_head,
    check_properties,
)
from replicator.iceberg.table_commit import commit_batch

__all__ = [
    "MANIFESTS_PER_CONTENT_MAX", "UNSET", "check_expected_head", "check_properties",
    "commit_row_delta",
]  # fmt: skip


def commit_row_delta(
    table: Table,
    *,
    data_files: Iterable[DataFile],
    delete_files: Iterable[DataFile],
    snapshot_properties: Mapping[str, str],
    expected_parent_snapshot_id: int | None | _Unset = UNSET,
    branch: str = MAIN_BRANCH,
    table_properties: Callable[[int], Mapping[str, str]] | None = None,
    remove_all: bool = False,
) -> Snapshot:
    """Commit new data files and delete files as ONE snapshot on ``branch``.

    Args:
        table: the table; on success its metadata is advanced to the new snapshot. After a
            ``CommitConflictError`` it is stale and must be reloaded.
        data_files: files with content DATA (see ``replicator.iceberg.files``).
        delete_files: files with content POSITION_DELETES or EQUALITY_DELETES.
        snapshot_properties: extra summary entries, e.g. ``{"replicator.position": "..."}``.
        expected_parent_snapshot_id: the branch head the caller's work is based on (``None``: the
            branch has no snapshot yet). Defaults to the head of ``table``'s loaded metadata.
        branch: the branch to commit to.
        table_properties: table properties to set in the SAME catalog commit, given the new
            snapshot's id (the engine's checkpoint, see ``replicator.checkpoint.table``).
        remove_all: first remove every live data and delete file of the parent snapshot (a
            TRUNCATE at the source), in the same snapshot that adds the new files.

    Returns:
        The new snapshot. Its operation is ``append`` (data only, or nothing at all: an empty
        batch still records its properties), ``delete`` (deletes only) or ``overwrite`` (both),
        as in Iceberg Java's ``BaseRowDelta`` since 1.11.

    Raises:
        CommitConflictError: the branch head is not ``expected_parent_snapshot_id`` (checked
            before writing anything, and atomically again by the catalog).
        ValueError: invalid files or properties.
    """
    return commit_batch(
        table, data_files=list(data_files), delete_files=list(delete_files),
        snapshot_properties=snapshot_properties, table_properties=table_properties,
        expected_parent_snapshot_id=expected_parent_snapshot_id, branch=branch, remove_all=remove_all,
    )  # fmt: skip
