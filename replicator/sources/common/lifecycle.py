"""The lifecycle both database sources implement, once: snapshot, hand-over, stream,
acknowledge, state.

* start: ``_start(checkpoints)`` (identity, fence, checks, what to snapshot before
  streaming and what to copy incrementally while streaming); a failure closes the source, so
  a failed check never keeps the fence from the next try.
* snapshot: while ``_cursor`` is set, ``_poll_snapshot`` hands out its rows as 'r' events.
* hand-over: ``_poll_snapshot`` ends the snapshot (``_end_snapshot``) and clears ``_cursor``;
  the stream starts where the snapshot stands (the source's position rules say where).
  ``streams_in_the_snapshot_poll``: a poll that ends the snapshot goes on streaming (an
  empty poll then always means idle), else the next poll streams.
* stream: ``_poll_stream``.
* acknowledge: ``acknowledge(position)`` (each source: a snapshot position moves the
  snapshot's resume state, a streamed one what the server keeps and the incremental copies).
* state: the incremental snapshots (``_incr``, an ``IncrementalCopier``): requests and what
  is pending / finished, asked for by the pipeline between batches.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from replicator.checkpoint import Checkpoints
from replicator.events.model import ChangeEvent
from replicator.sources.base import ChangeSource
from replicator.sources.common.incremental_copy import IncrementalCopier
from replicator.sources.common.snapshot import SnapshotCursor


class DatabaseSource(ChangeSource):
    """A change source with an initial snapshot, a change stream and incremental snapshots
    (Postgres, MySQL/MariaDB): the steps above; the protocol is the subclass's."""

    streams_in_the_snapshot_poll: bool = False
    # Tables without a primary key (``source.keyless_tables``): copied by the initial
    # snapshot only (an incremental copy drops and upserts rows by key).
    keyless_tables: frozenset[str] = frozenset()

    _lock: threading.RLock  # acknowledge() and requests may come from other threads
    _tables: Mapping[str, Any]  # the selected tables
    _checkpointed: list[str]  # tables with a committed position at start
    _incr: IncrementalCopier[Any] | None  # tables copied while streaming
    _cursor: SnapshotCursor[Any] | None  # set while the snapshot is read

    # -- start ----------------------------------------------------------------------------------
    def start(self, checkpoints: Checkpoints) -> None:
        try:
            self._start(checkpoints)
        except BaseException:
            self.close()  # releases the fence: a failed check must not block the next try
            raise

    @abstractmethod
    def _start(self, checkpoints: Checkpoints) -> None: ...

    # -- snapshot, hand-over, stream -----------------------------------------------------------
    def poll(self) -> Iterator[ChangeEvent]:
        self._before_poll()
        if self._cursor is not None:
            yield from self._poll_snapshot()
            if self._cursor is not None or not self.streams_in_the_snapshot_poll:
                return
        yield from self._poll_stream()

    @abstractmethod
    def _before_poll(self) -> None:
        """Checks before every poll (started, fence held, ...)."""

    @abstractmethod
    def _poll_snapshot(self) -> Iterator[ChangeEvent]:
        """Snapshot rows, at most a poll's worth; at the end: ``_end_snapshot``."""

    @abstractmethod
    def _end_snapshot(self) -> None:
        """Every snapshot row is read: the hand-over to the stream (``_cursor`` cleared)."""

    @abstractmethod
    def _poll_stream(self) -> Iterator[ChangeEvent]: ...

    # -- state: incremental snapshots ----------------------------------------------------------
    def request_snapshot(self, tables: Sequence[str], reason: str) -> list[str]:
        """Copy ``tables`` again, incrementally, while streaming (a running engine's
        resnapshot); returns the ones that cannot be (not selected, or no incremental
        snapshots on this server / without a state directory)."""
        with self._lock:
            if self._incr is None:
                return list(tables)
            refused = [t for t in tables if t not in self._tables or t in self.keyless_tables]
            for t in tables:
                if t in self._tables and t not in self.keyless_tables:
                    self._incr.add(t, reason)
            self.replay = replace(self.replay, snapshot_rows=True)
            return refused

    @property
    def incremental_pending(self) -> list[str]:
        """Tables whose incremental snapshot is not committed yet, and tables this source
        does not replicate (a copy of theirs cannot be complete either)."""
        with self._lock:
            pending = list(self._incr.state.tables) if self._incr is not None else []
            return pending + [t for t in self._checkpointed if t not in self._tables]

    @property
    def incremental_active(self) -> bool:
        """An incremental snapshot has rows not yet committed (or chunks not yet read)."""
        return self._incr is not None and self._incr.active

    @property
    def incremental_finished(self) -> list[str]:
        """Tables whose incremental snapshot is committed, once each (taken by the caller)."""
        with self._lock:
            if self._incr is None:
                return []
            out, self._incr.finished = self._incr.finished, []
            return out

    @property
    def snapshot_in_progress(self) -> bool:
        # An incremental snapshot too: a table partly copied makes no consistent cut.
        return self._cursor is not None or (self._incr is not None and self._incr.active)
