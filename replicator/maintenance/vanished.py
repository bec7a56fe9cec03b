"""A file that vanished between a maintenance step's plan and its reads.

Other tools may commit to the engine's tables at any time: a platform's compaction rewrites
data files, its snapshot expiry then deletes the files no snapshot it keeps references. A
step plans on the table as the catalog has it when the step starts and reads the planned files
afterwards, so a file can be gone by the time it is read. That is not damage: the step's
commit would be refused anyway (it requires the head it planned on), and the next slice plans
again on the new head.

A missing file that the table's *current* snapshot still references is damage (a file removed
by hand, a broken expiry): ``MissingFileError``, naming the table and the file. So is one
missing while no commit happened since the plan (the plan read only files of that head).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from replicator.errors import MissingFileError
from replicator.maintenance.common import live_files, normalize_path
from replicator.retry import missing_file

__all__ = ["Planned", "Vanished", "judge_missing", "missing_file"]


@dataclass(frozen=True)
class Vanished:
    """A step that read a file removed since it planned: nothing was changed."""

    table: Table  # the table as the catalog has it now
    detail: str


@dataclass(frozen=True)
class Planned:
    """The table version a step planned on (``Table.refresh`` updates a table in place)."""

    metadata_location: str
    snapshot_id: int | None

    @classmethod
    def of(cls, table: Table) -> Planned:
        head = table.current_snapshot()
        return cls(table.metadata_location, head.snapshot_id if head is not None else None)


def judge_missing(table: Table, planned: Planned, error: BaseException) -> Vanished:
    """``error`` (a ``missing_file``) raised by a step on ``table`` that planned on
    ``planned``: ``Vanished`` when the table has moved on since and its current snapshot does
    not reference the file, else ``MissingFileError``."""
    name = ".".join(table.name())
    message = str(error)
    fresh = table.refresh()
    head = fresh.current_snapshot()
    head_id = head.snapshot_id if head is not None else None
    referenced: set[str] = set()
    if head is not None:
        try:
            manifests, files = live_files(fresh, [head])
        except Exception as exc:
            if missing_file(exc) is None:
                raise
            raise MissingFileError(
                f"a manifest of the current snapshot {head_id} is missing: {exc}", table=name
            ) from exc
        referenced = manifests | files | {normalize_path(head.manifest_list)}
    named = sorted(p for p in referenced if p in message)
    if named:
        raise MissingFileError(
            f"{named[0]} is missing, yet the current snapshot {head_id} references it",
            table=name, hint="restore the file, or roll the table back to a snapshot without it",
        ) from error
    if fresh.metadata_location == planned.metadata_location:
        raise MissingFileError(
            f"a file is missing though the table has not changed since the step planned: {message}",
            table=name,
        ) from error
    moved = f"snapshot {planned.snapshot_id} -> {head_id}"
    said = next((line.strip() for line in message.splitlines() if line.strip()), "")[:400]
    return Vanished(fresh, f"a file it planned on was removed by a commit since ({moved}): {said}")
