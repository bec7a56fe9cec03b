"""Consistent cuts across every replicated table (issue: readers joining tables at "latest"
can see an order whose items are not committed yet).

Every batch ends at ONE source position for all its tables, and after its last commit every
table holds exactly the source's state at that position (a table the batch did not touch had
no change in it). At such a moment, and only then, ``CutKeeper`` tags the current snapshot of
EVERY replicated table with the same name and records the position (``replicator.iceberg.cuts``).
Never while a table is stopped (it is behind) or an initial snapshot is still being copied.

A cut that a crash left on some tables only is incomplete: it is never listed as a cut, and
the next cut removes it. Only the newest ``keep`` complete cuts are kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from replicator.events.model import SourcePosition
from replicator.iceberg.cuts import (
    Cut,
    list_cuts,
    next_cut_name,
    remove_cuts,
    replicated_tables,
    tag_cut,
)

log = logging.getLogger(__name__)


class CutKeeper:
    def __init__(
        self,
        catalog: Catalog,
        namespace: str,
        *,
        every_seconds: float,
        keep: int,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self.every_seconds = every_seconds
        self.keep = keep
        self.clock = clock
        self.now = now
        self._last_cut_at = clock()
        self._last_position: SourcePosition | None = None

    @property
    def enabled(self) -> bool:
        return self.every_seconds > 0

    def after_batch(self, position: SourcePosition, *, consistent: bool) -> str | None:
        """Called after every batch is committed; cuts when one is due."""
        if not self.enabled or self.clock() - self._last_cut_at < self.every_seconds:
            return None
        return self.cut(position, consistent=consistent)

    def cut(self, position: SourcePosition | None, *, consistent: bool) -> str | None:
        """Cut now, at ``position`` (what every table holds), unless a table is behind or
        the newest complete cut already stands for that position."""
        if not self.enabled or position is None:
            return None
        if not consistent:
            log.info("no cut: a table is stopped or an initial snapshot is in progress")
            return None
        self._last_cut_at = self.clock()
        tables = replicated_tables(self.catalog, self.namespace)
        tables = [t for t in tables if t.current_snapshot() is not None]
        if not tables:
            return None
        cuts = list_cuts(tables)
        complete = [c for c in cuts if c.complete]
        if complete and complete[-1].position == position:
            return None
        name = next_cut_name(self.now(), [c.name for c in cuts])
        for table in tables:
            tag_cut(table, name, position)
        self._last_position = position
        log.info("cut %s at %s over %d table(s)", name, position, len(tables))
        self._prune(tables, [c for c in cuts if c.name != name], complete)
        return name

    def _prune(self, tables: list[Table], others: list[Cut], complete: list[Cut]) -> None:
        # Keep the newest keep-1 earlier complete cuts (plus the one just made); drop every
        # incomplete one (left by a crash while cutting).
        keep = {c.name for c in complete[-(self.keep - 1):]} if self.keep > 1 else set()
        drop = [c.name for c in others if c.name not in keep]
        if not drop:
            return
        for table in tables:
            remove_cuts(table.refresh(), drop)
        log.info("removed %d old or incomplete cut(s)", len(drop))
