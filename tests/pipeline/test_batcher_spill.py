"""The batcher's decisions for a transaction larger than the batch: close the complete
transactions, spill the open one, close at its end."""

import logging

import pytest

from replicator.config import BatchConfig
from replicator.pipeline.batcher import Batcher
from tests.pipeline.spill_record import Recorder, ev


def test_a_large_transaction_is_spilled_in_chunks_and_closes_at_its_end() -> None:
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=4), spill=spill)
    batches = [b.add(ev(i, "a", i == 11, table="s.t" if i % 2 else "s.u")) for i in range(1, 12)]
    assert spill.spills == [
        {"s.t": [1, 3], "s.u": [2, 4]},  # the first chunk at the batch limit
        {"s.t": [5], "s.u": [6]},  # later ones every half batch (LATER_CHUNK_SHARE)
        {"s.t": [7], "s.u": [8]},
        {"s.t": [9], "s.u": [10]},
    ]
    assert batches[:-1] == [None] * 10
    batch = batches[-1]
    assert batch is not None
    assert batch.events == {"s.t": (ev(11, "a", True, "s.t"),)}  # only what is in memory
    assert batch.event_count == 11 and batch.end_position.parts == (11,)
    assert b.peak <= 4 and b.pending == 0 and b.spilled == 0


def test_later_chunks_are_half_a_batch_by_bytes_too() -> None:
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=1000, max_bytes=4 * 88), spill=spill)  # 88 bytes an event
    for i in range(1, 10):
        assert b.add(ev(i, "a", False)) is None
    assert spill.spills == [{"s.t": [1, 2, 3, 4]}, {"s.t": [5, 6]}, {"s.t": [7, 8]}]


def test_complete_transactions_close_before_the_open_one_is_spilled() -> None:
    # A batch must never mix a spilled transaction with others: a table's checkpoint then
    # covers all of its chunks or none.
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=4), spill=spill)
    assert b.add(ev(1, "a", False)) is None
    assert b.add(ev(2, "a", True)) is None
    assert b.add(ev(3, "b", False)) is None
    closed = b.add(ev(4, "b", False))  # the limit, inside "b": "a" closes alone
    assert closed is not None and closed.end_position.parts == (2,) and closed.event_count == 2
    for i in (5, 6, 7):
        assert b.add(ev(i, "b", False)) is None
    end = b.add(ev(8, "b", True))
    assert end is not None and end.end_position.parts == (8,) and end.event_count == 6
    assert spill.spills == [{"s.t": [3, 4, 5, 6]}]
    assert [e.position.parts[0] for e in end.events["s.t"]] == [7, 8]


def test_the_close_at_the_limit_keeps_the_open_transaction() -> None:
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=3), spill=spill)
    b.add(ev(1, None, True))
    b.add(ev(2, "b", False))
    closed = b.add(ev(3, "b", False))
    assert closed is not None
    assert closed.events == {"s.t": (ev(1, None, True),)} and closed.end_position.parts == (1,)
    assert closed.event_count == 1
    assert b.pending == 2 and not spill.spills
    assert b.flush() is None  # inside "b"
    last = b.add(ev(4, "b", True))
    assert last is not None and [e.position.parts[0] for e in last.events["s.t"]] == [2, 3, 4]


def test_without_a_spill_step_a_transaction_grows_the_batch() -> None:
    b = Batcher(BatchConfig(max_events=2))
    for i in range(1, 5):
        assert b.add(ev(i, "a", False)) is None
    batch = b.add(ev(5, "a", True))
    assert batch is not None and batch.event_count == 5


def test_age_alone_never_spills() -> None:
    now = [0.0]
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=100, max_seconds=1), clock=lambda: now[0], spill=spill)
    b.add(ev(1, "a", False))
    now[0] = 5.0
    assert b.add(ev(2, "a", False)) is None and not spill.spills
    assert b.add(ev(3, "a", True)) is not None


def test_held_counts_the_events_in_memory_until_a_spill_or_a_close_releases_them() -> None:
    """What the source reader reads ahead of (``pipeline.reader``): the events a spill is
    staging still count while it stages them; a closed batch does not."""
    seen: list[int] = []
    b = Batcher(BatchConfig(max_events=4), spill=lambda events: seen.append(b.held))
    held = []
    for i in range(1, 10):
        b.add(ev(i, "a", i == 9))
        held.append(b.held)
    assert seen == [4, 2, 2]  # each spill ran while its events were still held
    assert held == [1, 2, 3, 0, 1, 0, 1, 0, 0]  # released after each spill; closed at 9


def test_a_transaction_outgrowing_the_batch_is_logged_once_per_table(caplog: pytest.LogCaptureFixture) -> None:
    # Operators read this line to learn why a batch is late; staging as a batch fills
    # (complete transactions) must not say it.
    caplog.set_level(logging.INFO, logger="replicator.pipeline.batcher")
    b = Batcher(BatchConfig(max_events=4), spill=Recorder(), stage_every=2)
    for i in range(1, 4):
        b.add(ev(i, None, True))  # complete transactions: staged as the batch fills
    assert not [r for r in caplog.records if "outgrows the batch" in r.getMessage()]
    for i in range(4, 16):
        b.add(ev(i, "a", i == 15, table="s.t" if i % 2 else "s.u"))
    said = [r.getMessage() for r in caplog.records if "outgrows the batch" in r.getMessage()]
    assert sorted(said) == [
        f"{t}: a transaction outgrows the batch; staging its changes in chunks" for t in ("s.t", "s.u")
    ]
