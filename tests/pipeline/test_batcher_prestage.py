"""The batcher stages complete transactions as the batch fills (``stage_every``): the driver
holds about that many events whatever ``max_events`` is (issue 27), and the batch still
closes at its limits, as one batch."""


from replicator.config import BatchConfig
from replicator.events.model import Op
from replicator.pipeline.batcher import Batcher
from tests.pipeline.spill_record import Recorder, ev


def test_complete_transactions_are_staged_every_n_events_and_the_batch_closes_at_its_limit() -> None:
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=10), spill=spill, stage_every=3)
    out = [b.add(ev(i, None, True, table="s.t" if i % 2 else "s.u")) for i in range(1, 11)]
    assert out[:-1] == [None] * 9
    assert spill.spills == [{"s.t": [1, 3], "s.u": [2]}, {"s.u": [4, 6], "s.t": [5]},
                            {"s.t": [7, 9], "s.u": [8]}]  # fmt: skip
    batch = out[-1]
    assert batch is not None and batch.event_count == 10 and batch.end_position.parts == (10,)
    assert batch.events == {"s.u": (ev(10, None, True, "s.u"),)}  # what was still in memory
    assert b.peak == 3 and b.pending == 0 and b.prestaged == 0


def test_staging_waits_for_a_transaction_boundary() -> None:
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=100), spill=spill, stage_every=2)
    for i in (1, 2, 3):
        assert b.add(ev(i, "a", False)) is None
    assert not spill.spills and b.held == 3
    assert b.add(ev(4, "a", True)) is None
    assert spill.spills == [{"s.t": [1, 2, 3, 4]}] and b.held == 0 and b.pending == 4
    batch = b.flush()  # all of it staged: the batch still closes, with nothing in memory
    assert batch is not None and batch.events == {} and batch.event_count == 4
    assert batch.end_position.parts == (4,)


def test_a_close_inside_a_later_transaction_keeps_the_staged_chunks_in_the_closed_batch() -> None:
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=5), spill=spill, stage_every=2)
    assert b.add(ev(1, None, True)) is None
    assert b.add(ev(2, None, True)) is None  # staged: [1, 2]
    assert b.add(ev(3, None, True)) is None
    assert b.add(ev(4, "b", False)) is None
    closed = b.add(ev(5, "b", False))  # the limit inside "b": [1, 2] staged + 3 close
    assert closed is not None and closed.end_position.parts == (3,) and closed.event_count == 3
    assert closed.events == {"s.t": (ev(3, None, True),)}
    assert spill.spills == [{"s.t": [1, 2]}]
    assert b.pending == 2 and b.prestaged == 0
    assert b.add(ev(6, "b", True)) is None  # "b" ends under the limit: staged in its turn
    assert spill.spills[-1] == {"s.t": [4, 5, 6]}
    end = b.flush()
    assert end is not None and end.event_count == 3 and end.end_position.parts == (6,)


def test_no_staging_while_the_run_loop_says_no_nor_after_a_snapshot_row() -> None:
    allowed = [False]
    spill = Recorder()
    b = Batcher(BatchConfig(max_events=100), spill=spill, stage_every=2, may_stage=lambda: allowed[0])
    b.add(ev(1, None, True))
    b.add(ev(2, None, True))
    assert not spill.spills and b.memory_cap == 100
    allowed[0] = True
    b.add(ev(3, None, True, op=Op.READ))  # a snapshot row last: the cut rule reads it
    assert not spill.spills and b.memory_cap == 3  # what it holds now
    b.add(ev(4, None, True))
    assert spill.spills == [{"s.t": [1, 2, 3, 4]}] and b.memory_cap == 2


def test_without_a_spill_target_nothing_is_staged() -> None:
    b = Batcher(BatchConfig(max_events=4), stage_every=1)
    for i in (1, 2, 3):
        assert b.add(ev(i, None, True)) is None
    batch = b.add(ev(4, None, True))
    assert batch is not None and batch.event_count == 4 and len(batch.events["s.t"]) == 4
