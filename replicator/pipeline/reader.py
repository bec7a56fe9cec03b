"""Read the source on its own thread while the pipeline applies the previous batch.

The reader thread is the only one that touches the source: it polls, hands events over in
chunks through a bounded queue, and applies the acknowledgements the run loop passes to it
between polls (so sources need no locking, and an acknowledgement still comes only after the
commits it covers). While the run loop is busy and the queue is full, the thread stops
polling and calls ``ChangeSource.keepalive()`` so the source connection is not dropped by the
server (Postgres' ``wal_sender_timeout``) during a long apply.

The read-ahead also counts the events the run loop holds in memory outside a closed batch
(``held``: the batcher's pending events): while a transaction larger than a batch is staged
in chunks, the driver holds one chunk's events plus the read-ahead, and without this bound
the reader could queue a full batch's worth more during the first chunk's staging (measured:
driver peak RSS +11% at 5M and 20M changes against a 100k-change transaction, issue 23;
``benchmarks/bigtx.py --trace``). A closed batch no longer counts, so reading still overlaps
its apply as before.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from replicator.events.block import BlockEvent, row_count
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.sources.base import ChangeSource, LogPosition

log = logging.getLogger(__name__)

CHUNK_EVENTS = 1024  # events per hand-over: one queue operation per chunk, not per event
KEEPALIVE_SECONDS = 5.0
# Read ahead of the events the run loop holds: at most this share of ``max_events`` more
# (a quarter: at 100k, ~12 MiB of Python event objects; reading a quarter batch takes longer
# than staging a chunk, so the source is not throttled in the measured runs).
READ_AHEAD_SHARE = 4
ROOM_POLL_SECONDS = 0.02  # how often a reader held back by ``held`` looks again


def read_limit(held_cap: int) -> int:
    """Events held plus queued that the reader stops at, for a run loop holding up to
    ``held_cap`` (a quarter more, at least one hand-over)."""
    return held_cap + max(CHUNK_EVENTS, held_cap // READ_AHEAD_SHARE)


@dataclass(frozen=True)
class Events:
    """Events in source order; ``snapshot_in_progress`` as the source said after them;
    ``first_read``: when the reader got the first of them (``time.monotonic()``);
    ``reached``: the source's ``reached_position()`` as they were handed over (everything
    the source logged before it is in this item or an earlier one); ``behind``: the source
    said it reads a backlog (its ``behind``, as they were handed over): more changes follow
    without waiting for new ones, so the run loop does not close a batch by its linger."""

    events: list[ChangeEvent]
    snapshot_in_progress: bool
    first_read: float | None = None
    reached: LogPosition | None = None
    behind: bool = False


@dataclass(frozen=True)
class Idle:
    """A poll returned nothing: everything the source sent was handed over before this.
    ``started``: when that poll began (``time.monotonic()``); ``reached``: as in ``Events``
    (a silent source is not necessarily a caught-up one: a Postgres walsender sends nothing
    while it decodes a large transaction)."""

    started: float = 0.0
    reached: LogPosition | None = None


@dataclass(frozen=True)
class Failed:
    """The source raised; everything it handed over before is in the queue ahead of this."""

    error: BaseException


Item = Events | Idle | Failed


class SourceReader:
    def __init__(
        self,
        source: ChangeSource,
        *,
        max_events: int,
        idle_sleep: float = 0.5,
        keepalive_seconds: float = KEEPALIVE_SECONDS,
        transform: Callable[[ChangeEvent], ChangeEvent] | None = None,
        held: Callable[[], int] | None = None,
        held_cap: Callable[[], int] | None = None,
    ) -> None:
        self.source = source
        # Applied to every event before it is handed over (source.columns), so nothing
        # downstream (batches, staging, files, dead letters, logs) sees what it removes.
        self.transform = transform
        # Bound on events read ahead (at least one chunk): memory stays bounded.
        self.max_chunks = max(1, max_events // CHUNK_EVENTS)
        # Events the run loop holds outside a closed batch (read from this thread: one int).
        self.held = held
        if hasattr(source, "snapshot_blocks"):
            source.snapshot_blocks = True  # this reader takes snapshot chunks as block events
        self.max_held = read_limit(max_events)
        # The most events the run loop holds now, when it is less than a batch (it stages a
        # batch as it fills: pipeline.batcher); the read-ahead is measured against it.
        self.held_cap = held_cap
        self.idle_sleep = idle_sleep
        self.keepalive_seconds = keepalive_seconds
        self._queue: queue.Queue[Item] = queue.Queue(maxsize=self.max_chunks + 2)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._ack_lock = threading.Lock()
        self._ack: SourcePosition | None = None
        self._thread = threading.Thread(target=self._run, name="source-reader", daemon=True)
        # Events items put / taken: more put than taken means changes wait in the queue. Each
        # counter has one writer; a momentary misread only delays a maintenance cut-off.
        self._events_put = 0
        self._events_taken = 0
        # The same in events (for the bound with ``held``), one writer each.
        self._changes_put = 0
        self._changes_taken = 0
        self._told_behind = False  # the last Events item handed over said ``behind``

    # -- run loop side ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def items(self, timeout: float) -> Iterator[Item]:
        """What the reader has handed over, waiting up to ``timeout`` for the first item."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            if isinstance(item, Events):
                self._events_taken += 1
                self._changes_taken += _rows(item.events)
            yield item
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return

    @property
    def queued(self) -> int:
        """Events handed over that the run loop has not taken yet (from any thread: a
        momentary misread is possible; for measurement)."""
        return self._changes_put - self._changes_taken

    def oldest_read(self) -> float | None:
        """When the reader got the oldest change handed over and not taken yet
        (``time.monotonic()``; None: none waits): how long the run loop has kept it waiting."""
        with self._queue.mutex:
            for item in self._queue.queue:
                if isinstance(item, Events):
                    return item.first_read
        return None

    def events_waiting(self) -> bool:
        """Changes were handed over that the run loop has not taken yet, or the source has
        read some it has not handed out (an idle maintenance slice then stops starting
        steps: a burst after a quiet stretch is decoded a group at a time, and a slice over
        100 tables could otherwise take its health and orphan steps, ~0.65 s, meanwhile)."""
        return self._events_put > self._events_taken or self.source.receiving

    def acknowledge(self, position: SourcePosition) -> None:
        """Everything up to ``position`` is durable; the reader tells the source."""
        with self._ack_lock:
            self._ack = position
        self._wake.set()

    def stop(self) -> None:
        """Stop reading; the last acknowledgement reaches the source before this returns."""
        self._stop.set()
        self._wake.set()
        while self._thread.is_alive():
            self._drain()
            self._thread.join(timeout=0.1)
        self._drain()
        self._deliver_ack()

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    # -- reader thread ------------------------------------------------------------------------
    def _deliver_ack(self) -> None:
        with self._ack_lock:
            ack, self._ack = self._ack, None
        if ack is not None:
            self.source.acknowledge(ack)

    def _put(self, item: Item) -> bool:
        """Hand over ``item``; while the run loop is busy, keep the source alive. False:
        stopping."""
        if isinstance(item, Events) and not self._wait_for_room(_rows(item.events)):
            return False
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=self.keepalive_seconds)
                if isinstance(item, Events):
                    self._events_put += 1
                    self._changes_put += _rows(item.events)
                return True
            except queue.Full:
                self._deliver_ack()
                self.source.keepalive()
        return False

    def _wait_for_room(self, n: int) -> bool:
        """Wait while ``n`` more events would put the queued ones plus those the run loop
        holds over ``max_held`` (an empty queue always takes one item, so the run loop is
        never left waiting on the reader). Keeps the source alive meanwhile. False: stopping."""
        held = self.held
        if held is None:
            return True
        alive = time.monotonic()
        while True:
            queued = self._changes_put - self._changes_taken
            limit = self.max_held if self.held_cap is None else read_limit(self.held_cap())
            if queued <= 0 or queued + held() + n <= limit:
                return True
            if self._stop.wait(ROOM_POLL_SECONDS):
                return False
            # An acknowledgement reaches the source now, not at the next keepalive: a
            # snapshot's resume point (its state file) moves with it, so a kill meanwhile
            # re-reads fewer committed rows.
            self._deliver_ack()
            if time.monotonic() - alive >= self.keepalive_seconds:
                self._deliver_ack()
                self.source.keepalive()
                alive = time.monotonic()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._deliver_ack()
                started = time.monotonic()
                got = self._read_one_poll()
                if got is None:
                    return
                if got == 0:
                    if not self._put(Idle(started, self.source.reached_position())):
                        return
                    self._wake.wait(self.idle_sleep)
                    self._wake.clear()
        except BaseException as exc:  # noqa: BLE001 - handed to the run loop, which raises it
            self._put(Failed(exc))

    def _read_one_poll(self) -> int | None:
        """One poll of the source, handed over in chunks (blocking, with keepalives, while the
        queue is full: the poll generator waits suspended, as sources allow). None: stopping."""
        got = rows = 0
        chunk: list[ChangeEvent] = []
        first = 0.0
        transform = self.transform
        try:
            for ev in self.source.poll():
                if not chunk:
                    first = time.monotonic()
                if transform is not None:
                    for one in _rows_for(transform, ev):
                        chunk.append(transform(one))
                        rows += 1
                else:
                    chunk.append(ev)
                    rows += row_count(ev)
                got += 1
                if rows >= CHUNK_EVENTS:
                    if not self._put(self._events(chunk, first)):
                        return None
                    chunk, rows = [], 0
                    self._deliver_ack()
        finally:
            # Also when the source raises: what it handed out before comes first (the run
            # loop commits the complete transactions among them, then raises).
            # A backlog read to its end in whole chunks: an empty item says so (``behind``).
            told = chunk or (self._told_behind and not self.source.behind)
            if told and not self._put(self._events(chunk, first or time.monotonic())):
                return None  # noqa: B012 - stopping: nothing left to hand over
        return got

    def _events(self, chunk: list[ChangeEvent], first: float) -> Events:
        src = self.source
        self._told_behind = behind = src.behind
        return Events(chunk, self._snapshot_in_progress(), first, src.reached_position(), behind)

    def _snapshot_in_progress(self) -> bool:
        return bool(getattr(self.source, "snapshot_in_progress", False))


def _rows(events: list[ChangeEvent]) -> int:
    """Rows the events stand for (a snapshot block event is many)."""
    return sum(map(row_count, events))


def _rows_for(transform: Callable[[ChangeEvent], ChangeEvent], ev: ChangeEvent) -> list[ChangeEvent]:
    """``ev``, or its rows when a column policy changes its table's rows one by one."""
    applies = getattr(transform, "applies_to", None)
    if type(ev) is BlockEvent and (applies is None or applies(ev.table)):
        return ev.events()
    return [ev]
