"""Partitions added to or removed from a partitioned source table: logged, with what to check.

pgoutput sends nothing for ATTACH PARTITION of a table with rows, DETACH PARTITION, or
TRUNCATE / DROP of one partition (README "Partitioned source tables"): the Iceberg table then
differs from the source until that table is snapshotted again. A TRUNCATE leaves no trace in
the catalog, but the others change the table's set of leaf partitions. The source records that
set per partitioned table (``<state_dir>/postgres-<slot>.partitions.json``, so a change made
while the engine was down is seen at its next start) and compares it at start and every
``CHECK_SECONDS`` while reading; a change is logged as a warning naming the partitions added
and removed. A partition created empty (``CREATE TABLE ... PARTITION OF``) changes the set
too, harmlessly: the warning says what to check (``replicator diff``), not that rows are lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from replicator.sources.common.state import JsonStateFile
from replicator.sources.postgres.setup import TableInfo

log = logging.getLogger(__name__)

CHECK_SECONDS = 60.0

_LEAVES_SQL = """
SELECT n.nspname || '.' || c.relname FROM pg_partition_tree(%s) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.isleaf ORDER BY 1
"""


@dataclass
class PartitionState(JsonStateFile):
    """Leaf partitions of each partitioned source table, as last seen."""

    leaves: dict[str, list[str]] = field(default_factory=dict)
    source_id: str | None = None


@dataclass(frozen=True)
class PartitionChange:
    table: str
    added: tuple[str, ...]
    removed: tuple[str, ...]

    def message(self) -> str:
        what = []
        if self.added:
            what.append(f"added {', '.join(self.added)}")
        if self.removed:
            what.append(f"removed {', '.join(self.removed)}")
        return (
            f"partitions of {self.table} changed: {'; '.join(what)}. pgoutput sends no row for "
            "ATTACH PARTITION of a table with rows, DETACH PARTITION or DROP of a partition "
            "(nor for TRUNCATE of one partition): if such rows were attached or removed, the "
            f"Iceberg table differs; check with `replicator diff --table {self.table}` and see "
            "README 'Partitioned source tables' (a partition created empty needs nothing)"
        )


def compare(before: dict[str, list[str]], now: dict[str, list[str]]) -> list[PartitionChange]:
    """Changes of the tables known in both (a table seen for the first time is no change)."""
    out = []
    for table, leaves in now.items():
        if table not in before:
            continue
        old, new = set(before[table]), set(leaves)
        if old != new:
            out.append(PartitionChange(table, tuple(sorted(new - old)), tuple(sorted(old - new))))
    return out


def leaf_partitions(
    conn: psycopg.Connection[Any], tables: Sequence[TableInfo]
) -> dict[str, list[str]]:
    return {
        t.qualified: [str(r[0]) for r in conn.execute(_LEAVES_SQL, (t.oid,)).fetchall()]
        for t in tables
        if t.relkind == "p"
    }


class PartitionWatch:
    """Compares the partitioned tables' leaf partitions with the recorded ones."""

    def __init__(
        self, path: Path | None, source_id: str | None, tables: Sequence[TableInfo],
        every_seconds: float = CHECK_SECONDS,
    ) -> None:  # fmt: skip
        self.path = path
        self.tables = [t for t in tables if t.relkind == "p"]
        self.every_seconds = every_seconds
        state = PartitionState.load(path) if path is not None else None
        if state is not None and state.source_id != source_id:
            state = None  # another source's record: start afresh
        self.state = state or PartitionState(source_id=source_id)
        self._next = 0.0

    def due(self) -> bool:
        return bool(self.tables) and time.monotonic() >= self._next

    def check(self, conn: psycopg.Connection[Any]) -> list[PartitionChange]:
        """Read the leaf partitions, log what changed since last seen, record them."""
        self._next = time.monotonic() + self.every_seconds
        if not self.tables:
            return []
        now = leaf_partitions(conn, self.tables)
        changes = compare(self.state.leaves, now)
        for change in changes:
            log.warning("%s", change.message())
        if changes or any(t not in self.state.leaves for t in now):
            self.state.leaves.update(now)
            if self.path is not None:
                self.state.save(self.path)
        return changes
