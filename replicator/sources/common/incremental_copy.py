"""What the incremental snapshots of both databases share around the protocol: the queue of
tables to copy and their resume state, acknowledgements moving each table's frontier
(``ChunkLedger``), progress. The protocol itself (watermarks on Postgres, consistent-snapshot
points on MariaDB) lives in each source's ``incremental.py``; the pure algorithm in
``incremental.py`` next to this module."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

from tqdm import tqdm

from replicator.sources.common.incremental import ChunkLedger, IncrementalState
from replicator.sources.common.snapshot import PROGRESS_LOG_SECONDS

log = logging.getLogger(__name__)

KeyT = TypeVar("KeyT")  # a table's frontier as the source reads it back


def load_incremental_state(
    path: Path, source_id: str, selected: Collection[str], committed_tables: Collection[str]
) -> IncrementalState:
    """The resumable state of this run's incremental snapshots: a state file of another
    source is dropped; tables no longer selected leave the queue (and are named)."""
    state = IncrementalState.load(path)
    if state is None or state.source_id not in (None, source_id):
        state = IncrementalState(source_id=source_id)
    state.source_id = source_id
    for gone in [t for t in state.tables if t not in selected]:
        log.info("incremental snapshot of %s dropped: the table is no longer selected", gone)
        state.tables.remove(gone)
    for gone in sorted(t for t in committed_tables if t not in selected):
        log.info("%s is no longer selected: its changes are not replicated any more; its "
                 "Iceberg table is kept as it is", gone)  # fmt: skip
    return state


class IncrementalCopier(Generic[KeyT]):
    """The incremental snapshots of one source: tables queued (``add``), read chunk by chunk
    by the subclass (``_next_table`` says which), committed chunks acknowledged."""

    def __init__(
        self,
        *,
        tables: Mapping[str, Any],
        state: IncrementalState,
        state_path: Path | None,
        chunk_rows: int,
        progress: bool | None,
    ) -> None:
        self.tables = tables
        self.state = state
        self.state_path = state_path
        self.chunk_rows = chunk_rows
        self.ledger = ChunkLedger()
        self.finished: list[str] = []  # tables completely copied (committed), for the owner
        self.rows = 0
        self._reading: dict[str, KeyT | None] = {}  # frontier read, maybe not committed
        self._read_all: set[str] = set()  # every chunk read (maybe not committed)
        self._progress = progress
        self._bar: tqdm[Any] | None = None
        self._logged = time.monotonic()

    # -- requests ------------------------------------------------------------------------------
    def add(self, table: str, reason: str) -> None:
        if self.state.add(table, reason):
            self._reading[table] = None
            # Copied before in this process (a second resnapshot): its chunks are read again.
            self._read_all.discard(table)
            log.info("incremental snapshot of %s (%s) queued: copied in chunks of %d rows "
                     "while the stream goes on", table, reason, self.chunk_rows)  # fmt: skip
            self.save()

    @property
    def active(self) -> bool:
        return bool(self.state.tables)

    def _next_table(self) -> str | None:
        for t in self.state.tables:
            if t in self.tables and t not in self._read_all:
                return t
        return None

    # -- acknowledgements ----------------------------------------------------------------------
    def acknowledge(self, parts: tuple[Any, ...]) -> None:
        changed = False
        for done in self.ledger.committed(parts):
            changed = True
            if self.state.advance(done):
                self.finished.append(done.table)
                log.info("incremental snapshot of %s done", done.table)
        if changed:
            self.save()

    def save(self) -> None:
        if self.state_path is not None:
            self.state.save(self.state_path)

    # -- progress ------------------------------------------------------------------------------
    def _counted(self, table: str, n: int, *, force_log: bool = False) -> bool:
        """Count ``n`` rows handed out; True when the log should say so now."""
        self.rows += n
        if self._bar is None:
            self._bar = tqdm(unit="rows", desc=f"incremental snapshot {table}", leave=False,
                             disable=None if self._progress is None else not self._progress)  # fmt: skip
        self._bar.update(n)
        now = time.monotonic()
        if now - self._logged >= PROGRESS_LOG_SECONDS or force_log:
            self._logged = now
            return True
        return False

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
