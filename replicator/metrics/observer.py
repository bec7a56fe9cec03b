"""What the run loop tells whoever watches it: the observer interface (a no-op by default).

The run loop calls these methods at a few fixed points (a batch committed, the loop idle or
busy, a dead letter, a stopped table, a measurement of the source's retained log). The base
class does nothing, so a run without metrics pays one method call per batch and nothing per
event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# The ``content`` label of ``replicator_table_files``.
CONTENT_DATA = "data"
CONTENT_POSITION_DELETES = "position_deletes"
CONTENT_EQUALITY_DELETES = "equality_deletes"

# Dead-letter reasons are free text (they name values and columns); the ``reason`` label
# must stay a small closed set, so reasons are sorted into these kinds by their wording.
_REASON_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("truncate", re.compile(r"\btruncate", re.IGNORECASE)),
    ("missing_key", re.compile(r"\b(primary )?key\b.*\b(missing|null|none)\b|\bno (primary )?key\b", re.IGNORECASE)),
    ("out_of_order", re.compile(r"out of (position )?order", re.IGNORECASE)),
    ("unparseable", re.compile(r"\b(json|parse|malformed|envelope|decode)", re.IGNORECASE)),
    ("unrepresentable", re.compile(r"\b(range|overflow|precision|convert|unrepresentable|invalid|cannot)\b", re.IGNORECASE)),
)


def reason_kind(reason: str) -> str:
    """A bounded label for a dead letter's reason (``other`` when none fits)."""
    for kind, pattern in _REASON_KINDS:
        if pattern.search(reason):
            return kind
    return "other"


class Observer:
    """The no-op observer: what the run loop calls when metrics are off."""

    #: False: the run loop skips work done only for metrics (counting ops per batch, reading
    #: every table's file counts at start).
    enabled: bool = False

    def started(self) -> None:
        """The run loop is about to read the source."""

    def ended(self) -> None:
        """The run loop has stopped (normally or not)."""

    def loop(self, *, pending: bool, caught_up: bool) -> None:
        """The loop is alive. ``pending``: changes were read that are not committed yet;
        ``caught_up``: the source had nothing more and everything read is committed."""

    def source_behind(self, head: str | None, behind_bytes: int | None) -> None:
        """How far the reader is behind the source's log head (``head`` as last measured):
        0 caught up, None unknown (no head, or positions that do not give a byte count)."""

    def applying(self) -> None:
        """A batch is being applied (changes wait until it commits)."""

    def committed(
        self,
        *,
        seconds: float,
        events: Mapping[tuple[str, str], int],
        newest_source_ms: int | None,
    ) -> None:
        """A batch is committed: ``events`` per (table, op), ``newest_source_ms`` the source
        commit time (epoch ms) of its newest change when the source knows it."""

    def dead_letter(self, table: str, reason: str) -> None:
        """An input record went to the dead-letter file."""

    def tables_stopped(self, count: int) -> None:
        """How many tables are stopped now."""

    def retained_bytes(self, value: int | None) -> None:
        """WAL/binlog the source keeps for this engine (None: unknown)."""

    def table_files(self, table: str, *, data: int, position_deletes: int, equality_deletes: int) -> None:
        """Live files of a table's current snapshot, by content."""

    def maintenance_run(self, table: str, kind: str) -> None:
        """A maintenance job (compaction, expiry, ...) ran on a table."""

    def close(self) -> None:
        """Release what the observer holds (an HTTP server)."""


NULL_OBSERVER = Observer()
