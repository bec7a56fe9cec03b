"""The resnapshot branch: a table copied again is written to an Iceberg branch while readers
of ``main`` keep the old rows, then ``main`` moves to the branch's head in ONE atomic ref
update (a reader sees the old rows or the new ones, never a mix).

* ``open_resnapshot_branch``: the branch starts as an empty snapshot with no parent (the new
  copy is built from nothing: the incremental snapshot's rows and the table's stream changes).
* ``target_branch``: where the engine commits a table: the branch while it exists, else main.
* ``publish_resnapshot``: ``main`` := branch head and the branch removed, in one catalog
  commit that asserts both refs (another writer's commit on either refuses it).
"""

from __future__ import annotations

import logging

from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemoveSnapshotRefUpdate,
    SetSnapshotRefUpdate,
)

from replicator.iceberg.table_commit import commit_batch
from replicator.iceberg.table_updates import commit_table_updates

log = logging.getLogger(__name__)

__all__ = ["MAIN_BRANCH", "RESNAPSHOT_BRANCH", "open_resnapshot_branch", "publish_resnapshot", "target_branch"]

RESNAPSHOT_BRANCH = "replicator-resnapshot"
RESNAPSHOT_PROPERTY = "replicator.resnapshot"  # summary mark of the branch's first snapshot


def target_branch(table: Table) -> str:
    """The branch the engine's commits to ``table`` go to."""
    return RESNAPSHOT_BRANCH if RESNAPSHOT_BRANCH in table.metadata.refs else MAIN_BRANCH


def branch_head(table: Table, branch: str) -> int | None:
    snap = table.metadata.snapshot_by_name(branch)
    return snap.snapshot_id if snap is not None else None


def open_resnapshot_branch(table: Table) -> bool:
    """Create the branch (an empty snapshot, no parent) unless it exists; True if created."""
    if RESNAPSHOT_BRANCH in table.metadata.refs:
        return False
    commit_batch(
        table, data_files=[], delete_files=[], snapshot_properties={RESNAPSHOT_PROPERTY: "start"},
        expected_parent_snapshot_id=None, branch=RESNAPSHOT_BRANCH,
    )  # fmt: skip
    log.info("%s: copying the table again into branch %s; readers of main keep the old rows "
             "until the copy is complete", ".".join(table.name()), RESNAPSHOT_BRANCH)  # fmt: skip
    return True


def publish_resnapshot(table: Table) -> int | None:
    """Move ``main`` to the branch head and drop the branch, atomically. Returns the new
    main head (None: there was no branch)."""
    head = branch_head(table, RESNAPSHOT_BRANCH)
    if head is None:
        return None
    old = branch_head(table, MAIN_BRANCH)
    commit_table_updates(
        table,
        (
            SetSnapshotRefUpdate.model_validate(
                {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": head}
            ),
            RemoveSnapshotRefUpdate.model_validate({"ref-name": RESNAPSHOT_BRANCH}),
        ),
        (
            AssertRefSnapshotId.model_validate({"ref": MAIN_BRANCH, "snapshot-id": old}),
            AssertRefSnapshotId.model_validate({"ref": RESNAPSHOT_BRANCH, "snapshot-id": head}),
        ),
    )
    log.info("%s: the new copy is published: main moved from snapshot %s to %s in one commit",
             ".".join(table.name()), old, head)  # fmt: skip
    return head
