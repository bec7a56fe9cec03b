from replicator.config import BatchConfig
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.pipeline.batcher import Batcher


def ev(i: int, tx: str | None, last: bool, table: str = "s.t") -> ChangeEvent:
    return ChangeEvent(
        table=table, op=Op.CREATE, after={"id": i}, position=SourcePosition(source="x", parts=(i,)),
        tx_id=tx, last_in_tx=last,
    )


def test_batch_closes_only_at_transaction_boundary() -> None:
    b = Batcher(BatchConfig(max_events=2))
    assert b.add(ev(1, "a", False)) is None
    assert b.add(ev(2, "a", False)) is None  # limit reached inside a transaction: keep going
    batch = b.add(ev(3, "a", True))
    assert batch is not None
    assert batch.event_count == 3
    assert batch.end_position.parts == (3,)


def test_events_without_transactions_are_each_a_boundary() -> None:
    b = Batcher(BatchConfig(max_events=2))
    assert b.add(ev(1, None, False)) is None
    batch = b.add(ev(2, None, False, table="s.u"))
    assert batch is not None and batch.tables == ("s.t", "s.u")


def test_flush_only_at_boundary() -> None:
    b = Batcher(BatchConfig(max_events=100))
    b.add(ev(1, "a", False))
    assert b.flush() is None
    b.add(ev(2, "a", True))
    batch = b.flush()
    assert batch is not None and batch.event_count == 2
    assert b.pending == 0


def test_age_limit() -> None:
    now = [0.0]
    b = Batcher(BatchConfig(max_events=100, max_seconds=5), clock=lambda: now[0])
    assert b.add(ev(1, None, True)) is None
    now[0] = 6.0
    assert b.add(ev(2, None, True)) is not None


def test_linger() -> None:
    now = [0.0]
    b = Batcher(BatchConfig(max_events=100, linger_seconds=1.0), clock=lambda: now[0])
    b.add(ev(1, None, True))
    assert not b.lingered
    now[0] = 1.5
    assert b.lingered
    assert b.flush() is not None and not b.lingered


def test_linger_counts_from_when_the_reader_got_the_events() -> None:
    # Events that queued while the previous batch applied have already waited: their batch
    # must not linger a full linger_seconds more (commit-to-visible lag).
    now = [10.0]
    b = Batcher(BatchConfig(max_events=100, linger_seconds=1.0), clock=lambda: now[0])
    b.add(ev(1, None, True), read_at=8.8)
    assert b.lingered
    b.flush()
    b.add(ev(2, None, True), read_at=11.0)  # a read time after now is taken as now
    assert not b.lingered


def test_old_events_do_not_close_batches_early() -> None:
    # Under a backlog every queued event was read long ago: the size limits (max_seconds
    # included) still count from when the batch opened, or each event would close a batch.
    now = [100.0]
    b = Batcher(BatchConfig(max_events=100, max_seconds=5, linger_seconds=1.0), clock=lambda: now[0])
    for i in range(50):
        assert b.add(ev(i, None, True), read_at=10.0) is None
    assert b.pending == 50 and b.lingered
    now[0] = 106.0
    assert b.add(ev(50, None, True), read_at=10.0) is not None


def test_the_run_loop_waits_for_the_reader_only_until_the_batch_is_due() -> None:
    # Issue 27: the lingered check runs when the reader's wait ends; waiting the full idle
    # sleep after the batch is due would add it to commit-to-visible lag.
    now = [10.0]
    b = Batcher(BatchConfig(max_events=100, linger_seconds=0.5), clock=lambda: now[0])
    assert b.due_in() is None and b.wait_seconds(0.5) == 0.5  # nothing pending
    b.add(ev(1, "a", False), read_at=9.9)
    due = b.due_in()
    assert due is not None and abs(due - 0.4) < 1e-9
    assert b.wait_seconds(0.5) == 0.5  # inside a transaction it cannot close: no hurry
    b.add(ev(2, "a", True))
    assert abs(b.wait_seconds(0.5) - 0.4) < 1e-9
    now[0] = 11.0  # overdue (its check comes next): a short wait, never a busy loop
    assert 0 < b.wait_seconds(0.5) < 0.1


def test_room_before_the_oldest_change_read_is_due() -> None:
    # What a maintenance slice between batches may take: the pending batch's linger left,
    # else that of the oldest change the reader queued, else a whole linger.
    now = [10.0]
    b = Batcher(BatchConfig(max_events=100, linger_seconds=0.5), clock=lambda: now[0])
    assert b.room(None) == 0.5
    assert abs(b.room(9.8) - 0.3) < 1e-9
    assert b.room(5.0) < 0  # a backlog: overdue
    b.add(ev(1, None, True), read_at=9.7)
    assert abs(b.room(5.0) - 0.2) < 1e-9  # the batch's first change is the oldest


def test_no_room_while_the_source_reads_a_backlog() -> None:
    # Between a backlog's batches the reader's queue can be empty while it decodes its next
    # group: that is no lull for a maintenance slice (Postgres mixed: 0.27-0.58 s of slices
    # inside a 2 s backlog). The scheduler's own bound still runs one under a lasting backlog.
    now = [10.0]
    b = Batcher(BatchConfig(max_events=100, linger_seconds=0.5), clock=lambda: now[0])
    b.behind = True
    assert b.room(None) == 0.0 and b.room(9.9) == 0.0
    b.behind = False
    assert b.room(None) == 0.5


def test_a_backlog_is_not_split_by_the_linger() -> None:
    # Issue 27: under a backlog the reader's hand-overs pause while the source reads and
    # decodes its next group of changes; the queue looks empty and the pending batch's first
    # change is past its linger, but the source says more follows (``behind``): the batch
    # stays open (100,000 changes over 100 tables took 2 batches, 200 commits, not 1).
    now = [10.0]
    b = Batcher(BatchConfig(max_events=100, max_seconds=5, linger_seconds=0.5), clock=lambda: now[0])
    b.behind = True
    b.add(ev(1, None, True), read_at=9.0)
    assert b.due_in() is not None and b.due_in() < 0  # type: ignore[operator]
    assert not b.lingered
    assert b.wait_seconds(0.5) == 0.5  # no short waits for a close that does not come
    b.behind = False  # the source caught up: the linger closes the batch as before
    assert b.lingered and 0 < b.wait_seconds(0.5) < 0.1
    b.behind = True  # the size limits still apply (max_seconds from when the batch opened)
    now[0] = 16.0
    batch = b.add(ev(2, None, True))
    assert batch is not None and batch.event_count == 2
