"""Checks and defaults shared by the engine's commits (``dv_commit`` and its entries in
``table_commit``): what a caller may pass, checked before anything is written. The files a
commit adds are checked in one place, ``dv_commit`` (every commit goes through it)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Final

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from replicator.errors import CommitConflictError

__all__ = [
    "MANIFESTS_PER_CONTENT_MAX", "UNSET", "check_expected_head", "check_properties", "file_spec_id",
]  # fmt: skip


class _Unset(Enum):
    UNSET = "unset"


# Default of ``expected_parent_snapshot_id``: "whatever head the given table object has loaded".
UNSET: Final = _Unset.UNSET

# Manifests of one content type listed by a snapshot before the small ones are merged (when the
# table does not set commit.manifest.min-count-to-merge).
MANIFESTS_PER_CONTENT_MAX = 16

# Summary keys that Iceberg itself writes; a caller's property must not shadow them.
_RESERVED_SUMMARY_PREFIXES = (
    "operation", "added-", "deleted-", "removed-", "total-", "changed-partition-count",
    "partition-summaries-included", "partitions.",
)  # fmt: skip


def check_properties(properties: Mapping[str, str]) -> None:
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"snapshot property {key!r}={value!r}: keys and values must be str")
        if key.startswith(_RESERVED_SUMMARY_PREFIXES):
            raise ValueError(f"snapshot property {key!r} would shadow an Iceberg summary field")


def check_expected_head(table: Table, expected: int | None, branch: str = MAIN_BRANCH) -> Snapshot | None:
    """``branch``'s head (None: no snapshot yet); ``CommitConflictError`` unless its id is
    ``expected``."""
    head = table.metadata.snapshot_by_name(branch)
    head_id = head.snapshot_id if head is not None else None
    if expected != head_id:
        raise CommitConflictError(
            f"branch {branch!r} is at snapshot {head_id}, expected {expected}",
            table=".".join(table.name()),
            hint="another writer committed, or the table object is stale; reload the table "
            "and decide whether this batch still applies",
        )
    return head


def file_spec_id(f: DataFile, default: int) -> int:
    # DataFile.from_args does not set spec_id; files built that way carry none.
    try:
        return f.spec_id
    except AttributeError:
        return default
