"""Checks and defaults shared by the engine's commits (``dv_commit`` and its entries in
``table_commit``): what a caller may pass, checked before anything is written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Final

from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH

from replicator.errors import CommitConflictError

__all__ = [
    "MANIFESTS_PER_CONTENT_MAX", "UNSET", "check_expected_head", "check_files", "check_properties",
    "file_spec_id",
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


def check_expected_head(table: Table, expected: int | None, branch: str = MAIN_BRANCH) -> int | None:
    """The id of ``branch``'s head; ``CommitConflictError`` unless it is ``expected``."""
    head = table.metadata.snapshot_by_name(branch)
    head_id = head.snapshot_id if head is not None else None
    if expected != head_id:
        raise CommitConflictError(
            f"branch {branch!r} is at snapshot {head_id}, expected {expected}",
            table=".".join(table.name()),
            hint="another writer committed, or the table object is stale; reload the table "
            "and decide whether this batch still applies",
        )
    return head_id


def file_spec_id(f: DataFile, default: int) -> int:
    # DataFile.from_args does not set spec_id; files built that way carry none.
    try:
        return f.spec_id
    except AttributeError:
        return default


def check_files(table: Table, data: Sequence[DataFile], deletes: Sequence[DataFile]) -> None:
    """Contents, partition specs and uniqueness of the files one commit adds."""
    for f in data:
        if f.content != DataFileContent.DATA:
            raise ValueError(f"{f.file_path}: data_files entry has content {f.content!r}")
    for f in deletes:
        if f.content == DataFileContent.DATA:
            raise ValueError(f"{f.file_path}: delete_files entry has content DATA")
        if f.content == DataFileContent.EQUALITY_DELETES and not f.equality_ids:
            raise ValueError(f"{f.file_path}: equality delete file without equality_ids")
    if deletes and table.metadata.format_version < 2:
        raise ValueError(f"delete files need format-version 2, table has {table.metadata.format_version}")
    default_spec_id = table.metadata.default_spec_id
    specs = table.metadata.specs()
    seen: set[str] = set()
    for f in [*data, *deletes]:
        # Any spec of the table: files written before a spec change keep theirs, and
        # equality deletes use the unpartitioned one (``partitions``).
        spec_id = file_spec_id(f, default_spec_id)
        if spec_id not in specs:
            raise ValueError(f"{f.file_path}: spec id {spec_id} is not a spec of the table")
        if len(f.partition) != len(specs[spec_id].fields):
            raise ValueError(f"{f.file_path}: partition {f.partition!r} does not fit spec {spec_id}")
        if f.file_path in seen:  # a file listed twice in a snapshot makes scans undefined
            raise ValueError(f"{f.file_path}: listed more than once in one commit")
        seen.add(f.file_path)
