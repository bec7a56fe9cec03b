"""The source reader thread: order, hand-over on failure, acknowledgements on its thread,
keepalives while the run loop is busy."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from replicator.checkpoint import Checkpoints
from replicator.errors import SchemaChangeError
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.pipeline.reader import (
    CHUNK_EVENTS,
    READ_AHEAD_SHARE,
    Events,
    Failed,
    Idle,
    SourceReader,
)
from replicator.sources.base import ChangeSource


def event(i: int) -> ChangeEvent:
    return ChangeEvent(table="t", op=Op.CREATE, after={"id": i},
                       position=SourcePosition(source="x", parts=(i,)))


class Scripted(ChangeSource):
    """Hands out ``polls`` one poll at a time, then empty polls; may raise after one."""

    kind = "scripted"
    keepalive_seconds = 0.05

    def __init__(self, polls: list[list[int]], fail_after: int | None = None) -> None:
        super().__init__(DeadLetterSink(None))
        self.polls = polls
        self.fail_after = fail_after
        self.acks: list[tuple[SourcePosition, str]] = []
        self.keepalives = 0

    def start(self, checkpoints: Checkpoints) -> None:
        pass

    def poll(self) -> Iterator[ChangeEvent]:
        if not self.polls:
            return
        for i in self.polls.pop(0):
            yield event(i)
            if self.fail_after is not None and i == self.fail_after:
                raise SchemaChangeError("renamed", table="t")

    def acknowledge(self, position: SourcePosition) -> None:
        self.acks.append((position, threading.current_thread().name))

    def keepalive(self) -> None:
        self.keepalives += 1


def drain(reader: SourceReader, until: type, limit: float = 10.0) -> list[object]:
    got: list[object] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for item in reader.items(timeout=0.1):
            got.append(item)
            if isinstance(item, until):
                return got
    raise AssertionError(f"no {until.__name__} within {limit}s: {got}")


def ids(items: list[object]) -> list[int]:
    return [e.after["id"] for it in items if isinstance(it, Events) for e in it.events]  # type: ignore[index]


def read_until_idle(src: Scripted) -> list[object]:
    """Everything a reader over ``src`` hands over until it says Idle."""
    reader = SourceReader(src, max_events=100_000, idle_sleep=0.01)
    reader.start()
    try:
        return drain(reader, Idle)
    finally:
        reader.stop()


def test_events_in_order_then_idle() -> None:
    src = Scripted([list(range(3000)), list(range(3000, 3010))])
    items = read_until_idle(src)
    assert ids(items) == list(range(3010))
    assert max(len(it.events) for it in items if isinstance(it, Events)) == CHUNK_EVENTS


def test_events_read_before_a_failure_come_before_it() -> None:
    src = Scripted([[1, 2, 3, 4]], fail_after=3)
    reader = SourceReader(src, max_events=1000)
    reader.start()
    try:
        items = drain(reader, Failed)
    finally:
        reader.stop()
    assert ids(items) == [1, 2, 3]
    assert isinstance(items[-1], Failed) and isinstance(items[-1].error, SchemaChangeError)


def test_acknowledgements_reach_the_source_on_the_reader_thread_or_at_stop() -> None:
    src = Scripted([[1, 2]])
    reader = SourceReader(src, max_events=1000, idle_sleep=0.01)
    reader.start()
    drain(reader, Idle)
    reader.acknowledge(SourcePosition(source="x", parts=(1,)))
    deadline = time.monotonic() + 5
    while not src.acks and time.monotonic() < deadline:
        time.sleep(0.01)
    reader.acknowledge(SourcePosition(source="x", parts=(2,)))
    reader.stop()
    assert [p.parts for p, _ in src.acks] == [(1,), (2,)]  # the last one is never lost
    assert src.acks[0][1] == "source-reader"


def test_keepalive_while_the_run_loop_is_busy() -> None:
    src = Scripted([list(range(20 * CHUNK_EVENTS))])
    reader = SourceReader(src, max_events=CHUNK_EVENTS, keepalive_seconds=0.05)
    reader.start()
    deadline = time.monotonic() + 20  # the run loop is "applying": nobody takes items
    while src.keepalives < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert src.keepalives >= 3
    items = drain(reader, Idle)
    reader.stop()
    assert ids(items) == list(range(20 * CHUNK_EVENTS))


def test_events_waiting_while_the_source_reads_changes_it_has_not_handed_out() -> None:
    """A burst after a quiet stretch: the Postgres source reads a group of changes (tens of
    thousands of rows) before handing any out; an idle maintenance slice stops starting steps
    from the first of them, not from the first hand-over (a slice over 100 tables took
    0.65 s meanwhile)."""

    class Receiving(Scripted):
        reading = False

        @property
        def receiving(self) -> bool:
            return self.reading

    src = Receiving([])
    reader = SourceReader(src, max_events=100_000, idle_sleep=0.01)
    assert not reader.events_waiting()
    src.reading = True
    assert reader.events_waiting()
    src.reading = False
    assert not reader.events_waiting()


def test_events_waiting_until_the_run_loop_takes_them() -> None:
    """What an idle maintenance slice checks: changes were handed over and not yet taken."""
    src = Scripted([list(range(10))])
    reader = SourceReader(src, max_events=100_000, idle_sleep=0.01)
    assert not reader.events_waiting()
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while not reader.events_waiting():
            assert time.monotonic() < deadline, "no events handed over"
            time.sleep(0.01)
        items = drain(reader, Idle)
        assert ids(items) == list(range(10))
        assert not reader.events_waiting()
    finally:
        reader.stop()


def test_read_ahead_counts_the_events_the_run_loop_holds() -> None:
    """Issue 23: while the batcher holds a batch's worth of one open transaction (its chunk
    being staged), the reader queues at most a quarter batch more, not a full batch more
    (the driver's peak RSS grew 11% at 5M-20M changes from that); then reads on in order."""
    max_events = 8 * CHUNK_EVENTS
    src = Scripted([list(range(40 * CHUNK_EVENTS))])
    release = threading.Event()
    asked = 0

    def held() -> int:
        nonlocal asked
        asked += 1
        return 0 if release.is_set() else max_events

    reader = SourceReader(src, max_events=max_events, keepalive_seconds=0.05, held=held)
    reader.start()
    try:
        deadline = time.monotonic() + 20
        while (asked < 5 or src.keepalives < 2) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert asked >= 5, "the reader never asked what the run loop holds"
        assert src.keepalives >= 2  # the source is kept alive while the reader waits
        queued = sum(len(it.events) for it in list(reader._queue.queue) if isinstance(it, Events))
        assert queued == max_events // READ_AHEAD_SHARE  # not the queue's capacity (10 chunks)
        release.set()
        items = drain(reader, Idle)
    finally:
        reader.stop()
    assert ids(items) == list(range(40 * CHUNK_EVENTS))


def test_an_empty_queue_always_takes_a_chunk() -> None:
    """Whatever the run loop holds, it is never left waiting on an empty queue."""
    src = Scripted([list(range(3 * CHUNK_EVENTS))])
    reader = SourceReader(src, max_events=CHUNK_EVENTS, idle_sleep=0.01, held=lambda: 10**9)
    reader.start()
    try:
        items = drain(reader, Idle)
    finally:
        reader.stop()
    assert ids(items) == list(range(3 * CHUNK_EVENTS))


def test_acknowledgement_delivered_while_waiting_for_room() -> None:
    """A reader held back by what the run loop holds hands an acknowledgement to the source
    at once, not at its next keepalive (a snapshot's resume point moves with it: a kill in
    between re-read a whole batch of committed rows as upserts)."""
    max_events = 2 * CHUNK_EVENTS
    src = Scripted([list(range(20 * CHUNK_EVENTS))])
    reader = SourceReader(src, max_events=max_events, keepalive_seconds=3600, held=lambda: max_events)
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while not reader._queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.01)
        reader.acknowledge(SourcePosition(source="x", parts=(7,)))
        while not src.acks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [p.parts for p, _ in src.acks] == [(7,)]
        assert src.acks[0][1] == "source-reader" and src.keepalives == 0
    finally:
        reader.stop()


def test_oldest_read_is_when_the_reader_got_the_oldest_change_still_queued() -> None:
    # The run loop sizes a maintenance slice between batches by it (issue 27): changes that
    # queued while a batch applied are already waiting.
    src = Scripted([[1, 2], [3]])
    reader = SourceReader(src, max_events=100_000, idle_sleep=0.01)
    assert reader.oldest_read() is None
    reader.start()
    try:
        deadline = time.monotonic() + 10.0
        while reader.queued < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        oldest = reader.oldest_read()
        items = drain(reader, Idle)
    finally:
        reader.stop()
    firsts = [it.first_read for it in items if isinstance(it, Events)]
    assert len(firsts) == 2 and oldest == firsts[0]
    assert reader.oldest_read() is None  # everything taken


class Backlog(Scripted):
    """Says it reads a backlog (``behind``) until its last poll has read everything."""

    def __init__(self, polls: list[list[int]]) -> None:
        super().__init__(polls)
        self._behind = False

    @property
    def behind(self) -> bool:
        return self._behind

    def poll(self) -> Iterator[ChangeEvent]:
        last = len(self.polls) == 1
        self._behind = bool(self.polls)
        yield from super().poll()
        if last:
            self._behind = False  # caught up (a keepalive): the poll's last chunk says so


def test_events_say_whether_the_source_reads_a_backlog() -> None:
    # Issue 27: the run loop keeps a batch open past its linger while the source is behind;
    # each hand-over carries what the source said as it was made.
    src = Backlog([list(range(1500)), list(range(1500, 1510))])
    items = read_until_idle(src)
    got = [(len(it.events), it.behind) for it in items if isinstance(it, Events)]
    assert got == [(CHUNK_EVENTS, True), (1500 - CHUNK_EVENTS, True), (10, False)]


def test_a_backlog_read_to_its_end_in_whole_chunks_says_so() -> None:
    # The last chunk went over while the source was still behind and the poll then ended
    # caught up with nothing left: an empty item says so, or the run loop would keep its batch
    # open until the next (idle) poll.
    src = Backlog([list(range(CHUNK_EVENTS)), list(range(CHUNK_EVENTS, 2 * CHUNK_EVENTS))])
    items = read_until_idle(src)
    got = [(len(it.events), it.behind) for it in items if isinstance(it, Events)]
    assert got == [(CHUNK_EVENTS, True), (CHUNK_EVENTS, True), (0, False)]
