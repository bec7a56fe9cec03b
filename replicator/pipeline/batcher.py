"""Micro-batches that close only at transaction boundaries.

A batch closes when a limit (events, approximate bytes, age) is reached AND the last event
added ends its transaction, so one source transaction is never split across two Iceberg
snapshots (a reader never sees half a transaction). A single transaction larger than the
limits therefore makes one large batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from replicator.config import BatchConfig
from replicator.events.model import ChangeBatch, ChangeEvent, SourcePosition


def _approx_bytes(ev: ChangeEvent) -> int:
    # Cheap estimate: exact sizing would cost more than the batching decision is worth.
    n = len(ev.after) if ev.after is not None else 0
    n += len(ev.before) if ev.before is not None else 0
    return 64 + 24 * n


class Batcher:
    def __init__(self, limits: BatchConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._events: dict[str, list[ChangeEvent]] = {}
        self._count = 0
        self._bytes = 0
        self._opened_at: float | None = None
        self._first_read: float | None = None
        self._last: ChangeEvent | None = None

    @property
    def pending(self) -> int:
        return self._count

    @property
    def at_boundary(self) -> bool:
        last = self._last
        return last is not None and (last.tx_id is None or last.last_in_tx)

    def add(self, ev: ChangeEvent, read_at: float | None = None) -> ChangeBatch | None:
        """Add one event; return a closed batch when limits are reached at a boundary.

        ``read_at``: when the source reader got it (same clock). Linger counts from there, so
        events that queued while the previous batch applied do not wait a full
        ``linger_seconds`` more; the size limits (``max_seconds`` included) count from when
        the batch opened here, or under a backlog every old event would close a batch."""
        if self._opened_at is None:
            now = self._opened_at = self.clock()
            self._first_read = now if read_at is None else min(read_at, now)
        self._events.setdefault(ev.table, []).append(ev)
        self._count += 1
        self._bytes += _approx_bytes(ev)
        self._last = ev
        if self.at_boundary and self._full():
            return self._close()
        return None

    @property
    def lingered(self) -> bool:
        """The pending batch has waited ``linger_seconds``: commit it at the next chance."""
        first = self._first_read
        return first is not None and self.clock() - first >= self.limits.linger_seconds

    def _full(self) -> bool:
        if self._count >= self.limits.max_events or self._bytes >= self.limits.max_bytes:
            return True
        return self._opened_at is not None and self.clock() - self._opened_at >= self.limits.max_seconds

    def flush(self) -> ChangeBatch | None:
        """Close the pending batch if it ends at a transaction boundary (used when the
        source is idle, so small trickles still get committed)."""
        if self._count and self.at_boundary:
            return self._close()
        return None

    def _close(self) -> ChangeBatch:
        assert self._last is not None
        end: SourcePosition = self._last.position
        batch = ChangeBatch(
            events={t: tuple(evs) for t, evs in self._events.items()},
            end_position=end,
            event_count=self._count,
        )
        self._events = {}
        self._count = 0
        self._bytes = 0
        self._opened_at = None
        self._first_read = None
        self._last = None
        return batch
