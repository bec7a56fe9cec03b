"""Micro-batches that close only at transaction boundaries.

A batch closes when a limit (events, approximate bytes, age) is reached AND the last event
added ends its transaction, so one source transaction is never split across two Iceberg
snapshots (a reader never sees half a transaction).

A transaction larger than the size limits does not make the batch grow with it: when the
pending events reach ``max_events``/``max_bytes`` inside a transaction, the complete
transactions before it close as a batch of their own, and the open transaction's events are
handed to ``spill`` (staged to files, ``pipeline.spill``) and released. Its batch closes at
the transaction's end as the spilled chunks plus the events still in memory, so the batcher
never holds much more than ``max_events`` events, and the spilled chunks always belong to
exactly one transaction (the pending one).

After its first chunk, the open transaction is spilled every half batch
(``LATER_CHUNK_SHARE``): the first chunk's staging sets the driver's high-water mark of
allocator arenas (Python's, Arrow's), and smaller later chunks fit inside it instead of
fragmenting new ones, so the driver's peak does not creep up chunk after chunk (measured:
+0.4 MiB per 100k-change chunk late in a 5M-change transaction, issue 23).

Staged as it fills (``stage_every``, config ``batch.stage_every_events``): once the events in
memory reach it at a transaction boundary, the complete transactions pending are handed to
``spill`` too and released, so the driver holds about that many events whatever
``max_events`` is (issue 27: memory flat in batch size). The batch still closes at the
limits, as one commit per table; its chunks end at a transaction boundary, so a close inside
a later transaction keeps them whole. This is off while the run loop says so (``may_stage``: an initial snapshot is being
copied, whose rows the consistent-cut rule reads from the batch) and for a source whose
events need filling from earlier images (Debezium's unavailable values).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence

from replicator.config import BatchConfig
from replicator.events.block import row_count
from replicator.events.model import ChangeBatch, ChangeEvent, Op, SourcePosition

log = logging.getLogger(__name__)

# Stage these events (one table -> its events, in order) out of memory; they stay part of
# the pending batch.
Spill = Callable[[Mapping[str, Sequence[ChangeEvent]]], None]


# Later chunks of a spilled transaction hold this share of the batch limits (see above).
LATER_CHUNK_SHARE = 2
MIN_WAIT_SECONDS = 0.01  # ``wait_seconds``' floor: a due batch that cannot close yet


def _approx_bytes(ev: ChangeEvent) -> int:
    # Cheap estimate: exact sizing would cost more than the batching decision is worth.
    n = len(ev.after) if ev.after is not None else 0
    n += len(ev.before) if ev.before is not None else 0
    return (64 + 24 * n) * row_count(ev)


class Batcher:
    def __init__(
        self, limits: BatchConfig, clock: Callable[[], float] = time.monotonic, spill: Spill | None = None,
        *, stage_every: int | None = None, may_stage: Callable[[], bool] | None = None,
    ) -> None:  # fmt: skip
        self.limits = limits
        self.clock = clock
        self.spill = spill  # None: a transaction larger than the limits stays in memory
        # Stage complete transactions once this many events are held (None: never); only
        # while ``may_stage()`` says so.
        self.stage_every = stage_every if spill is not None else None
        self.may_stage = may_stage
        self.prestaged = 0  # events of complete transactions of the pending batch handed to ``spill``
        self._prestaged_bytes = 0
        self._events: dict[str, list[ChangeEvent]] = {}
        self._count = 0
        self._bytes = 0
        self._opened_at: float | None = None
        self._first_read: float | None = None
        self._last: ChangeEvent | None = None
        self._boundary: ChangeEvent | None = None  # the last event that ended a transaction
        self.spilled = 0  # events of the pending (open) transaction handed to ``spill``
        self.peak = 0  # the most events held in memory at once (tests, benchmarks)
        # The source reads a backlog (the run loop sets it from each item the reader hands
        # over: ``pipeline.reader.Events.behind``): more changes follow without waiting for
        # new ones, so the pending batch does not close by its linger; it grows to the size
        # limits (``max_seconds`` included) or until the source has caught up.
        self.behind = False

    @property
    def pending(self) -> int:
        return self._count + self.spilled + self.prestaged

    @property
    def memory_cap(self) -> int:
        """About the most events this batcher holds in memory now: what the source reader's
        read-ahead is measured against (read from its thread)."""
        cap = self.limits.max_events
        if self.stage_every is None or (self.may_stage is not None and not self.may_stage()):
            return cap
        # A transaction larger than the chunk is held until it ends or fills a batch: the
        # read-ahead stays a share of what is held then.
        return max(min(cap, self.stage_every), self._count)

    @property
    def held(self) -> int:
        """Events held in memory for the pending batch (not those handed to ``spill``): the
        source reader reads ahead of these (``pipeline.reader``); read from its thread."""
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
        self._count += row_count(ev)
        self._bytes += _approx_bytes(ev)
        self._last = ev
        if self._count > self.peak:
            self.peak = self._count
        if self.at_boundary:
            self._boundary = ev
            if self._full():
                return self._close()
            if self._stage_due():
                self._prestage()
            return None
        if self.spill is not None and (self._batch_over_size() or self._later_chunk_full()):
            if self._boundary is not None:
                return self._close_complete()
            self._spill()
        return None

    @property
    def lingered(self) -> bool:
        """The pending batch has waited ``linger_seconds`` and the source is not reading a
        backlog (``behind``): commit it at the next chance. Under a backlog the reader's
        hand-overs pause while it reads and decodes a group of changes; closing then would
        split the backlog into batches of whatever was read by the linger (issue 27: a
        100,000-change backlog over 100 tables took 2 batches, 200 commits)."""
        due = self.due_in()
        return due is not None and due <= 0 and not self.behind

    def due_in(self) -> float | None:
        """Seconds until the pending batch has lingered (0 or less: it has; None: nothing is
        pending). The run loop waits for the reader no longer than this, and a maintenance
        slice between batches fits into it (commit-to-visible lag)."""
        first = self._first_read
        if first is None:
            return None
        return first + self.limits.linger_seconds - self.clock()

    def room(self, queued_since: float | None) -> float:
        """Seconds until the oldest change read and not committed is due by the linger: the
        pending batch's first, else the oldest the reader queued (``queued_since``, when it
        got it), else one read now (the whole linger). Negative: overdue (a backlog). 0 while
        the source reads a backlog (``behind``): its next changes are at hand, so a
        slice now only holds them (the reader's queue can be empty for a moment after a
        commit while it decodes the next group, which looked like a whole linger of room)."""
        if self.behind:
            return 0.0
        due = self.due_in()
        if due is not None:
            return due
        if queued_since is None:
            return self.limits.linger_seconds
        return queued_since + self.limits.linger_seconds - self.clock()

    def wait_seconds(self, longest: float) -> float:
        """How long the run loop waits for the reader: at most until the pending batch is due
        by its linger, when it can close then (at a transaction boundary), so it closes at
        once instead of up to ``longest`` later (not while ``behind``: it does not close by
        its linger then, and the reader's next hand-over ends the wait anyway)."""
        due = self.due_in()
        if due is None or not self.at_boundary or self.behind:
            return longest
        return min(longest, max(MIN_WAIT_SECONDS, due))

    def _over_size(self) -> bool:
        return self._count >= self.limits.max_events or self._bytes >= self.limits.max_bytes

    def _batch_over_size(self) -> bool:
        """The pending batch (in memory and staged as it filled) reached the size limits."""
        limits = self.limits
        return (self._count + self.prestaged >= limits.max_events
                or self._bytes + self._prestaged_bytes >= limits.max_bytes)  # fmt: skip

    def _stage_due(self) -> bool:
        """At a boundary: stage the complete transactions held now (see the module doc)?"""
        if self.stage_every is None or self.spilled or self._count < self.stage_every:
            return False
        if self.may_stage is not None and not self.may_stage():
            return False
        # A table whose last change is a snapshot row keeps it in the batch (the cut rule).
        return all(evs[-1].op is not Op.READ for evs in self._events.values())

    def _later_chunk_full(self) -> bool:
        """A spilled transaction's next chunk is due (every half batch after its first)."""
        limits, share = self.limits, LATER_CHUNK_SHARE
        return bool(self.spilled) and (
            self._count >= limits.max_events // share or self._bytes >= limits.max_bytes // share
        )

    def _full(self) -> bool:
        if self.spilled or self._batch_over_size():
            return True  # a spilled transaction's batch closes at its end
        return self._opened_at is not None and self.clock() - self._opened_at >= self.limits.max_seconds

    def flush(self) -> ChangeBatch | None:
        """Close the pending batch if it ends at a transaction boundary (used when the
        source is idle, so small trickles still get committed)."""
        if (self._count or self.prestaged) and self.at_boundary:
            return self._close()
        return None

    def _prestage(self) -> None:
        """Hand the complete transactions held to ``spill`` and forget them (the batch stays
        open: they are its first part)."""
        assert self.spill is not None
        self.spill(self._events)
        self.prestaged += self._count
        self._prestaged_bytes += self._bytes
        self._events = {}
        self._count = 0
        self._bytes = 0

    def _spill(self) -> None:
        """Hand the open transaction's events so far to ``spill`` and forget them."""
        assert self.spill is not None and self._boundary is None
        events, count = self._events, self._count
        if not self.spilled:  # say so once per transaction (staging as a batch fills is quiet)
            for table in events:
                log.info("%s: a transaction outgrows the batch; staging its changes in chunks", table)
        self.spill(events)
        self.spilled += count
        self._events = {}
        self._count = 0
        self._bytes = 0

    def _close_complete(self) -> ChangeBatch:
        """Close the complete transactions pending (up to the last boundary); the open
        transaction's events stay pending, as the start of the next batch."""
        assert self._boundary is not None and not self.spilled
        end = self._boundary.position
        done: dict[str, tuple[ChangeEvent, ...]] = {}
        rest: dict[str, list[ChangeEvent]] = {}
        for table, evs in self._events.items():
            cut = bisect_right(evs, end, key=_position)  # a table's events are in position order
            if cut:
                done[table] = tuple(evs[:cut])
            if cut < len(evs):
                rest[table] = evs[cut:]
        batch = ChangeBatch(events=done, end_position=end, event_count=_rows(done.values()) + self.prestaged)
        self.prestaged = self._prestaged_bytes = 0
        self._events = rest
        self._count = _rows(rest.values())
        self._bytes = sum(_approx_bytes(e) for evs in rest.values() for e in evs)
        self._opened_at = self._first_read = self.clock()
        self._boundary = None  # self._last (the event just added) is the open transaction's
        return batch

    def _close(self) -> ChangeBatch:
        assert self._last is not None
        end: SourcePosition = self._last.position
        batch = ChangeBatch(
            events={t: tuple(evs) for t, evs in self._events.items()},
            end_position=end,
            event_count=self._count + self.spilled + self.prestaged,
        )
        self._events = {}
        self._count = 0
        self._bytes = 0
        self.spilled = 0
        self.prestaged = self._prestaged_bytes = 0
        self._opened_at = None
        self._first_read = None
        self._last = None
        self._boundary = None
        return batch


def _position(ev: ChangeEvent) -> SourcePosition:
    return ev.position


def _rows(tables: Iterable[Sequence[ChangeEvent]]) -> int:
    return sum(row_count(e) for evs in tables for e in evs)
