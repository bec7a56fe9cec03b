"""Reading and writing a table's checkpoint: the one way.

Written: by ``checkpoint_commit_properties`` into BOTH the snapshot summary of the commit that
makes a batch durable (history: each snapshot says which source position it holds, which cuts
and ``diff`` read) and the table property ``replicator.checkpoint`` (one JSON document, bound
to that snapshot's id), in the same atomic catalog commit.

Read: ``read_checkpoint(table)`` takes the table property. Table properties survive snapshot
expiry and commits by other tools (compaction, expiry, a user's Spark job), which neither
carry nor need the checkpoint, so every field is always read from one place. A table written
before the property existed falls back to the nearest ancestor snapshot summary carrying one.
If the property's snapshot is still in the table but no longer an ancestor of the head, the
table was rolled back under the engine: that is refused, because the source was acknowledged
past what the table now holds.
"""

from __future__ import annotations

from collections.abc import Callable

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from replicator.checkpoint.model import Checkpoint
from replicator.errors import TerminalError

CHECKPOINT_PROPERTY = "replicator.checkpoint"


def checkpoint_commit_properties(
    checkpoint: Checkpoint,
) -> tuple[dict[str, str], Callable[[int], dict[str, str]]]:
    """(snapshot summary entries, table properties for the new snapshot id) of a commit."""

    def table_properties(snapshot_id: int) -> dict[str, str]:
        return {CHECKPOINT_PROPERTY: checkpoint.to_json(snapshot_id)}

    return checkpoint.summary(), table_properties


def read_checkpoint(table: Table) -> Checkpoint | None:
    """Where ``table`` stands (None: the engine has committed nothing to it yet)."""
    raw = table.properties.get(CHECKPOINT_PROPERTY)
    if raw is None:
        return checkpoint_at(table, table.current_snapshot())
    cp = Checkpoint.from_json(raw)
    if cp.snapshot_id is not None and not _consistent(table, cp.snapshot_id):
        raise TerminalError(
            f"table {'.'.join(table.name())} was rolled back to before the engine's last "
            f"commit (snapshot {cp.snapshot_id}, source position {cp.position})",
            position=cp.position,
            hint="the source was acknowledged past what the table holds now: re-snapshot "
            "the table (drop it and restart), or roll it forward to that snapshot",
        )
    return cp


def checkpoint_at(table: Table, snapshot: Snapshot | None) -> Checkpoint | None:
    """The checkpoint ``snapshot`` holds: its own summary's, or the nearest ancestor's
    (snapshots of other writers hold what their parent held)."""
    snap = snapshot
    while snap is not None:
        if snap.summary is not None:
            cp = Checkpoint.from_summary(snap.summary.additional_properties)
            if cp is not None:
                return cp
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return None


def _consistent(table: Table, snapshot_id: int) -> bool:
    """The checkpoint's snapshot is a branch head (main, or the branch a table being copied
    again is written to), an ancestor of one, or expired (gone)."""
    if table.snapshot_by_id(snapshot_id) is None:
        return True
    for ref in table.metadata.refs.values():
        if ref.snapshot_ref_type != "branch":
            continue
        snap = table.snapshot_by_id(ref.snapshot_id)
        while snap is not None:
            if snap.snapshot_id == snapshot_id:
                return True
            snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return False
